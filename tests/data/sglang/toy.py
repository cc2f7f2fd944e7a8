"""Toy tokenizer and scripted SGLang-like engine that wrote the fixtures in this folder.

NOT a recording of a live SGLang engine: no GPU with SGLang was available to this project.  The
fixtures are hand-built to the documented shape of ``sglang.Engine.generate`` results (SGLang
0.5.x; /work/shared/spec/ecosystem.md §3.1 and the engine's ``meta_info``):

* one ``{"text", "output_ids", "meta_info"}`` dict per request of a batched call;
* ``meta_info``: ``id``, ``finish_reason`` (``{"type": "stop", "matched": <eos id>}`` or
  ``{"type": "length", "length": <max_new_tokens>}``), ``prompt_tokens``, ``completion_tokens``,
  ``cached_tokens``, ``e2e_latency``; with ``return_logprob=True`` also ``output_token_logprobs`` —
  one ``[logprob, token_id, null]`` per generated token — and ``output_top_logprobs`` — one list of
  ``top_logprobs_num`` such triples per generated token (JSON turns the engine's tuples into lists);
* the EOS token that ends a request is part of ``output_ids`` and of the log-probability lists and
  counts in ``completion_tokens``; ``text`` is detokenised without special tokens;
* ``cached_tokens`` follow a radix cache: the longest prefix of the request already seen in an
  earlier call (prompt + output of every earlier request, minus the last output token whose KV was
  never computed), never the whole input.

Regenerate with ``python tests/data/sglang/toy.py`` (it drives
:class:`mars.backends.sglang.SGLangBackend` against :class:`ScriptedEngine` and records every
request/response pair); the tests only replay the JSON files.
"""

from __future__ import annotations

import json
import string
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EOS_ID = 2
WORDS = [
    " Considering",
    " the",
    " limited",
    " time",
    " by",
    " user",
    " I",
    " have",
    " to",
    " give",
    " solution",
    " based",
    " on",
    " thinking",
    " directly",
    " now",
    "</think>",
    "<think>",
    "\\boxed{",
    "\\dfrac{",
    " Let",
    " me",
    " add",
    " So",
    " answer",
    " is",
    " Hmm",
    " maybe",
    " check",
    " again",
    " wait",
    " What",
    " Please",
    " reason",
    " step",
    " put",
    " your",
    " final",
    " within",
    " and",
    "user",
    "assistant",
    " 2",
    " 3",
    " 5",
    " 6",
    " 12",
    " so",
    " +",
    " =",
    " or",
]
VOCAB = SPECIAL + WORDS + [c for c in string.printable if c not in "\x0b\x0c\r"]


class ToyTokenizer:
    """Greedy longest-match tokenizer over :data:`VOCAB` with a ChatML-like chat template."""

    chat_template = "chatml"

    def __init__(self, vocab=VOCAB, eos_token_id=EOS_ID):
        self.vocab = list(vocab)
        self.index = {t: i for i, t in enumerate(self.vocab)}
        self.special = set(range(len(SPECIAL)))
        self.eos_token_id = eos_token_id
        self.maxlen = max(map(len, self.vocab))

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids, i = [], 0
        while i < len(text):
            for n in range(min(self.maxlen, len(text) - i), 0, -1):
                t = self.index.get(text[i : i + n])
                if t is not None:
                    ids.append(t)
                    i += n
                    break
            else:
                raise ValueError(f"toy tokenizer cannot encode {text[i]!r}")
        return ids

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": self.encode(text)}

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join(
            self.vocab[i] for i in ids if not (skip_special_tokens and i in self.special)
        )

    def apply_chat_template(
        self, messages, add_generation_prompt: bool = True, tokenize: bool = False
    ):
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        if add_generation_prompt:
            text += "<|im_start|>assistant\n"
        return self.encode(text) if tokenize else text

    def ids(self, pieces: list[str]) -> list[int]:
        """Token ids of a list of vocabulary strings (exact tokens, no merging)."""
        return [self.index[p] for p in pieces]


# ---------------------------------------------------------------------------------------------
# The scripted "model": three traces of "What is 2 + 3?" and canned probe completions

T = ToyTokenizer()
SCRIPTS = {
    # ends with EOS as its 15th token (finished; probed at 8 only)
    "A": [
        " Let",
        " me",
        " add",
        ":",
        " 2",
        " +",
        " 3",
        " =",
        " 5",
        ".",
        " So",
        "\\boxed{",
        "5",
        "}",
        "<|im_end|>",
    ],
    # runs into the 24-token cap (cut), a boxed 6 in its thinking
    "B": [
        " Hmm",
        ",",
        " maybe",
        " 2",
        " +",
        " 3",
        " =",
        " 6",
        "?",
        " Let",
        " me",
        " check",
        " again",
        ".",
        " 2",
        " +",
        " 3",
        " =",
        " 6",
        ",",
        " ",
        "\\boxed{",
        "6",
        "}",
        " wait",
        " or",
    ],
    # ends with EOS as its 16th token, exactly at a checkpoint (not probed there)
    "C": [
        " What",
        " is",
        " 2",
        " +",
        " 3",
        "?",
        " 5",
        ".",
        " So",
        " the",
        " answer",
        " is",
        "\\boxed{",
        "5",
        "}",
        "<|im_end|>",
    ],
}
assert len(SCRIPTS["A"]) == 15 and len(SCRIPTS["C"]) == 16 and "<|im_end|>" not in SCRIPTS["B"]
#: probe completion per (script, position): token strings (EOS included where the probe stops)
PROBES = {
    ("A", 8): [" 5", "}", "<|im_end|>"],
    ("B", 8): [" 6", "}", "<|im_end|>"],
    ("C", 8): ["<|im_end|>"],  # nothing parseable: answer None
    ("B", 16): ["\\dfrac{", "1", "2", "}", "{", "2", "}", "}"]
    + [" and", " so", " on"] * 20,  # hits max_new_tokens
}


class ScriptedEngine:
    """Answers ``generate`` like SGLang would for the scripts above (see the module docstring)."""

    def __init__(self, prompt_ids: list[int], suffix_ids: list[int], first_tokens: dict[int, str]):
        self.prompt = list(prompt_ids)
        self.suffix = list(suffix_ids)
        self.first_tokens = first_tokens  # sampling_seed of a trace's first request -> script name
        self.seen: list[tuple[int, ...]] = []
        self.exchanges: list[dict] = []
        self.calls = 0
        self.rng = np.random.default_rng(12345)

    def _cached(self, ids: list[int]) -> int:
        best = 0
        for s in self.seen:
            n = 0
            for a, b in zip(s, ids):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        return min(best, len(ids) - 1)

    def _script_of(self, cont: list[int], seed: int) -> str:
        if not cont:
            return self.first_tokens[seed]
        for name, toks in SCRIPTS.items():
            if T.ids(toks[:1]) == cont[:1]:
                return name
        raise KeyError("unknown trace prefix")

    def _top(self, chosen: int, lp: float) -> list[list]:
        """20 [logprob, id, null] entries, descending; the chosen token's mass exp(lp), the other 19
        share 90 % of the rest (the tail of the vocabulary holds the remaining 10 %)."""
        others = [
            int(i)
            for i in self.rng.choice(
                np.setdiff1d(np.arange(len(VOCAB)), [chosen]), 19, replace=False
            )
        ]
        rest = (1.0 - float(np.exp(lp))) * 0.9 * self.rng.dirichlet(np.full(19, 0.3))
        entries = [[round(lp, 6), chosen, None]] + [
            [round(float(np.log(max(q, 1e-30))), 6), i, None] for q, i in zip(rest, others)
        ]
        return sorted(entries, key=lambda e: -e[0])

    def generate(
        self, input_ids, sampling_params, return_logprob=False, top_logprobs_num=None, **kw
    ):
        assert not kw, kw
        self.calls += 1
        outs = []
        for ids, sp in zip(input_ids, sampling_params):
            ids = list(ids)
            assert ids[: len(self.prompt)] == self.prompt
            rest = ids[len(self.prompt) :]
            probe = len(rest) >= len(self.suffix) and rest[-len(self.suffix) :] == self.suffix
            if probe:
                cont = rest[: -len(self.suffix)]
                toks = PROBES[(self._script_of(cont, -1), len(cont))]
            else:
                cont = rest
                name = self._script_of(cont, sp.get("sampling_seed"))
                toks = SCRIPTS[name][len(cont) :]
            out_ids = T.ids(toks)[: sp["max_new_tokens"]]
            if EOS_ID in out_ids:
                out_ids = out_ids[: out_ids.index(EOS_ID) + 1]
                finish = {"type": "stop", "matched": EOS_ID}
            else:
                assert len(out_ids) == sp["max_new_tokens"], "script too short"
                finish = {"type": "length", "length": sp["max_new_tokens"]}
            meta = {
                "id": f"{self.calls:02d}{len(outs):02d}" + "5f3c9a1e7b2d4c6e8a0f1b3d5e7a9c1e"[4:],
                "finish_reason": finish,
                "prompt_tokens": len(ids),
                "completion_tokens": len(out_ids),
                "cached_tokens": self._cached(ids),
                "e2e_latency": round(0.05 + 0.004 * len(out_ids) + 0.0001 * len(ids), 4),
            }
            if return_logprob:
                lps = [-float(x) for x in self.rng.gamma(0.6, 0.4, len(out_ids))]
                meta["output_token_logprobs"] = [
                    [round(lp, 6), t, None] for lp, t in zip(lps, out_ids)
                ]
                meta["output_top_logprobs"] = [
                    self._top(t, lp)[:top_logprobs_num] for lp, t in zip(lps, out_ids)
                ]
            outs.append(
                {
                    "text": T.decode(out_ids, skip_special_tokens=True),
                    "output_ids": out_ids,
                    "meta_info": meta,
                }
            )
            self.exchanges.append(
                {
                    "request": {
                        "input_ids": ids,
                        "sampling_params": sp,
                        "return_logprob": return_logprob,
                        "top_logprobs_num": top_logprobs_num,
                    },
                    "response": outs[-1],
                }
            )
        for ids, out in zip(input_ids, outs):
            self.seen.append(tuple(list(ids) + out["output_ids"][:-1]))
        return outs


def dumps(obj, level: int = 0, width: int = 110) -> str:
    """JSON with short containers (and lists of scalars) on one line, the rest indented."""
    flat = json.dumps(obj, ensure_ascii=False)
    scalars = isinstance(obj, list) and all(not isinstance(x, (list, dict)) for x in obj)
    rows = isinstance(obj, list) and all(
        isinstance(x, list) and not any(isinstance(y, (list, dict)) for y in x) for x in obj
    )
    if (
        len(flat) + level <= width
        or scalars
        or (rows and len(flat) <= 8 * width)
        or not isinstance(obj, (list, dict))
        or not obj
    ):
        return flat
    pad = " " * (level + 1)
    if isinstance(obj, list):
        items = [pad + dumps(x, level + 1, width) for x in obj]
        return "[\n" + ",\n".join(items) + "\n" + " " * level + "]"
    items = [pad + json.dumps(k) + ": " + dumps(v, level + 1, width) for k, v in obj.items()]
    return "{\n" + ",\n".join(items) + "\n" + " " * level + "}"


def main() -> int:
    sys.path.insert(0, str(HERE.parents[2]))
    from mars.backends.base import Problem
    from mars.backends.sglang import SGLangBackend, request_seed
    from mars.generate import run_batch

    problem = Problem(qid=0, question="What is 2 + 3?", answer="5", dataset="toy")
    seed, n, spacing, max_tokens = 7, 3, 8, 24
    tok = ToyTokenizer()
    # the prompt and suffix ids come from the adapter itself; the engine only checks them
    be = SGLangBackend("toy/Toy-Reasoner", engine=object(), tokenizer=tok, max_tokens=max_tokens)
    firsts = {request_seed(seed, problem.qid, j, 0): name for j, name in enumerate("ABC")}
    engine = ScriptedEngine(be.prompt_ids(problem.question), be.suffix_ids, firsts)
    be.engine = engine
    records = run_batch(be.start(problem, n, seed), spacing, max_tokens=max_tokens)
    doc = {
        "about": "Hand-built SGLang Engine.generate exchanges (shape of SGLang 0.5.x meta_info), "
        "NOT recorded from a live engine; written by tests/data/sglang/toy.py, replayed by "
        "tests/test_backend_sglang.py.",
        "problem": {
            "qid": problem.qid,
            "question": problem.question,
            "answer": problem.answer,
            "dataset": problem.dataset,
        },
        "model": be.model,
        "seed": seed,
        "n_traces": n,
        "spacing": spacing,
        "max_tokens": max_tokens,
        "eos_token_id": EOS_ID,
        "vocab": VOCAB,
        "exchanges": engine.exchanges,
        "expected": [
            {
                "length": r.result.length,
                "finished": r.result.finished,
                "final_answer": r.result.final_answer,
                "probes": [
                    [p, pr.answer, pr.cached_tokens, pr.generated_tokens] for p, pr in r.probes
                ],
            }
            for r in records
        ],
    }
    path = HERE / "session_toy_q0.json"
    path.write_text(dumps(doc) + "\n")
    print(f"{path}: {len(engine.exchanges)} exchanges in {engine.calls} calls")
    for r in doc["expected"]:
        print(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
