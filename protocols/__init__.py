"""Wire dialects. Each sub-package is a sans-IO state machine: bytes in, commands out; replies in,
bytes out. `protocols` imports `core` only and never touches a socket (DESIGN.md)."""
