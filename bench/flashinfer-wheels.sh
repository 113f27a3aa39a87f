#!/usr/bin/env bash
# flashinfer-wheels.sh — FlashInfer, the benchmark's serving-engine peer (bench/peers.py), for a
# GPU machine without network: fetch its pinned wheels here, install them there.
#   bash bench/flashinfer-wheels.sh fetch DIR     # with network: the wheels for CPython 3.12, x86_64
#   bash bench/flashinfer-wheels.sh install DIR   # on the GPU machine, from DIR alone
# FlashInfer 0.5.3 is a wheel of JIT sources (7 MB; its newest wheels are 60-100 MB, more than a
# device call carries); its kernels compile on first use with the machine's nvcc and ninja,
# 20-30 s a module. Only what `import flashinfer` and its paged decode need is listed (11 MB in
# all): its declared cutlass-dsl (~92 MB a CUDA flavour) and cudnn-frontend serve other kernels,
# so installs are --no-deps and `pip check` names those two as missing. torch, jinja2 and
# filelock come with the machine's torch.
set -euo pipefail
pins="flashinfer-python==0.5.3 apache-tvm-ffi==0.1.15.post2 packaging==26.4 nvidia-ml-py==13.615.71
requests==2.34.2 urllib3==2.8.0 idna==3.21 certifi==2026.10.19.post1 charset-normalizer==3.5.3"
mode=${1:-}
dir=${2:-}
if [ -z "$dir" ] || { [ "$mode" != fetch ] && [ "$mode" != install ]; }; then
  echo "usage: bash bench/flashinfer-wheels.sh fetch|install DIR" >&2
  exit 2
fi
if [ "$mode" = fetch ]; then
  mkdir -p "$dir"
  # shellcheck disable=SC2086
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d "$dir" $pins
  du -sh "$dir"
else
  # shellcheck disable=SC2086
  python3 -m pip install -q --no-index --no-deps --find-links "$dir" $pins
  python3 -c "import flashinfer; print('flashinfer', flashinfer.__version__)"
fi
