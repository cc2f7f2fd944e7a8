"""The transformers engine's sampler (mars/engines/transformers/sampling.py): top-k, top-p, greedy
and the confidence modes."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")
pytest.importorskip("accelerate")  # transformers needs it to load GGUF files

from engines.transformers.common import (  # noqa: E402
    smol_test,
)
from mars.engines.transformers import (  # noqa: E402
    sample_tokens,
)


@smol_test
def test_sampler_top_k_top_p_greedy_and_confidence_modes():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 50, generator=g) * 3
    u = np.linspace(0.01, 0.99, 4)
    tok, conf = sample_tokens(logits, u, temperature=0.6, top_k=5, top_p=1.0)
    top5 = logits.topk(5).indices
    assert all(int(t) in top5[i].tolist() for i, t in enumerate(tok))
    expect = -torch.log_softmax(logits / 0.6, -1).topk(20).values.mean(-1).double().numpy()
    assert np.allclose(conf, expect)
    _, raw = sample_tokens(logits, u, temperature=0.6, top_k=5, logprobs="raw")
    assert np.allclose(
        raw, -torch.log_softmax(logits, -1).topk(20).values.mean(-1).double().numpy()
    )
    assert not np.allclose(
        raw, conf
    )  # temperature changes the confidences: recorded in the manifest
    # u -> 0 picks the most likely token; top_p tiny keeps only it
    assert np.array_equal(
        sample_tokens(logits, np.zeros(4), 0.6, 0, 1.0)[0], logits.argmax(-1).numpy()
    )
    assert np.array_equal(
        sample_tokens(logits, np.full(4, 0.999), 0.6, 0, 1e-6)[0], logits.argmax(-1).numpy()
    )
    assert np.array_equal(sample_tokens(logits, u, 0.0)[0], logits.argmax(-1).numpy())
    # the same uniforms give the same tokens (a trace's stream decides its tokens)
    assert np.array_equal(
        sample_tokens(logits, u, 0.6, 20, 0.95)[0], sample_tokens(logits, u, 0.6, 20, 0.95)[0]
    )
