"""What a live run cost and saved (mars.live.summary): the paper's accounting beside what a live
user pays, a question that did not stop saving nothing, answers that are not known."""

from __future__ import annotations

import csv

from typer.testing import CliRunner

from mars.cli import app
from mars.live.summary import closing_lines, summarize, write_csv


def _record(qid=0, tokens=100, stopped=(), full=None, warmup_tokens=50, probes=10, **more):
    rec = {
        "qid": qid,
        "method": "sc-mars-cal",
        "answer": "7",
        "correct": True,
        "stopped_by": "margin" if stopped else "budget",
        "stop_position": 2048 if stopped else None,
        "tokens": tokens,
        "warmup_tokens": warmup_tokens,
        "probe_tokens": probes,
        "gamma": 0.5,
        "warmup": 4,
        "stopped_traces": list(stopped),
        "wall_s": {"main": 1.0},
        "full": full,
        "replay_ok": True,
    }
    rec.update(more)
    return rec


def _full(tokens):
    return {"tokens": tokens, "wall_s": 2.0, "answer": "7", "correct": True}


def test_a_question_that_did_not_stop_saves_nothing_whatever_its_rerun_generated():
    """Its traces ran to their end: it is its own full budget (a --compare-full rerun on a server
    generates other tokens, and the table used to show "saved 1 %")."""
    rec = _record(tokens=1000, full=_full(1010))
    s = summarize([rec])
    row = dict(zip(s.header, s.rows[0]))
    assert row["full"] == "1,000" and row["saved"] == "0%"
    assert "saved 0.0% of the 1,000 tokens" in s.lines[1]


def test_the_paper_saving_and_the_paid_saving_side_by_side(tmp_path):
    """Main traces against the same traces run to the end (the paper's), and with the warmup and
    probe tokens a live run also pays."""
    rec = _record(tokens=100, stopped=[5, 6], full=_full(400), warmup_tokens=50, probes=10)
    s = summarize([rec])
    row = dict(zip(s.header, s.rows[0]))
    assert (row["saved"], row["paid saved"]) == ("75%", "60%")
    assert "saved 75.0% of the 400 tokens" in s.lines[1]
    assert "with the warmup and probe tokens a live run also pays: 60.0%" in s.lines[1]
    write_csv(tmp_path / "live.csv", [rec])
    (out,) = csv.DictReader((tmp_path / "live.csv").open())
    assert (out["full_budget_tokens"], out["saved"], out["saved_paid"]) == ("400", "0.75", "0.6")
    assert "probes not reported" in closing_lines([{**rec, "probe_tokens": None}])[0]


def test_a_stopped_question_without_its_full_run_has_no_saving():
    lines = closing_lines([_record(stopped=[5]), _record(qid=1)])
    assert "saved: n/a" in lines[1] and "--compare-full" in lines[1]


def test_why_nothing_was_saved():
    assert "with --warmup 0 there is no switch model" in closing_lines([_record(warmup=0)])[-1]
    assert "full-budget baseline" in closing_lines([_record(method="sc")])[-1]
    assert "warmup 0" not in closing_lines([_record(warmup=0, stopped=[3], full=_full(200))])[-1]


def test_answers_that_are_not_known_are_not_graded():
    s = summarize([_record(correct=None), _record(qid=1, correct=None)])
    assert [r[2] for r in s.rows] == ["?", "?"] and "accuracy n/a" in s.lines[0]
    mixed = closing_lines([_record(correct=None), _record(qid=1, correct=False)])
    assert "accuracy 0.0% of the 1 with a known answer" in mixed[0]


def test_solve_prints_both_savings_and_why_warmup_0_saves_nothing(tmp_path):
    base = ["solve", "--problems", "aime_2025", "--questions", "0,1", "--traces", "16"]
    res = CliRunner().invoke(
        app, [*base, "--warmup", "8", "--compare-full", "--out", str(tmp_path / "a")]
    )
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "(main traces: the paper's accounting); with the warmup and probe tokens" in text
    res = CliRunner().invoke(app, [*base, "--warmup", "0", "--out", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    assert "with --warmup 0 there is no switch model" in " ".join(res.output.split())
