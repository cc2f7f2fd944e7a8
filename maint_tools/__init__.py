"""Maintainers' tools, outside the runtime package (run from the repository root)."""
