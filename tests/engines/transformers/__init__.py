"""Tests of the transformers engine (mars.engines.transformers) on CPU."""
