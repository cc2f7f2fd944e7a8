"""Unit tests of the method core (mars.method), one module per file; ../shared data only in tests
marked ``reference``, skipped without it."""
