"""DeepConf-online emulation (reference-protocol §8): threshold, voting filter, truncation."""

from __future__ import annotations

import numpy as np

from .arrays import QuestionArrays

PERCENTILE = 90


def threshold(arr: QuestionArrays, warm: np.ndarray):
    """Confidence threshold: 90th percentile (linear)
    of the warmup traces' lowest group confidence."""
    assert arr.min_group is not None  # DeepConf needs confidences
    return np.percentile(arr.min_group[warm], PERCENTILE)


def running_min_conf(arr: QuestionArrays) -> np.ndarray:
    """Running minimum over checkpoints of the checkpoint confidence (once below, out for good)."""
    assert arr.conf_at_pos is not None  # DeepConf needs confidences
    return np.minimum.accumulate(arr.conf_at_pos, axis=1)


def iteration_state(arr: QuestionArrays, samples: np.ndarray, n_warmup: int):
    """Per-iteration thresholds τ_i (from each sample's first ``n_warmup`` columns)
    and truncation [I, B]."""
    taus = [threshold(arr, s[:n_warmup]) for s in samples]
    trunc = np.stack([arr.truncation(t)[s] for t, s in zip(taus, samples)])
    return taus, trunc
