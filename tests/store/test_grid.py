"""The probe grid (:class:`mars.store.grid.Grid`): the checkpoints and probe positions every stage
reads are the ones the stages computed each on its own before, checked once where a value
enters and refused in one line naming it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mars.errors import UsageError
from mars.store.grid import Grid, GridError
from mars.store.pool import PoolError

spacings = st.integers(1, 5000)
lengths = st.integers(0, 40_000)


# the grid as each stage computed it on its own (kept as the reference)


def loop_checkpoints(spacing: int, max_tokens: int) -> list[int]:
    """run_batch: p = spacing, then p += spacing while p ≤ max_tokens."""
    out, p = [], spacing
    while p <= max_tokens:
        out.append(p)
        p += spacing
    return out


def live_checkpoints(spacing: int, max_tokens: int) -> np.ndarray:
    """live_grid."""
    return spacing * np.arange(1, max_tokens // spacing + 1, dtype=np.int64)


def stage_probe_positions(length: int, spacing: int) -> np.ndarray:
    """the probe stage's probe_positions."""
    grid = spacing * np.arange(1, (max(length, 1) - 1) // spacing + 1, dtype=np.int64)
    return np.append(grid, np.int64(length))


def import_checkpoints(n_tok: int, spacing: int) -> np.ndarray:
    """a Parallel-Probe import's checkpoints below a trace's length."""
    return spacing * np.arange(1, (n_tok - 1) // spacing + 1, dtype=np.int64)


def layout_on_grid(pos: np.ndarray, spacing: int) -> np.ndarray:
    """the simulator's arrays: which probes lie on the grid."""
    return (pos % spacing == 0) & (pos >= 0)


def protocol_steps(lens: np.ndarray, spacing: int) -> np.ndarray:
    """Parallel-Probe's protocol: the recorded probes of a trace, and its T-step grid."""
    return np.maximum(np.asarray(lens, dtype=np.int64) - 1, 0) // spacing


@settings(max_examples=300, deadline=None)
@given(spacings, st.integers(1, 200_000))
def test_checkpoints_are_the_generation_loops_and_the_live_grids(spacing, max_tokens):
    if max_tokens < spacing:
        with pytest.raises(GridError):
            Grid(spacing, max_tokens)
        return
    grid = Grid(spacing, max_tokens).checkpoints()
    assert grid.tolist() == loop_checkpoints(spacing, max_tokens)
    assert np.array_equal(grid, live_checkpoints(spacing, max_tokens))
    assert grid.dtype == np.int64


@settings(max_examples=300, deadline=None)
@given(spacings, lengths)
def test_probe_positions_are_the_probe_stages_and_the_imports(spacing, length):
    g = Grid(spacing)
    assert np.array_equal(g.probe_positions(length), stage_probe_positions(length, spacing))
    if length >= 1:  # an import's traces hold tokens
        assert np.array_equal(g.below(length), import_checkpoints(length, spacing))
    assert g.probe_positions(length).dtype == np.int64


@settings(max_examples=200, deadline=None)
@given(spacings, st.lists(st.integers(-10, 50_000), max_size=50), st.lists(lengths, max_size=20))
def test_on_grid_and_counts_are_the_simulators(spacing, positions, lens):
    g = Grid(spacing)
    pos = np.asarray(positions, dtype=np.int64)
    assert np.array_equal(g.on_grid(pos), layout_on_grid(pos, spacing))
    assert np.array_equal(g.count_below(lens), protocol_steps(np.asarray(lens), spacing))
    n = int(protocol_steps(np.asarray(lens), spacing).max(initial=0)) + 1
    assert np.array_equal(g.first(n), spacing * np.arange(1, n + 1, dtype=np.int64))


@pytest.mark.parametrize("spacing", [0, -1, 2.5, True, "8", None])
def test_a_spacing_that_is_no_grid_is_refused_in_one_line_naming_it(spacing):
    with pytest.raises(UsageError, match=r"^--spacing .*: must be a whole number of tokens"):
        Grid.checked(spacing)
    with pytest.raises(GridError):
        Grid(spacing)  # type: ignore[arg-type]


def test_a_cap_below_the_spacing_or_past_the_most_checkpoints_is_refused():
    with pytest.raises(UsageError, match=r"^--spacing 2048: no checkpoint within --max-tokens 1"):
        Grid.checked(2048, 1000)
    err = lambda msg: ValueError(msg)  # noqa: E731
    with pytest.raises(ValueError, match=r"^mars.spacing 2048: no checkpoint within max_tokens"):
        Grid.checked(2048, 1000, names=("mars.spacing", "max_tokens"), error=err)
    assert len(Grid.checked(2, 8, most=4).checkpoints()) == 4
    with pytest.raises(UsageError, match=r"^--max-tokens 10 at --spacing 2: 5 checkpoints, more"):
        Grid.checked(2, 10, most=4)


def test_a_pools_grid_is_its_manifests():
    assert Grid.of_manifest({}, "pool.json", PoolError) is None
    assert Grid.of_manifest({"spacing": 512}, "pool.json", PoolError) == Grid(512)
    with pytest.raises(PoolError, match=r"^pool.json: spacing 0: must be a whole number"):
        Grid.of_manifest({"spacing": 0}, "pool.json", PoolError)
    with pytest.raises(PoolError, match=r"^pool.json: spacing '8'"):
        Grid.of_manifest({"spacing": "8"}, "pool.json", PoolError)


def test_a_grid_is_frozen_and_hashable():
    g = Grid(256, 1024)
    with pytest.raises(AttributeError):
        g.spacing = 8  # type: ignore[misc]
    assert {g: 1}[Grid(256, 1024)] == 1
    assert Grid().spacing == 2048 and Grid(np.int64(8)).spacing == 8
    assert type(Grid(np.int64(8), np.int64(16)).max_tokens) is int


@settings(max_examples=200, deadline=None)
@given(spacings, st.lists(st.integers(0, 5000), max_size=30))
def test_checkpoint_positions_and_indices_are_the_protocols(spacing, ks):
    """Parallel-Probe's protocol reads step k at k·spacing and a probe at p as step p // spacing."""
    g, k = Grid(spacing), np.asarray(ks, dtype=np.int64)
    assert np.array_equal(g.at(k), k * spacing)
    assert np.array_equal(g.index(g.at(k)), k - 1)
    assert np.array_equal(g.index(k), k // spacing - 1)
