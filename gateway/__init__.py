"""The running server: YAML config, listeners, the connection loop, the writer, the CLI.
`gateway` wires `protocols` and `core` together (DESIGN.md)."""
