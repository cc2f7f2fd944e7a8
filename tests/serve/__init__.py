"""Tests of the OpenAI-compatible proxy (mars.serve), in front of the synthetic engine and of a real
llama.cpp server."""
