"""What the report's data functions share: the record of what a table read (its provenance), a
number of an ``overall.json``, and the cost of a method that runs fewer traces than the budget
against its pipeline's full-budget vote."""

from __future__ import annotations

from ...method.registry import METHODS
from ..collect import Results, Run
from ..names import family_baseline, run_commands
from ..provenance import describe


class Reads:
    """The (run, method) pairs a table reads, for its provenance lines: call it with a run (or
    None) and a method to read that method's ``overall.json`` (None when the run lacks it)."""

    def __init__(self) -> None:
        self.items: list[tuple[Run, str]] = []

    def __call__(self, run: Run | None, method: str) -> dict | None:
        if run is not None and method in run.overall:
            self.items.append((run, method))
            return run.overall[method]
        return None

    def commands(self, report_command: str | None) -> list[str]:
        """The report command, then the simulate commands of the runs read."""
        uniq = list({(str(r.path), m): (r, m) for r, m in self.items}.values())
        return ([report_command] if report_command else []) + run_commands(uniq)

    def source(self, results: Results) -> str:
        """What the data read is (synthetic stand-ins flagged, real sources named)."""
        return describe(results.sources([r for r, _ in self.items]))


def number(ov: dict | None, key: str) -> float | None:
    """``ov[key]`` as a float (None when the method or the number is missing)."""
    if ov is None:
        return None
    v = ov.get(key)
    return None if v is None else float(v)


def oracle_stop(method: str) -> bool:
    """The method's rule stops by the traces' outcome (the oracle stops; a rule reading oracle q
    is not one); an unknown method is taken not to."""
    m = METHODS.get(method)
    return m is not None and m.rule.reads_future


def runs_fewer_traces(method: str) -> bool:
    """The method runs fewer traces of each sample than the budget (``single-sac``: one): its
    savings are against those traces, not against the full-budget vote."""
    m = METHODS.get(method)
    return m is not None and m.width is not None


def vote_share(results: Results, pair: tuple[str, str], run: Run, method: str) -> float | None:
    """A method's mean tokens as a share (%) of its pipeline's full-budget vote's, on the pool's
    comparable runs (None when either is missing)."""
    base = family_baseline(method)
    base_run = results.find(*pair, base)
    tokens = number(run.overall[method], "tokens_mean")
    vote = None if base_run is None else number(base_run.overall[base], "tokens_mean")
    if tokens is not None and vote:
        return 100.0 * tokens / vote
    return None
