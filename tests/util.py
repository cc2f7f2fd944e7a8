"""Small random pools for tests: built in memory, written as published parquet or our layout;
a FIFO that never hangs a test."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mars.store import schema
from mars.store.pool import read_trace_table
from mars.store.write import PoolDirWriter


def random_traces(
    rng: np.random.Generator,
    qid: int,
    n: int = 40,
    max_len: int = 9000,
    spacing: int = 2048,
    n_answers: int = 4,
    abstain: float = 0.0,
    confs: bool = True,
    p_none: float = 0.05,
) -> dict:
    """Columns of one question in TRACE_SCHEMA form: traces drift towards a final answer."""
    cols = {k: [] for k in schema.TRACE_SCHEMA.names}
    answers = [str(100 + a) for a in range(n_answers)]
    for t in range(n):
        length = int(rng.integers(spacing // 2, max_len))
        final = answers[int(rng.integers(0, n_answers))] if rng.random() > p_none else None
        probes = []
        cur = answers[int(rng.integers(0, n_answers))]
        for p in range(spacing, length, spacing):
            if rng.random() < 0.35:
                cur = (
                    final
                    if (final and rng.random() < 0.6)
                    else answers[int(rng.integers(0, n_answers))]
                )
            ans = None if rng.random() < abstain else cur
            probes.append(
                {
                    "position": p,
                    "answer": ans,
                    "raw_text": None,
                    "conf": None,
                    "prompt_tokens": 50 + p,
                    "cached_tokens": p,
                    "generated_tokens": 6,
                }
            )
        cols["qid"].append(qid)
        cols["trace_idx"].append(t)
        cols["final_answer"].append(final)
        cols["length"].append(length)
        cols["finished"].append(True)
        cols["confs"].append((rng.random(length) * 4 + 8).astype(np.float16) if confs else None)
        cols["probes"].append(probes)
        cols["text"].append(None)
        cols["token_ids"].append(None)
    return cols


def write_layout_pool(path, seed: int = 0, n_questions: int = 3, **kw):
    rng = np.random.default_rng(seed)
    with PoolDirWriter(path, atomic=True) as w:
        for q in range(n_questions):
            w.write_question(q, random_traces(rng, q, **kw))
        w.finish(
            [{"qid": q, "ground_truth": "101"} for q in range(n_questions)], {"backend": "test"}
        )
    return path


def write_published_pool(path, seed: int = 0, n_questions: int = 3, rows_hook=None, **kw):
    """Published-schema parquet; ``rows_hook(list_of_row_dicts)`` may corrupt rows first."""
    rng = np.random.default_rng(seed)
    rows = []
    for q in range(n_questions):
        cols = random_traces(rng, q, **kw)
        rows.extend(
            {
                "qid": q,
                "trace_idx": cols["trace_idx"][j],
                "ground_truth": "101",
                "extracted_answer": cols["final_answer"][j],
                "confs": cols["confs"][j],
                "probes": [
                    {
                        "position": p["position"],
                        "answer": p["answer"] if p["answer"] else "",
                        "is_correct": False,
                        "raw_text": "",
                        "avg_conf": 1.0,
                    }
                    for p in cols["probes"][j]
                ],
            }
            for j in range(len(cols["qid"]))
        )
    if rows_hook:
        rows = rows_hook(rows)
    table = pa.Table.from_pylist(rows, schema=schema.PUBLISHED_SCHEMA)
    pq.write_table(table, path)
    return path


@contextlib.contextmanager
def unblocking_fifo(path):
    """A FIFO at ``path``; a reader that opens it gets end-of-file after 3 s instead of waiting
    forever (so a reader that should never open it fails its test rather than hanging it)."""
    if path.exists():
        path.unlink()
    os.mkfifo(path)
    done = threading.Event()

    def unblock():
        done.wait(3)
        while not done.is_set():
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # no reader yet
                done.wait(0.05)

    thread = threading.Thread(target=unblock, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        done.set()
        thread.join()


@contextlib.contextmanager
def small_disk(path, size: str = "64k"):
    """A file system of ``size`` (tmpfs) mounted at ``path``: a disk that fills up on demand.
    Skips the test where mounting is not permitted (not root)."""
    import subprocess

    import pytest

    path.mkdir(parents=True, exist_ok=True)
    try:
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:
        pytest.skip("no mount command")
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small disk: {r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def report_files_differ(before: dict, after: dict) -> list:
    """The report files (relative path -> bytes) that differ beyond matplotlib's layout noise:
    from one process to the next a coordinate can move by its last bit, so a PDF prints one
    differently (to 1e-6 pt) and a PNG can shift a few antialiased pixels by one level. Tables,
    CSVs, captions and the index must be byte-identical."""
    import io
    import re
    import zlib

    def pdf_numbers(data: bytes) -> list[float]:
        out = []
        for m in re.finditer(rb"stream\r?\n(.*?)\r?\nendstream", data, re.S):
            try:
                part = zlib.decompress(m.group(1))
            except zlib.error:
                part = m.group(1)
            out += [float(x) for x in re.findall(rb"-?\d+\.\d+", part)]
        return out

    def same(path, a: bytes, b: bytes) -> bool:
        if a == b:
            return True
        if path.suffix == ".pdf":
            x, y = pdf_numbers(a), pdf_numbers(b)
            return len(x) == len(y) and bool(np.allclose(x, y, rtol=0, atol=1e-5))
        if path.suffix == ".png":
            import matplotlib.image as mpimg

            x, y = mpimg.imread(io.BytesIO(a)), mpimg.imread(io.BytesIO(b))
            if x.shape != y.shape:
                return False
            d = np.abs(x - y)
            return bool(d.max() <= 2 / 255 + 1e-9 and (d > 0).any(axis=-1).mean() < 1e-4)
        return False

    assert sorted(before) == sorted(after), (sorted(before), sorted(after))
    return [k for k in before if not same(k, before[k], after[k])]


def as_format_1(pool, out):
    """The same pool as format 1 wrote it: list<float16> confidences, byte-stream split."""
    shutil.copytree(pool, out)
    for f in sorted((out / schema.POOL_TRACES_DIR).glob("*.parquet")):
        pq.write_table(
            read_trace_table(f),
            f,
            compression="zstd",
            use_byte_stream_split=["confs.list.element"],
            use_dictionary=["final_answer", "text"],
            row_group_size=256,
        )
    manifest = json.loads((out / schema.POOL_MANIFEST).read_text())
    (out / schema.POOL_MANIFEST).write_text(json.dumps({**manifest, "version": 1}))
    return out


class NoBoxed:
    """An engine whose traces end without a \\boxed{} final answer (a model the prompt's
    instruction does not reach): ``inner``'s traces, their final answers dropped."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def start(self, *args, **kwargs):
        return _NoBoxedBatch(self.inner.start(*args, **kwargs))


class _NoBoxedBatch:
    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def result(self, j):
        import dataclasses

        return dataclasses.replace(self.inner.result(j), final_answer=None)
