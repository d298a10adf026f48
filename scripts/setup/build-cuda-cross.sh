#!/usr/bin/env bash
# Builds ragbox with `--features cuda` (the encoders on an NVIDIA GPU; the local LLM
# left out: `--no-default-features`) on a machine with no CUDA toolkit and no GPU, for a GPU box
# that has the driver and CUDA 13 libraries but no Rust toolchain (docs/BENCHMARKS.md, "On a GPU").
#
#   scripts/setup/build-cuda-cross.sh [COMPUTE_CAP]     # default 90 (H100/H200); 80 for A100, 89 for L4
#
# nvcc 13.0 comes from NVIDIA's PyPI wheels (nvidia-cuda-nvcc, -crt, nvvm, cuda-runtime, cccl:
# ~105 MB) unpacked under ${RAGBOX_CACHE_DIR:-~/.cache/ragbox}/cuda-cross. cudarc links libcuda,
# libnvrtc, libcurand, libcublas and libcublasLt by name; this machine has none, so the link goes
# against stubs generated from cudarc's own bindings (every function it declares, with the real
# library's soname) and the binary uses the GPU box's real libraries at run time. Output:
# $CACHE/cuda-cross/target/debug/ragbox. On the GPU box:
#   LD_LIBRARY_PATH=/usr/local/cuda/lib64 ragbox --device cuda doctor
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CAP="${1:-90}"
CACHE="${RAGBOX_CACHE_DIR:-$HOME/.cache/ragbox}"
D="$CACHE/cuda-cross"
TK="$D/toolkit"
CUDARC="$(ls -d ~/.cargo/registry/src/*/cudarc-0.19.10/src 2>/dev/null | head -1)"
[[ -n "$CUDARC" ]] || { echo "error: cudarc 0.19.10's source is not in ~/.cargo/registry (run cargo fetch first)" >&2; exit 2; }

if [[ ! -x "$TK/bin/nvcc" ]]; then
  mkdir -p "$D/wheels" "$D/py"
  python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_27_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --python-version 3.11 -d "$D/wheels" \
    nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 \
    nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85
  for w in "$D"/wheels/*.whl; do unzip -q -o "$w" -d "$D/py"; done
  ln -sfn "$D/py/nvidia/cu13" "$TK"
  ln -sfn lib "$TK/lib64"
fi

# Link-time stubs: one function per name in cudarc's `extern "C"` blocks, trapping if ever called.
S="$D/stubs"
mkdir -p "$S/src"
for spec in driver:cuda:libcuda.so.1 nvrtc:nvrtc:libnvrtc.so.13 curand:curand:libcurand.so.10 \
            cublas:cublas:libcublas.so.13 cublaslt:cublasLt:libcublasLt.so.13; do
  IFS=: read -r module lib soname <<< "$spec"
  grep -A2 'extern "C" {' "$CUDARC/$module/sys/mod.rs" | grep -oP '^\s+(pub )?fn \K\w+(?=\()' | sort -u |
    sed 's/.*/void &(void) { __builtin_trap(); }/' > "$S/src/$lib.c"
  gcc -shared -fPIC -nostdlib -Wl,-soname,"$soname" -o "$S/$soname" "$S/src/$lib.c"
  ln -sfn "$soname" "$S/lib$lib.so"
done
ln -sfn "$TK/lib/libcudart.so.13" "$S/libcudart.so"
ln -sfn "$S" "$TK/lib/stubs"  # where cudarc's build script looks for them

. "$ROOT/scripts/setup/build-env.sh"
export PATH="$TK/bin:$PATH" NVCC="$TK/bin/nvcc" CUDA_ROOT="$TK" CUDA_HOME="$TK" CUDA_PATH="$TK"
export CUDARC_CUDA_VERSION=13000 CUDA_COMPUTE_CAP="$CAP" CUDAFORGE_THREADS="$(nproc)"
export LIBRARY_PATH="$S:$TK/lib${LIBRARY_PATH:+:$LIBRARY_PATH}" CARGO_TARGET_DIR="$D/target"
cd "$ROOT"
cargo build --offline --locked --no-default-features --features cuda --bin ragbox
echo "$CARGO_TARGET_DIR/debug/ragbox (CUDA, compute capability $CAP)"
