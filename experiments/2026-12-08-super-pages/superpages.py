"""superpages.py — E94: how much of a page-level Quest estimate could a coarser bound level
(super-pages of S pages) skip without changing the selection, on a real model's keys?

CPU only (qgen.models' NumPy runner). Prefills SmolLM2-135M with ~N tokens of real text (the
GPL-3, the LGPL-2.1, the MPL-1.1 and the GFDL-1.3 from Debian's common-licenses, one after
another), decodes T tokens (T - 1 decode steps: the first token is the prefill's) through the runner's exact attention while recording each
step's queries, and for every (layer, KV head, step):
  u_p = max over the group's query heads of sum_d max(q_d min_pd, q_d max_pd)  (Quest, 64-token pages)
  U_s = the same over a super-page's min and max (S pages): U_s >= every u_p inside it
  k   = ceil(coverage x pages), tau = the k-th largest u_p
Reported per coverage:
  ideal   the share of super-pages with U_s < tau (skippable if tau were known: the ceiling)
  2-phase score the super-pages' pages in descending U_s until k pages are scored; their k-th
          largest u_p is a lower bound of tau; skip every later super-page with U_s below it
          (exact: the top k is unchanged). The share of page scores it skips.
The last, partial super-page and the sink/recent pages are always scored (counted as scored).
    PYTHONPATH=<gguf dir>:python python3 experiments/2026-12-08-super-pages/superpages.py [N] [T]
"""
import math
import sys
import time

import numpy as np

from qgen import models

N = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
T = int(sys.argv[2]) if len(sys.argv) > 2 else 5
BLOCK, SPS = 64, (4, 8, 16)
COVER = (0.25, 0.0625)
FILES = ["GPL-3", "LGPL-2.1", "MPL-1.1", "GFDL-1.3"]

m = models.load("smollm2")
c, tok = m.config, m.tokenizer
text = "\n\n".join(open("/usr/share/common-licenses/" + f).read() for f in FILES)
ids = tok.encode(text)[: min(N, c.context_length - T - 1)]
t0 = time.time()
state = m.prefill(ids)
print(f"smollm2: {len(ids)} tokens prefilled in {time.time() - t0:.0f} s; {c.n_layer} layers, "
      f"{c.n_head} heads, {c.n_head_kv} KV heads, head_dim {c.head_dim}", flush=True)


class Record(models.ExactAttention):
    """The runner's exact attention, keeping every step's queries [n_head, D]."""

    def bind(self, model, states, max_new, layers=None):
        super().bind(model, states, max_new, layers)
        self.q = {i: [] for i in range(model.config.n_layer)}

    def step(self, layer, q, k, v):
        self.q[layer].append(np.array(q[0], dtype=np.float64))
        return super().step(layer, q, k, v)


rec = Record()
r = m.generate(state, T, attention=rec, stop=False)
print(f"decoded {len(r.ids)} tokens: {r.text!r}", flush=True)

G = c.n_head // c.n_head_kv
P = len(ids) // BLOCK  # whole pages of the prompt (the partial last page is always attended)
res = {(s, cv): [0.0, 0.0, 0] for s in SPS for cv in COVER}
for layer in range(c.n_layer):
    K = np.asarray(state.k[layer], dtype=np.float64)[: P * BLOCK]  # [P*64, Hkv, D]
    pg = K.reshape(P, BLOCK, c.n_head_kv, c.head_dim)
    pmin, pmax = pg.min(1), pg.max(1)  # [P, Hkv, D]
    for q in rec.q[layer]:
        qg = q.reshape(c.n_head_kv, G, c.head_dim)
        for h in range(c.n_head_kv):
            def bound(mn, mx):  # [X, D] -> [X]: max over the group of the Quest bound
                return np.maximum(qg[h][:, None, :] * mn[None], qg[h][:, None, :] * mx[None]).sum(-1).max(0)
            u = bound(pmin[:, h], pmax[:, h])
            for S in SPS:
                ns = P // S  # whole super-pages; the rest is always scored
                if ns == 0:
                    continue
                smin = pmin[: ns * S, h].reshape(ns, S, c.head_dim).min(1)
                smax = pmax[: ns * S, h].reshape(ns, S, c.head_dim).max(1)
                U = bound(smin, smax)
                us = u[: ns * S].reshape(ns, S)
                assert (U[:, None] >= us - 1e-9).all(), "a super-page bound below a page's"
                for cv in COVER:
                    k = max(1, math.ceil(cv * P))
                    tau = np.sort(u)[-k]
                    ideal = (U < tau).mean()
                    order = np.argsort(-U, kind="stable")
                    scored = list(u[ns * S:])  # the tail's pages
                    n_first = 0
                    while len(scored) < k and n_first < ns:
                        scored.extend(us[order[n_first]])
                        n_first += 1
                    lb = np.sort(scored)[-k] if len(scored) >= k else -np.inf
                    skip = sum(S for i in order[n_first:] if U[i] < lb)
                    e = res[(S, cv)]
                    e[0] += ideal
                    e[1] += skip / P
                    e[2] += 1
print(f"{P} whole pages of {BLOCK} tokens; {c.n_layer} layers x {c.n_head_kv} KV heads x {T - 1} decode steps a cell")
print("| super-page | coverage | super-pages skippable with tau known | page scores skipped (2-phase, exact) |")
print("|--:|--:|--:|--:|")
for (S, cv), (a, b, n) in res.items():
    if n == 0:
        continue
    print(f"| {S} pages ({S * BLOCK} tokens) | {cv * 100:g} % | {100 * a / n:.1f} % | {100 * b / n:.1f} % |")
