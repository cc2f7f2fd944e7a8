"""Synthetic reasoning-model backend: the embedded default, calibrated on real traces.

It stands in for an LLM on machines with no GPU and no model. For a question it produces reasoning
traces -- a token count, per-token confidences, a short text ending in ``\\boxed{...}`` -- and
answers probes ("what would the trace answer if stopped at token t?") through the very same
:class:`~mars.engines.base.Backend` / :class:`~mars.engines.base.TraceBatch` interface as the real
engines, so ``mars generate`` and live mode take one path through every backend.

Nothing is generated token by token. Each question gets a latent model, each trace a latent
*answer timeline* (a list of change points), and a trace "advancing" only moves its position
along that timeline. See ``docs/synthetic.md`` for the model, its parameters, the presets and the
calibration against real Qwen3-8B probe traces.
"""

from .backend import SyntheticBackend
from .batch import SyntheticTraceBatch
from .latent import QuestionLatent, dataset_key, question_latent, wrong_answer
from .presets import (
    DEFAULT_PRESET,
    PARAMS,
    PRESET_DIR,
    list_presets,
    load_preset,
    question_logit,
    resolve_params,
    trap_share,
)

__all__ = [
    "DEFAULT_PRESET",
    "PARAMS",
    "PRESET_DIR",
    "QuestionLatent",
    "SyntheticBackend",
    "SyntheticTraceBatch",
    "dataset_key",
    "list_presets",
    "load_preset",
    "question_latent",
    "question_logit",
    "resolve_params",
    "trap_share",
    "wrong_answer",
]
