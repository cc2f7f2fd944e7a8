"""Random-weight causal LMs of a real model's shape: speed measured where no weights can be had.

    python benchmarks/random_model.py SHAPE --tokenizer PATH --out DIR [--device cuda]
                                      [--dtype bfloat16]

A random model decodes at the speed of its shape (layers, widths, heads, vocabulary) but writes
nonsense and almost never its end-of-text token, so every trace runs to the token cap.  Shapes:

* ``qwen3-8b``: Qwen3-8B's (36 layers, hidden 4,096, MLP 12,288, 32 query / 8 KV heads of 128),
  with the tokenizer's vocabulary (SmolLM2's 49,152: 7.35 B parameters, the 8B-shaped model of
  benchmarks/README.md);
* ``smollm2-135m``: SmolLM2-135M's (30 layers, hidden 576, MLP 1,536, 9 / 3 heads of 64, tied
  embeddings);
* ``tiny`` and ``tiny-qwen3``: two layers of width 64, for trying the scripts on a CPU.

Rotary settings are left at the library's defaults (they do not change the speed).  The weights
come from ``torch.manual_seed(seed)`` and the library's initialisation, on ``device`` directly
(7.35 B parameters are made in about a second on a GPU).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: model type and dimensions of each shape (vocabulary: the tokenizer's)
SHAPES: dict[str, tuple[str, dict]] = {
    "qwen3-8b": (
        "qwen3",
        {
            "hidden_size": 4096,
            "intermediate_size": 12288,
            "num_hidden_layers": 36,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "max_position_embeddings": 40960,
            "tie_word_embeddings": False,
        },
    ),
    "smollm2-135m": (
        "llama",
        {
            "hidden_size": 576,
            "intermediate_size": 1536,
            "num_hidden_layers": 30,
            "num_attention_heads": 9,
            "num_key_value_heads": 3,
            "head_dim": 64,
            "max_position_embeddings": 8192,
            "tie_word_embeddings": True,
        },
    ),
    "tiny": (
        "llama",
        {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 4096,
        },
    ),
    "tiny-qwen3": (
        "qwen3",
        {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "max_position_embeddings": 4096,
        },
    ),
}


def build(shape: str, tokenizer, device: str = "cpu", dtype=None, seed: int = 0):
    """A random-weight model of ``shape`` for ``tokenizer``, on ``device`` in eval mode."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from mars.engines.models import _resolve_dtype

    if shape not in SHAPES:
        raise SystemExit(f"unknown shape {shape!r} ({', '.join(SHAPES)})")
    kind, dims = SHAPES[shape]
    eos = tokenizer.eos_token_id
    cfg = AutoConfig.for_model(
        kind,
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos,
        **dims,
    )
    torch_dtype = _resolve_dtype(torch, dtype, device)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch_dtype)
    return model.eval()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("--tokenizer", required=True, help="a tokenizer: model directory or GGUF file")
    ap.add_argument("--out", required=True, help="model directory to write")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None, help="default: bfloat16 on CUDA, float32 on a CPU")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)

    from mars.engines.models import load_tokenizer

    tok = load_tokenizer(a.tokenizer)
    model = build(a.shape, tok, a.device, a.dtype, a.seed)
    model.save_pretrained(a.out)
    tok.save_pretrained(a.out)
    n = sum(p.numel() for p in model.parameters())
    print(f"{a.shape}: {n / 1e6:.1f} M parameters → {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
