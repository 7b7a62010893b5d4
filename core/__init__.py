"""jobgate core: the canonical job model, the single-threaded engine, scheduling and SQL storage.

`core` imports none of the other jobgate packages and never touches a socket (DESIGN.md).
"""
