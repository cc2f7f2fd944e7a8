"""Tests of the command line (mars.cli): what every command shares."""
