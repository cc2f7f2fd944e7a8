"""How the transformers engine draws a token: logits / temperature → top-k → top-p as SGLang and
vLLM do, by inverse-CDF sampling with one uniform from the trace's own generator, so a trace does
not depend on which other traces share its batch."""

from __future__ import annotations

import numpy as np

from ..models import _torch
from ..tokens import (
    CONF_TOP_K,
)

UNIFORM_BLOCK = 64  # uniforms drawn per refill of a trace's generator (fixed: part of the stream)


def round_confs(values: np.ndarray) -> np.ndarray:
    return np.round(np.asarray(values, np.float64), 3)


def sample_tokens(
    logits,
    uniforms: np.ndarray,
    temperature: float,
    top_k: int = 0,
    top_p: float = 1.0,
    logprobs: str = "scaled",
) -> tuple[np.ndarray, np.ndarray]:
    """One token per row of ``logits`` [B, V], and each row's confidence (float64, unrounded).

    Sampling: logits / temperature → keep the ``top_k`` largest (0: all) → keep the smallest set of
    most likely tokens whose probability reaches ``top_p`` → draw by inverse CDF with the row's
    uniform in [0, 1) (tokens ordered by decreasing probability, ties by token id).
    ``temperature <= 0``: greedy.  Confidence: −mean of the top-20 log-probabilities of
    ``log_softmax(logits / temperature)`` (``logprobs="scaled"``) or of ``log_softmax(logits)``
    (``"raw"``, and always when greedy).
    """
    torch = _torch()
    t = float(temperature)
    logits = logits.float()
    scaled = logits / t if t > 0 else logits
    logp = torch.log_softmax(scaled if (logprobs == "scaled" and t > 0) else logits, dim=-1)
    k = min(CONF_TOP_K, logp.shape[-1])
    conf = (-logp.topk(k, dim=-1).values.mean(dim=-1)).double().cpu().numpy()
    if t <= 0:
        return logits.argmax(dim=-1).cpu().numpy(), conf
    if 0 < top_k < scaled.shape[-1]:
        vals, idx = scaled.topk(int(top_k), dim=-1)  # sorted, descending
    else:
        vals, idx = scaled.sort(dim=-1, descending=True, stable=True)
    probs = torch.softmax(vals, dim=-1)
    if top_p < 1:
        before = probs.cumsum(dim=-1) - probs
        probs = probs.masked_fill(before > top_p, 0.0)
    cdf = probs.cumsum(dim=-1)
    n_kept = (probs > 0).sum(dim=-1)
    u = torch.as_tensor(np.asarray(uniforms, np.float64), dtype=cdf.dtype, device=cdf.device)
    r = (u * cdf[:, -1]).unsqueeze(-1)
    pos = torch.searchsorted(cdf, r, right=True).squeeze(-1)
    pos = torch.minimum(pos, n_kept - 1)
    tok = idx.gather(-1, pos.unsqueeze(-1)).squeeze(-1)
    return tok.cpu().numpy(), conf


class UniformStream:
    """Uniforms of one torch.Generator, drawn in fixed blocks
    (the block size is part of the stream)."""

    def __init__(self, seed: int):
        torch = _torch()
        self.gen = torch.Generator(device="cpu")
        self.gen.manual_seed(seed)
        self.buf = np.zeros(0)
        self.i = 0

    def next(self) -> float:
        if self.i >= self.buf.size:
            torch = _torch()
            self.buf = torch.rand(UNIFORM_BLOCK, generator=self.gen, dtype=torch.float64).numpy()
            self.i = 0
        self.i += 1
        return float(self.buf[self.i - 1])
