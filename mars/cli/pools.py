"""The commands that make and convert trace pools: ``generate``, ``probe``, ``consolidate``,
``import`` and ``export``."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from ..errors import MarsError
from ..store.problems import parse_question_spec
from ..store.schema import CHECKPOINT_SPACING
from .common import (
    BACKEND_HELP,
    MODEL_HELP,
    PRESET_HELP,
    PROBLEMS_HELP,
    err,
    resumable_bar,
    stood_in_note,
    user_errors,
    with_engine_options,
)


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
    from ..engines.factory import make_backend
    from ..generate import generate_pool
    from ..store.atomic import check_apart

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
    stood_in_note(out)


def _print_generated(out: Path) -> None:
    """The closing line of ``mars generate``: what the folder now holds."""
    import pyarrow.parquet as pq

    from ..store import schema
    from ..store.pool import LayoutPool

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
            "no trace has a final answer (\\boxed{...}): `mars simulate` has nothing to sample "
            "unless it takes each trace's last probe's answer (--finals last-probe)",
            file=sys.stderr,
        )


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
    from ..generate import probe_backend, probe_pool
    from ..store.atomic import check_apart
    from ..store.pool import LayoutPool, open_pool

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


def consolidate(
    shards: list[Path] = typer.Argument(..., help="shard directories of one generation"),
    out: Path = typer.Option(..., "--out", "-o"),
    overwrite: bool = typer.Option(False),
):
    """Merge generated shards into one pool directory."""
    from ..store.consolidate import consolidate as merge

    with user_errors():
        merge(shards, out, overwrite=overwrite)


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
    from ..store.published import import_pool

    with user_errors():
        import_pool(fmt, src, out, trust_pickle=trust_pickle, spacing=spacing)
    err.print(f"pool written to {out}")


def export(
    pool: Path = typer.Argument(...),
    out: Path = typer.Argument(..., help="output .parquet (must not exist)"),
):
    """Write a pool in the authors' published parquet schema."""
    from ..method.answers import is_correct
    from ..store.published import export_published

    with user_errors():
        export_published(pool, out, grade=is_correct)
    err.print(f"published-schema parquet written to {out}")
