"""Served traffic analysed offline (mars/simulate/answers.py, `mars simulate --answers`): a pool
recorded without answers is simulated with its accuracy unknown (never 0.0), at the warmup it was
recorded with; a harness's targets are attached afterwards by question text."""

from __future__ import annotations

import json

import httpx
import pytest
from typer.testing import CliRunner

pytest.importorskip("starlette")

from serve.common import fake_upstreams, fakes
from serving import serving

from mars.cli import app as cli
from mars.serve.requests import Defaults

QUESTIONS = {"What is 2 + 3?": "5", "What is 7 + 1?": "8", "How many legs has a cat?": "4"}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Three questions through mars serve (a harness's prompt around each), recorded with no
    answer, warmup 4."""
    root = tmp_path_factory.mktemp("served")
    ups = fake_upstreams({"http://a.test": fakes().FakeServer("vllm")})
    defaults = Defaults(method="sc-mars-cal", traces=8, warmup=4, spacing=8, max_tokens=64)
    with serving(ups, defaults, record=str(root / "rec")) as running:
        for q in QUESTIONS:
            r = httpx.post(
                running.url + "/v1/completions",
                json={"prompt": f"Question: {q}\nAnswer:", "n": 8, "seed": 1},
                timeout=60,
            )
            assert r.status_code == 200
    ups.close()
    (pool,) = [p for p in (root / "rec").iterdir() if p.is_dir()]
    answers = root / "answers.jsonl"
    answers.write_text(
        "".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in QUESTIONS.items())
    )
    return pool, answers


def _simulate(pool, out, *args):
    return CliRunner().invoke(
        cli,
        [
            "simulate",
            str(pool),
            "-m",
            "sc,sc-mars-cal",
            "--budget",
            "8",
            "--iterations",
            "2",
            "--out",
            str(out),
            *args,
        ],
    )


def test_unknown_answers_are_unknown_accuracy_not_zero(recorded, tmp_path):
    pool, _ = recorded
    res = _simulate(pool, tmp_path / "sim")
    assert res.exit_code == 0, res.output  # --warmup 4 from the pool: no --warmup needed
    assert "accuracy n/a: the pool records no question's answer" in res.output
    ov = json.loads((tmp_path / "sim" / "sc" / "overall.json").read_text())
    assert ov["accuracy_known"] is False and ov["settings"]["warmup"] == 4


def test_a_harnesss_targets_are_attached_by_question_text(recorded, tmp_path):
    pool, answers = recorded
    res = _simulate(pool, tmp_path / "sim", "--answers", str(answers))
    assert res.exit_code == 0, res.output
    ov = json.loads((tmp_path / "sim" / "sc" / "overall.json").read_text())
    assert "accuracy_known" not in ov
    assert any("graded against --answers" in n for n in ov["notes"])
    import pandas as pd

    pq = pd.read_csv(tmp_path / "sim" / "sc" / "per_question.csv", dtype={"ground_truth": str})
    assert sorted(pq.ground_truth) == sorted(QUESTIONS.values())
    bad = tmp_path / "partial.jsonl"
    bad.write_text(json.dumps({"question": "What is 2 + 3?", "answer": "5"}) + "\n")
    res = _simulate(pool, tmp_path / "sim2", "--answers", str(bad))
    assert res.exit_code == 2 and "no line's question is in question" in res.output
    assert not (tmp_path / "sim2").exists()
