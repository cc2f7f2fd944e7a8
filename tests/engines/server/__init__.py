"""Tests of the server engine (mars.engines.server): the transport, the backend against fake and
real servers, fuzzed answers."""
