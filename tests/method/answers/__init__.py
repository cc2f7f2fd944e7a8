"""Tests of mars.method.answers, one module per module."""
