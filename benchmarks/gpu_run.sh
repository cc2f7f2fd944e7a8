#!/usr/bin/env bash
# The transformers backend's decoding modes (eager, static, cuda-graphs) on one GPU, in one call
# of at most ~6 minutes, results written as they come.
#
#   bash benchmarks/gpu_run.sh --prepare   # first, here: benchmarks/out/gpu-assets (SmolLM2's
#                                          # tokenizer, Math-Verify and gguf as pure Python; ~10 MB)
#   bash benchmarks/gpu_run.sh             # on the GPU machine, benchmarks/out/gpu-assets carried
#   bash benchmarks/gpu_run.sh --cpu       # the same parts on this CPU with tiny models (a dry
#                                          # run of the logic: 3x the time limits, no graphs)
#
# Parts, most important first, each under its own `timeout` and within one overall deadline
# (GPU_RUN_BUDGET seconds, default 345; a part that would not fit is cut short or skipped):
#   env         versions, the GPU, imports                                    → env.json
#   tiny        all three modes on a two-layer model (a quick check of graphs) → bench-tiny.jsonl
#   8b-graphs   random Qwen3-8B-shaped model, cuda-graphs, N = 1, 16, 64      → bench-8b.jsonl
#   8b-eager    the same model, eager then static (the baseline)             → bench-8b.jsonl
#   solve       a random SmolLM2-shaped model written to disk, then a live `mars solve` (AIME
#               2025 q0, 16 traces + 4 warmup, cap 256, probes of 50 every 64, --compare-full,
#               cuda-graphs)
#                                                                             → solve-graphs/
#   smol-graphs random SmolLM2-135M-shaped model, cuda-graphs                 → bench-smol.jsonl
#   8b-long     the 8B-shaped model, cuda-graphs, N = 64 to 1,024 tokens      → bench-8b-long.jsonl
#   smol-eager  the SmolLM2-shaped model, eager then static                   → bench-smol.jsonl
#   report      summary.md and summary.json (also rewritten after every part)
# Each part's output is in OUT/<part>.log; OUT/parts.jsonl has each part's exit status and time.
# OUT is $OUT (the device machine's result folder), else benchmarks/out/gpu-run.
# GPU_RUN_PARTS="tiny 8b-graphs" runs only those parts (a second, shorter call).
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
ASSETS=$ROOT/benchmarks/out/gpu-assets
PY=${PYTHON:-python3}

if [ "${1:-}" = "--prepare" ]; then
    exec "${PYTHON:-$ROOT/.venv/bin/python}" benchmarks/gpu_run.py assets "$ASSETS"
fi
CPU=0
if [ "${1:-}" = "--cpu" ]; then CPU=1; fi
if [ ! -d "$ASSETS/tokenizer" ]; then
    echo "missing $ASSETS: run 'bash benchmarks/gpu_run.sh --prepare' first and carry it" >&2
    exit 2
fi

OUT=${OUT:-$ROOT/benchmarks/out/gpu-run}
mkdir -p "$OUT"
WORK=$(mktemp -d)  # big files (a model written for mars solve) stay out of OUT
trap 'rm -rf "$WORK"' EXIT
export PYTHONPATH="$ROOT:$ASSETS/pylib${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# numba compiles mars's confidence pass once per cache (seconds on the GPU machine's CPU)
export NUMBA_CACHE_DIR=${NUMBA_CACHE_DIR:-$ROOT/benchmarks/out/numba-cache} PYTHONUNBUFFERED=1

SCALE=1
if [ $CPU = 1 ]; then
    export OMP_NUM_THREADS=1  # a shared CPU: one thread each (mars solve takes torch's default)
    SCALE=3                   # a dry run checks the logic: a slow CPU gets 3x the time
    DEVICE=cpu BIG=tiny-qwen3 SMALL=tiny NS=1,4 GRAPHS="" TOK=32 LONG=64
    SOLVE="--traces 4 --warmup 2 --max-tokens 32 --spacing 16"
    export MARS_BACKEND_OPTIONS='{"probe_max_new_tokens": 8}'
else
    DEVICE=cuda BIG=qwen3-8b SMALL=smollm2-135m NS=1,16,64 GRAPHS=cuda-graphs TOK=128 LONG=1024
    SOLVE="--traces 16 --warmup 4 --max-tokens 256 --spacing 64"  # probes of 50 tokens
fi
START=$(date +%s)
DEADLINE=$((START + SCALE * ${GPU_RUN_BUDGET:-345}))
echo "gpu_run: device $DEVICE, results in $OUT, deadline in $((DEADLINE - START)) s"

# part NAME LIMIT CMD...: run CMD under `timeout` (at most LIMIT s, and not past the deadline
# less 10 s kept for the report), its output in OUT/NAME.log, its status in OUT/parts.jsonl
part() {
    local name=$1 limit=$(($2 * SCALE)) left t0 rc
    shift 2
    if [ -n "${GPU_RUN_PARTS:-}" ] && [[ " $GPU_RUN_PARTS " != *" $name "* ]]; then
        return
    fi
    left=$((DEADLINE - $(date +%s) - 10))
    if [ "$left" -lt 15 ]; then
        echo "== $name: skipped (${left}s left)"
        echo "{\"part\": \"$name\", \"rc\": -1, \"seconds\": 0, \"limit\": 0}" >>"$OUT/parts.jsonl"
        return
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "== $name (at most ${limit}s): $*"
    t0=$(date +%s.%N)
    # timeout signals its whole process group: the part's Python processes end with it
    timeout -k 5 "$limit" bash -c '"$@"' "$name" "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    local secs
    secs=$(awk "BEGIN {printf \"%.1f\", $(date +%s.%N) - $t0}")
    echo "{\"part\": \"$name\", \"rc\": $rc, \"seconds\": $secs, \"limit\": $limit}" \
        >>"$OUT/parts.jsonl"
    echo "   exit $rc after ${secs}s; last lines:"
    tail -n 4 "$OUT/$name.log" | cut -c1-240 | sed 's/^/   | /'
    "$PY" benchmarks/gpu_run.py report "$OUT" >/dev/null 2>&1
}

bench() {  # bench OUTFILE ARGS...: bench_transformers.py on DEVICE with the carried tokenizer
    local file=$1
    shift
    "$PY" benchmarks/bench_transformers.py --device "$DEVICE" --tokenizer "$ASSETS/tokenizer" \
        --out "$OUT/$file" "$@"
}

solve() {  # a random SmolLM2-shaped model on disk, then a live run on it
    "$PY" benchmarks/random_model.py "$SMALL" --tokenizer "$ASSETS/tokenizer" \
        --device "$DEVICE" --out "$WORK/smol" &&
        # shellcheck disable=SC2086  # SOLVE is several options
        "$PY" -m mars.cli solve --backend transformers --model "$WORK/smol" \
            --problems aime_2025 --questions 0 $SOLVE --decode "${GRAPHS:-static}" \
            --compare-full --out "$OUT/solve-${GRAPHS:-static}"
}

with_graphs() { echo "${GRAPHS:+$GRAPHS,}$1"; }
export -f bench solve
export PY ASSETS OUT WORK DEVICE SMALL GRAPHS SOLVE

part env 25 "$PY" benchmarks/gpu_run.py env "$OUT"
part tiny 30 bench bench-tiny.jsonl --random tiny --decode "$(with_graphs static,eager)" \
    --traces 1,4 --tokens 40 --spacing 16 --probe-new 8
if [ $CPU = 0 ]; then
    part 8b-graphs 50 bench bench-8b.jsonl --random "$BIG" --decode cuda-graphs --traces "$NS" \
        --tokens "$TOK" --spacing $((TOK / 2)) --probe-new 16
fi
part 8b-eager 100 bench bench-8b.jsonl --random "$BIG" --decode eager,static --traces "$NS" \
    --tokens "$TOK" --spacing $((TOK / 2)) --probe-new 16 --probe-modes reuse
part solve "${GPU_SOLVE_LIMIT:-45}" solve
if [ $CPU = 0 ]; then
    part smol-graphs 30 bench bench-smol.jsonl --random "$SMALL" --decode cuda-graphs \
        --traces "$NS" --tokens $((2 * TOK)) --spacing "$TOK" --probe-new 16
fi
part 8b-long "${GPU_LONG_LIMIT:-40}" bench bench-8b-long.jsonl --random "$BIG" --decode "${GRAPHS:-static}" \
    --traces "${NS##*,}" --tokens "$LONG" --spacing $((LONG / 2)) --probe-new 50 \
    --probe-modes reuse
part smol-eager 60 bench bench-smol.jsonl --random "$SMALL" --decode eager,static \
    --traces "$NS" --tokens $((TOK / 2)) --spacing $((TOK / 4)) --probe-new 8 --probe-modes reuse
"$PY" benchmarks/gpu_run.py report "$OUT" >"$OUT/report.log" 2>&1
echo "== done in $(($(date +%s) - START)) s: $OUT/summary.md"
cat "$OUT/summary.md" 2>/dev/null | head -120
