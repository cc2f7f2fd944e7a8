"""The results tables' frames equal the runs' overall.json: Table 1, Table 2 (every u found),
the full tables (every method of every run) and both cost axes."""

from __future__ import annotations

import numpy as np

from mars.report import collect
from mars.report.data.base import Reads
from mars.report.data.results import (
    FULL_COLUMNS,
    full_frame,
    latency_frame,
    main_frame,
    pp_frame,
    pp_variants,
)

from ..trees import DATASET, METHODS, MODEL, MODEL2, close, overall


def test_main_frame_equals_overall(tree):
    results, _, _ = tree
    reads = Reads()
    df = main_frame(collect([results]), reads)
    assert list(df.model) == sorted([MODEL, MODEL2])  # report order
    for _, r in df.iterrows():
        for col in df.columns[2:]:
            method, key = col.split(".")
            assert close(r[col], overall(results, r.model, "default", method)[key]), col
    # what it read is what its provenance names: the four methods of both pools
    assert sorted({m for _, m in reads.items}) == ["dco", "dco-mars-cal", "sc", "sc-mars-cal"]
    assert len(reads.items) == 8


def test_pp_frame_has_every_u_found(tree):
    results, _, _ = tree
    res = collect([results])
    assert pp_variants(res) == [("sc-pp", 3), ("sc-pp", 4)]
    df = pp_frame(res)
    assert {"sc-pp-u3.accuracy_pct", "sc-pp-u4.accuracy_pct", "sc-mars-cal.savings_pct"} <= set(
        df.columns
    )
    for _, r in df.iterrows():
        assert close(
            r["sc-pp-u3.accuracy_pct"],
            overall(results, r.model, "default", "sc-pp")["accuracy_pct"],
        )
        assert close(
            r["sc-pp-u4.savings_pct"], overall(results, r.model, "pp-u4", "sc-pp")["savings_pct"]
        )
        assert close(
            r["sc-mars-cal.accuracy_pct"],
            overall(results, r.model, "default", "sc-mars-cal")["accuracy_pct"],
        )


def test_full_frame_holds_every_method_of_every_run(tree):
    results, _, _ = tree
    res = collect([results])
    for model in (MODEL, MODEL2):
        df = full_frame(res, model)
        assert set(df.model) == {model}
        assert set(df[df.setting == "default"].method) == set(METHODS)
        assert set(df[df.setting == "pp-u4"].method) == {"sc-pp"}
        for r in df.itertuples():
            ov = overall(results, model, r.setting, r.method)
            assert close(r.accuracy_pct, ov["accuracy_pct"])
            assert close(r.tokens_mean, ov["tokens_mean"])
            if r.method in ("sc", "dco"):
                assert np.isnan(r.savings_pct)  # the paper's "---"
            else:
                assert close(r.savings_pct, ov["savings_pct"])
        # each run is a block, opened by its first row and named by its setting
        opens = df[df["first"]]
        assert list(opens.block) == [f"{DATASET} · default", f"{DATASET} · pp-u4"]
        assert list(df.columns[: len(FULL_COLUMNS)]) == FULL_COLUMNS


def test_simulated_frames_match_outputs(simulated):
    res_root, _, rep = simulated
    sim = res_root / "synthetic" / "synth-5q"
    t1 = main_frame(rep.results).iloc[0]
    for col in ("sc.accuracy_pct", "sc-mars-cal.savings_pct", "dco-mars-cal.accuracy_pct"):
        m, k = col.split(".")
        assert close(t1[col], rep.results.main_run("synthetic", "synth-5q").overall[m][k])
    t2 = pp_frame(rep.results).iloc[0]
    u4 = next(r for r in rep.results.runs if r.path == sim / "pp-u4" / "sim")
    assert close(t2["sc-pp-u4.accuracy_pct"], u4.overall["sc-pp"]["accuracy_pct"])


def test_latency_frame_has_every_method_of_every_run(simulated):
    """Both axes: every method of every run, sequential tokens never above total tokens; the
    Parallel-Probe columns only for runs under its protocol (none here)."""
    _, _, rep = simulated
    lat = latency_frame(rep.results)
    assert len(lat) == sum(
        len(r.methods) for p in rep.results.pairs for r in rep.results.runs_of(*p)
    )
    assert (lat.seq_tokens_mean <= lat.tokens_mean + 1e-9).all()
    assert lat.pp_Acc.isna().all() and not lat.printed.any()
    assert lat[lat["first"]].block.str.startswith("synthetic · synth-5q · ").all()
