#!/usr/bin/env python3
# imma-error.py — the output error integer mma for K would add (issue 19 item 1), measured
# before building it: q staged as int8 per 32-channel block (q8_0's rounding, d = amax/127),
# K and V q4_0 (ggml's rounding), attention in float64 against the same with the f16 q.
# Prints per (head_dim, q scale) the median and worst relative RMS error of the output over
# 20 trials of 8 heads x 4096 tokens; qgen check accepts 2e-3 for f16 outputs
# (base/qtypes.c check_tol). Run: /usr/bin/python3 bench/imma-error.py
import numpy as np

rng = np.random.default_rng(1)


def q4_0(x):  # ggml q4_0 round trip: d = max / -8, q = min(15, trunc(x / d + 8.5))
    b = x.reshape(-1, 32)
    mx = b[np.arange(len(b)), np.abs(b).argmax(1)]
    d = (mx / -8).astype(np.float16).astype(np.float32)
    inv = np.where(mx != 0, -8 / np.where(mx != 0, mx, 1), 0)
    q = np.minimum(15, np.trunc(b * inv[:, None] + 8.5))
    return ((q - 8) * d[:, None]).reshape(x.shape)


def int8_blocks(x):  # per 32-channel block: d = amax / 127, q = round(x / d)
    b = x.reshape(-1, 32)
    d = np.abs(b).max(1) / 127
    return (np.round(b / np.where(d > 0, d, 1)[:, None]) * d[:, None]).reshape(x.shape)


def attend(q, k, v):
    s = q @ k.T / np.sqrt(q.shape[1])
    p = np.exp(s - s.max(1, keepdims=True))
    return (p / p.sum(1, keepdims=True)) @ v


print(f"{'head_dim':>8} {'q scale':>7} {'median':>8} {'worst':>8}")
for D in (64, 128, 256):
    for scale in (1.0, 3.0):
        errs = []
        for _ in range(20):
            q = (rng.standard_normal((8, D)) * scale).astype(np.float16).astype(np.float64)
            k = q4_0(rng.standard_normal((4096, D)).astype(np.float32)).astype(np.float64)
            v = q4_0(rng.standard_normal((4096, D)).astype(np.float32)).astype(np.float64)
            ref, out = attend(q, k, v), attend(int8_blocks(q), k, v)
            errs.append(np.sqrt(((out - ref) ** 2).mean() / (ref ** 2).mean()))
        print(f"{D:>8} {scale:>7} {np.median(errs):8.4f} {max(errs):8.4f}")
