"""Tests of the fit stage (mars.fit): the driver and the fit directory it writes."""
