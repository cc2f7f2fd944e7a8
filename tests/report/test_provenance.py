"""Results say what they are: real data names its source, results that record none say so."""

from __future__ import annotations

import json
import shutil

from mars.report import render_report

from .trees import DATASET, MODEL, MODEL2, edit_json, make_tree, small_tree


def test_real_and_unknown_sources_are_named(tmp_path):
    """Issue 25 (3): real data names its source; results that record none say it is unknown."""
    from mars.store.provenance import pool_source

    results = small_tree(tmp_path)
    pool = tmp_path / "smollm-pool"
    pool.mkdir()
    manifest = {"format": "mars-pool", "backend": "transformers", "model": "org/Model-1B"}
    (pool / "pool.json").write_text(json.dumps(manifest))
    data = pool_source(pool).to_dict()  # what `mars simulate` records in overall.json
    for d in (results / MODEL / DATASET / "default" / "sim").iterdir():
        edit_json(d / "overall.json", lambda ov: ov["input"].update(source=str(pool), data=data))
    other = make_tree(tmp_path / "t2")  # its results record no source
    out = tmp_path / "out"
    shutil.rmtree(pool)  # the report reads what the simulation recorded, not the pool
    render_report([results, other / MODEL2], out, labels=["m/d", "m2/d2"], figures=False)
    index = (out / "report.md").read_text()
    assert "Data: m from a transformers run of org/Model-1B." in index
    assert f"m2: unknown: {other / MODEL2}" in index and "records none" in index
    assert "Synthetic" not in index


def test_each_pool_is_described_by_its_own_grid(tmp_path):
    """Issue 39: the report says each pool's probe grid as its runs recorded it from the pool,
    not a default: one sentence where every pool shares it, each pool named where they differ."""
    results = small_tree(tmp_path)
    other = make_tree(tmp_path / "t2")
    render_report(
        [results, other / MODEL2], tmp_path / "same", labels=["m/d", "m2/d2"], figures=False
    )
    index = (tmp_path / "same" / "report.md").read_text()
    assert "Probe grid: a checkpoint every 2,048 tokens." in index
    for d in (other / MODEL2).rglob("overall.json"):
        edit_json(d, lambda ov: ov["settings"].update(spacing=500))
    render_report(
        [results, other / MODEL2], tmp_path / "own", labels=["m/d", "m2/d2"], figures=False
    )
    index = (tmp_path / "own" / "report.md").read_text()
    assert "Probe grids: a checkpoint every 500 tokens (m2/d2); every 2,048 tokens (m/d)." in index
