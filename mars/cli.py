"""The ``mars`` command line: one subcommand per pipeline stage (the Snakemake rules call these)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import typer
from rich.console import Console

from . import __version__

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="MARS: margin-adversarial risk-controlled stopping for parallel LLM reasoning.",
)
err = Console(stderr=True, width=110)


def _user_errors() -> tuple:
    """Errors caused by the user's input: reported in one line with exit code 2."""
    from .pool import PoolError
    from .simulate import SimulationError

    return (PoolError, SimulationError, ValueError, FileNotFoundError)


def _fail(exc: BaseException) -> None:
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    print(f"error: {msg}", file=sys.stderr)
    raise typer.Exit(2)


def _parse_qids(spec: str | None):
    from .generate import parse_qids

    return parse_qids(spec)


@app.command()
def simulate(
    pool: Path = typer.Argument(..., help="published-schema parquet file or a pool directory"),
    method: str = typer.Option(
        "reference",
        "--method",
        "-m",
        help="comma-separated methods, 'reference' (the 14 reference methods) or 'all'",
    ),
    out: Path = typer.Option(
        ..., "--out", "-o", help="output directory (one sub-directory per method)"
    ),
    budget: int = typer.Option(512, help="traces per bootstrap sample"),
    iterations: int = typer.Option(64, help="bootstrap iterations per question"),
    warmup: int = typer.Option(
        16, help="warmup traces (q-model, γ, probe-0 guard; DeepConf threshold)"
    ),
    seed: int = typer.Option(42),
    window: int = typer.Option(2048, help="confidence window (tokens)"),
    gamma: float = typer.Option(1.0, help="γ for the uncalibrated MARS methods"),
    ucb_z: float = typer.Option(1.0, "--ucb-z", help="UCB bump z/√n of γ calibration (0 = off)"),
    gamma_min: float = typer.Option(0.5, "--gamma-min", help="floor of calibrated γ"),
    pp_conv: int = typer.Option(
        3, "--pp-conv", help="Parallel-Probe: equal winners in a row to stop (u)"
    ),
    pp_warmup: int = typer.Option(
        4, "--pp-warmup", help="Parallel-Probe: checkpoints before stopping/pruning"
    ),
    pp_patience: int = typer.Option(
        2, "--pp-patience", help="Parallel-Probe: off-track checkpoints before pruning (k)"
    ),
    delta: float = typer.Option(0.05, help="risk level δ of the certified MARS methods"),
    consensus: float = typer.Option(0.9, help="vote share at which sc-consensus stops"),
    questions: str | None = typer.Option(None, help="question ids, e.g. 0,3,5-9 (default: all)"),
    workers: int = typer.Option(1, help="questions simulated in parallel (processes)"),
    cache: Path | None = typer.Option(
        None, help="per-question array cache directory (e.g. from `mars fit`)"
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar or summary"),
):
    """Bootstrap-simulate stopping methods on a trace pool (the paper's evaluation)."""
    from rich.progress import Progress

    from .methods import parse_methods
    from .results import summary_table, write_method
    from .simulate import Settings, settings_dict, simulate_pool

    try:
        methods = parse_methods(method)
        settings = Settings(
            budget=budget,
            iterations=iterations,
            warmup=warmup,
            seed=seed,
            window=window,
            gamma=gamma,
            ucb_z=ucb_z,
            gamma_min=gamma_min,
            pp_conv=pp_conv,
            pp_warmup=pp_warmup,
            pp_patience=pp_patience,
            delta=delta,
            consensus=consensus,
        ).validate()
        qids = _parse_qids(questions)
        t0 = time.perf_counter()
        with Progress(console=err, disable=quiet, transient=True) as progress:
            task = progress.add_task("simulating questions", total=len(qids) if qids else None)
            results = simulate_pool(
                pool,
                methods,
                settings,
                questions=qids,
                workers=workers,
                cache_dir=cache,
                progress=lambda: progress.advance(task),
            )
        overalls = [
            write_method(out, m.name, results, settings_dict(settings), str(pool)) for m in methods
        ]
    except _user_errors() as exc:
        _fail(exc)
    if not quiet:
        err.print(summary_table(overalls))
        err.print(
            f"{len(results)} questions × {len(methods)} methods in {time.perf_counter() - t0:.1f} s → {out}/"
        )


@app.command("import")
def import_(
    fmt: str = typer.Argument(
        ..., metavar="FORMAT", help="mars-parquet | mars-pickle | parallel-probe"
    ),
    src: Path = typer.Argument(..., help="input file"),
    out: Path = typer.Argument(..., help="output pool directory (must not exist)"),
):
    """Convert published MARS data or Parallel-Probe matrices into a pool directory."""
    from .convert import import_pool

    try:
        import_pool(fmt, src, out)
    except _user_errors() as exc:
        _fail(exc)
    err.print(f"pool written to {out}")


@app.command()
def export(
    pool: Path = typer.Argument(...), out: Path = typer.Argument(..., help="output .parquet")
):
    """Write a pool in the authors' published parquet schema."""
    from .convert import export_published

    try:
        export_published(pool, out)
    except _user_errors() as exc:
        _fail(exc)
    err.print(f"published-schema parquet written to {out}")


@app.command()
def fit(
    pool: Path = typer.Argument(...),
    out: Path = typer.Option(..., "--out", "-o", help="cache directory for per-question arrays"),
    window: int = typer.Option(2048),
    questions: str | None = typer.Option(None),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
):
    """Precompute per-question arrays (answer groups, confidences) into a cache `simulate --cache` reuses."""
    import json

    from rich.progress import track

    from .arrays import load_arrays
    from .pool import open_pool

    try:
        p = open_pool(pool)
        qids = _parse_qids(questions) or p.qids
        summary = []
        for qid in track(
            qids, description="fitting questions", console=err, disable=quiet, transient=True
        ):
            arr = load_arrays(p.read_question(qid), out, window=window)
            summary.append(
                {
                    "qid": qid,
                    "n_traces": arr.n_traces,
                    "n_checkpoints": arr.n_checkpoints,
                    "n_answers": arr.n_answers,
                    "content_hash": arr.content_hash,
                }
            )
        (Path(out) / "fit.json").write_text(
            json.dumps({"pool": str(pool), "window": window, "questions": summary}, indent=2) + "\n"
        )
    except _user_errors() as exc:
        _fail(exc)


@app.command()
def generate(
    out: Path = typer.Option(..., "--out", "-o", help="output pool (or shard) directory"),
    problems: str = typer.Option(
        ..., help="jsonl file or bundled set: aime_2025, hmmt_feb_2025, brumo_2025"
    ),
    traces: int = typer.Option(..., help="traces per question (whole pool)"),
    backend: str = typer.Option("synthetic", help="synthetic | transformers | sglang"),
    preset: str | None = typer.Option(None, help="synthetic preset"),
    model: str | None = typer.Option(None, help="model path (transformers/sglang)"),
    seed: int = typer.Option(0),
    skill: float | None = typer.Option(None, help="synthetic: override the preset's skill"),
    max_tokens: int | None = typer.Option(None, "--max-tokens"),
    spacing: int = typer.Option(2048, help="probe every this many tokens"),
    questions: str | None = typer.Option(None, help="e.g. 0-4,7"),
    shard: int | None = typer.Option(None),
    n_shards: int = typer.Option(1, "--n-shards"),
    no_confs: bool = typer.Option(False, "--no-confs", help="do not store per-token confidences"),
    temperature: float | None = typer.Option(None, help="real backends: sampling temperature"),
    top_p: float | None = typer.Option(None, "--top-p", help="real backends: nucleus sampling"),
    top_k: int | None = typer.Option(None, "--top-k", help="real backends: top-k sampling"),
    tp_size: int | None = typer.Option(None, "--tp-size", help="SGLang: tensor-parallel GPUs"),
    dp_size: int | None = typer.Option(None, "--dp-size", help="SGLang: data-parallel replicas"),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
):
    """Generate traces and probe them every `spacing` tokens (resumable; sharded)."""
    from .generate import generate_pool, make_backend

    try:
        be = (
            make_backend(backend, preset, skill, max_tokens, with_confs=not no_confs)
            if backend == "synthetic"
            else _real_backend(
                backend,
                model,
                max_tokens,
                temperature=temperature,
                top_p=top_p,
                top_k=top_k,
                tp_size=tp_size,
                dp_size=dp_size,
            )
        )
        generate_pool(
            be,
            problems,
            traces,
            seed,
            out,
            questions=_parse_qids(questions),
            shard=shard,
            n_shards=n_shards,
            progress=not quiet,
            spacing=spacing,
            max_tokens=max_tokens,
        )
    except _user_errors() as exc:
        _fail(exc)


def _real_backend(name: str, model: str | None, max_tokens: int | None, **options):
    """The transformers or SGLang backend for ``--model`` (a model directory, hub id or .gguf file).

    Backend options (sampling, engine, batch size…: the keyword arguments of
    :class:`mars.backends.transformers.TransformersBackend` / :class:`mars.backends.sglang.SGLangBackend`)
    come from ``options`` (None values ignored) over the JSON object in the environment variable
    ``MARS_BACKEND_OPTIONS``, e.g. ``MARS_BACKEND_OPTIONS='{"top_k": 20, "batch_size": 8}'``.
    """
    import json
    import os

    if name not in ("transformers", "sglang"):
        raise ValueError(f"unknown backend {name!r} (synthetic | transformers | sglang)")
    if not model:
        raise ValueError(
            f"--backend {name} needs --model (a model directory, hub id or .gguf file)"
        )
    raw = os.environ.get("MARS_BACKEND_OPTIONS", "").strip()
    try:
        opts = json.loads(raw) if raw else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"MARS_BACKEND_OPTIONS is not valid JSON ({exc})") from None
    if not isinstance(opts, dict):
        raise ValueError("MARS_BACKEND_OPTIONS must be a JSON object")
    opts.update({k: v for k, v in options.items() if v is not None})
    if max_tokens is not None:
        opts["max_tokens"] = int(max_tokens)
    try:
        if name == "transformers":
            from .backends.transformers import TransformersBackend as cls
        else:
            from .backends.sglang import SGLangBackend as cls
        import inspect

        known = set(inspect.signature(cls.__init__).parameters) - {
            "self",
            "model_path",
            "engine",
            "model",
            "tokenizer",
        }
        bad = sorted(set(opts) - known)
        if bad:
            raise ValueError(
                f"unknown {name} backend options {bad} (known: {', '.join(sorted(known))})"
            )
        return cls(model, **opts)
    except ImportError as exc:
        raise ValueError(
            f"backend {name!r} is not installed ({exc}); pip install 'mars[{name}]'"
        ) from None
    except OSError as exc:  # transformers: no such model directory / hub id not cached offline
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"cannot load model {model!r}: {first}") from None


@app.command()
def solve(
    out: Path = typer.Option(
        ..., "--out", "-o", help="output directory (a pool + live/ records; resumable)"
    ),
    problems: str = typer.Option(
        ..., help="jsonl file or bundled set: aime_2025, hmmt_feb_2025, brumo_2025"
    ),
    traces: int = typer.Option(64, help="traces run in parallel per question (N)"),
    warmup: int = typer.Option(16, help="warmup traces run to completion first (q-model, γ)"),
    method: str = typer.Option(
        "sc-mars-cal",
        "--method",
        "-m",
        help="sc, sc-mars, sc-mars-cal, sc-mars-cert, sc-pp, sc-pp-faithful or sc-consensus",
    ),
    backend: str = typer.Option("synthetic", help="synthetic | transformers | sglang"),
    preset: str | None = typer.Option(None, help="synthetic preset"),
    model: str | None = typer.Option(None, help="model path (transformers/sglang)"),
    seed: int = typer.Option(0),
    skill: float | None = typer.Option(None, help="synthetic: override the preset's skill"),
    max_tokens: int | None = typer.Option(None, "--max-tokens"),
    spacing: int = typer.Option(2048, help="checkpoint (probe) spacing in tokens"),
    questions: str | None = typer.Option(None, help="e.g. 0-4,7"),
    compare_full: bool = typer.Option(
        False,
        "--compare-full",
        help="also run the same traces to completion: tokens, wall time and answer of plain SC",
    ),
    gamma: float | None = typer.Option(
        None, help="γ of the uncalibrated MARS methods (default 1)"
    ),
    delta: float | None = typer.Option(None, help="risk level of sc-mars-cert (default 0.05)"),
    consensus: float | None = typer.Option(
        None, help="vote share at which sc-consensus stops (default 0.9)"
    ),
    pp_conv: int | None = typer.Option(
        None, "--pp-conv", help="Parallel-Probe: equal winners in a row (default 3)"
    ),
    temperature: float | None = typer.Option(None, help="real backends: sampling temperature"),
    top_p: float | None = typer.Option(None, "--top-p"),
    top_k: int | None = typer.Option(None, "--top-k"),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
):
    """Answer questions live: stop the parallel traces the moment the method fires."""
    from .generate import make_backend
    from .live import solve_pool

    knobs = {
        k: v
        for k, v in (
            ("gamma", gamma),
            ("delta", delta),
            ("consensus", consensus),
            ("pp_conv", pp_conv),
        )
        if v is not None
    }
    try:
        be = (
            make_backend(backend, preset, skill, max_tokens)
            if backend == "synthetic"
            else _real_backend(
                backend, model, max_tokens, temperature=temperature, top_p=top_p, top_k=top_k
            )
        )
        rows = solve_pool(
            be,
            problems,
            out,
            method,
            n_traces=traces,
            warmup=warmup,
            seed=seed,
            spacing=spacing,
            max_tokens=max_tokens,
            questions=_parse_qids(questions),
            compare_full=compare_full,
            progress=not quiet,
            **knobs,
        )
    except _user_errors() as exc:
        _fail(exc)
    if not quiet:
        _print_live(rows)


def _print_live(rows: list) -> None:
    from rich.table import Table

    t = Table(title="live runs", show_lines=False)
    for c in ("q", "answer", "ok", "stopped", "at", "tokens", "full", "saved", "wall", "full wall"):
        t.add_column(c, justify="right")
    for r in rows:
        full = r.get("full") or {}
        saved = f"{1 - r['tokens'] / full['tokens']:.0%}" if full.get("tokens") else ""
        t.add_row(
            str(r["qid"]),
            str(r["answer"]),
            "✓" if r["correct"] else "✗",
            r["stopped_by"],
            str(r["stop_position"] or ""),
            f"{r['tokens']:,}",
            f"{full['tokens']:,}" if full else "",
            saved,
            f"{r['wall_s']['main']:.1f}s",
            f"{full['wall_s']:.1f}s" if full else "",
        )
    err.print(t)
    n = len(rows)
    acc = sum(r["correct"] for r in rows) / n
    line = f"{n} questions, accuracy {acc:.1%}, tokens {sum(r['tokens'] for r in rows):,} (+ warmup {sum(r['warmup_tokens'] for r in rows):,})"
    if all(r.get("full") for r in rows):
        ft = sum(r["full"]["tokens"] for r in rows)
        line += (
            f"; run to completion: {ft:,} tokens, accuracy {sum(r['full']['correct'] for r in rows) / n:.1%}, "
            f"saved {1 - sum(r['tokens'] for r in rows) / ft:.1%}"
        )
    err.print(line)


@app.command()
def replay(
    run: Path = typer.Argument(..., help="a `mars solve` output directory"),
    questions: str | None = typer.Option(None, help="e.g. 0-4,7"),
):
    """Re-simulate a live run from its records; exit 1 if any question differs from what ran live."""
    from .live import replay as _replay

    try:
        rows = _replay(run, _parse_qids(questions))
    except _user_errors() as exc:
        _fail(exc)
    bad = [r for r in rows if not r["match"]]
    for r in bad:
        print(f"question {r['qid']}: live {r['live']} != replay {r['replay']}", file=sys.stderr)
    print(f"{len(rows) - len(bad)}/{len(rows)} questions replay exactly")
    if bad:
        raise typer.Exit(1)


@app.command()
def consolidate(
    shards: list[Path] = typer.Argument(..., help="shard directories of one generation"),
    out: Path = typer.Option(..., "--out", "-o"),
    overwrite: bool = typer.Option(False),
):
    """Merge generated shards into one pool directory."""
    from .generate import consolidate as _consolidate

    try:
        _consolidate(shards, out, overwrite=overwrite)
    except _user_errors() as exc:
        _fail(exc)


@app.command()
def report(
    results: list[Path] = typer.Argument(
        ...,
        help="results root(s) or `mars simulate --out` directories; every "
        "directory with <method>/overall.json below is a run, labelled by its path "
        "(model/dataset/setting, an optional trailing sim/ dropped)",
    ),
    out: Path = typer.Option(
        ..., "--out", "-o", help="output directory (report.md, tables/, figures/)"
    ),
    label: list[str] | None = typer.Option(
        None,
        "--label",
        help="model/dataset or model/dataset/setting for each RESULTS path, in "
        "order (prefix of the discovered labels)",
    ),
    pool: list[str] | None = typer.Option(
        None,
        "--pool",
        help="model/dataset=POOL: trace pool for the trace-level "
        "figures (default: overall.json input.source)",
    ),
    main_setting: str = typer.Option(
        "default", "--main-setting", help="setting whose runs fill the main tables"
    ),
    example: str | None = typer.Option(
        None, help="Fig. 1 right question: model/dataset:qid or model/dataset:qid:iteration"
    ),
    q_questions: int = typer.Option(
        10, "--q-questions", help="questions per pool for the learned-vs-oracle q panels (0 = all)"
    ),
    figures: bool = typer.Option(
        True, "--figures/--no-figures", help="render figures (tables are always written)"
    ),
    tradeoff: list[str] | None = typer.Option(
        None,
        "--tradeoff",
        help="POOL or label=POOL: simulate accuracy–savings "
        "trade-off curves in-process on this pool (repeatable)",
    ),
    tradeoff_budget: int = typer.Option(
        128, "--tradeoff-budget", help="traces per bootstrap sample for --tradeoff"
    ),
    tradeoff_iterations: int = typer.Option(
        8, "--tradeoff-iterations", help="bootstrap samples per question for --tradeoff"
    ),
    tradeoff_questions: int = typer.Option(
        0, "--tradeoff-questions", help="first N questions of each --tradeoff pool (0 = all)"
    ),
    cache: Path | None = typer.Option(
        None, help="per-question array cache directory (e.g. from `mars fit`)"
    ),
):
    """Render the paper's tables and figures (and the new ones) from simulate outputs."""
    import shlex

    from .report import ReportError, render_report

    try:
        rep = render_report(
            results,
            out,
            labels=label,
            pools=pool,
            main_setting=main_setting,
            example=example,
            q_questions=q_questions or None,
            figures=figures,
            tradeoff=tradeoff,
            tradeoff_budget=tradeoff_budget,
            tradeoff_iterations=tradeoff_iterations,
            tradeoff_questions=tradeoff_questions or None,
            cache_dir=cache,
            command=shlex.join(["mars", "report", *sys.argv[2:]])
            if sys.argv[1:2] == ["report"]
            else None,
        )
    except (ReportError, *_user_errors()) as exc:
        _fail(exc)
    err.print(
        f"{len(rep.results.runs)} runs → {len(rep.tables)} tables, {len(rep.figures)} figures: {rep.index}"
    )


@app.command()
def version():
    """Print the version."""
    print(__version__)


def main(argv=None) -> int:
    try:
        app(args=argv, standalone_mode=True)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
