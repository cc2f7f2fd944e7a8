"""Tests of the simulate stage (mars.simulate): the driver, its results files, and conformance with
the reference simulator."""
