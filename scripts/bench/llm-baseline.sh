#!/usr/bin/env bash
# Side-by-side LLM speed: the SAME GGUF file and the SAME messages through ragbox (mistralrs) and
# through llama.cpp (llama-cpp-python, built from source by pip), in one run, on the same number
# of threads: prompt processing (tokens/s at ~512 prompt tokens) and generation (tokens/s over
# 128 tokens), greedy.
#
#   scripts/bench/llm-baseline.sh [--model NAME] [--threads N] [--runs N] [--ragbox BIN]
#
# llama.cpp lives in a venv outside the clone, ${RAGBOX_CACHE_DIR:-$HOME/.cache/ragbox}/llama-venv,
# built on first use (pip compiles llama.cpp: ~10 minutes on 2 cores); never a ragbox dependency.
# LLAMA_VENV=DIR uses another venv: on a CPU with AMX, where the default -march=native build
# crashed, one built with CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
# -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX_VNNI=ON -DGGML_AMX_INT8=OFF" and
# `pip install --no-cache-dir` (pip's cache otherwise hands back the AMX build; docs/BENCHMARKS.md).
# llama.cpp maps the GGUF and decodes up to 15% faster from a freshly written file than from one
# read back into the page cache over time (docs/BENCHMARKS.md, "On a GPU"), so it gets a fresh copy
# (under $CACHE, removed afterwards): the comparison is with llama.cpp at its best.
# Output: a markdown table on stdout; the two JSON lines in ${OUT:-target/bench}/llm-baseline.jsonl.
# Figures compare only when taken side by side on a quiet machine.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${RAGBOX_CACHE_DIR:-$HOME/.cache/ragbox}"
MODEL="qwen2.5-coder-0.5b-instruct"
THREADS="$(nproc)"
RUNS=3
RAGBOX="${CARGO_TARGET_DIR:-$CACHE/target}/debug/ragbox"
LLAMA_CPP_PYTHON="llama-cpp-python==0.3.36"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --ragbox) RAGBOX="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument: $1" >&2; exit 2 ;;
  esac
done
[[ -x "$RAGBOX" ]] || { echo "error: no ragbox binary at $RAGBOX (cargo build, or --ragbox BIN)" >&2; exit 2; }
VENV="${LLAMA_VENV:-$CACHE/llama-venv}"
if ! "$VENV/bin/python" -c 'import llama_cpp' 2>/dev/null; then
  echo "[bench-llm-baseline] building $LLAMA_CPP_PYTHON in $VENV (once)" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "$LLAMA_CPP_PYTHON"
fi
OUT="${OUT:-$ROOT/target/bench}"
mkdir -p "$OUT"
FILE="$("$RAGBOX" models path "$MODEL")"
echo "[bench-llm-baseline] ragbox bench llm ($MODEL, $THREADS threads)" >&2
RAYON_NUM_THREADS="$THREADS" "$RAGBOX" bench llm --model "$MODEL" --runs "$RUNS" --json > "$OUT/llm-ragbox.json"
mkdir -p "$CACHE"
FRESH="$(mktemp -p "$CACHE" llama-bench-XXXXXX.gguf)"
trap 'rm -f "$FRESH"' EXIT
cp "$FILE" "$FRESH"
echo "[bench-llm-baseline] llama.cpp on a fresh copy of $FILE" >&2
"$VENV/bin/python" "$ROOT/scripts/bench/llm-llamacpp.py" --model "$FRESH" --threads "$THREADS" --runs "$RUNS" \
  < "$OUT/llm-ragbox.json" > "$OUT/llm-llamacpp.json"
cat "$OUT/llm-ragbox.json" "$OUT/llm-llamacpp.json" > "$OUT/llm-baseline.jsonl"
python3 - "$OUT/llm-ragbox.json" "$OUT/llm-llamacpp.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); l = json.load(open(sys.argv[2]))
print(f"| {r['model']}, {r['threads']} threads | ragbox (mistralrs) | {l['engine']} | ratio |")
print("|---|---|---|---|")
print(f"| prompt processing, tokens/s ({r['prompt_tokens']} / {l['prompt_tokens']} tokens) | {r['prompt_tokens_per_s']:.1f} | {l['prompt_tokens_per_s']:.1f} | {r['prompt_tokens_per_s']/l['prompt_tokens_per_s']:.2f}x |")
print(f"| generation, tokens/s ({r['gen_tokens']} / {l['gen_tokens']} tokens) | {r['gen_tokens_per_s']:.1f} | {l['gen_tokens_per_s']:.1f} | {r['gen_tokens_per_s']/l['gen_tokens_per_s']:.2f}x |")
print(f"| load, s | {r['load_s']:.1f} | {l['load_s']:.1f} | |")
PY
