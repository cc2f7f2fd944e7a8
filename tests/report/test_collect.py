"""Finding and loading the runs: labels from paths, one set of samples per run folder, and
damaged simulation results refused in one line naming the file, before any output."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from mars.report import collect, discover
from mars.report.collect import ReportError, split_label

from .trees import (
    DATASET,
    MODEL,
    MODEL2,
    SETTINGS,
    SMALL_METHODS,
    assert_one_line,
    edit_json,
    report_cli,
    small_tree,
    write_method,
)


def test_labels_from_paths(tree):
    results, _, rep = tree
    labels = sorted(r.label for r in rep.results.runs)
    assert labels == sorted(
        [
            f"{MODEL}/{DATASET}/default",
            f"{MODEL}/{DATASET}/pp-u4",
            f"{MODEL2}/{DATASET}/default",
            f"{MODEL2}/{DATASET}/pp-u4",
        ]
    )
    assert split_label(["m", "d", "s", "sim"]) == ("m", "d", "s")
    assert split_label(["m", "d"]) == ("m", "d", "default")
    assert split_label(["only"]) == ("-", "only", "default")
    assert split_label(["simulate", "m", "d", "s"]) == (
        "m",
        "d",
        "s",
    )  # the workflow's results/simulate/...
    # a run directory given directly, with and without --label
    run_dir = results / MODEL / DATASET / "default" / "sim"
    (r,) = discover(run_dir)
    assert (r.model, r.dataset, r.setting) == (MODEL, DATASET, "default")  # parts after "results/"
    (r,) = discover(run_dir, label="m1/d1/s1")
    assert (r.model, r.dataset, r.setting) == ("m1", "d1", "s1")
    with pytest.raises(ReportError):
        collect([run_dir, run_dir])  # same label twice


DAMAGES = {
    "accuracy_pct a string": (
        "sc/overall.json",
        lambda p: edit_json(p, lambda ov: ov.update(accuracy_pct="87.5")),
        "accuracy_pct",
    ),
    "settings not a dict": (
        "sc-mars-cal/overall.json",
        lambda p: edit_json(p, lambda ov: ov.update(settings=[16, 4])),
        "settings",
    ),
    "a bad setting": (
        "dco/overall.json",
        lambda p: edit_json(p, lambda ov: ov["settings"].update(budget="sixteen")),
        "budget",
    ),
    "missing per_iteration.csv": ("sc-mars-cert/per_iteration.csv", Path.unlink, "missing"),
    "overall.json a list": ("sc/overall.json", lambda p: p.write_text("[1, 2]"), "JSON object"),
    "overall.json nested 100,000 deep": (
        "sc/overall.json",
        lambda p: p.write_text("[" * 100_000 + "]" * 100_000),
        "nested",
    ),
    "overall.json a 5,001-digit number": (
        "sc/overall.json",
        lambda p: p.write_text('{"accuracy_pct": ' + "9" * 5001 + "}"),
        "digits",
    ),
    "overall.json a directory": (
        "sc/overall.json",
        lambda p: (p.unlink(), p.mkdir()),
        "not a regular file",
    ),
    "per_question.csv a FIFO": (
        "sc/per_question.csv",
        lambda p: (p.unlink(), os.mkfifo(p)),
        "not a regular file",
    ),
    "a non-number in per_question.csv": (
        "sc/per_question.csv",
        lambda p: p.write_text(p.read_text().replace("\n1,", "\nx,", 1)),
        "column qid",
    ),
    "a missing per_iteration row": (
        "dco/per_iteration.csv",
        lambda p: p.write_text("\n".join(p.read_text().splitlines()[:-1]) + "\n"),
        "rows",
    ),
    "overall.json disagrees with per_question.csv": (
        "sc-pp/overall.json",
        lambda p: edit_json(p, lambda ov: ov.update(savings_pct=ov["savings_pct"] + 5)),
        "disagrees",
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_results_are_one_line(tmp_path, damage):
    """Issue 19 (12): each damage is one line naming the file, exit 2, before any output."""
    results = small_tree(tmp_path)
    rel, edit, needle = DAMAGES[damage]
    target = results / MODEL / DATASET / "default" / "sim" / rel
    edit(target)
    out = tmp_path / "out"
    res = report_cli(results, out)
    assert_one_line(res, rel.split("/")[1], needle)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["results"]  # no staging folder left either


FUZZ_RESULTS_TRIALS = 40
_BAD_VALUES = ["abc", None, float("nan"), -1, 1e308, [], {}, True, "", 10**30]
_BAD_CELLS = ["abc", "", "nan", "-1", "1e309", "1.5", "True", '"', "7,8"]


def _fuzz_results(rng, run: Path) -> str:
    """Damage a run in one random way: bytes, JSON values, CSV cells, rows, columns or kinds."""
    method = run / str(rng.choice(SMALL_METHODS))
    files = ["overall.json", "per_question.csv", "per_iteration.csv"]
    f = method / str(rng.choice(files))
    kind = str(rng.choice(["flip", "truncate", "json", "key", "cell", "rows", "column", "kind"]))
    if kind == "flip":
        data = bytearray(f.read_bytes())
        for i in rng.integers(0, len(data), size=int(rng.integers(1, 20))):
            data[int(i)] = int(rng.integers(0, 256))
        f.write_bytes(bytes(data))
    elif kind == "truncate":
        f.write_bytes(f.read_bytes()[: int(rng.integers(0, f.stat().st_size))])
    elif kind == "json":
        f = method / "overall.json"
        f.write_text(str(rng.choice(["", "{", "[]", "null", '"x"', "[" * 5000, "1" * 5000])))
    elif kind == "key":
        f = method / "overall.json"
        ov = json.loads(f.read_text())
        target = ov if rng.random() < 0.6 else ov["settings"]
        key = str(rng.choice(sorted(target)))
        if rng.random() < 0.2:
            del target[key]
        else:
            target[key] = _BAD_VALUES[int(rng.integers(0, len(_BAD_VALUES)))]
        f.write_text(json.dumps(ov))
    else:
        f = method / str(rng.choice(files[1:]))
        lines = f.read_text().splitlines()
        if kind == "cell":
            i = int(rng.integers(0, len(lines)))
            cells = lines[i].split(",")
            cells[int(rng.integers(0, len(cells)))] = str(rng.choice(_BAD_CELLS))
            lines[i] = ",".join(cells)
        elif kind == "rows":
            i = int(rng.integers(1, len(lines)))
            lines = lines[:i] + lines[i + 1 :] if rng.random() < 0.5 else [*lines, lines[i]]
        elif kind == "column":
            j = int(rng.integers(0, len(lines[0].split(","))))
            lines = [",".join(c for k, c in enumerate(ln.split(",")) if k != j) for ln in lines]
        if kind == "kind":
            f.unlink()
            if rng.random() < 0.5:
                f.mkdir()
        else:
            f.write_text("\n".join(lines) + "\n")
    return f"{kind} {f.relative_to(run)}"


@pytest.mark.slow
def test_fuzz_damaged_results_never_give_a_traceback(tmp_path):
    """Issue 19 (beyond the list): damaged overall.json / CSVs give a report or one line."""
    import shutil

    rng = np.random.default_rng(19)
    clean = small_tree(tmp_path / "clean")
    outcomes = {0: 0, 2: 0}
    for trial in range(FUZZ_RESULTS_TRIALS):
        results = tmp_path / f"r{trial}"
        shutil.copytree(clean, results)
        case = _fuzz_results(rng, results / MODEL / DATASET / "default" / "sim")
        out = tmp_path / f"o{trial}"
        res = report_cli(results, out)
        assert res.exit_code in (0, 2), (trial, case, res.output, res.exception)
        if res.exit_code == 2:
            assert res.output.startswith("error: ") and res.output.count("\n") == 1, (case, res)
            assert not out.exists()
        else:
            assert (out / "tables" / "table1-main.csv").is_file()
        outcomes[res.exit_code] += 1
    assert outcomes[2] > FUZZ_RESULTS_TRIALS // 2  # most damage is detected


def test_a_method_simulated_with_other_sampling_settings_is_refused(tmp_path):
    """Issue 25 (2): `mars simulate -m sc` without --budget into a folder of budget-16 runs."""
    results = small_tree(tmp_path)
    run = results / MODEL / DATASET / "default" / "sim"
    shutil.rmtree(run / "sc")
    write_method(run, "sc", np.random.default_rng(5), {**SETTINGS, "budget": 512})
    out = tmp_path / "out"
    assert_one_line(report_cli(results, out), "sc/overall.json", "budget 512 (theirs: 16)")
    assert not out.exists()
