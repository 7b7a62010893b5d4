"""TEMPORARY (replaced by the keys branch)."""
