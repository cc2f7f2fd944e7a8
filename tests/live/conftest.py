"""Fixtures of the live runs' tests: the synthetic engine and the problem set they run on."""

from __future__ import annotations

import pytest

from mars.engines.synthetic import SyntheticBackend
from mars.store.problems import load_problems


@pytest.fixture(scope="module")
def backend():
    return SyntheticBackend("qwen3-8b")


@pytest.fixture(scope="module")
def problems():
    return load_problems("aime_2025")
