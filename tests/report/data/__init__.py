"""Tests of mars.report.data, one module per module."""
