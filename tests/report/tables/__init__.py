"""Tests of mars.report.tables, one module per module."""
