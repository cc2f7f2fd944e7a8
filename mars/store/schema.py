"""Every on-disk schema of the project, defined once.

Two pool formats exist:

* the *published* MARS trace-pool parquet (the authors' release, one row per trace), which we read
  and write for interoperability;
* our *pool layout*, a directory partitioned per question so one question reads alone::

      POOL/
        pool.json                 format marker + provenance (model, dataset, backend, seed, ...)
        questions.parquet         one row per question (QUESTION_SCHEMA)
        traces/q000007.parquet    one file per question, one row per trace (TRACE_FILE_SCHEMA)

Trace rows carry an explicit token ``length`` (the published format infers it from ``len(confs)``),
nullable per-token confidences (a pool without them is valid; confidence methods then refuse), and
per-probe cost (prompt, cached and generated tokens) when the engine reported it.
"""

from __future__ import annotations

import pyarrow as pa

POOL_FORMAT = "mars-pool"
#: 2: trace files store confidences as one float16 byte string per trace (TRACE_FILE_SCHEMA)
POOL_FORMAT_VERSION = 2
#: Pool formats this mars reads (format 1 stores confidences as list<float16>)
POOL_FORMAT_VERSIONS_READ = (1, 2)
POOL_MANIFEST = "pool.json"
POOL_QUESTIONS = "questions.parquet"
POOL_TRACES_DIR = "traces"

#: Token spacing of the checkpoint grid (the reference hard-codes it).
CHECKPOINT_SPACING = 2048

#: What a trace's final answer is (:meth:`mars.store.pool.QuestionData.with_finals`): ``trace`` =
#: its own (the ``\\boxed{}`` answer its text gives: none without one, as in the paper);
#: ``last-probe`` = its own, or where it has none the answer of its last probe that gave one.
FINALS = ("trace", "last-probe")


def trace_file_name(qid: int) -> str:
    """Relative path of one question's trace table inside a pool directory."""
    return f"{POOL_TRACES_DIR}/q{qid:06d}.parquet"


PROBE_TYPE = pa.struct(
    [
        pa.field("position", pa.int64(), nullable=False),
        pa.field("answer", pa.string()),  # None: the probe produced no parseable answer
        pa.field("raw_text", pa.string()),
        pa.field("conf", pa.float32()),  # mean token confidence of the window before the probe
        pa.field("prompt_tokens", pa.int32()),  # probe cost, null when unknown
        pa.field("cached_tokens", pa.int32()),
        pa.field("generated_tokens", pa.int32()),
    ]
)

TRACE_SCHEMA = pa.schema(
    [
        pa.field("qid", pa.int64(), nullable=False),
        pa.field("trace_idx", pa.int64(), nullable=False),
        pa.field("final_answer", pa.string()),  # None: no final answer (no \boxed{}, or cut off)
        pa.field("length", pa.int64(), nullable=False),  # generated tokens
        pa.field("finished", pa.bool_()),  # False: hit the token cap
        pa.field("confs", pa.list_(pa.float16())),  # per-token confidence, null when unknown
        pa.field("probes", pa.list_(PROBE_TYPE), nullable=False),
        pa.field("text", pa.string()),  # full trace text, optional
        # generated token ids (the generator's tokenizer), null when not kept: what `mars probe`
        # needs to probe the trace again at any position, with any probe model
        pa.field("token_ids", pa.list_(pa.int32())),
    ]
)
#: A trace file's columns: TRACE_SCHEMA's, confidences stored as one little-endian float16 byte
#: string per trace (:mod:`mars.store.confs`: Parquet decodes lists value by value).
TRACE_FILE_SCHEMA = TRACE_SCHEMA.set(
    TRACE_SCHEMA.get_field_index("confs"), pa.field("confs", pa.large_binary())
)
#: An optional trace column: how many probes the source recorded, one every ``spacing`` tokens
#: (Parallel-Probe's ``len(probe_list)``, written by ``mars import parallel-probe --spacing
#: native``). Parallel-Probe's evaluation times and charges a trace by it: probe j after j·spacing
#: tokens for j ≤ probe_steps (the last may lie past the length: its answer is the final one),
#: then one step that reads the rest. Null or absent: the probes stored below the length.
PROBE_STEPS_FIELD = pa.field("probe_steps", pa.int32())
#: Columns a trace file may hold beyond TRACE_SCHEMA.
TRACE_OPTIONAL_FIELDS = (PROBE_STEPS_FIELD,)

#: Trace columns the simulator never reads (read only by the probe stage and exporters).
TRACE_PAYLOAD_COLUMNS = ("confs", "text", "token_ids")

#: Parquet options of trace files: confidences are float16 noise, so no dictionary for them
#: (zstd makes their bytes 25 % smaller); row groups of 256 traces keep the decoding buffers of a
#: question small (readers stream confidences row group by row group); every page carries a CRC32,
#: checked when read.
TRACE_PARQUET_OPTIONS = {
    "compression": "zstd",
    "use_dictionary": ["final_answer", "text"],  # token ids: plain int32 runs, zstd
    "write_statistics": ["qid", "trace_idx", "length"],
    "row_group_size": 256,
    "write_page_checksum": True,  # a damaged page is an error on reading, never silent noise
}
#: Read options matching TRACE_PARQUET_OPTIONS (files without checksums read as before).
TRACE_READ_OPTIONS = {"page_checksum_verification": True}

QUESTION_SCHEMA = pa.schema(
    [
        pa.field("qid", pa.int64(), nullable=False),
        pa.field("ground_truth", pa.string()),  # null: not known (a problem's "answer": null)
        pa.field("question", pa.string()),
        pa.field("dataset", pa.string()),
        pa.field("model", pa.string()),
        # the generator's prompt token ids (chat template applied), null for engines without
        # tokens: with `token_ids` exactly the context a probe extends
        pa.field("prompt_ids", pa.list_(pa.int32())),
    ]
)

PUBLISHED_PROBE_TYPE = pa.struct(
    [
        pa.field("position", pa.int64()),
        pa.field("answer", pa.string()),
        pa.field("is_correct", pa.bool_()),
        pa.field("raw_text", pa.string()),
        pa.field("avg_conf", pa.float64()),
    ]
)

#: The authors' published trace-pool parquet (reference-protocol §1.1).
PUBLISHED_SCHEMA = pa.schema(
    [
        pa.field("qid", pa.int64()),
        pa.field("trace_idx", pa.int64()),
        pa.field("ground_truth", pa.string()),
        pa.field("extracted_answer", pa.string()),
        pa.field("confs", pa.list_(pa.float16())),
        pa.field("probes", pa.list_(PUBLISHED_PROBE_TYPE)),
    ]
)

#: The fit stage's artifact (``mars fit``): FIT/fit.json (provenance), FIT/models.parquet (one
#: row per question × warmup size) and the per-question arrays (``q000007-<key>.npz``).
FIT_MANIFEST = "fit.json"
FIT_MODELS = "models.parquet"
FIT_FORMAT = "mars-fit"

#: One fitted switch model (reference-protocol §6): standardisation, logistic coefficients and
#: Platt parameters (null without warmup traces: q = 1), training size and in-sample fit.
#: the switch model's features (mars.method.features), in the order of ``coef`` below
SWITCH_FEATURES = ("position", "confidence", "flips", "streak", "conf_trend")

MODEL_SCHEMA = pa.schema(
    [
        pa.field("qid", pa.int64(), nullable=False),
        pa.field("model", pa.string(), nullable=False),  # "switch": learned q of the MARS methods
        pa.field("warmup", pa.int64(), nullable=False),  # warmup size asked for
        pa.field("warmup_traces", pa.list_(pa.int64()), nullable=False),  # trace indices used
        pa.field("content_hash", pa.string(), nullable=False),  # of the question's traces
        pa.field("n_traces", pa.int64(), nullable=False),
        pa.field("n_checkpoints", pa.int64(), nullable=False),
        pa.field("n_answers", pa.int64(), nullable=False),
        pa.field(
            "n_rows", pa.int64(), nullable=False
        ),  # training rows: warmup traces × checkpoints
        pa.field("n_positive", pa.int64(), nullable=False),  # rows whose answer differs from final
        pa.field("log_loss", pa.float64()),  # in-sample, calibrated q
        pa.field("brier", pa.float64()),
        pa.field("mean", pa.list_(pa.float64())),  # feature standardisation
        pa.field("scale", pa.list_(pa.float64())),
        pa.field("intercept", pa.float64()),
        pa.field("coef", pa.list_(pa.float64())),  # on standardised features, FEATURE_NAMES order
        pa.field("platt_a", pa.float64()),
        pa.field("platt_b", pa.float64()),
    ]
)

#: Columns of a simulator's per-iteration output, in order.
PER_ITERATION_COLUMNS = [
    "qid",
    "iteration",
    "answer",
    "correct",
    "tokens",
    "baseline_tokens",
    "stop_position",
    "stopped_by",
    "probe_tokens",
    "seq_tokens",  # the latency axis: what a user waits for (docs/baselines.md)
    "longest_tokens",  # the longest trace started
    "warmup_tokens",  # the question's warmup a live run generates first (0: the method reads none)
]

#: The first columns of per_question.csv, exactly (more may follow).
PER_QUESTION_LEADING_COLUMNS = [
    "qid",
    "accuracy",
    "tokens_mean",
    "baseline_tokens_mean",
    "savings_pct",
    "stop_position_mean",
]
