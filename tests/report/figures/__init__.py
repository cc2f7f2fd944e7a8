"""Tests of mars.report.figures, one module per module."""
