"""Tests of live runs (mars.live): the decision loop, its records and replay, the warmup file, the
summary, and the library's face (mars.Stopper)."""
