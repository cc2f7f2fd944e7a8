"""Problem files (mars.store.problems): the format docs/live.md documents, answers that are not
known, and one line naming the file, line and problem for anything else."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from mars.cli import app
from mars.errors import MarsError
from mars.live import replay_run
from mars.store.pool import open_pool
from mars.store.problems import load_problems


def _file(tmp_path, *lines: str):
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def test_unknown_answers_numbers_and_trailing_blank_lines(tmp_path):
    """``"answer": null`` is an answer not known (it used to become the string "None", graded
    against); a number is its text; blank lines may end the file."""
    path = _file(
        tmp_path,
        '{"question": "What is 1+1?", "answer": null}',
        '{"question": "What is 2+2?", "answer": 4, "source": "mine"}',
        "",
        "   ",
    )
    ps = load_problems(path)
    assert [(p.qid, p.answer, p.dataset) for p in ps] == [(0, None, "mine"), (1, "4", "mine")]


@pytest.mark.parametrize(
    "lines, msg",
    [
        (['{"question": "q?"}'], r":1: no 'answer' key \(null for an answer that is not known\)"),
        (['{"answer": "3"}'], ":1: no 'question' key"),
        (["{}"], ":1: no 'question' and no 'answer' key"),
        (
            ['{"question": "q?", "answer": "1"}', "", '{"question": "r?", "answer": "2"}'],
            ":2: blank line before more problems",
        ),
        (['{"question": "q?", "answer": [1, 2]}'], ":1: 'answer' is \\[1, 2\\], not a string"),
        (['{"question": "q?", "answer": true}'], ":1: 'answer' is True"),
        (['{"question": "q?", "answer": "  "}'], ":1: 'answer' is empty"),
        (['{"question": 5, "answer": "1"}'], ":1: 'question' is 5, not a non-empty string"),
        (['["q?", "1"]'], ":1: not a JSON object"),
        (['{"question": "q?", "answer": "1"'], ":1: invalid JSON"),
        (["", ""], "no problems"),
    ],
)
def test_a_bad_problem_line_is_one_line_naming_it(tmp_path, lines, msg):
    path = _file(tmp_path, *lines)
    with pytest.raises(MarsError, match=msg) as err:
        load_problems(path)
    assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)


def test_live_traffic_without_answers(tmp_path):
    """`mars solve` on questions whose answers are not known: accuracy n/a, the records replay,
    the pool keeps the answers as unknown (null), and `mars simulate`, which scores accuracy,
    refuses it in one line."""
    path = _file(
        tmp_path,
        json.dumps({"question": "Find x.", "answer": None}),
        json.dumps({"question": "Find y.", "answer": "70"}),
    )
    out = tmp_path / "run"
    runner = CliRunner()
    cmd = ["solve", "--problems", str(path), "--traces", "16", "--warmup", "4", "--out", str(out)]
    res = runner.invoke(app, cmd)
    assert res.exit_code == 0, res.output
    assert "of the 1 with a known answer" in " ".join(res.output.split())
    records = [json.loads((out / "live" / f"q00000{q}.json").read_text()) for q in (0, 1)]
    assert records[0]["correct"] is None and isinstance(records[1]["correct"], bool)
    pool = open_pool(out)
    assert pool.question_meta(0)["ground_truth"] is None and pool.unknown_answers == [0]
    assert [r["match"] for r in replay_run(out)] == [True, True]
    res = runner.invoke(
        app,
        [
            "simulate",
            str(out),
            "--method",
            "sc",
            "--budget",
            "8",
            "--iterations",
            "2",
            "--out",
            str(tmp_path / "sim"),
            "-q",
        ],
    )
    assert res.exit_code == 2 and "question 0 has no known answer" in res.output
    res = runner.invoke(
        app,
        [
            "simulate",
            str(out),
            "--method",
            "sc",
            "--budget",
            "8",
            "--iterations",
            "2",
            "--questions",
            "1",
            "--out",
            str(tmp_path / "sim"),
            "-q",
        ],
    )
    assert res.exit_code == 0, res.output
