"""Tests of the analyze stage (mars.analyze) and the files it writes (mars.store.analysis)."""
