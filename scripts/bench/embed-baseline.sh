#!/usr/bin/env bash
# Side-by-side embedding throughput: the SAME texts through sentence-transformers (PyTorch, CPU)
# and through `ragbox bench embed`, in one run, with the same thread count, batch size and
# truncation (all-MiniLM-L6-v2, 256 tokens), so the two figures compare.
#
#   scripts/bench/embed-baseline.sh --data ../shared/data/beir/scifact [--threads N] [--limit N]
#       [--batch-size B] [--ragbox BIN] [--models-dir DIR]
#
# The Python side runs in a venv with pinned versions (every package, --no-deps, so a rerun installs
# the identical set) at ${RAGBOX_CACHE_DIR:-$HOME/.cache/ragbox}/venv-bench; it is built on first use
# (PyPI only; about 6 GB because PyPI's Linux torch wheel pulls the CUDA libraries even for CPU use)
# and reused afterwards. The model is read from the hub-cache layout under --models-dir (what
# scripts/setup/fetch-models.sh produces). Nothing is downloaded at run time besides the venv.
#
# Output: a markdown table on stdout, the raw JSON lines in ${OUT:-target/bench}/embed-baseline.jsonl
# (ragbox's stderr in embed-baseline.ragbox.log beside it).
# Exits non-zero if either side failed (the other side's result is still printed).
# Throughput figures are only comparable when taken side by side on a quiet machine.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

usage() {
  sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

DATA=""
THREADS="$(nproc)"
LIMIT=""
BATCH=32
RAGBOX="$ROOT/target/debug/ragbox"
MODELS="$ROOT/models"
MAX_TOKENS=256

while [[ $# -gt 0 ]]; do
  case "$1" in
    --data) DATA="${2:?--data needs a value}"; shift 2 ;;
    --threads) THREADS="${2:?--threads needs a value}"; shift 2 ;;
    --limit) LIMIT="${2:?--limit needs a value}"; shift 2 ;;
    --batch-size) BATCH="${2:?--batch-size needs a value}"; shift 2 ;;
    --ragbox) RAGBOX="${2:?--ragbox needs a value}"; shift 2 ;;
    --models-dir) MODELS="${2:?--models-dir needs a value}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done

die() { echo "error: $*" >&2; exit 2; }
log() { echo "[bench-embed-baseline] $*" >&2; }

[[ -n "$DATA" ]] || die "--data DIR is required (a BEIR dataset folder with corpus.jsonl)"
[[ -f "$DATA/corpus.jsonl" ]] || die "no corpus.jsonl in $DATA"
[[ "$THREADS" =~ ^[1-9][0-9]*$ ]] || die "--threads must be a positive integer"
[[ "$BATCH" =~ ^[1-9][0-9]*$ ]] || die "--batch-size must be a positive integer"
[[ -z "$LIMIT" || "$LIMIT" =~ ^[1-9][0-9]*$ ]] || die "--limit must be a positive integer"

# ---------------------------------------------------------------------------------------------
# Pinned Python environment. The complete resolved set (pip's resolution of the three top-level
# pins on CPython 3.11, linux x86_64), installed with --no-deps so nothing floats. The nvidia-*,
# cuda-* and triton wheels are unused on CPU but `import torch` fails without them (PyPI torch is
# the CUDA build; the PyTorch CPU index is not reachable from here).
# ---------------------------------------------------------------------------------------------
PINS="$(cat <<'EOF'
torch==2.15.0
sentence-transformers==6.2.0
transformers==5.23.0
annotated-doc==0.0.7
annotated-types==0.8.0
anyio==4.16.0
click==8.5.1
cloudpickle==3.1.2
cuda-bindings==13.5.0
cuda-pathfinder==1.9.0
cuda-toolkit==13.2.2
filelock==4.2.11
fsspec==2026.9.0
h11==0.16.0
hf-xet==1.8.0
httpcore2==2.16.2
httpx2==2.16.2
huggingface_hub==2.4.0
idna==3.20
Jinja2==3.1.6
joblib==1.6.0
markdown-it-py==4.3.0
MarkupSafe==3.0.4
mdurl==0.1.2
mpmath==1.3.0
narwhals==2.29.0
networkx==3.6.1
numpy==2.4.6
nvidia-cublas==13.4.1.3
nvidia-cuda-cccl==13.3.5.0.6
nvidia-cuda-cupti==13.2.86
nvidia-cuda-nvrtc==13.2.86
nvidia-cuda-runtime==13.2.86
nvidia-cudnn-cu13==9.26.0.51
nvidia-cufft==12.2.0.57
nvidia-cufile==1.17.1.22
nvidia-cusolver==12.2.0.11
nvidia-cusparse==12.7.10.12
nvidia-cusparselt-cu13==0.8.1
nvidia-nccl-cu13==2.30.7
nvidia-nvjitlink==13.5.37
nvidia-nvshmem-cu13==3.7.2
nvidia-nvtx==13.2.86
packaging==26.3
pydantic==2.14.3
pydantic_core==2.50.4
Pygments==2.21.0
PyYAML==6.0.3
regex==2026.11.15
rich==15.0.0
safetensors==0.8.0
scikit-learn==1.9.1
scipy==1.17.1
setuptools==84.2.1
shellingham==1.5.4
sympy==1.14.0
threadpoolctl==3.8.0
tokenizers==0.23.3
tqdm==4.70.1
triton==3.9.0
truststore==0.10.5
typer==0.29.2
typing-inspection==0.4.5
typing_extensions==4.16.0
EOF
)"

CACHE="${RAGBOX_CACHE_DIR:-$HOME/.cache/ragbox}"
VENV="$CACHE/venv-bench"
PY="$VENV/bin/python"
STAMP="$VENV/.ragbox-bench-pins"
PYTHON="${PYTHON:-python3}"

venv_ok() {
  [[ -x "$PY" && -f "$STAMP" ]] && [[ "$(cat "$STAMP")" == "$PINS" ]] &&
    "$PY" -c 'import torch, sentence_transformers, transformers' >/dev/null 2>&1
}

if venv_ok; then
  log "reusing venv $VENV"
else
  command -v "$PYTHON" >/dev/null || die "$PYTHON not found (needed to build the benchmark venv)"
  log "building venv $VENV (pinned torch/sentence-transformers/transformers from PyPI; ~6 GB, a few minutes)"
  rm -rf "$VENV"
  mkdir -p "$CACHE"
  t0=$(date +%s)
  "$PYTHON" -m venv "$VENV"
  req="$(mktemp)"
  trap 'rm -f "$req"' EXIT
  printf '%s\n' "$PINS" >"$req"
  "$PY" -m pip install --quiet --disable-pip-version-check --no-deps --only-binary=:all: -r "$req"
  "$PY" -c 'import torch, sentence_transformers, transformers' ||
    die "the venv at $VENV was installed but does not import torch/sentence-transformers"
  printf '%s' "$PINS" >"$STAMP"
  log "venv ready in $(( $(date +%s) - t0 )) s ($(du -sh "$VENV" | cut -f1))"
fi

# ---------------------------------------------------------------------------------------------
# Locate all-MiniLM-L6-v2 in the hub-cache layout.
# ---------------------------------------------------------------------------------------------
REPO_DIR="$MODELS/models--sentence-transformers--all-MiniLM-L6-v2"
[[ -f "$REPO_DIR/refs/main" ]] ||
  die "all-MiniLM-L6-v2 not found under $MODELS (no $REPO_DIR/refs/main); run scripts/setup/fetch-models.sh"
MODEL_DIR="$REPO_DIR/snapshots/$(tr -d '[:space:]' <"$REPO_DIR/refs/main")"
for f in config.json tokenizer.json model.safetensors; do
  [[ -f "$MODEL_DIR/$f" ]] || die "missing $MODEL_DIR/$f; run scripts/setup/fetch-models.sh"
done

OUT_DIR="${OUT:-$ROOT/target/bench}"
mkdir -p "$OUT_DIR"
JSONL="$OUT_DIR/embed-baseline.jsonl"
RB_LOG="$OUT_DIR/embed-baseline.ragbox.log"
: >"$JSONL"
: >"$RB_LOG"

export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS" RAYON_NUM_THREADS="$THREADS"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1

limit_args=()
[[ -n "$LIMIT" ]] && limit_args=(--limit "$LIMIT")

# Last line of a command's stdout that parses as a JSON object, or nothing.
last_json() {
  python3 -c '
import json, sys
out = None
for line in sys.stdin:
    line = line.strip()
    if line.startswith("{"):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out = line
if out:
    print(out)
'
}

log "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); threads $THREADS, batch $BATCH, max $MAX_TOKENS tokens${LIMIT:+, first $LIMIT docs}"

# (a) sentence-transformers
ST_OK=1
ST_LINE=""
log "sentence-transformers: running"
if st_out="$("$PY" "$ROOT/scripts/bench/embed-sentence-transformers.py" --data "$DATA" --model-dir "$MODEL_DIR" \
      --threads "$THREADS" --batch-size "$BATCH" --max-tokens "$MAX_TOKENS" "${limit_args[@]}")"; then
  ST_LINE="$(printf '%s\n' "$st_out" | last_json)"
fi
if [[ -n "$ST_LINE" ]]; then
  printf '%s\n' "$ST_LINE" >>"$JSONL"
else
  ST_OK=0
  log "sentence-transformers side FAILED (see the messages above)"
fi

# (b) ragbox
RB_OK=1
RB_LINE=""
RB_WHY=""
if [[ ! -x "$RAGBOX" ]]; then
  RB_WHY="binary not found or not executable: $RAGBOX (build it, or pass --ragbox BIN)"
else
  # target/debug is fine: the dev profile optimises every dependency (candle, gemm, libm...).
  log "ragbox: running $RAGBOX bench embed (its stderr goes to $RB_LOG)"
  if rb_out="$("$RAGBOX" bench embed --data "$DATA" --model all-minilm-l6-v2 --threads "$THREADS" \
        --batch-size "$BATCH" "${limit_args[@]}" --json 2>"$RB_LOG")"; then
    RB_LINE="$(printf '%s\n' "$rb_out" | last_json)"
    [[ -n "$RB_LINE" ]] || RB_WHY="'$RAGBOX bench embed --json' printed no JSON line"
  else
    RB_WHY="'$RAGBOX bench embed' exited with status $?"
  fi
fi
if [[ -n "$RB_LINE" ]]; then
  printf '%s\n' "$RB_LINE" >>"$JSONL"
else
  RB_OK=0
  log "ragbox side FAILED: $RB_WHY"
  if [[ -s "$RB_LOG" ]]; then
    log "last lines of $RB_LOG:"
    tail -n 20 "$RB_LOG" >&2
  fi
fi

# ---------------------------------------------------------------------------------------------
# Report.
# ---------------------------------------------------------------------------------------------
python3 - "$JSONL" "$RB_OK" "${RB_WHY:-}" <<'EOF'
import json, sys

path, rb_ok, rb_why = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
rows = [json.loads(l) for l in open(path) if l.strip()]
by = {r.get("impl"): r for r in rows}

def num(r, k, fmt):
    v = r.get(k)
    return format(v, fmt) if isinstance(v, (int, float)) else "?"

print("| impl | texts | tokens | seconds | texts/s | tokens/s | peak RSS MB |")
print("|---|---:|---:|---:|---:|---:|---:|")
for r in rows:
    print(f"| {r.get('impl', '?')} | {num(r, 'texts', 'd')} | {num(r, 'tokens', 'd')} | {num(r, 'seconds', '.2f')} "
          f"| {num(r, 'chunks_per_s', '.1f')} | {num(r, 'tokens_per_s', '.0f')} | {num(r, 'peak_rss_mb', '.0f')} |")
if not rb_ok:
    print("| ragbox | FAILED | | | | | |")
if "sentence-transformers" not in by:
    print("| sentence-transformers | FAILED | | | | | |")
print()

st, rb = by.get("sentence-transformers"), by.get("ragbox")
if st and rb:
    try:
        print(f"ratio ragbox / sentence-transformers, tokens/s: {rb['tokens_per_s'] / st['tokens_per_s']:.2f}x")
    except (KeyError, TypeError, ZeroDivisionError):
        print("ratio: n/a (missing tokens_per_s)")
    for k in ("texts", "tokens"):
        if st.get(k) != rb.get(k):
            print(f"WARNING: {k} differ (sentence-transformers {st.get(k)}, ragbox {rb.get(k)}): "
                  "not the same input, the figures do not compare")
    if st.get("threads") != rb.get("threads") or st.get("batch_size") != rb.get("batch_size"):
        print("WARNING: threads or batch size differ between the two sides")
elif not rb_ok:
    print(f"ragbox side FAILED: {rb_why}")
    print("no ratio: only the sentence-transformers figure above is valid")
if st and "versions" in st:
    v = st["versions"]
    print(f"sentence-transformers {v.get('sentence_transformers')}, transformers {v.get('transformers')}, "
          f"torch {v.get('torch')}, {st.get('threads')} threads, batch {st.get('batch_size')}")
print(f"raw JSON lines: {path}")
EOF

if [[ "$ST_OK" != 1 || "$RB_OK" != 1 ]]; then
  exit 1
fi
