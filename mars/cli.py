"""The ``mars`` command line: one subcommand per pipeline stage (the Snakemake rules call these).

User errors (:class:`mars.errors.MarsError`) print one line and exit with code 2; anything else
is a bug and shows its traceback. The options of ``simulate`` and ``solve`` that are simulation
settings are generated from their declarations in :mod:`mars.method.settings`.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import shlex
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape

from . import __version__
from .engines.endpoint import printable
from .engines.factory import BACKENDS, bundled_presets
from .errors import MarsError
from .method.registry import DEFAULT_METHOD, live_methods
from .method.settings import LIVE_KEYS, SETTINGS, SPECS, SettingSpec
from .store.atomic import disk_full_message
from .store.problems import bundled_problem_sets, parse_question_spec
from .store.schema import CHECKPOINT_SPACING

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="MARS: margin-adversarial risk-controlled stopping for parallel LLM reasoning.",
)
err = Console(stderr=True, width=110)

PROBLEMS_HELP = (
    "jsonl file ({question, answer} per line) or bundled set: "
    f"{', '.join(bundled_problem_sets())}"
)
PRESET_HELP = f"synthetic preset (a name or a JSON file): {', '.join(bundled_presets())}"
BACKEND_HELP = " | ".join(BACKENDS)
MODEL_HELP = "model path (transformers/sglang) or served model name (server)"


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Report a :class:`MarsError` or a full disk in one line and exit 2; let every other
    exception through."""
    try:
        yield
    except MarsError as exc:
        msg = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
        # printable text only: a message may quote a file's or a server's words
        print(f"error: {printable(msg, 4000)}", file=sys.stderr)
        raise typer.Exit(2) from None
    except OSError as exc:
        full = disk_full_message(exc)
        if full is None:
            raise
        print(f"error: {full}", file=sys.stderr)
        raise typer.Exit(2) from None


@contextlib.contextmanager
def resumable_bar(description: str, quiet: bool, out: Path) -> Iterator[Any]:
    """The progress of a stage that resumes (generate, probe, solve); Ctrl-C ends it with one
    line saying what is kept and the command that goes on from there (exit 130)."""
    from .progress import bar

    with bar(description, disable=quiet) as shown:
        try:
            yield shown
        except KeyboardInterrupt:
            pass
        else:
            return
    done = f"{shown.done} of {shown.total} questions" if shown.total else "no question"
    again = "the same command"
    if sys.argv[1:2] and Path(sys.argv[0]).name in ("mars", "cli.py"):
        again = f"`{shlex.join(['mars', *sys.argv[1:]])}`"
    print(
        f"interrupted: {done} finished in this run, kept in {out}; {again} resumes from there",
        file=sys.stderr,
        flush=True,
    )
    raise typer.Exit(130)


def setting_help(spec: SettingSpec, more: str = "") -> str:
    """An option's help from its declaration: what it sets (and ``more``), the range it must lie
    in and its default (a default of None, "derive it", is explained in the help itself)."""
    tags = f"[range: {spec.range_text()}]"
    if not spec.optional:
        tags += f" [default: {spec.default}]"
    return f"{spec.help}{more} {escape(tags)}"


def with_options(
    declared: list[tuple[str, Any, Any]], receiver: str, collect: Callable
) -> Callable:
    """Give a command one keyword option per ``(name, annotation, typer.Option)`` of ``declared``;
    the command receives ``collect({name: value})`` as its ``receiver`` argument."""
    names = [name for name, _, _ in declared]

    def deco(fn: Callable) -> Callable:
        sig = inspect.signature(fn)
        params = [p for n, p in sig.parameters.items() if n != receiver]
        annotations = {k: v for k, v in fn.__annotations__.items() if k != receiver}
        for name, kind, option in declared:
            params.append(
                inspect.Parameter(
                    name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind
                )
            )
            annotations[name] = kind

        @functools.wraps(fn)
        def wrapper(**kwargs: Any) -> Any:
            given = {n: kwargs.pop(n) for n in names}
            return fn(**kwargs, **{receiver: collect(given)})

        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = annotations
        return wrapper

    return deco


def with_settings(names: Sequence[str]) -> Callable:
    """Give a command one option per simulation setting in ``names`` (help, flag and default from
    :mod:`mars.method.settings`); the command receives those the user set as ``settings_given``."""
    declared = [
        (
            name,
            Optional[SPECS[name].type],  # noqa: UP045 - typer needs a runtime type
            typer.Option(
                None,
                SPECS[name].flag,
                help=setting_help(SPECS[name]),
                show_default=False,
                rich_help_panel="Settings",
            ),
        )
        for name in names
    ]
    return with_options(
        declared, "settings_given", lambda given: {k: v for k, v in given.items() if v is not None}
    )


def with_engine_options(command: str) -> Callable:
    """Give a command one option per engine option it takes (name, type, default and help from
    :mod:`mars.engines.options`, checked against its range); the command receives them all as
    ``engine_options``."""
    from .engines.options import check, options_of

    declared = []
    for opt in options_of(command):
        kind = opt.type if opt.default is not None else Optional[opt.type]  # noqa: UP045
        help_text = opt.help + ("" if opt.default is None else f" [default: {opt.default}]")
        flag = f"{opt.flag}/--no-{opt.flag[2:]}" if opt.type is bool else opt.flag
        option = typer.Option(
            opt.default, flag, help=escape(help_text), show_default=False, rich_help_panel="Engine"
        )
        declared.append((opt.name, kind, option))

    def collect(given: dict) -> dict:
        with user_errors():
            check(given)
        return given

    return with_options(declared, "engine_options", collect)


@app.command()
@with_settings([s.name for s in SETTINGS])
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
    questions: str | None = typer.Option(None, help="question ids, e.g. 0,3,5-9 (default: all)"),
    workers: int = typer.Option(1, help="questions simulated in parallel (processes)"),
    fit_dir: Path | None = typer.Option(
        None, "--fit", help="a `mars fit` directory: its arrays and switch models (no refitting)"
    ),
    cache: Path | None = typer.Option(None, help="per-question array cache directory"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar or summary"),
    settings_given: dict | None = None,
):
    """Bootstrap-simulate stopping methods on a trace pool (the paper's evaluation)."""
    from .method.registry import parse_methods
    from .method.settings import Settings, pool_settings
    from .progress import bar
    from .simulate.driver import (
        check_protocol_inputs,
        simulate_pool,
        size_notes,
        supported_methods,
    )
    from .simulate.results import summary_table, write_methods
    from .store.atomic import check_apart, output_dir
    from .store.pool import open_pool
    from .store.provenance import pool_source

    with user_errors():
        parse_methods(method)
        settings = Settings(**(settings_given or {})).validate()
        check_protocol_inputs(settings, fit_dir, cache)
        src = open_pool(pool)
        settings = pool_settings(src, settings)
        qids = parse_question_spec(questions)
        methods, left_out = supported_methods(method, src, qids)
        if left_out:
            err.print(
                f"note: --method {method} leaves out {', '.join(left_out)}: they need per-token "
                f"confidences, which {pool} does not have",
                highlight=False,
                soft_wrap=True,
            )
        notes = size_notes(src, methods, settings, qids)
        if workers < 1:
            raise MarsError(f"--workers {workers}: must be at least 1")
        check_apart(out, [("POOL", pool), ("--fit", fit_dir), ("--cache", cache)])
        if cache is not None:
            check_apart(cache, [("POOL", pool)], "--cache")
        for note in notes:  # after every refusal: a note only when the run goes ahead
            err.print(f"note: {note}", highlight=False, soft_wrap=True)
        t0 = time.perf_counter()
        with output_dir(out), bar("simulating questions", disable=quiet) as progress:
            results = simulate_pool(
                pool,
                methods,
                settings,
                questions=qids,
                workers=workers,
                cache_dir=cache,
                fit_dir=fit_dir,
                progress=progress,
            )
            fit = None if fit_dir is None else str(fit_dir)
            names = [m.name for m in methods]
            data = pool_source(pool).to_dict()
            overalls = write_methods(
                out, names, results, settings.to_dict(), str(pool), fit, notes, data
            )
    if not quiet:
        err.print(summary_table(overalls))
        err.print(
            f"{len(results)} questions × {len(methods)} methods in "
            f"{time.perf_counter() - t0:.1f} s → {out}/"
        )


@app.command()
def fit(
    pool: Path = typer.Argument(..., help="published-schema parquet file or a pool directory"),
    out: Path = typer.Option(..., "--out", "-o", help="fit directory (arrays + models.parquet)"),
    warmup: str = typer.Option(
        str(SPECS["warmup"].default),
        help=setting_help(SPECS["warmup"], "; several sizes comma-separated (one model each)"),
        show_default=False,
    ),
    window: int = typer.Option(
        SPECS["window"].default, help=setting_help(SPECS["window"]), show_default=False
    ),
    spacing: int | None = typer.Option(None, help=setting_help(SPECS["spacing"])),
    questions: str | None = typer.Option(None, help="question ids, e.g. 0,3,5-9 (default: all)"),
    workers: int = typer.Option(1, help="questions fitted in parallel (processes)"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar or summary"),
):
    """Fit the per-question stage: arrays and switch models (q) that `simulate --fit` reads."""
    from .fit.driver import check_fit, fit_pool, summary_table
    from .progress import bar
    from .store.atomic import check_apart, output_dir

    with user_errors():
        try:
            warmups = [int(w) for w in warmup.split(",") if w.strip()]
        except ValueError:
            raise MarsError(
                f"--warmup {warmup!r}: expected whole numbers, e.g. 16 or 8,16"
            ) from None
        qids = parse_question_spec(questions)
        check_apart(out, [("POOL", pool)])
        check_fit(pool, warmups, window, spacing, qids)  # refusals before --out is made
        with output_dir(out), bar("fitting questions", disable=quiet) as progress:
            table = fit_pool(
                pool,
                out,
                warmups=warmups,
                window=window,
                spacing=spacing,
                questions=qids,
                workers=workers,
                progress=progress,
            )
    if not quiet:
        err.print(summary_table(table, "switch models (in-sample fit)"))
        err.print(f"{pool} → {out}/")


@app.command("import")
def import_(
    fmt: str = typer.Argument(
        ..., metavar="FORMAT", help="mars-parquet | mars-pickle | parallel-probe"
    ),
    src: Path = typer.Argument(..., help="input file"),
    out: Path = typer.Argument(..., help="output pool directory (must not exist)"),
    trust_pickle: bool = typer.Option(
        False,
        "--trust-pickle",
        help="mars-pickle: load with Python's full unpickler. A pickle can run any code when "
        "loaded; by default only plain data and numpy arrays are accepted, which is all the "
        "authors' files hold. Use only for a file you trust.",
    ),
    spacing: str | None = typer.Option(
        None,
        help=f"parallel-probe: the checkpoint grid in tokens (default {CHECKPOINT_SPACING}, the "
        "MARS grid: the "
        "answer at each checkpoint is the last probe before it), or `native`: the source's own "
        "probe spacing, keeping each trace's probe count for `--protocol parallel-probe`",
    ),
):
    """Convert published MARS data or Parallel-Probe matrices into a pool directory."""
    from .store.published import import_pool

    with user_errors():
        import_pool(fmt, src, out, trust_pickle=trust_pickle, spacing=spacing)
    err.print(f"pool written to {out}")


@app.command()
def export(
    pool: Path = typer.Argument(...),
    out: Path = typer.Argument(..., help="output .parquet (must not exist)"),
):
    """Write a pool in the authors' published parquet schema."""
    from .method.answers import is_correct
    from .store.published import export_published

    with user_errors():
        export_published(pool, out, grade=is_correct)
    err.print(f"published-schema parquet written to {out}")


@app.command()
@with_engine_options("generate")
def generate(
    out: Path = typer.Option(..., "--out", "-o", help="output pool (or shard) directory"),
    problems: str = typer.Option(..., help=PROBLEMS_HELP),
    backend: str = typer.Option("synthetic", help=BACKEND_HELP),
    preset: str | None = typer.Option(None, help=PRESET_HELP),
    model: str | None = typer.Option(None, help=MODEL_HELP),
    questions: str | None = typer.Option(None, help="e.g. 0-4,7"),
    shard: int | None = typer.Option(None, help="this job's shard (0 to --n-shards - 1)"),
    probe_mode: str = typer.Option(
        "inline",
        "--probe",
        help="inline: probe while generating (one pass); none: leave it to `mars probe` (any "
        "spacing, any probe model, no regeneration)",
    ),
    token_ids: bool = typer.Option(
        True,
        "--token-ids/--no-token-ids",
        help="keep each trace's token ids (what `mars probe` reads)",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
    engine_options: dict | None = None,
):
    """Generate traces and probe them every `spacing` tokens (resumable; sharded)."""
    from .engines.factory import make_backend
    from .engines.generate import generate_pool
    from .store.atomic import check_apart

    opts = dict(engine_options or {})
    spacing, seed, traces = opts.pop("spacing"), opts.pop("seed"), opts.pop("traces")
    n_shards, confs = opts.pop("n_shards"), opts.pop("confs")
    with user_errors():
        qids = parse_question_spec(questions)
        check_apart(out, [("--problems", problems), ("--preset", preset), ("--model", model)])
        be = make_backend(backend, model=model, preset=preset, with_confs=confs, **opts)
        with resumable_bar(f"generate ({backend})", quiet, out) as progress:
            generate_pool(
                be,
                problems,
                traces,
                seed,
                out,
                questions=qids,
                shard=shard,
                n_shards=n_shards,
                progress=progress,
                spacing=spacing,
                max_tokens=opts["max_tokens"],
                with_confs=confs,
                probe=probe_mode,
                token_ids=token_ids,
                detail=progress.detail,
            )
        if not quiet:
            _print_generated(out)
    _stood_in_note(out)


def _print_generated(out: Path) -> None:
    """The closing line of ``mars generate``: what the folder now holds."""
    import pyarrow.parquet as pq

    from .store import schema
    from .store.pool import LayoutPool

    pool = LayoutPool(out)
    n = final = 0
    for q in pool.qids:
        answers = pq.read_table(out / schema.trace_file_name(q), columns=["final_answer"])
        n += answers.num_rows
        final += answers.num_rows - answers.column(0).null_count
    share = f" ({final / n:.0%})" if n else ""
    print(  # a line a log keeps whole (rich would wrap it)
        f"wrote {n:,} traces of {len(pool.qids)} questions, {final:,} with a final answer{share}, "
        f"to {out}",
        file=sys.stderr,
    )
    if n and not final:
        print(
            "no trace has a final answer (\\boxed{...}): `mars simulate` has nothing to sample",
            file=sys.stderr,
        )


def _stood_in_note(out: Path) -> None:
    """Say how many of a written pool's confidences were stood in for (its pool.json records
    the count; none: nothing said)."""
    import json

    from .engines.server import MAX_STOOD_IN_SHARE
    from .store.schema import POOL_MANIFEST
    from .store.write import STOOD_IN_MANIFEST_KEY

    try:
        n = json.loads((out / POOL_MANIFEST).read_text()).get(STOOD_IN_MANIFEST_KEY)
    except (OSError, ValueError, AttributeError):
        return
    if isinstance(n, int) and n > 0:
        err.print(
            f"note: {n:,} token confidence{' was' if n == 1 else 's were'} stood in for "
            "log-probabilities the server did not send (each takes the confidence of the token "
            f"before it; {out / POOL_MANIFEST} records the count as {STOOD_IN_MANIFEST_KEY}): "
            "llama.cpp sends none for a token after which the text ends inside a character; a "
            f"server leaving out more than {MAX_STOOD_IN_SHARE * 100:g} % of a question's "
            "otherwise is refused",
            highlight=False,
            soft_wrap=True,
        )


@app.command()
@with_engine_options("probe")
def probe(
    traces: Path = typer.Argument(..., help="a pool or shard directory written by `mars generate`"),
    out: Path = typer.Option(..., "--out", "-o", help="output pool (or shard) directory"),
    backend: str | None = typer.Option(
        None, help=f"{BACKEND_HELP} (default: the engine that generated the traces)"
    ),
    probe_model: str | None = typer.Option(
        None, "--probe-model", help="model that answers the probes (default: the generator's)"
    ),
    questions: str | None = typer.Option(None, help="e.g. 0-4,7"),
    replace: bool = typer.Option(
        False,
        "--replace",
        help="an --out folder probed with other settings is started over (default: refused)",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
    engine_options: dict | None = None,
):
    """Probe stored traces again, at any spacing and with any probe model (no regeneration)."""
    from .engines.probe import probe_backend, probe_pool
    from .store.atomic import check_apart
    from .store.pool import LayoutPool, open_pool

    opts = dict(engine_options or {})
    spacing = opts.pop("spacing")
    with user_errors():
        qids = parse_question_spec(questions)
        check_apart(out, [("TRACES", traces), ("--probe-model", probe_model)])  # before loading
        src = open_pool(traces)
        if not isinstance(src, LayoutPool):
            raise MarsError(
                f"{traces}: `mars probe` reads a pool directory written by `mars generate`"
            )
        suffix, max_new_tokens = opts.pop("suffix"), opts.pop("max_new_tokens")
        be = probe_backend(
            src.manifest,
            backend,
            model=probe_model,
            probe_suffix=suffix,
            probe_max_new_tokens=max_new_tokens,
            **opts,
        )
        with resumable_bar(f"probe every {spacing} tokens", quiet, out) as progress:
            probe_pool(
                traces, out, be, spacing=spacing, questions=qids, progress=progress, replace=replace
            )


@app.command()
@with_settings(LIVE_KEYS)
@with_engine_options("solve")
def solve(
    out: Path = typer.Option(
        ..., "--out", "-o", help="output directory (a pool + live/ records; resumable)"
    ),
    problems: str = typer.Option(..., help=PROBLEMS_HELP),
    traces: int = typer.Option(64, help="traces run in parallel per question (N)"),
    warmup: int = typer.Option(
        SPECS["warmup"].default, help="warmup traces run to completion first (q-model, γ)"
    ),
    method: str = typer.Option(
        DEFAULT_METHOD,
        "--method",
        "-m",
        help=f"a method that can run live: {', '.join(live_methods())}",
    ),
    backend: str = typer.Option("synthetic", help=BACKEND_HELP),
    preset: str | None = typer.Option(None, help=PRESET_HELP),
    model: str | None = typer.Option(None, help=MODEL_HELP),
    questions: str | None = typer.Option(None, help="e.g. 0-4,7"),
    compare_full: bool = typer.Option(
        False,
        "--compare-full",
        help="also run the same traces to completion: tokens, wall time and answer of plain SC",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
    settings_given: dict | None = None,
    engine_options: dict | None = None,
):
    """Answer questions live: stop the parallel traces the moment the method fires."""
    from .engines.factory import make_backend
    from .live.solve import solve_pool
    from .store.atomic import check_apart

    opts = dict(engine_options or {})
    spacing, seed = opts.pop("spacing"), opts.pop("seed")
    with user_errors():
        qids = parse_question_spec(questions)
        check_apart(out, [("--problems", problems), ("--preset", preset), ("--model", model)])
        be = make_backend(backend, model=model, preset=preset, **opts)
        with resumable_bar(f"solve ({method})", quiet, out) as progress:
            rows = solve_pool(
                be,
                problems,
                out,
                method,
                n_traces=traces,
                warmup=warmup,
                seed=seed,
                spacing=spacing,
                max_tokens=opts["max_tokens"],
                questions=qids,
                compare_full=compare_full,
                progress=progress,
                detail=progress.detail,
                **(settings_given or {}),
            )
    if not quiet:
        _print_live(rows)
    _stood_in_note(out)


def _print_live(rows: list) -> None:
    from rich.table import Table

    from .live.summary import summarize

    summary = summarize(rows)
    t = Table(title="live runs", show_lines=False)
    for c in summary.header:
        t.add_column(c, justify="right")
    for row in summary.rows:
        t.add_row(*map(escape, row))
    err.print(t)
    for line in summary.lines:
        err.print(escape(line))


@app.command()
@with_settings(LIVE_KEYS)
@with_engine_options("serve")
def serve(
    upstream: list[str] = typer.Option(
        ...,
        "--upstream",
        help="an OpenAI-compatible server to front (llama.cpp, vLLM, SGLang), http://HOST:PORT; "
        "repeat for replicas of one model; 'synthetic' (or synthetic:PRESET) for the synthetic "
        "engine",
    ),
    host: str = typer.Option("127.0.0.1", help="address to listen on"),
    port: int = typer.Option(8000, help="port to listen on"),
    model: str | None = typer.Option(
        None, help="the upstream model to serve (default: the one the upstream serves)"
    ),
    served_model_name: str | None = typer.Option(
        None, help="the name clients ask for (default: the upstream's)"
    ),
    method: str = typer.Option(
        DEFAULT_METHOD,
        "--method",
        "-m",
        help=f"default method of a request: {', '.join(live_methods())}",
    ),
    traces: int = typer.Option(64, help="default traces of a request without n (N)"),
    warmup: int = typer.Option(SPECS["warmup"].default, help="default warmup traces"),
    max_traces: int = typer.Option(1024, help="n (traces) a request may ask for at most"),
    max_active: int = typer.Option(4, help="requests solved at once (the others queue)"),
    max_queue: int = typer.Option(64, help="requests that may wait; more are answered 429"),
    record: Path | None = typer.Option(
        None, help="append every served question to pools in this folder (mars replay reads them)"
    ),
    api_key_env: str = typer.Option(
        "MARS_SERVE_API_KEY",
        help="environment variable holding the key clients must send (unset or empty: none)",
    ),
    upstream_key_env: str = typer.Option(
        "MARS_API_KEY", help="environment variable holding the upstreams' API key"
    ),
    retries: int = typer.Option(2, help="further tries of an upstream request before failover"),
    tokenizer: str | None = typer.Option(
        None,
        help="the model's tokenizer: 'server' (the upstream's /tokenize), a tokenizer folder, "
        "tokenizer.json or GGUF file (default: what the upstream reports)",
    ),
    log_level: str = typer.Option("info", help="uvicorn's log level"),
    settings_given: dict | None = None,
    engine_options: dict | None = None,
):
    """Serve MARS behind an OpenAI-compatible API: one request with n > 1 (or a mars object) is
    one question solved live on the upstream servers; other requests pass through."""
    import os

    from .errors import need_extra

    opts = dict(engine_options or {})
    spacing, max_tokens, seed = opts.pop("spacing"), opts.pop("max_tokens"), opts.pop("seed")
    temperature, top_p = opts.pop("temperature"), opts.pop("top_p")
    sampling = {k: v for k, v in opts.items() if k == "top_k" and v is not None}
    with user_errors():
        need_extra(("starlette", "uvicorn", "httpx", "prometheus_client"), "serve", "mars serve")
        from .serve.app import ServeOptions, create_app
        from .serve.requests import Defaults
        from .serve.upstreams import Upstreams

        defaults = Defaults(
            method=method,
            traces=traces,
            warmup=warmup,
            spacing=spacing,
            max_tokens=max_tokens,
            knobs=dict(settings_given or {}),
            max_traces=max_traces,
            seed=seed,
            temperature=temperature,
            top_p=top_p,
        ).check()
        if max_active < 1 or max_queue < 0:
            raise MarsError("--max-active must be at least 1 and --max-queue at least 0")
        ups = Upstreams(
            upstream,
            model=model,
            api_key_env=upstream_key_env,
            concurrency=opts["concurrency"],
            timeout=opts["timeout"] or 600.0,
            retries=retries,
            tokenizer=tokenizer,
            **sampling,
        )
        options = ServeOptions(
            defaults,
            max_active=max_active,
            max_queue=max_queue,
            api_key=os.environ.get(api_key_env, "").strip() or None,
            served_model=served_model_name,
            record=str(record) if record else None,
        )
        asgi, _ = create_app(ups, options)
    import uvicorn

    err.print(
        f"mars serve: {ups.model} from {len(upstream)} upstream(s) on http://{host}:{port}/v1 "
        f"({'key required' if options.api_key else 'no key'})"
    )
    try:
        uvicorn.run(asgi, host=host, port=port, log_level=log_level)
    finally:
        ups.close()


@app.command()
def replay(
    run: Path = typer.Argument(..., help="a `mars solve` output directory"),
    questions: str | None = typer.Option(None, help="e.g. 0-4,7"),
):
    """Re-simulate a live run from its records; exit 1 if any question differs from what ran live."""  # noqa: E501 - typer shows it verbatim as the command summary
    from .live.replay import open_live_run
    from .live.replay import replay as replay_run

    with user_errors():
        state = open_live_run(run)
        rows = replay_run(run, parse_question_spec(questions))
    bad = [r for r in rows if not r["match"]]
    for r in bad:
        print(f"question {r['qid']}: live {r['live']} != replay {r['replay']}", file=sys.stderr)
    if not state.finished:
        print(state.unfinished_line(), file=sys.stderr)
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
    from .store.consolidate import consolidate as merge

    with user_errors():
        merge(shards, out, overwrite=overwrite)


@app.command()
def analyze(
    pool: Path = typer.Argument(..., help="the trace pool the run was simulated on"),
    simulation: Path = typer.Argument(..., help="one `mars simulate --out` directory"),
    out: Path = typer.Option(
        ..., "--out", "-o", help="analysis directory (analysis.json and two CSVs)"
    ),
    fit_dir: Path | None = typer.Option(
        None, "--fit", help="the `mars fit` directory the run was simulated with"
    ),
    label: str | None = typer.Option(
        None, "--label", help="model/dataset/setting of the run (default: from its path)"
    ),
    example: str | None = typer.Option(
        None, help="Fig. 1 right question: QID or QID:ITERATION (default: chosen automatically)"
    ),
    q_questions: int = typer.Option(
        10, "--q-questions", help="questions for the learned-vs-oracle q panels (0 = none)"
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar"),
):
    """What the report draws beyond simulation summaries: example trajectories, q calibration,
    the switch models (computed from the pool, so the report only draws)."""
    from .analyze.driver import analyze as run_analysis
    from .progress import bar
    from .store.atomic import check_apart

    with user_errors():
        check_apart(out, [("POOL", pool), ("SIMULATION", simulation), ("--fit", fit_dir)])
        with bar("analysing questions", disable=quiet) as progress:
            run_analysis(
                pool,
                simulation,
                out,
                fit_dir=fit_dir,
                label=label,
                example=example,
                q_questions=q_questions,
                progress=progress,
            )
    if not quiet:
        err.print(f"analysis of {simulation} → {out}/")


@app.command()
def report(
    results: list[Path] = typer.Argument(
        ...,
        help="results root(s) or `mars simulate --out` directories; every "
        "directory with <method>/overall.json below is a run, labelled by its path "
        "(model/dataset/setting, an optional trailing sim/ dropped), and every one with an "
        "analysis.json an analysis (mars analyze)",
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
    analysis: list[Path] | None = typer.Option(
        None,
        "--analysis",
        help="`mars analyze` output directories (or a folder holding them), for the "
        "single-question figures, the q calibration and the switch-model table (repeatable)",
    ),
    main_setting: str = typer.Option(
        "default", "--main-setting", help="setting whose runs fill the main tables"
    ),
    figures: bool = typer.Option(
        True, "--figures/--no-figures", help="render figures (tables are always written)"
    ),
):
    """Render the paper's tables and figures (and the new ones) from simulate outputs and their
    analyses; it reads nothing else (no pool, no fit) and simulates nothing."""
    import shlex

    from .errors import need_extra
    from .store.atomic import check_apart, output_dir

    with user_errors():
        if figures:
            need_extra(
                ("matplotlib", "seaborn"),
                "report",
                "drawing the figures (--no-figures: tables only)",
            )
    from .report import render_report

    command = None
    if sys.argv[1:2] == ["report"]:
        command = shlex.join(["mars", "report", *sys.argv[2:]])
    with user_errors():  # a report may lie inside a results root, never hold or be one
        check_apart(out, [("RESULTS", r) for r in results], inside_ok=True)
        check_apart(out, [("--analysis", a) for a in analysis or []], inside_ok=True)
    with user_errors(), output_dir(out):
        rep = render_report(
            results,
            out,
            labels=label,
            analyses=analysis,
            main_setting=main_setting,
            figures=figures,
            command=command,
        )
    err.print(
        f"{len(rep.results.runs)} runs → {len(rep.tables)} tables, "
        f"{len(rep.figures)} figures: {rep.index}"
    )


def _print_version(value: bool) -> None:
    if value:
        print(__version__)
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """Options before the command (``mars --version``); the app's help is the Typer's."""


@app.command()
def version():
    """Print the version (as `mars --version` does)."""
    print(__version__)


def main(argv=None) -> int:
    try:
        app(args=argv, standalone_mode=True)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def run() -> None:
    """The ``mars`` command: :func:`main`, then the exit without the interpreter's last sweep of
    cyclic garbage, which visits every object of every module loaded (seconds once transformers
    has loaded torch, on Ctrl-C too); files and outputs are closed before it (the temporary ones
    removed), and whatever ``atexit`` holds still runs."""
    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    run()
