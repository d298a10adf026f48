#!/usr/bin/env bash
# Side-by-side ingest: the SAME folder through a LangChain-style Python pipeline (BeautifulSoup ->
# RecursiveCharacterTextSplitter 1000/150 -> sentence-transformers all-MiniLM-L6-v2 -> Chroma) and
# through `ragbox ingest`, with the same thread count, so the two figures compare.
#
#   scripts/bench/ingest-baseline.sh --data DIR [--threads N] [--ragbox BIN] [--models-dir DIR]
#       [--limit-files N] [--ext LIST] [--python-only]
#
#   --data DIR        the folder to ingest (e.g. a tree printed by scripts/bench/fetch-corpora.sh)
#   --threads N       threads for both sides (torch / rayon); default: all cores
#   --ragbox BIN      the ragbox binary (default target/debug/ragbox)
#   --models-dir DIR  hub-cache models folder (default <repo>/models; scripts/setup/fetch-models.sh fills it)
#   --limit-files N   only the first N regular files in sorted path order, hard-linked (or copied)
#                     into a temporary folder that both sides then ingest
#   --ext LIST        only files with these extensions (comma-separated, e.g. html,htm), applied
#                     before --limit-files, same temporary-folder mechanism
#   --python-only     skip ragbox
#
# Runs: (a) scripts/bench/ingest-baseline.py; (b) `ragbox --data-dir D ingest DIR --json` with a fresh
# D; (c) the same command again on the unchanged folder (the incremental re-run). Each is timed as a
# whole process by GNU time (wall clock, peak RSS); index size is `du -sb` of Chroma's folder and of D.
#
# The Python side uses the pinned venv of scripts/bench/embed-baseline.sh (same folder, same base
# pins, read from that script) plus the pinned ingest packages below, installed with --no-deps on top;
# each script keeps its own stamp, so neither rebuilds the other's venv. PyPI is only contacted when
# the venv is built; the runs themselves are offline.
#
# Output: a markdown table on stdout, the raw JSON lines in ${OUT:-target/bench}/ingest-baseline.jsonl
# (ragbox's stderr in ingest-baseline.ragbox.log beside it). Exits non-zero if a side failed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

usage() {
  sed -n '2,28p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

DATA=""
THREADS="$(nproc)"
RAGBOX="$ROOT/target/debug/ragbox"
MODELS="$ROOT/models"
LIMIT_FILES=""
EXTS=""
PYTHON_ONLY=0

while [[ $# -gt 0 ]]; do
  case "$1" in
    --data) DATA="${2:?--data needs a value}"; shift 2 ;;
    --threads) THREADS="${2:?--threads needs a value}"; shift 2 ;;
    --ragbox) RAGBOX="${2:?--ragbox needs a value}"; shift 2 ;;
    --models-dir) MODELS="${2:?--models-dir needs a value}"; shift 2 ;;
    --limit-files) LIMIT_FILES="${2:?--limit-files needs a value}"; shift 2 ;;
    --ext) EXTS="${2:?--ext needs a value}"; shift 2 ;;
    --python-only) PYTHON_ONLY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done

die() { echo "error: $*" >&2; exit 2; }
log() { echo "[bench-ingest-baseline] $*" >&2; }

[[ -n "$DATA" ]] || die "--data DIR is required (the folder to ingest)"
[[ -d "$DATA" ]] || die "--data $DATA is not a folder"
DATA="$(cd "$DATA" && pwd)"
[[ "$THREADS" =~ ^[1-9][0-9]*$ ]] || die "--threads must be a positive integer"
[[ -z "$LIMIT_FILES" || "$LIMIT_FILES" =~ ^[1-9][0-9]*$ ]] || die "--limit-files must be a positive integer"
[[ -z "$EXTS" || "$EXTS" =~ ^[A-Za-z0-9]+(,[A-Za-z0-9]+)*$ ]] || die "--ext takes a comma-separated list like html,htm"

if [[ ! -x /usr/bin/time ]] || ! /usr/bin/time -v true >/dev/null 2>&1; then
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
    log "GNU time missing: apt-get install time"
    apt-get install -y -qq time >/dev/null || die "could not install GNU time (apt-get install time)"
  else
    die "GNU time (/usr/bin/time -v) is needed: apt-get install time"
  fi
fi

# ---------------------------------------------------------------------------------------------
# Pinned Python environment: the base set of scripts/bench/embed-baseline.sh (torch,
# sentence-transformers, transformers and their dependencies; read from that script so there is one
# list) plus the ingest packages: pip's resolution of langchain-text-splitters, chromadb and
# beautifulsoup4 on top of the base set (CPython 3.11, linux x86_64), every package pinned and
# installed with --no-deps so nothing floats.
# ---------------------------------------------------------------------------------------------
EMBED_SCRIPT="$ROOT/scripts/bench/embed-baseline.sh"
BASE_PINS="$(sed -n "/^PINS=\"\$(cat <<'EOF'\$/,/^EOF\$/p" "$EMBED_SCRIPT" | sed '1d;$d')"
[[ -n "$BASE_PINS" ]] || die "could not read the base pins from $EMBED_SCRIPT"

INGEST_PINS="$(cat <<'PINS_END'
langchain-text-splitters==1.1.3
chromadb==1.5.9
beautifulsoup4==4.15.0
aiohappyeyeballs==2.7.1
aiohttp==3.14.5
aiohttp-retry==2.9.1
aiosignal==1.4.0
attrs==26.1.0
bcrypt==5.0.0
build==1.6.1
certifi==2026.10.18
charset-normalizer==3.5.2
distro==1.9.0
durationpy==0.11
flatbuffers==25.12.19
frozenlist==1.8.0
googleapis-common-protos==1.76.0
grpcio==1.85.1
httpcore==1.0.9
httptools==0.9.0
httpx==0.28.1
importlib_resources==7.1.0
jsonpatch==1.47
jsonpointer==3.12
jsonschema==4.26.0
jsonschema-specifications==2025.9.1
kubernetes==37.0.2
langchain-core==1.7.2
langchain-protocol==0.0.20
langsmith==0.15.0
mmh3==5.3.1
multidict==7.2.1
oauthlib==4.0.1
onnxruntime==1.31.1
opentelemetry-api==1.45.2
opentelemetry-exporter-otlp-common==0.66b2
opentelemetry-exporter-otlp-proto-common==1.45.2
opentelemetry-exporter-otlp-proto-grpc==1.45.2
opentelemetry-proto==1.45.2
opentelemetry-sdk==1.45.2
opentelemetry-semantic-conventions==0.66b2
orjson==3.13.0
overrides==7.7.0
propcache==0.5.4
protobuf==7.36.2
pybase64==1.5.1
pydantic-settings==2.16.3
PyPika==0.51.1
pyproject_hooks==1.3.3
python-dateutil==4.0.0
python-dotenv==1.2.4
referencing==0.37.0
requests==2.34.2
requests-oauthlib==2.0.0
requests-toolbelt==1.0.0
rpds-py==2026.9.1
sniffio==1.3.1
soupsieve==4.1.2
tenacity==9.2.1
tzdata==2026.6
urllib3==2.8.0
uuid_utils==0.19.0
uvicorn==0.54.0
uvloop==0.23.0
watchfiles==1.3.0
websocket-client==1.9.2
websockets==17.4
xxhash==4.1.0
yarl==1.25.1
zstandard==0.25.0
PINS_END
)"

CACHE="${RAGBOX_CACHE_DIR:-$HOME/.cache/ragbox}"
VENV="$CACHE/venv-bench"
PY="$VENV/bin/python"
BASE_STAMP="$VENV/.ragbox-bench-pins"            # the stamp of bench-embed-baseline.sh, same content
INGEST_STAMP="$VENV/.ragbox-bench-ingest-pins"
PYTHON="${PYTHON:-python3}"

TMP_ALL=()
cleanup() {
  local d
  for d in "${TMP_ALL[@]}"; do
    [[ -n "$d" ]] && rm -rf -- "$d"
  done
}
trap cleanup EXIT

pip_install() {  # pip_install PINS
  local req
  req="$(mktemp)"
  TMP_ALL+=("$req")
  printf '%s\n' "$1" >"$req"
  "$PY" -m pip install --quiet --disable-pip-version-check --no-deps --only-binary=:all: -r "$req"
}

base_ok() {
  [[ -x "$PY" && -f "$BASE_STAMP" ]] && [[ "$(cat "$BASE_STAMP")" == "$BASE_PINS" ]] &&
    "$PY" -c 'import torch, sentence_transformers, transformers' >/dev/null 2>&1
}
ingest_ok() {
  [[ -f "$INGEST_STAMP" ]] && [[ "$(cat "$INGEST_STAMP")" == "$INGEST_PINS" ]] &&
    "$PY" -c 'import chromadb, bs4, langchain_text_splitters' >/dev/null 2>&1
}

if base_ok; then
  log "reusing venv $VENV"
else
  command -v "$PYTHON" >/dev/null || die "$PYTHON not found (needed to build the benchmark venv)"
  log "building venv $VENV (pinned torch/sentence-transformers/transformers from PyPI; ~6 GB, a few minutes)"
  rm -rf "$VENV"
  mkdir -p "$CACHE"
  "$PYTHON" -m venv "$VENV"
  pip_install "$BASE_PINS"
  "$PY" -c 'import torch, sentence_transformers, transformers' ||
    die "the venv at $VENV was installed but does not import torch/sentence-transformers"
  printf '%s' "$BASE_PINS" >"$BASE_STAMP"
fi
if ! ingest_ok; then
  log "installing the pinned ingest packages (langchain-text-splitters, chromadb, beautifulsoup4) into $VENV"
  pip_install "$INGEST_PINS"
  "$PY" -c 'import chromadb, bs4, langchain_text_splitters' ||
    die "the ingest packages were installed but do not import"
  printf '%s' "$INGEST_PINS" >"$INGEST_STAMP"
fi

# ---------------------------------------------------------------------------------------------
# Model (hub-cache layout, found the way scripts/bench/embed-baseline.sh finds it).
# ---------------------------------------------------------------------------------------------
REPO_DIR="$MODELS/models--sentence-transformers--all-MiniLM-L6-v2"
[[ -f "$REPO_DIR/refs/main" ]] ||
  die "all-MiniLM-L6-v2 not found under $MODELS (no $REPO_DIR/refs/main); run scripts/setup/fetch-models.sh"
MODEL_DIR="$REPO_DIR/snapshots/$(tr -d '[:space:]' <"$REPO_DIR/refs/main")"
for f in config.json tokenizer.json model.safetensors; do
  [[ -f "$MODEL_DIR/$f" ]] || die "missing $MODEL_DIR/$f; run scripts/setup/fetch-models.sh"
done

# ---------------------------------------------------------------------------------------------
# The input folder: DATA itself, or the selected files linked into a temporary folder.
# ---------------------------------------------------------------------------------------------
INPUT="$DATA"
if [[ -n "$LIMIT_FILES" || -n "$EXTS" ]]; then
  INPUT="$(mktemp -d "${TMPDIR:-/tmp}/ragbox-bench-input.XXXXXX")"
  TMP_ALL+=("$INPUT")
  python3 - "$DATA" "$INPUT" "${LIMIT_FILES:-0}" "$EXTS" <<'PY_END'
import os, shutil, stat, sys

src, dst, limit, exts = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
want = {"." + e.lower() for e in exts.split(",")} if exts else None
files = []
for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
    for name in filenames:
        p = os.path.join(dirpath, name)
        if not stat.S_ISREG(os.lstat(p).st_mode):
            continue
        if want is not None and os.path.splitext(name)[1].lower() not in want:
            continue
        files.append(os.path.relpath(p, src))
files.sort()
if limit:
    files = files[:limit]
if not files:
    sys.exit(f"no files selected in {src}")
copied = 0
for rel in files:
    target = os.path.join(dst, rel)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    try:
        os.link(os.path.join(src, rel), target)
    except OSError:
        shutil.copy2(os.path.join(src, rel), target)
        copied += 1
print(f"[bench-ingest-baseline] selected {len(files)} files into {dst}"
      + (f" ({copied} copied, not hard-linked)" if copied else ""), file=sys.stderr)
PY_END
fi

OUT_DIR="${OUT:-$ROOT/target/bench}"
mkdir -p "$OUT_DIR"
JSONL="$OUT_DIR/ingest-baseline.jsonl"
RB_LOG="$OUT_DIR/ingest-baseline.ragbox.log"
: >"$JSONL"
: >"$RB_LOG"

export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS" RAYON_NUM_THREADS="$THREADS"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 ANONYMIZED_TELEMETRY=False

# Last line of stdin that parses as a JSON object, or nothing.
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

# GNU time -v report FILE -> {"wall_s": .., "peak_rss_mb": ..}
time_json() {
  python3 - "$1" <<'PY_END'
import json, sys
wall = rss = None
for line in open(sys.argv[1], errors="replace"):
    line = line.strip()
    if line.startswith("Elapsed (wall clock) time"):
        parts = [float(x) for x in line.rsplit(" ", 1)[1].split(":")]
        wall = round(sum(v * 60 ** i for i, v in enumerate(reversed(parts))), 3)
    elif line.startswith("Maximum resident set size (kbytes):"):
        rss = round(int(line.rsplit(" ", 1)[1]) / 1024, 1)
print(json.dumps({"wall_s": wall, "peak_rss_mb": rss}))
PY_END
}

log "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); threads $THREADS; input $INPUT"

# (a) Python pipeline
PY_OK=1
PY_LINE=""
TIME_PY="$(mktemp)"
TMP_ALL+=("$TIME_PY")
log "python pipeline: running"
if py_out="$(/usr/bin/time -v -o "$TIME_PY" "$PY" "$ROOT/scripts/bench/ingest-baseline.py" --data "$INPUT" \
      --model-dir "$MODEL_DIR" --threads "$THREADS")"; then
  PY_LINE="$(printf '%s\n' "$py_out" | last_json)"
fi
if [[ -n "$PY_LINE" ]]; then
  # The in-process figures keep their names; the whole-process ones (measured the same way as for
  # ragbox) are added as process_wall_s / process_peak_rss_mb.
  PY_LINE="$(python3 -c '
import json, sys
r = json.loads(sys.argv[1]); t = json.loads(sys.argv[2])
r["process_wall_s"], r["process_peak_rss_mb"] = t["wall_s"], t["peak_rss_mb"]
print(json.dumps(r))' "$PY_LINE" "$(time_json "$TIME_PY")")"
  printf '%s\n' "$PY_LINE" >>"$JSONL"
else
  PY_OK=0
  log "python side FAILED (see the messages above)"
fi

# (b) + (c) ragbox: a fresh data dir, then the unchanged re-run into the same one
RB_OK=1
RB_WHY=""
if [[ "$PYTHON_ONLY" == 1 ]]; then
  RB_OK=skip
elif [[ ! -x "$RAGBOX" ]]; then
  RB_OK=0
  RB_WHY="binary not found or not executable: $RAGBOX (build it, or pass --ragbox BIN)"
else
  RB_DATA="$(mktemp -d "${TMPDIR:-/tmp}/ragbox-bench-data.XXXXXX")"
  TMP_ALL+=("$RB_DATA")
  for run in first rerun; do
    TIME_RB="$(mktemp)"
    TMP_ALL+=("$TIME_RB")
    log "ragbox ($run): $RAGBOX --data-dir $RB_DATA ingest $INPUT --json (stderr to $RB_LOG)"
    echo "=== $run" >>"$RB_LOG"
    line=""
    if rb_out="$(/usr/bin/time -v -o "$TIME_RB" "$RAGBOX" --data-dir "$RB_DATA" --models-dir "$MODELS" \
          ingest "$INPUT" --json 2>>"$RB_LOG")"; then
      line="$(printf '%s\n' "$rb_out" | last_json)"
      [[ -n "$line" ]] || RB_WHY="'ragbox ingest --json' ($run) printed no JSON line"
    else
      RB_WHY="'ragbox ingest' ($run) exited with status $?"
    fi
    if [[ -z "$line" ]]; then
      RB_OK=0
      break
    fi
    # ragbox's own summary goes under "summary"; the measured figures are top-level.
    python3 -c '
import json, sys
r = json.loads(sys.argv[1])
r.update(impl="ragbox", run=sys.argv[2], index_bytes=int(sys.argv[3]), threads=int(sys.argv[4]),
         summary=json.loads(sys.argv[5]))
print(json.dumps(r))' "$(time_json "$TIME_RB")" "$run" "$(du -sb "$RB_DATA" | cut -f1)" "$THREADS" "$line" >>"$JSONL"
  done
fi
if [[ "$RB_OK" == 0 ]]; then
  log "ragbox side FAILED: $RB_WHY"
  if [[ -s "$RB_LOG" ]]; then
    log "last lines of $RB_LOG:"
    tail -n 20 "$RB_LOG" >&2
  fi
fi

# ---------------------------------------------------------------------------------------------
# Report.
# ---------------------------------------------------------------------------------------------
python3 - "$JSONL" "$RB_OK" "${RB_WHY:-}" <<'PY_END'
import json, sys

path, rb_ok, rb_why = sys.argv[1], sys.argv[2], sys.argv[3]
rows = [json.loads(l) for l in open(path) if l.strip()]
py = next((r for r in rows if r.get("impl") != "ragbox"), None)
rb = next((r for r in rows if r.get("impl") == "ragbox" and r.get("run") == "first"), None)
rb2 = next((r for r in rows if r.get("impl") == "ragbox" and r.get("run") == "rerun"), None)

FILE_KEYS = ("files", "files_indexed", "documents", "docs", "files_added", "added")
CHUNK_KEYS = ("chunks", "chunks_indexed", "chunks_added", "children")


def pick(d, keys):
    """First numeric value among keys, at the top level of d or one level down."""
    if not isinstance(d, dict):
        return None
    for k in keys:
        v = d.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return v
    for v in d.values():
        if isinstance(v, dict):
            got = pick(v, keys)
            if got is not None:
                return got
    return None


def f(v, fmt):
    return format(v, fmt) if isinstance(v, (int, float)) and not isinstance(v, bool) else "?"


def rate(n, s):
    ok = isinstance(n, (int, float)) and isinstance(s, (int, float)) and s > 0
    return n / s if ok else None


def mb(b):
    return b / 1e6 if isinstance(b, (int, float)) else None


print("| impl | files | chunks | wall s | files/s | chunks/s | peak RSS MB | index MB | re-run s | first/re-run |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
if py:
    wall = py.get("process_wall_s") or py.get("wall_s")
    rss = py.get("process_peak_rss_mb") or py.get("peak_rss_mb")
    print(f"| python: bs4 + langchain splitter + sentence-transformers + chroma | {f(py.get('files'), 'd')} "
          f"| {f(py.get('chunks'), 'd')} | {f(wall, '.2f')} | {f(rate(py.get('files'), wall), '.2f')} "
          f"| {f(rate(py.get('chunks'), wall), '.1f')} | {f(rss, '.0f')} | {f(mb(py.get('index_bytes')), '.1f')} "
          f"| n/a | n/a |")
else:
    print("| python | FAILED | | | | | | | | |")
if rb:
    s = rb.get("summary", {})
    files, chunks = pick(s, FILE_KEYS), pick(s, CHUNK_KEYS)
    wall, wall2 = rb.get("wall_s"), (rb2 or {}).get("wall_s")
    ratio = rate(wall, wall2)
    print(f"| ragbox | {f(files, 'd')} | {f(chunks, 'd')} | {f(wall, '.2f')} | {f(rate(files, wall), '.2f')} "
          f"| {f(rate(chunks, wall), '.1f')} | {f(rb.get('peak_rss_mb'), '.0f')} | {f(mb(rb.get('index_bytes')), '.1f')} "
          f"| {f(wall2, '.2f')} | {f(ratio, '.1f')}x |")
elif rb_ok == "0":
    print("| ragbox | FAILED | | | | | | | | |")
print()
if py:
    st = py.get("seconds", {})
    print("python stages, s: " + ", ".join(f"{k} {v:.2f}" for k, v in st.items())
          + f"; {py.get('chunks_truncated')} of {py.get('chunks')} chunks longer than {py.get('max_tokens')} tokens "
          f"(truncated before embedding); skipped files: {py.get('files_skipped') or 'none'}")
    v = py.get("versions", {})
    print("versions: " + ", ".join(f"{k} {val}" for k, val in v.items()) + f"; {py.get('threads')} threads")
if rb_ok == "0":
    print(f"ragbox side FAILED: {rb_why}; only the python row above is valid")
elif rb_ok == "skip":
    print("ragbox skipped (--python-only)")
if rb and py:
    files = pick(rb.get("summary", {}), FILE_KEYS)
    if files is not None and files != py.get("files"):
        print(f"NOTE: file counts differ (python {py.get('files')}, ragbox {files}): the two sides accept "
              "different formats (the python side skips .pdf and reads .eml/.mbox as raw text); "
              "compare on HTML/text-only folders")
print("wall s and peak RSS are whole-process figures from GNU time for both sides (python includes "
      "interpreter start, imports and model load; ragbox its start-up and model load)")
print(f"raw JSON lines: {path}")
PY_END

if [[ "$PY_OK" != 1 || "$RB_OK" == 0 ]]; then
  exit 1
fi
