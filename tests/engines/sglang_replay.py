"""A fake SGLang engine that replays hand-built engine outputs (tests/data/sglang/): it answers a
request only if it matches a recorded one exactly (token ids, sampling parameters, logprob
options), and the backend built on it. A refusal is one line."""

from __future__ import annotations

import copy
import importlib.util
import json
import types
from pathlib import Path

import pytest

from mars.engines.base import Problem
from mars.engines.generate import run_batch
from mars.engines.sglang import (
    SGLangBackend,
)
from mars.errors import MarsError
from mars.store.grid import Grid

DATA = Path(__file__).resolve().parents[1] / "data" / "sglang"
SESSION = json.loads((DATA / "session_toy_q0.json").read_text())

_spec = importlib.util.spec_from_file_location("sglang_toy", DATA / "toy.py")
toy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(toy)


def _key(input_ids, sampling_params, return_logprob, top_logprobs_num) -> str:
    return json.dumps(
        [list(input_ids), sampling_params, bool(return_logprob), top_logprobs_num], sort_keys=True
    )


def _tuples(x):
    """JSON lists of [logprob, id, text] back to the tuples the in-process engine returns."""
    if (
        isinstance(x, list)
        and len(x) == 3
        and isinstance(x[1], int)
        and not isinstance(x[0], (list, dict))
    ):
        return tuple(x)
    if isinstance(x, list):
        return [_tuples(e) for e in x]
    if isinstance(x, dict):
        return {k: _tuples(v) for k, v in x.items()}
    return x


class ReplayEngine:
    """Answers ``generate`` from recorded exchanges; an unrecorded request is an error.  Reports
    the recorded ``get_server_info()`` (updated by ``server_info``) and context length."""

    def __init__(
        self,
        exchanges,
        tuples: bool = True,
        server_info: dict | None = None,
        context_len: int | None = SESSION["context_len"],
    ):
        self.info = {**SESSION["server_info"], **(server_info or {})}
        self.tokenizer_manager = types.SimpleNamespace(context_len=context_len)
        self.table = {}
        for ex in exchanges:
            r = ex["request"]
            self.table[
                _key(
                    r["input_ids"], r["sampling_params"], r["return_logprob"], r["top_logprobs_num"]
                )
            ] = ex["response"]
        self.tuples = tuples
        self.used: list[str] = []
        self.calls: list[list[dict]] = []
        self.shut = False

    def generate(
        self,
        input_ids=None,
        sampling_params=None,
        return_logprob=False,
        top_logprobs_num=None,
        **kw,
    ):
        assert not kw, f"unexpected engine arguments {kw}"
        assert isinstance(input_ids, list) and isinstance(sampling_params, list)
        assert len(input_ids) == len(sampling_params)
        outs, reqs = [], []
        for ids, sp in zip(input_ids, sampling_params):
            assert all(isinstance(t, int) for t in ids), "token ids must be plain ints"
            key = _key(ids, sp, return_logprob, top_logprobs_num if return_logprob else None)
            if key not in self.table:
                raise AssertionError(
                    f"unrecorded request: {len(ids)} ids, {sp}, logprob={return_logprob}"
                )
            self.used.append(key)
            reqs.append(
                {
                    "input_ids": list(ids),
                    "sampling_params": dict(sp),
                    "return_logprob": return_logprob,
                }
            )
            out = copy.deepcopy(self.table[key])
            outs.append(_tuples(out) if self.tuples else out)
        self.calls.append(reqs)
        return outs

    def get_server_info(self):
        return dict(self.info)

    def shutdown(self):
        self.shut = True


PROBLEM = Problem(**SESSION["problem"])
NONDET = {"enable_deterministic_inference": False}  # an engine started without it


def make_backend(engine=None, **kw) -> SGLangBackend:
    return SGLangBackend(
        SESSION["model"],
        engine=engine or ReplayEngine(SESSION["exchanges"]),
        tokenizer=toy.ToyTokenizer(SESSION["vocab"], SESSION["eos_token_id"]),
        **{"max_tokens": SESSION["max_tokens"], **kw},
    )


def run(be: SGLangBackend, **kw):
    batch = be.start(PROBLEM, SESSION["n_traces"], SESSION["seed"])
    return batch, run_batch(batch, Grid(SESSION["spacing"]), max_tokens=SESSION["max_tokens"], **kw)


def _one_line_error(fn, *match):
    with pytest.raises(MarsError) as err:
        fn()
    text = str(err.value)
    assert "\n" not in text, text
    for m in match:
        assert m in text, text
    return text
