"""Tests of the engines (mars.engines), one module per module or package."""
