"""A process that records questions into a ``mars serve`` record folder, as a proxy does
(tests/serve/test_fleet.py runs several at once, and kills some mid-write).

    python fleet_writer.py ROOT ARGS.pickle TAG COUNT [KILL_AT WHAT WHEN]

Adds COUNT copies of the question in ARGS.pickle (``Recorder.add``'s arguments, pickled), the
k-th with the question text ``TAG k``, printing each one's number. With KILL_AT: while writing
question KILL_AT (0-based), just ``before`` or ``after`` the rename that puts WHAT in place
(``traces``, ``record``, ``questions``, ``manifest``: a file of the question; ``pool``: a new
pool's folder), it writes ``ROOT.TAG.ready`` and waits to be killed. Every durable step of a
write is a rename, so these are all the states a write can be killed in.
"""

from __future__ import annotations

import os
import pickle
import sys
import time
from pathlib import Path


def _what(dst: str, root: str) -> str | None:
    p = Path(dst)
    if p.parent == Path(root):
        return "pool" if p.name != "serve.json" else None
    if p.name == "questions.parquet":
        return "questions"
    if p.name == "pool.json":
        return "manifest"
    if p.parent.name == "traces" and p.suffix == ".parquet":
        return "traces"
    if p.parent.name == "live" and p.suffix == ".json":
        return "record"
    return None


def main() -> None:
    root, args_file, tag, count = sys.argv[1:5]
    kill_at = int(sys.argv[5]) if len(sys.argv) > 5 else -1
    what, when = (sys.argv[6], sys.argv[7]) if len(sys.argv) > 5 else ("", "")
    from mars.serve.record import Recorder

    params, table, summary, row = pickle.loads(Path(args_file).read_bytes())
    now = [-1]

    def hang() -> None:
        Path(f"{root}.{tag}.ready").write_text(str(os.getpid()))
        time.sleep(600)

    def hooked(real):
        def move(src, dst, *a, **k):
            hit = now[0] == kill_at and _what(str(dst), root) == what
            if hit and when == "before":
                hang()
            out = real(src, dst, *a, **k)
            if hit and when == "after":
                hang()
            return out

        return move

    os.replace, os.rename = hooked(os.replace), hooked(os.rename)
    rec = Recorder(root)
    for k in range(int(count)):
        now[0] = k
        got = rec.add(params, table, summary, {**row, "question": f"{tag} {k}"})
        print(got.pool, got.qid, flush=True)


if __name__ == "__main__":
    main()
