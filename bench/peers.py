#!/usr/bin/env python3
"""peers.py — the decode step a user would run today, timed like `qgen bench` times ours.

For every (context, batch): PyTorch scaled_dot_product_attention with the cuDNN and the
flash backends over a dense f16 cache ([B, n_kv, ctx, D], enable_gqa), and a plain PyTorch
Quest at each coverage < 1 (per-page key min/max kept beside the cache, upper bound per
page, max over the query group, top-k pages, gather, SDPA). Each is captured in a CUDA graph per
cache copy and replayed (CUDA events around each replay after warm-up, median of --runs),
and also timed eagerly; enough cache copies are rotated that one pass is >= 4x L2.

FlashInfer's paged decode (BatchDecodeWithPagedKVCacheWrapper, the kernel serving engines
call), where it imports: over a paged cache of the same shape (pages of --block tokens, HND)
with f16 and with e4m3 K/V, dense, and at each coverage < 1 over that many pages of each
sequence (the last one always among them). Its page lists are per sequence, shared by the KV
heads, where qgen's are per KV head: at equal page counts both read the same bytes, so the
comparison is the attend kernel's at equal bytes, not a selection's. Each cell takes the faster
of its two decode kernels for grouped heads (the CUDA-core default and use_tensor_cores=True;
both times are in the row). Its kernels are compiled
by its own JIT on first use (nvcc and ninja on the GPU machine); bench/flashinfer-wheels.sh
fetches the pinned wheels for a machine without network.

--tokens T,.. also times SDPA over a verify step of T query tokens a sequence (the last T of
the cache, causal among themselves: a lower-right causal mask), rows with "tokens": T, the
peer of `qgen bench --tokens`.

  python3 bench/peers.py --ctx 16384,131072 --batch 1 --coverage 1,0.25 --json peers.json
"""
import argparse
import json
import math
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

try:
    import flashinfer
    FLASHINFER = None
except Exception as e:  # not installed, or its import failed: the columns stay empty
    flashinfer = None
    FLASHINFER = f"{type(e).__name__}: {e}"


def timed(fn, inputs, runs, warmup):
    """Median µs of fn over rotated inputs, replayed from one CUDA graph per input (as
    `qgen bench` times our step), and eagerly (host launch latency included)."""
    def median_of(call):
        for i in range(warmup):
            call(i)
        ts = []
        for i in range(runs):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            call(i)
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b) * 1e3)
        return statistics.median(ts)
    eager = median_of(lambda i: fn(*inputs[i % len(inputs)]))
    graphs = []
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for inp in inputs:  # warm up on the side stream before capture
            fn(*inp)
    torch.cuda.current_stream().wait_stream(s)
    for inp in inputs:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn(*inp)
        graphs.append(g)
    replay = median_of(lambda i: graphs[i % len(graphs)].replay())
    return replay, eager


def flashinfer_rows(q, B, C, HK, D, BS, R, covs, runs, warmup):
    """FlashInfer's paged decode over R rotated paged caches [pages, 2, HK, BS, D] of f16
    and of e4m3: {coverage: {"fi_f16_us": .., "fi_e4m3_us": .., ..._eager_us}}, coverage 1
    the dense step. q is [B, H, 1, D] f16. Its decode has two kernels for a group of query
    heads (its CUDA-core one, the default, and use_tensor_cores=True, which it advises for
    larger groups): both are timed (..._cuda_us, ..._tc_us) and fi_*_us is the faster, so the
    peer is FlashInfer at its best on the shape. A kernel that refuses the shape (its CUDA-core
    one raised at every cell of a group of 5) leaves its own column out; only if both refuse
    does the cell lose FlashInfer."""
    dev = q.device
    H = q.shape[1]
    npg = (C + BS - 1) // BS
    last = C - (npg - 1) * BS
    qf = q.view(B, H, D)
    out = {}
    ws = torch.zeros(256 << 20, dtype=torch.uint8, device=dev)
    for dt, col in ((torch.float16, "fi_f16_us"), (torch.float8_e4m3fn, "fi_e4m3_us")):
        caches = [torch.randn(B * npg, 2, HK, BS, D, device=dev, dtype=torch.float16).to(dt) for _ in range(R)]
        for cov in covs:
            kp = npg if cov >= 1 else max(1, math.ceil(cov * npg))
            rows = []
            for b in range(B):  # kp - 1 pages drawn from the sequence's others, then its last
                pick = torch.randperm(npg - 1, device=dev)[:kp - 1].sort().values
                rows.append(torch.cat([pick, torch.tensor([npg - 1], device=dev)]) + b * npg)
            indices = torch.cat(rows).to(torch.int32)
            indptr = torch.arange(B + 1, device=dev, dtype=torch.int32) * kp
            lastlen = torch.full((B,), last, device=dev, dtype=torch.int32)
            best, why = None, []
            for tc in (False, True):
                kcol = col.replace("_us", "_tc_us" if tc else "_cuda_us")
                try:
                    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                        ws, "HND", use_cuda_graph=True, use_tensor_cores=tc, paged_kv_indptr_buffer=indptr.clone(),
                        paged_kv_indices_buffer=indices.clone(), paged_kv_last_page_len_buffer=lastlen.clone())
                    w.plan(indptr, indices, lastlen, H, HK, D, BS, q_data_type=torch.float16, kv_data_type=dt)
                    o = torch.empty_like(qf)
                    us, eager = timed(lambda c: w.run(qf, c, out=o), [(c,) for c in caches], runs, warmup)
                except RuntimeError as e:  # one kernel may refuse a shape the other takes (a group size)
                    why.append(f"{kcol}: {short(e)}")
                    continue
                out.setdefault(cov, {})[kcol] = us
                if best is None or us < best[0]:
                    best = (us, eager)
            if best is None:
                raise RuntimeError("; ".join(why))
            for w_ in why:  # said once a shape: the other kernel's time stands alone in the column
                if w_ not in REFUSED:
                    REFUSED.add(w_)
                    print(f"flashinfer B{B} ctx {C} (and later cells of this shape): {w_}")
            out[cov][col], out[cov][col.replace("_us", "_eager_us")] = best
        del caches
        torch.cuda.empty_cache()
    return out


REFUSED = set()  # the refusals of one of FlashInfer's two kernels already printed


def short(e):
    """An exception's message on one line: FlashInfer's reason is at its end, after its source path."""
    msg = " ".join(str(e).split())
    return msg if len(msg) <= 300 else msg[:100] + " ... " + msg[-200:]


def tokens(s):
    """16384, 16K or 1M -> tokens"""
    s = s.strip().upper()
    mult = {"K": 1024, "M": 1048576}.get(s[-1:], 1)
    return int(float(s[:-1] if mult > 1 else s) * mult)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctx", default="16384,131072")
    ap.add_argument("--batch", default="1")
    ap.add_argument("--coverage", default="1,0.25")
    ap.add_argument("--tokens", default="1", help="query tokens a sequence a step (T > 1: SDPA only)")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--mem-gib", type=float, default=60)
    ap.add_argument("--json", default="peers.json")
    a = ap.parse_args()
    H, HK, D, BS = a.heads, a.kv_heads, a.head_dim, a.block
    G = H // HK
    rows = []
    dev = torch.device("cuda")
    for C in [tokens(x) for x in a.ctx.split(",")]:
        for B in [int(x) for x in a.batch.split(",")]:
            cache = 2 * B * HK * C * D * 2
            if cache > a.mem_gib * 2**30:
                print(f"skip B{B} ctx {C}: {cache / 2**30:.1f} GiB")
                continue
            R = max(1, min(16, math.ceil(4 * 64e6 / cache)))
            kvs = []
            for _ in range(R):
                k = torch.randn(B, HK, C, D, device=dev, dtype=torch.float16)
                v = torch.randn(B, HK, C, D, device=dev, dtype=torch.float16)
                kvs.append((k, v))
            q = torch.randn(B, H, 1, D, device=dev, dtype=torch.float16)
            row = {"ctx": C, "batch": B}
            for name, be in (("cudnn_us", SDPBackend.CUDNN_ATTENTION), ("flash_us", SDPBackend.FLASH_ATTENTION)):
                try:
                    with sdpa_kernel(be):
                        row[name], row[name.replace("_us", "_eager_us")] = timed(
                            lambda k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), kvs, a.runs, a.warmup)
                except Exception as e:  # a backend that refuses the shape
                    print(f"{name} B{B} ctx {C}: {type(e).__name__}: {str(e)[:120]}")
                    row[name] = None
            npg = (C + BS - 1) // BS
            pad = npg * BS - C
            bounds = []
            for k, _ in kvs:
                kp = F.pad(k, (0, 0, 0, pad)).view(B, HK, npg, BS, D)
                bounds.append((kp.amin(3), kp.amax(3)))
            for cov in [float(x) for x in a.coverage.split(",")]:
                if cov >= 1:
                    continue
                kpages = max(1, math.ceil(cov * npg))

                def quest(i, kpages=kpages):
                    k, v = kvs[i]
                    kmin, kmax = bounds[i]
                    qg = q.view(B, HK, G, 1, D)
                    ub = torch.maximum(qg * kmin.unsqueeze(2), qg * kmax.unsqueeze(2)).sum(-1).amax(2)  # [B, HK, npg]
                    idx = ub.topk(kpages, dim=-1).indices  # [B, HK, kpages]
                    tok = (idx.unsqueeze(-1) * BS + torch.arange(BS, device=dev)).flatten(2).clamp_(max=C - 1)
                    kg = torch.gather(k, 2, tok.unsqueeze(-1).expand(-1, -1, -1, D))
                    vg = torch.gather(v, 2, tok.unsqueeze(-1).expand(-1, -1, -1, D))
                    return F.scaled_dot_product_attention(q, kg, vg, enable_gqa=True)

                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION]):
                    us, eager = timed(quest, [(i,) for i in range(R)], a.runs, a.warmup)
                rows.append({"ctx": C, "batch": B, "coverage": cov, "torch_quest_us": us, "torch_quest_eager_us": eager})
            rows.append(dict(row, coverage=1.0))
            for T in [int(x) for x in a.tokens.split(",") if int(x) > 1]:
                qt = torch.randn(B, H, T, D, device=dev, dtype=torch.float16)
                # the causal-bias object where the backend takes it, else the same mask as booleans
                masks = (("lower-right bias", causal_lower_right(T, C)),
                         ("bool mask", torch.ones(T, C, dtype=torch.bool, device=dev).tril(C - T)))
                vrow = {"ctx": C, "batch": B, "coverage": 1.0, "tokens": T}
                for name, be in (("cudnn_us", SDPBackend.CUDNN_ATTENTION), ("flash_us", SDPBackend.FLASH_ATTENTION),
                                 ("efficient_us", SDPBackend.EFFICIENT_ATTENTION)):
                    vrow[name] = None
                    for how, mask in masks:
                        try:
                            with sdpa_kernel(be):
                                vrow[name], vrow[name.replace("_us", "_eager_us")] = timed(
                                    lambda k, v, m=mask: F.scaled_dot_product_attention(qt, k, v, attn_mask=m,
                                                                                        enable_gqa=True),
                                    kvs, a.runs, a.warmup)
                            vrow[name.replace("_us", "_mask")] = how
                            break
                        except Exception as e:  # a backend that refuses the mask or shape
                            print(f"{name} ({how}) T{T} B{B} ctx {C}: {type(e).__name__}: {str(e)[:120]}")
                rows.append(vrow)
            del kvs, bounds
            torch.cuda.empty_cache()
            if flashinfer is not None:
                covs = sorted({float(x) for x in a.coverage.split(",")} | {1.0})
                try:
                    fi = flashinfer_rows(q, B, C, HK, D, BS, R, covs, a.runs, a.warmup)
                except Exception as e:  # a shape or dtype it refuses: said, and its columns stay empty
                    print(f"flashinfer B{B} ctx {C}: {type(e).__name__}: {short(e)}")
                    fi = {}
                for r in rows:
                    if r["ctx"] == C and r["batch"] == B and "tokens" not in r:
                        r.update(fi.get(r["coverage"], {}))
            print(json.dumps(rows[-1]), flush=True)
    with open(a.json, "w") as f:
        json.dump({"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "heads": H,
                   "flashinfer": flashinfer.__version__ if flashinfer else f"not run ({FLASHINFER})",
                   "gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
