"""Tests of the storage layer (mars.store), one module per module or package."""
