"""One library contract for progress: every stage function takes ``progress(done, total)`` and
calls it, (0, total) first, then once per question; only the command line draws bars."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from util import write_layout_pool

from mars.engines.generate import generate_pool
from mars.engines.probe import probe_pool
from mars.engines.synthetic import SyntheticBackend
from mars.fit import fit_pool
from mars.live import solve_pool
from mars.method.registry import parse_methods
from mars.method.settings import Settings
from mars.simulate import simulate_pool

ROOT = Path(__file__).resolve().parents[1]


class Recorder:
    def __init__(self):
        self.calls: list[tuple[int, int]] = []

    def __call__(self, done: int, total: int) -> None:
        self.calls.append((done, total))

    def check(self, n: int) -> None:
        assert self.calls == [(k, n) for k in range(n + 1)], self.calls


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
    solve_pool(
        be,
        "aime_2025",
        tmp_path / "live",
        "sc-mars",
        n_traces=4,
        warmup=2,
        questions=[0, 1, 2],
        progress=solved,
    )
    gen.check(2)
    probed.check(2)
    solved.check(3)


def test_only_the_command_line_draws():
    """No module of the library but mars.progress (which the command line calls) imports rich's
    progress display."""
    for path in (ROOT / "mars").rglob("*.py"):
        if path.name in ("progress.py", "cli.py"):
            continue
        text = path.read_text()
        assert not re.search(r"rich\.progress|progress_bar|track\(", text), path
