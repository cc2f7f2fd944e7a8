"""Fixtures of the transformers engine's tests: SmolLM2-135M loaded once, and the tiny models."""

from __future__ import annotations

import os

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")
pytest.importorskip("accelerate")  # transformers needs it to load GGUF files

from engines.transformers.common import (  # noqa: E402
    GGUF,
    MAX_TOKENS,
    PROBE_NEW,
    bpe_tokenizer,
    tiny_model,
)
from mars.engines.transformers import (  # noqa: E402
    TransformersBackend,
)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One CPU thread for every model here: the models are small, and a second thread only spins
    (it doubles the CPU time, more so on a loaded machine or beside a parallel test worker)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def smol(tmp_path_factory):
    """(backend loaded from the GGUF file, the same model written as a plain model directory)."""
    be = TransformersBackend(
        GGUF, device="cpu", max_tokens=MAX_TOKENS, batch_size=2, probe_max_new_tokens=PROBE_NEW
    )
    d = be.save_pretrained(tmp_path_factory.mktemp("smollm2"))
    return be, d


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """Model directories of tiny models: ``a`` and ``a2`` (other weights) share one vocabulary,
    ``b`` has another (another size, special tokens in another order)."""
    root = tmp_path_factory.mktemp("tiny")
    tok_a = bpe_tokenizer(300, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok_b = bpe_tokenizer(360, ["<|im_start|>", "<|im_end|>", "<|endoftext|>"])
    dirs = {}
    for name, tok, seed in (("a", tok_a, 0), ("a2", tok_a, 1), ("b", tok_b, 2)):
        d = root / name
        tiny_model(tok, seed=seed).save_pretrained(d)
        tok.save_pretrained(d)
        dirs[name] = d
    return dirs
