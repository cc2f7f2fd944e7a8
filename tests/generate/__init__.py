"""Tests of the generate stage (mars.generate): the generate driver (generate_pool) and the probe
stage (probe_pool)."""
