"""The live stage (`mars solve`, `mars replay`): stop parallel generation on an engine the moment a
stopping rule fires.

* :mod:`.stepper` — :class:`~mars.live.stepper.Stopper`, one method deciding on one question
  checkpoint by checkpoint, fed by any generation loop (``mars.Stopper``);
* :mod:`.plan` — :class:`~mars.live.plan.LivePlan`, how one question is solved, built and checked
  once where a run starts (:func:`plan_for`) and taken whole by the loop and the writers;
* :mod:`.loop` — the decision loop on an engine (:func:`solve`) and many questions into a run
  directory (:func:`solve_pool`);
* :mod:`.warmup` — a question's warmup traces, kept on disk until the question ends;
* :mod:`.records` — a run directory's records, their grid and settings, and their checks;
* :mod:`.replay` — the records re-simulated (:func:`decide`, :func:`replay_run`);
* :mod:`.summary` — what a run cost and saved (``live.csv``);
* :mod:`.audit` — a stopped question run on to its end and its full-budget vote
  (:func:`complete_question`), and `mars audit` (:func:`audit_paths`).
"""

from ..method.registry import live_method
from .audit import audit_paths, complete_question
from .loop import Checkpoint, LiveRun, solve, solve_pool
from .plan import LivePlan, plan_for
from .records import live_grid, live_settings
from .replay import LiveRunDir, decide, open_live_run, replay_run
from .stepper import MAX_CHECKPOINTS

__all__ = [
    "MAX_CHECKPOINTS",
    "Checkpoint",
    "LivePlan",
    "LiveRun",
    "LiveRunDir",
    "audit_paths",
    "complete_question",
    "decide",
    "live_grid",
    "live_method",
    "live_settings",
    "open_live_run",
    "plan_for",
    "replay_run",
    "solve",
    "solve_pool",
]
