"""Tests of the method core (mars.method), one module per module or package; ../shared data only
in tests marked ``reference``, skipped without it."""
