"""Unit tests of the method core (mars.method), one module per file; no ../shared data."""
