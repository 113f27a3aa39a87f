"""models_cpu.py — the timings docs/real-models.md reports for qgen.models on this machine:
load, prefill of N-token prompts, and greedy decode in tokens/s with the runner's exact
attention and with qgen (CPU reference executor) in every full-attention layer.

    QGEN_LIBRARY=build/libqgen.so PYTHONPATH=python:build/pylib python3 bench/models_cpu.py smollm2 2048 8192
"""
import sys
import time

import numpy as np

from qgen import models


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "smollm2"
    lengths = [int(x) for x in sys.argv[2:]] or [2048]
    t = time.perf_counter()
    m = models.load(name)
    print(f"{name}: load {time.perf_counter() - t:.1f} s; {m.config.summary()}")
    rng = np.random.default_rng(0)
    words = m.tokenizer.encode("the river carries sand to the sea and farmers plant wheat in the valley " * 4)
    for n in lengths:
        ids = [int(x) for x in rng.choice(words, n)]
        t = time.perf_counter()
        st = m.prefill(ids)
        pre = time.perf_counter() - t
        row = [f"n={n}: prefill {pre:.1f} s ({n / pre:.0f} tokens/s)"]
        for label, attn in (("exact", None),
                            ("qgen dense", models.QgenAttention(m, sparse=False)),
                            ("qgen 25% two-stage", models.QgenAttention(m, sparse={"coverage": 0.25,
                                                                                    "rescore": {"candidates": 8}}))):
            r = m.generate(st, 17, attention=attn, stop=False)
            r = m.generate(st, 17, attention=attn, stop=False)  # the second: caches made, pages warm
            row.append(f"{label} {r.steps / (r.seconds - r.extra['bind_seconds']):.1f} tok/s "
                       f"(bind {r.extra['bind_seconds']:.2f} s)")
        print("  " + "; ".join(row), flush=True)


if __name__ == "__main__":
    main()
