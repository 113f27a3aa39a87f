#!/usr/bin/env bash
# Device call of NOTES 70 (estimate: two tiles of 16 pages a warp a round over 8-bit rows, at
# three CTAs an SM; the tree = fad3f27 + est-tiles.patch, rebuilt after the revert from the same
# edits without their comments):
# the same-call A/B of fad3f27 (.carry/qgen-head, its build's qgen) against
# the tree (build-dev), sparse 25 % and 6.25 %, 128K and 1M, B1, two rounds, on qwen3-4b
# (f16 cache, 8-bit bounds), its q4_0 variant, and the f16-bounds twin of
# tests/gpu/bounds-i8.lua (whose estimate should not move); then qwen3-4b's check,
# compute-sanitizer memcheck of its q4_0 variant, and tests/gpu-run.sh's quick specs and paths.
# (it ran with bench/ab-check.sh's lines inline)
bash bench/ab-check.sh .carry/qgen-head "f16i8:specs/qwen3-4b.lua:qwen3-4b q4_0i8:specs/qwen3-4b.lua:qwen3-4b-q4_0 f16f16:tests/gpu/bounds-i8.lua:qwen3-4b-f16-bounds-f16" "specs paths"
