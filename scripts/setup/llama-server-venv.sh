#!/usr/bin/env bash
# llama.cpp's OpenAI-compatible server (llama-cpp-python[server], pinned), built from source by pip
# into a venv OUTSIDE the clone, once: ${LLAMA_SERVER_VENV:-${RAGBOX_CACHE_DIR:-$HOME/.cache/ragbox}/llama-server-venv}.
# It is what the inference-server tests (tests/integration/inference_server.rs) run against:
# never a ragbox dependency. (scripts/bench/llm-baseline.sh keeps its own -march=native build
# for speed comparisons, in llama-venv.)
#
#   scripts/setup/llama-server-venv.sh        # prints the venv's path; builds it first if missing
#
# CPU-only and portable: GGML_NATIVE=OFF with AVX2/FMA/F16C (the x86-64-v3 baseline ragbox itself
# needs), no AVX-512 and no AMX, whose -march=native builds crashed on some CPUs (docs/BENCHMARKS.md).
# Text only: the multimodal library (mtmd, llava), which the package imports only for image chat
# formats, is not built. Building compiles llama.cpp: a few minutes on 2 cores, which
# scripts/test.sh overlaps with the cargo build (docs/BENCHMARKS.md, "First run").
set -euo pipefail
CACHE="${RAGBOX_CACHE_DIR:-$HOME/.cache/ragbox}"
VENV="${LLAMA_SERVER_VENV:-$CACHE/llama-server-venv}"
PACKAGE="llama-cpp-python[server]==0.3.36"
if "$VENV/bin/python" -c 'import llama_cpp.server.app' 2>/dev/null; then
  echo "$VENV"
  exit 0
fi
echo "[llama-server-venv] building $PACKAGE in $VENV (once, a few minutes on 2 cores)" >&2
mkdir -p "$(dirname "$VENV")"
python3 -m venv "$VENV"
CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DLLAMA_CURL=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_MTMD=OFF" \
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
  "$VENV/bin/pip" install -q --no-cache-dir "$PACKAGE" >&2
"$VENV/bin/python" -c 'import llama_cpp.server.app' >&2
echo "$VENV"
