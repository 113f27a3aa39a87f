#!/usr/bin/env bash
# Device call of NOTES 72 (estimate counts the first digit in shared memory, flushed once a
# CTA): the same-call A/B of fad3f27's qgen (.carry/qgen-head; its kernels are
# 2437064's) against the tree (build-dev = c2d18cb + est-shist.patch), as est-tiles-h200's, then qwen3-4b's check,
# compute-sanitizer memcheck of its q4_0 variant and tests/gpu-run.sh's quick specs and paths parts.
# (it ran with bench/ab-check.sh's lines inline)
bash bench/ab-check.sh .carry/qgen-head "f16i8:specs/qwen3-4b.lua:qwen3-4b q4_0i8:specs/qwen3-4b.lua:qwen3-4b-q4_0" "specs paths"
