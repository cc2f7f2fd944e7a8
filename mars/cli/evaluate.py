"""The offline evaluation's commands: ``fit``, ``simulate``, ``analyze`` and ``report`` (the paper's
tables and figures from a pool of traces)."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import typer

from ..errors import MarsError
from ..method.settings import SETTINGS, SPECS
from ..store.problems import parse_question_spec
from .common import (
    err,
    setting_help,
    user_errors,
    with_settings,
)


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
    calibration: Path | None = typer.Option(
        None,
        help="a `mars calibrate` file: MARS2's rules read it instead of a warmup per question "
        "(--warmup 0, its default then)",
    ),
    answers: Path | None = typer.Option(
        None,
        help="a problems jsonl ({question, answer} lines): each question is graded against the "
        "answer of the line whose question its prompt holds (served traffic recorded without "
        "answers)",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar or summary"),
    settings_given: dict | None = None,
):
    """Bootstrap-simulate stopping methods on a trace pool (the paper's evaluation)."""
    from ..method.registry import parse_methods
    from ..method.settings import Settings, pool_settings
    from ..progress import bar
    from ..simulate.driver import (
        check_protocol_inputs,
        simulate_pool,
        size_notes,
        supported_methods,
    )
    from ..simulate.results import summary_table, write_methods
    from ..store.atomic import check_apart, output_dir
    from ..store.pool import open_pool
    from ..store.provenance import pool_source

    with user_errors():
        parse_methods(method)
        given = dict(settings_given or {})
        cal = None
        if calibration is not None:
            from ..method.learned import Calibration

            cal = Calibration.load(calibration)
            given.setdefault("warmup", 0)
        src = open_pool(pool)
        live = (getattr(src, "manifest", None) or {}).get("live")
        if isinstance(live, dict) and isinstance(live.get("warmup"), int):
            given.setdefault("warmup", live["warmup"])  # a live run's pool: its own warmup
        settings = Settings(**given).validate()
        check_protocol_inputs(settings, fit_dir, cache)
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
        targets = None
        if answers is not None:
            from ..simulate.answers import match_answers

            if fit_dir is not None or cache is not None:
                raise MarsError("--answers: the arrays of --fit and --cache are graded already")
            targets = match_answers(src, answers, qids if qids is not None else src.qids)
        unknown = set(getattr(src, "unknown_answers", ())) - set(targets or {})
        accuracy_known = not set(qids if qids is not None else src.qids) <= unknown
        notes = size_notes(src, methods, settings, qids)
        if workers < 1:
            raise MarsError(f"--workers {workers}: must be at least 1")
        check_apart(
            out,
            [
                ("POOL", pool),
                ("--fit", fit_dir),
                ("--cache", cache),
                ("--calibration", calibration),
            ],
        )
        if cal is not None:
            from ..simulate.driver import check_calibration

            check_calibration(cal, src, settings, methods)
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
                calibration=cal,
                answers=targets,
            )
            fit = None if fit_dir is None else str(fit_dir)
            names = [m.name for m in methods]
            data = pool_source(pool).to_dict()
            used = None
            if cal is not None:
                from ..simulate.results import calibration_input, input_checksum

                used = calibration_input(calibration, cal, input_checksum(results))
                if used["in_sample"]:
                    notes = [*notes, f"{calibration} was fitted on these traces: in sample"]
            if answers is not None:
                notes = [*notes, f"graded against --answers {answers}"]
            overalls = write_methods(
                out,
                names,
                results,
                settings.to_dict(),
                str(pool),
                fit,
                notes,
                data,
                used,
                accuracy_known,
            )
    if not quiet:
        err.print(summary_table(overalls))
        if used is not None and used["in_sample"]:
            err.print(
                f"note: {calibration} was fitted on these traces: in sample (evaluate on a pool "
                "it never saw)",
                highlight=False,
                soft_wrap=True,
            )
        err.print(
            f"{len(results)} questions × {len(methods)} methods in "
            f"{time.perf_counter() - t0:.1f} s → {out}/"
        )


def calibrate(
    pools: list[Path] = typer.Argument(..., help="pool directories (or published parquet files)"),
    out: Path = typer.Option(..., "--out", "-o", help="the calibration file (JSON)"),
    protocol: str = typer.Option(
        SPECS["protocol"].default,
        help="the evaluation protocol whose answer groups the calibration reads: "
        + setting_help(SPECS["protocol"]),
        show_default=False,
    ),
    finals: str = typer.Option(
        SPECS["finals"].default, help=setting_help(SPECS["finals"]), show_default=False
    ),
    fits: list[Path] = typer.Option(
        [],
        "--fit",
        help="a `mars fit` directory of one of the pools: its arrays are read instead of built "
        "again (repeatable; bootstrap protocol; the same calibration either way)",
        show_default=False,
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar or summary"),
):
    """Learn once, from pools, what MARS2 reads of a warmup: who leaves an answer, by position,
    share and lead (read by `simulate`, `solve`, `serve` and `mars.Stopper` with --calibration)."""
    from ..fit.calibrate import calibrate_pools
    from ..method.settings import Settings
    from ..progress import bar
    from ..store.atomic import check_apart, check_output_dir

    with user_errors():
        Settings(protocol=protocol, finals=finals).validate()
        for pool in pools:
            if not pool.exists():
                raise MarsError(f"{pool}: no such pool")
        for fit_dir in fits:
            if not fit_dir.is_dir():
                raise MarsError(f"--fit {fit_dir}: no such fit directory")
        check_apart(out, [("POOL", p) for p in pools] + [("--fit", f) for f in fits])
        check_output_dir(out.parent, "--out")
        with bar("calibrating on questions", disable=quiet) as progress:
            cal = calibrate_pools(
                pools, protocol_name=protocol, finals=finals, fits=fits, progress=progress
            )
        cal.save(out)
    if not quiet:
        n = sum(int(f["questions"]) for f in cal.fitted_on)
        err.print(
            f"calibration {cal.digest} fitted on {n} questions of {len(pools)} pool(s) → {out}"
        )


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
    finals: str = typer.Option(
        SPECS["finals"].default, help=setting_help(SPECS["finals"]), show_default=False
    ),
    questions: str | None = typer.Option(None, help="question ids, e.g. 0,3,5-9 (default: all)"),
    workers: int = typer.Option(1, help="questions fitted in parallel (processes)"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar or summary"),
):
    """Fit the per-question stage: arrays and switch models (q) that `simulate --fit` reads."""
    from ..fit.driver import check_fit, fit_pool, summary_table
    from ..progress import bar
    from ..store.atomic import check_apart, output_dir

    with user_errors():
        try:
            warmups = [int(w) for w in warmup.split(",") if w.strip()]
        except ValueError:
            raise MarsError(
                f"--warmup {warmup!r}: expected whole numbers, e.g. 16 or 8,16"
            ) from None
        qids = parse_question_spec(questions)
        check_apart(out, [("POOL", pool)])
        check_fit(pool, warmups, window, spacing, qids, finals)  # refusals before --out is made
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
                finals=finals,
            )
    if not quiet:
        err.print(summary_table(table, "switch models (in-sample fit)"))
        err.print(f"{pool} → {out}/")


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
    from ..analyze.driver import analyze as run_analysis
    from ..progress import bar
    from ..store.atomic import check_apart

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

    from ..errors import need_extra
    from ..store.atomic import check_apart, output_dir

    with user_errors():
        if figures:
            need_extra(
                ("matplotlib", "seaborn"),
                "report",
                "drawing the figures (--no-figures: tables only)",
            )
    from ..report import render_report

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
