"""The live commands: ``solve`` (stop parallel generation on an engine), ``serve`` (the same
behind an OpenAI-compatible API) and ``replay`` (a live run re-simulated from its records)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.markup import escape

from ..errors import MarsError
from ..method.audit import CONFIDENCE, DEFAULT_TARGET
from ..method.registry import CALIBRATED_METHOD, DEFAULT_METHOD, live_methods
from ..method.settings import LIVE_KEYS, SPECS
from ..serve.options import OPTIONS as SERVE_OPTIONS
from ..serve.options import UPSTREAM_TIMEOUT_S
from ..store.problems import parse_question_spec
from .common import (
    BACKEND_HELP,
    MODEL_HELP,
    PRESET_HELP,
    PROBLEMS_HELP,
    err,
    resumable_bar,
    stood_in_note,
    user_errors,
    with_declared,
    with_engine_options,
    with_settings,
)


@with_settings(LIVE_KEYS)
@with_engine_options("solve")
def solve(
    ctx: typer.Context,
    out: Path = typer.Option(
        ..., "--out", "-o", help="output directory (a pool + live/ records; resumable)"
    ),
    problems: str = typer.Option(..., help=PROBLEMS_HELP),
    traces: int = typer.Option(64, help="traces run in parallel per question (N)"),
    warmup: int | None = typer.Option(
        None,
        help="warmup traces run to completion first (q-model, γ) "
        f"[default: {SPECS['warmup'].default}; 0 with --calibration]",
        show_default=False,
    ),
    method: str | None = typer.Option(
        None,
        "--method",
        "-m",
        help=f"a method that can run live: {', '.join(live_methods())} [default: "
        f"{DEFAULT_METHOD}; {CALIBRATED_METHOD} with --calibration]",
        show_default=False,
    ),
    calibration: Path | None = typer.Option(
        None,
        help="a `mars calibrate` file: MARS2 reads it instead of a warmup per question, "
        "which then costs nothing and delays nothing; probes on its grid unless --spacing is given",
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
    from ..engines.factory import make_backend
    from ..live.loop import solve_pool
    from ..live.plan import plan_for
    from ..store.atomic import check_apart

    opts = dict(engine_options or {})
    spacing, seed = opts.pop("spacing"), opts.pop("seed")
    with user_errors():
        qids = parse_question_spec(questions)
        cal, warmup, method, spacing = _calibrated(ctx, calibration, warmup, method, spacing)
        if cal is not None:  # a --spacing of another grid than the calibration's
            cal.check_for({"spacing": spacing}, "--spacing")
        check_apart(
            out,
            [
                ("--problems", problems),
                ("--preset", preset),
                ("--model", model),
                ("--calibration", calibration),
            ],
        )
        be = make_backend(backend, model=model, preset=preset, **opts)
        plan = plan_for(
            be,
            method,
            n_traces=traces,
            warmup=warmup,
            seed=seed,
            spacing=spacing,
            max_tokens=opts["max_tokens"],
            calibration=cal,
            **(settings_given or {}),
        )
        with resumable_bar(f"solve ({method})", quiet, out) as progress:
            rows = solve_pool(
                be,
                problems,
                out,
                plan,
                questions=qids,
                compare_full=compare_full,
                progress=progress,
                detail=progress.detail,
            )
    if not quiet:
        _print_live(rows)
    stood_in_note(out)


def _calibrated(
    ctx: typer.Context,
    calibration: Path | None,
    warmup: int | None,
    method: str | None,
    spacing: int,
):
    """(the calibration, the warmup, the method, the spacing) of `solve` and `serve`: with a
    calibration, no warmup, MARS2 launched in turns and, unless --spacing is given, the grid the
    calibration was fitted on (a calibration refit on served traffic serves as it came); without
    one, the paper's defaults."""
    cal = None
    if calibration is not None:
        from ..method.learned import Calibration

        cal = Calibration.load(calibration)
        source = ctx.get_parameter_source("spacing")
        if (source is None or source.name == "DEFAULT") and len(cal.spacings) == 1:
            (spacing,) = cal.spacings
    if warmup is None:
        warmup = 0 if cal is not None else SPECS["warmup"].default
    if method is None:
        method = CALIBRATED_METHOD if cal is not None else DEFAULT_METHOD
    return cal, warmup, method, spacing


def _print_live(rows: list) -> None:
    from rich.table import Table

    from ..live.summary import summarize

    summary = summarize(rows)
    t = Table(title="live runs", show_lines=False)
    for c in summary.header:
        t.add_column(c, justify="right")
    for row in summary.rows:
        t.add_row(*map(escape, row))
    err.print(t)
    for line in summary.lines:
        err.print(escape(line))


@with_settings(LIVE_KEYS)
@with_engine_options("serve")
@with_declared(SERVE_OPTIONS, "serve_options")
def serve(
    ctx: typer.Context,
    upstream: list[str] = typer.Option(
        ...,
        "--upstream",
        help="an OpenAI-compatible server to front (llama.cpp, vLLM, SGLang), http://HOST:PORT; "
        "repeat for replicas of one model; 'synthetic' (or synthetic:PRESET) for the synthetic "
        "engine",
    ),
    method: str | None = typer.Option(
        None,
        "--method",
        "-m",
        help=f"default method of a request: {', '.join(live_methods())} [default: "
        f"{DEFAULT_METHOD}; {CALIBRATED_METHOD} with --calibration]",
        show_default=False,
    ),
    warmup: int | None = typer.Option(
        None,
        help=f"default warmup traces [default: {SPECS['warmup'].default}; 0 with --calibration]",
        show_default=False,
    ),
    calibration: Path | None = typer.Option(
        None,
        help="a `mars calibrate` file: MARS2 reads it instead of a warmup per question (no "
        "warmup generated, none waited for); probes on its grid unless --spacing is given",
    ),
    answer_format: list[str] = typer.Option(
        [],
        "--answer-format",
        help="NAME=REGEX: an answer format requests may name (mars.answer_format), the last "
        "match's first group (repeatable; built in: boxed, gsm8k, answer, last-number)",
    ),
    record: Path | None = typer.Option(
        None, help="append every served question to pools in this folder (mars replay reads them)"
    ),
    settings_given: dict | None = None,
    engine_options: dict | None = None,
    serve_options: dict | None = None,
):
    """Serve MARS behind an OpenAI-compatible API: one request with n > 1 (or a mars object) is
    one question solved live on the upstream servers; other requests pass through."""
    import os

    from ..errors import need_extra

    o = dict(serve_options or {})
    opts = dict(engine_options or {})
    spacing, max_tokens, seed = opts.pop("spacing"), opts.pop("max_tokens"), opts.pop("seed")
    temperature, top_p = opts.pop("temperature"), opts.pop("top_p")
    sampling = {k: v for k, v in opts.items() if k == "top_k" and v is not None}
    with user_errors():
        need_extra(("starlette", "uvicorn", "httpx", "prometheus_client"), "serve", "mars serve")
        from ..serve.app import ServeOptions, create_app
        from ..serve.audit import AUDIT_FIELDS, AuditOptions
        from ..serve.requests import Defaults
        from ..serve.upstreams import Upstreams

        cal, warmup, method, spacing = _calibrated(ctx, calibration, warmup, method, spacing)
        from ..method.answers import ANSWER_FORMATS

        formats = dict(ANSWER_FORMATS)
        for given in answer_format:
            name, eq, regex = given.partition("=")
            if not eq or not name.strip() or not regex:
                raise MarsError(f"--answer-format {given!r}: expected NAME=REGEX")
            formats[name.strip()] = regex
        defaults = Defaults(
            method=method,
            traces=o["traces"],
            warmup=warmup,
            calibration=cal,
            mars_for=o["mars_for"],
            answer_formats=formats,
            answer_format=o["default_answer_format"],
            spacing=spacing,
            max_tokens=max_tokens,
            knobs=dict(settings_given or {}),
            max_traces=o["max_traces"],
            seed=seed,
            temperature=temperature,
            top_p=top_p,
        ).check()
        ups = Upstreams(
            upstream,
            model=o["model"],
            api_key_env=o["upstream_key_env"],
            concurrency=opts["concurrency"],
            timeout=opts["timeout"] or UPSTREAM_TIMEOUT_S,
            retries=o["retries"],
            tokenizer=o["tokenizer"],
            routing=o["routing"],
            affinity_header=o["affinity_header"],
            **sampling,
        )
        if cal is not None:  # a calibration of another model than the upstreams serve
            cal.check_for({"model": ups.model, "spacing": spacing}, "--upstream", what="serves")
        options = ServeOptions(
            defaults,
            max_active=o["max_active"],
            max_queue=o["max_queue"],
            api_key=os.environ.get(o["api_key_env"], "").strip() or None,
            served_model=o["served_model_name"],
            record=str(record) if record else None,
            calibration_path=str(calibration) if calibration else None,
            audit=AuditOptions(**{k: o[f"audit_{k}"] for k in AUDIT_FIELDS}),
            engine_watch=o["engine_watch"],
        ).check()
        asgi, _ = create_app(ups, options)
    import uvicorn

    err.print(
        f"mars serve: {ups.model} from {len(upstream)} upstream(s) on "
        f"http://{o['host']}:{o['port']}/v1 "
        f"({'key required' if options.api_key else 'no key'})"
    )
    if ups.synthetic is not None:
        from ..serve.notes import SYNTHETIC_NOTE

        err.print(f"note: {SYNTHETIC_NOTE}", highlight=False, soft_wrap=True)
    from ..serve import logs

    logs.configure(o["log_level"])  # a timestamp and the request on every line
    try:
        uvicorn.run(asgi, host=o["host"], port=o["port"], log_level=o["log_level"])
    finally:
        ups.close()


def replay(
    run: Path = typer.Argument(..., help="a `mars solve` output directory"),
    questions: str | None = typer.Option(None, help="e.g. 0-4,7"),
):
    """Re-simulate a live run from its records; exit 1 if any question differs from what ran live."""  # noqa: E501 - typer shows it verbatim as the command summary
    from ..live.replay import open_live_run, replay_run

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


@with_settings(LIVE_KEYS)
def audit(
    paths: list[Path] = typer.Argument(
        ...,
        help="a `mars serve --record` folder or a pool of it (its audited questions), a `mars "
        "solve --compare-full` run, a pool of whole traces (generated, imported, audited: with "
        "-m), or a `mars simulate` output",
    ),
    method: str | None = typer.Option(
        None,
        "--method",
        "-m",
        help="pools of whole traces: the methods to audit, comma-separated (each decides every "
        "question as a live run would)",
    ),
    traces: int | None = typer.Option(
        None, help="pools of whole traces: main traces N [default: the traces after the warmup]"
    ),
    warmup: int | None = typer.Option(
        None,
        help="pools of whole traces: warmup traces W, the first W [default: "
        f"{SPECS['warmup'].default}; 0 with --calibration]",
        show_default=False,
    ),
    spacing: int | None = typer.Option(
        None, help="pools of whole traces: the checkpoint spacing [default: the pool's]"
    ),
    max_tokens: int | None = typer.Option(
        None, help="pools of whole traces: the token cap [default: the pool's, else its longest]"
    ),
    seed: int = typer.Option(0, help="pools of whole traces: the live run's seed"),
    calibration: Path | None = typer.Option(
        None, help="pools of whole traces: a `mars calibrate` file MARS2 reads instead of a warmup"
    ),
    audit_target: float = typer.Option(
        DEFAULT_TARGET,
        help="the risk a method is held to when it promises none of its own (MARS2: its "
        "risk_alpha; the certified rule: its delta)",
    ),
    confidence: float | None = typer.Option(
        None,
        help=f"confidence of the one-sided Clopper-Pearson bounds [default: {CONFIDENCE}; a "
        "served record's own]",
        show_default=False,
    ),
    sampled_only: bool = typer.Option(
        False,
        "--sampled-only",
        help="a served record: the seeded sample's audits only, not those clients asked for "
        "(mars.audit: true), which are no random sample",
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        "-o",
        help="also write audit.json (the tallies), audits.csv (every audit, or sample) and "
        "per_question.csv (each question's rate and bound) into this folder",
    ),
    settings_given: dict | None = None,
):
    """How often stopping changed the answer: each method's answers against the full-budget vote
    of the same traces, with exact bounds against its promised risk; exit 1 on an alarm."""
    from ..live.audit import audit_paths

    with user_errors():
        cal = None
        if calibration is not None:
            from ..method.learned import Calibration

            cal = Calibration.load(calibration)
        methods = [m.strip() for m in (method or "").split(",") if m.strip()]
        report = audit_paths(
            paths,
            methods=methods,
            n_traces=traces,
            warmup=warmup,
            spacing=spacing,
            max_tokens=max_tokens,
            seed=seed,
            knobs=settings_given,
            calibration=cal,
            target=audit_target,
            confidence=confidence,
            sampled_only=sampled_only,
        )
        if out is not None:
            _write_audit(report, out)
    _print_audit(report)
    if report.alarm:
        raise typer.Exit(1)


def _write_text(path, text: str) -> None:
    Path(path).write_text(text)


def _write_audit(report, out: Path) -> None:
    import csv
    import functools
    import io

    from ..store.atomic import make_dirs, write_atomic, write_json_atomic

    make_dirs(out)
    write_json_atomic(out / "audit.json", report.summary())
    for name, rows in (("audits.csv", report.rows), ("per_question.csv", report.per_question())):
        buf = io.StringIO()
        w = csv.DictWriter(
            buf, list(dict.fromkeys(k for r in rows for k in r)), lineterminator="\n"
        )
        w.writeheader()
        w.writerows(rows)
        write_atomic(out / name, functools.partial(_write_text, text=buf.getvalue()))


def _print_audit(report) -> None:
    from rich.table import Table

    s = report.summary()
    t = Table(title=f"audit (one-sided bounds at {100 * s['confidence']:g} %)", show_lines=False)
    for c in ("method", "pool", "audits", "differ", "rate %", "upper %", "target %", "state"):
        t.add_column(c, justify="left" if c in ("method", "pool", "state") else "right")

    def pct(x) -> str:
        return "-" if x is None else f"{100 * x:.2f}"

    rows = [(m, "all", v) for m, v in s["methods"].items()]
    rows += [(v["method"], p, v) for p, v in s["pools"].items()]
    for m, p, v in sorted(rows, key=lambda r: (r[0], r[1] != "all", r[1])):
        t.add_row(
            escape(m),
            escape(p),
            str(v["audits"]),
            str(v["disagreements"]),
            pct(v["rate"]),
            pct(v["upper"]),
            pct(v["target"]),
            v["state"],
        )
    err.print(t)
    print(
        "; ".join(
            f"{m}: {v['disagreements']}/{v['audits']} differ, upper {pct(v['upper'])} % "
            f"against {pct(v['target'])} % ({v['state']})"
            for m, v in s["methods"].items()
        )
    )
