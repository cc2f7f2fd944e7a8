"""Tests of the report (mars.report), one module per module: the data frames (tests/report/data,
no drawing), the tables' cells (tests/report/tables), the drawing (tests/report/figures), and
the report folder as a whole."""
