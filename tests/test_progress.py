"""One library contract for progress: every stage function takes ``progress(done, total)`` and
calls it, (0, total) first, then once per question; only the command line draws bars."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from util import write_layout_pool

from mars.engines.synthetic import SyntheticBackend
from mars.fit.driver import fit_pool
from mars.generate import generate_pool, probe_pool
from mars.live import plan_for, solve_pool
from mars.method.registry import parse_methods
from mars.method.settings import Settings
from mars.progress import Bar
from mars.simulate.driver import simulate_pool

ROOT = Path(__file__).resolve().parents[1]


class Recorder:
    def __init__(self):
        self.calls: list[tuple[int, int]] = []

    def __call__(self, done: int, total: int) -> None:
        self.calls.append((done, total))

    def check(self, n: int) -> None:
        assert self.calls == [(k, n) for k in range(n + 1)], self.calls


def _solve(be, out, **kw):
    """A small live run: sc-mars, 4 traces + 2 warmup per question of AIME 2025."""
    return solve_pool(be, "aime_2025", out, plan_for(be, "sc-mars", n_traces=4, warmup=2), **kw)


@pytest.mark.parametrize("workers", [1, 2])
def test_fit_and_simulate_report_every_question(tmp_path, workers):
    pool = write_layout_pool(tmp_path / "pool", n_questions=3)
    fit, sim = Recorder(), Recorder()
    fit_pool(pool, tmp_path / "fit", warmups=(4,), workers=workers, progress=fit)
    s = Settings(budget=8, iterations=2, warmup=4)
    simulate_pool(pool, parse_methods("sc,sc-mars-cal"), s, workers=workers, progress=sim)
    fit.check(3)
    sim.check(3)


def test_generate_probe_and_solve_report_every_question(tmp_path):
    be = SyntheticBackend("qwen3-8b")
    gen, probed, solved = Recorder(), Recorder(), Recorder()
    out = generate_pool(
        be, "aime_2025", 4, 0, tmp_path / "gen", questions=[0, 1], probe="none", progress=gen
    )
    probe_pool(out, tmp_path / "probed", be, spacing=4096, progress=probed)
    _solve(be, tmp_path / "live", questions=[0, 1, 2], progress=solved)
    gen.check(2)
    probed.check(2)
    solved.check(3)


def test_only_the_command_line_draws():
    """No module of the library but mars.progress (which the command line calls) imports rich's
    progress display."""
    for path in (ROOT / "mars").rglob("*.py"):
        if path.name == "progress.py" or path.parent.name == "cli":
            continue
        text = path.read_text()
        assert not re.search(r"rich\.progress|progress_bar|track\(", text), path


def test_generate_and_solve_say_what_the_current_question_is_doing(tmp_path):
    """``detail`` hears each question's phases and checkpoints, in order (a question on a real
    engine takes minutes)."""
    be = SyntheticBackend("qwen3-8b")
    said: list[str] = []
    generate_pool(
        be, "aime_2025", 3, 0, tmp_path / "gen", questions=[4], spacing=4096, detail=said.append
    )
    assert said[0] == "q4: 4,096 tokens, 3 of 3 running" and said[-1].startswith("q4: to the end")
    positions = [int(re.match(r"q4: ([\d,]+) tokens", t)[1].replace(",", "")) for t in said[:-1]]
    assert positions == sorted(positions) and len(positions) > 1

    said.clear()
    _solve(be, tmp_path / "live", questions=[0, 1], compare_full=True, detail=said.append)
    for q in (0, 1):
        mine = [t for t in said if t.startswith(f"q{q} ")]
        phases = [t.split(":")[0] for t in mine]
        firsts = [phases.index(f"q{q} {p}") for p in ("warmup", "sc-mars", "to completion")]
        assert firsts == sorted(firsts), phases  # warmup, then the live traces, then the full run
        assert (
            f"q{q} warmup: starting 2 traces" in mine and f"q{q} sc-mars: starting 4 traces" in mine
        )
        assert any(re.fullmatch(rf"q{q} sc-mars: [\d,]+ tokens, \d of 4 running", t) for t in mine)


def test_the_bar_shows_the_detail_under_the_count():
    quiet = Bar("solve (sc)", disable=True)
    quiet.detail("q0 warmup: starting 16 traces")  # disabled: nothing is drawn
    quiet(0, 3)
    assert quiet.display is None
    shown = Bar("solve (sc)", plain=False)
    shown(0, 3)
    shown.detail("q0 sc: 2,048 tokens, 60 of 64 running")
    shown(1, 3)
    task = shown.display.tasks[0]
    lines = [type(r).__name__ for r in shown.display.get_renderables()]
    text = str(list(shown.display.get_renderables())[-1])
    shown.close()
    assert (task.completed, task.total) == (1, 3)
    assert lines == ["Table", "Text"] and text == "q0 sc: 2,048 tokens, 60 of 64 running"


def test_without_a_terminal_the_bar_is_plain_lines_a_log_keeps(capsys):
    """stderr to a file (nohup, CI, SLURM): one line per question done, and of the detail each
    phase's first line, every 4th checkpoint after it and every line that is not a checkpoint."""
    shown = Bar("solve (sc)")  # stderr is captured here: not a terminal
    assert shown.plain
    shown(0, 2)
    shown.detail("q0 warmup: starting 2 traces")
    for p in range(1, 11):
        shown.detail(f"q0 warmup: {p * 2048:,} tokens, 2 of 2 running")
    shown.detail("q0 warmup: to the end (at most 32,768 tokens)")
    shown.detail("q0 sc: starting 4 traces")
    shown.detail("q0 sc: 2,048 tokens, 4 of 4 running")  # the first after the phase's first
    shown(1, 2)
    shown(2, 2)
    shown.close()
    lines = [re.sub(r"^\[\d:\d\d:\d\d\] ", "", x) for x in capsys.readouterr().err.splitlines()]
    assert lines == [
        "solve (sc): 2 questions to do",
        "  q0 warmup: starting 2 traces",
        "  q0 warmup: 8,192 tokens, 2 of 2 running",
        "  q0 warmup: 16,384 tokens, 2 of 2 running",
        "  q0 warmup: to the end (at most 32,768 tokens)",
        "  q0 sc: starting 4 traces",
        lines[6],
        "solve (sc): 2/2 questions done",
    ]
    assert re.fullmatch(r"solve \(sc\): 1/2 questions done, about \d:\d\d:\d\d left", lines[6])


def test_a_quiet_checkpoint_is_written_after_a_minute_of_silence(capsys):
    shown = Bar("generate (server)", plain=True, quiet_s=0.0)
    shown(0, 1)
    for p in (2048, 4096, 6144):
        shown.detail(f"q0: {p:,} tokens, 64 of 64 running")
    assert len(capsys.readouterr().err.splitlines()) == 4


def test_quiet_writes_nothing_with_or_without_a_terminal(capsys):
    for plain in (True, False):
        shown = Bar("solve (sc)", disable=True, plain=plain)
        shown(0, 1)
        shown.detail("q0 warmup: starting 2 traces")
        shown(1, 1)
        shown.close()
    assert capsys.readouterr().err == ""
