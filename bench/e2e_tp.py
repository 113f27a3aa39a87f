#!/usr/bin/env python3
"""e2e_tp.py — whole-model decode of e2e.py's Qwen3-4B-shaped model tensor-parallel over 2
GPUs, each rank's attention through its own qgen caches, against the same model on 1 GPU.

    QGEN_LIBRARY=$PWD/build/libqgen.so torchrun --nproc-per-node 2 bench/e2e_tp.py \\
        --json bench/results/e2e-tp2-h200.json --md bench/results/e2e-tp2-h200.md

Needs one GPU per rank, at least 2 (NCCL); refuses otherwise. NVLink multicast stays off
(NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1 unless the
caller set them).

The model, its seeded random bf16 weights and the timed step are e2e.py's (fused q|k|v and
gate|up projections, torch.compile around attention, the whole step one CUDA graph). Split
by qgen.tp.split_model, rank r keeps query heads [16r, 16r+16), KV heads [4r, 4r+4) and half
of the intermediate channels, and all-reduces (NCCL, captured in the graph) the outputs of
the o and the down projection: 2 x 36 all-reduces of [B, 2560] bf16 a step. Embeddings,
norms and the head are whole on every rank. Each rank's qgen caches (spec: 16 query / 4 KV
heads) hold its heads of the same seeded random K/V as the 1-GPU caches.

First rank 0 alone runs the whole model on its GPU (the 1-GPU rows; the other ranks wait),
then all ranks the split model. Per cell (batch, context) and configuration (noattn, or
qgen-KV-dense / qgen-KV-P as in e2e.py):
    greedy      --greedy steps from the same start, replays of the step graph feeding back
                the argmax: the tokens of 2 GPUs against 1 GPU's; at a first difference the
                1-GPU top-2 logit gap there and the logit difference (a near-tie: gap < difference)
    ms          median of the timed replays that follow (the next decode steps)
    noreduce    the same split step with the all-reduces left out (wrong numbers, the same
                other work): the step's all-reduce time = ms - noreduce
    allreduce   the step's 2 x layers all-reduces alone, one graph
"""
import argparse
import gc
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from qgen.tp import init_ranks, multicast_off, split_model  # noqa: E402

multicast_off()  # first: NVLink multicast off before torch starts NCCL

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import e2e  # noqa: E402
from e2e import DTYPE, DoesNotFit, QgenLayers, build_model, capture, ctx_name, make_step, parse_qgen, size  # noqa: E402
from e2e import time_graph, weight_bytes  # noqa: E402

DEFAULT_CONFIGS = ["noattn", "qgen-q4_0-dense", "qgen-q4_0-25"]


def greedy(g, logits, tok, pos, n):
    """n replays of the step graph g, each feeding its argmax back: tokens [B, n] and
    logits [B, n, V] (on the CPU)."""
    toks, logs = [], []
    for _ in range(n):
        g.replay()
        last = logits[:, -1]
        nxt = last.argmax(-1)
        toks.append(nxt.clone())
        logs.append(last.clone())
        tok.copy_(nxt.view(-1, 1))
        pos.add_(1)
    return torch.stack(toks, 1).cpu(), torch.stack(logs, 1).float().cpu()


def compare(tok, log, ref_tok, ref_log):
    """Per sequence: the steps equal to the reference's before the first difference, the
    worst logits relative error over them, and at a difference the reference's top-2 gap
    and the largest logit difference there."""
    out = []
    for b in range(ref_tok.shape[0]):
        diff = (tok[b] != ref_tok[b]).nonzero()
        first = int(diff[0]) if len(diff) else None
        upto = ref_tok.shape[1] if first is None else first + 1
        rel = [float((log[b, s] - ref_log[b, s]).norm() / ref_log[b, s].norm()) for s in range(upto)]
        entry = {"equal_steps": upto if first is None else first, "worst_rel_err": max(rel)}
        if first is not None:
            top2 = ref_log[b, first].topk(2).values
            gap, err = float(top2[0] - top2[1]), float((log[b, first] - ref_log[b, first]).abs().max())
            entry.update(top2_gap=gap, logit_diff=err, near_tie=gap < err)
        out.append(entry)
    return out


def agree(ok, world):
    """Whether every rank says ok (a rank that cannot build a configuration skips it on all)."""
    if world == 1:
        return ok
    flag = torch.tensor([1 if ok else 0], device="cuda")
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def allreduce_ms(n, batch, hidden, a):
    """ms of n all-reduces of [batch, 1, hidden] bf16 (zeros: replays keep them finite), one graph."""
    buf = torch.zeros(batch, 1, hidden, dtype=DTYPE, device="cuda")

    def fn():
        for _ in range(n):
            dist.all_reduce(buf)

    g, _ = capture(fn)
    ms = time_graph(g, a.warm, a.steps)
    del g
    return ms


def run_cell(model, rank, world, batch, ctx, configs, a, results):
    """The rows of one cell; results[(batch, ctx, config, world)] gets (row, tokens, logits)."""
    tok = torch.zeros(batch, 1, dtype=torch.long, device="cuda")
    pos = torch.full((batch, 1), ctx, dtype=torch.long, device="cuda")
    reduce = None if world == 1 else (lambda t: dist.all_reduce(t))
    appends = a.greedy + 2 * (2 + a.warm + a.steps) + 8  # capture warm-ups, greedy, timed replays
    base = {"ctx": ctx, "batch": batch, "gpus": world}
    if world > 1:
        base["allreduce_alone_ms"] = round(allreduce_ms(2 * model.config.num_hidden_layers, batch,
                                                        model.config.hidden_size, a), 4)
    for name in configs:
        layers, row = None, dict(base, config=name)
        try:
            ok, why = True, None
            try:
                if name != "noattn":
                    kv, cov = parse_qgen(name)
                    layers = QgenLayers(model.config, kv, cov is not None, batch, ctx, appends, rank, world)
            except DoesNotFit as e:
                ok, why = False, str(e)
            if not agree(ok, world):
                raise DoesNotFit(why or "another rank's memory does not fit it")
            if layers is None:
                attention = lambda i, q, k, v: q.transpose(1, 2).reshape(q.shape[0], 1, -1)  # noqa: E731
            else:
                attention = layers.attention(cov, batch)
            tok.zero_()
            pos.fill_(ctx)
            step = make_step(model, attention, all_reduce=reduce)
            g, logits = capture(lambda: step(tok, pos))
            tokens, logs = greedy(g, logits, tok, pos, a.greedy)
            ms = time_graph(g, a.warm, a.steps)
            del g
            row.update(status="ok", ms=round(ms, 4), tok_s=round(batch * 1e3 / ms, 2))
            if reduce is not None:
                quiet = make_step(model, attention, all_reduce=lambda t: None)
                g, _ = capture(lambda: quiet(tok, pos))
                row["noreduce_ms"] = round(time_graph(g, a.warm, a.steps), 4)
                row["allreduce_in_step_ms"] = round(ms - row["noreduce_ms"], 4)
                del g
            if layers is not None:
                row.update(spec=layers.info.get("name"), n_head=layers.n_head, n_head_kv=layers.n_kv)
            results[(batch, ctx, name, world)] = (row, tokens, logs)
        except DoesNotFit as e:
            row.update(status="does not fit", reason=str(e))
            results[(batch, ctx, name, world)] = (row, None, None)
        if rank == 0:
            r = row
            print(f"  {world} GPU(s) {name:16s} " + (f"{r['ms']:8.3f} ms {r['tok_s']:9.2f} tok/s"
                  + (f"  all-reduce in step {r['allreduce_in_step_ms']:.3f} ms (alone {r['allreduce_alone_ms']:.3f})"
                     if "noreduce_ms" in r else "") if r["status"] == "ok" else f"{r['status']}: {r['reason']}"),
                  flush=True)
        if layers is not None:
            layers.close()
        del layers
        torch.cuda.empty_cache()


def phase(rank, world, cells, configs, a, results):
    """Build the model (split when world > 1) and run every cell."""
    model = build_model(a.layers, max(c for _, c in cells) + 4096)
    model = split_model(model, rank, world)
    gc.collect()
    torch.cuda.empty_cache()
    wbytes = weight_bytes(model)
    if rank == 0:
        print(f"{world} GPU(s): {wbytes / 1e9:.2f} GB of weights per GPU", flush=True)
    with torch.no_grad():
        for batch, ctx in cells:
            if rank == 0:
                print(f"B{batch} {ctx_name(ctx)}:", flush=True)
            run_cell(model, rank, world, batch, ctx, configs, a, results)
    del model
    gc.collect()
    torch.cuda.empty_cache()
    return wbytes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ctx", default="128K,512K,1M", help="contexts (default %(default)s)")
    ap.add_argument("--batch", default="1,4", help="batch sizes for every --ctx (default %(default)s)")
    ap.add_argument("--configs", default=",".join(DEFAULT_CONFIGS), help="default: %(default)s")
    ap.add_argument("--greedy", type=int, default=64, help="greedy steps compared with 1 GPU")
    ap.add_argument("--steps", type=int, default=30, help="timed replays per graph")
    ap.add_argument("--warm", type=int, default=5, help="untimed replays before timing")
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--no-single", action="store_true", help="skip the 1-GPU phase (no comparison)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 layers, 4K and 16K, few replays")
    ap.add_argument("--json")
    ap.add_argument("--md")
    a = ap.parse_args()
    if a.quick:
        a.layers, a.ctx, a.batch, a.steps, a.warm, a.greedy = 2, "4K,16K", "1,2", 5, 2, 16
    n_gpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if n_gpu < 2 or world < 2 or world > n_gpu:
        raise SystemExit(f"e2e_tp.py: needs at least 2 GPUs, one per rank, under torchrun --nproc-per-node N "
                         f"(2 <= N <= GPUs); found {n_gpu} GPU(s) and {world} rank(s)")
    configs = [c.strip() for c in a.configs.split(",") if c.strip()]
    for c in configs:
        if c != "noattn":
            parse_qgen(c)
    cells = [(size(b), size(c)) for b in a.batch.split(",") for c in a.ctx.split(",")]
    rank, world, _ = init_ranks("cuda", "nccl", timeout_s=3600)
    probe = torch.ones(1, device="cuda")
    dist.all_reduce(probe)
    try:
        capture(lambda: dist.all_reduce(probe))
    except RuntimeError as e:
        raise SystemExit(f"e2e_tp.py: an NCCL all-reduce could not be captured in a CUDA graph: {e}")

    env = e2e.environment(sys.argv) if rank == 0 else {}
    env.update(command=" ".join(["torchrun", f"--nproc-per-node {world}"] + sys.argv), world=world,
               nccl=str(torch.cuda.nccl.version()),
               nccl_env={k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                                                        "NVSHMEM_DISABLE_NVLS")},
               steps=a.steps, warm=a.warm, greedy=a.greedy, layers=a.layers)
    t0 = time.time()
    results = {}
    if not a.no_single:
        if rank == 0:
            print("1 GPU (rank 0 alone):", flush=True)
            env["weight_bytes_1gpu"] = phase(0, 1, cells, configs, a, results)
        dist.barrier(device_ids=[torch.cuda.current_device()])
    if rank == 0:
        print(f"{world} GPUs, tensor-parallel:", flush=True)
    env[f"weight_bytes_per_gpu_{world}gpu"] = phase(rank, world, cells, configs, a, results)
    env["runtime_s"] = round(time.time() - t0, 1)
    if rank == 0:
        rows = []
        for batch, ctx in cells:
            for name in configs:
                one = results.get((batch, ctx, name, 1))
                row, tokens, logs = results[(batch, ctx, name, world)]
                if one is not None:
                    rows.append(one[0])
                    if one[1] is not None and tokens is not None:
                        row["greedy"] = compare(tokens, logs, one[1], one[2])
                    if one[0]["status"] == "ok" and row["status"] == "ok":
                        row["vs_1gpu"] = round(row["tok_s"] / one[0]["tok_s"], 3)
                rows.append(row)
        doc = {"env": env, "rows": rows}
        print(f"done in {env['runtime_s']} s")
        e2e.save(doc, a.json, a.md, markdown)
    dist.barrier()
    dist.destroy_process_group()


def greedy_text(entries, n):
    if not entries:
        return ""
    return ", ".join(f"{e['equal_steps']}/{n}" + ("" if "top2_gap" not in e else
                     f" ({'near-tie' if e['near_tie'] else 'NOT a near-tie'}: gap {e['top2_gap']:.3g}, "
                     f"diff {e['logit_diff']:.3g})") for e in entries)


def markdown(doc):
    env, rows = doc["env"], doc["rows"]
    w = env["world"]
    single = {(r["batch"], r["ctx"], r["config"]): r for r in rows if r["gpus"] == 1}
    out = [f"# Whole-model decode, Qwen3-4B shape ({env['layers']} layers), tensor-parallel on {w} GPUs vs 1, "
           f"{env.get('gpu', '')}", "", f"`{env['command']}`", "",
           f"GPU {env.get('gpu')}, driver {env.get('driver')}, CUDA {env.get('cuda')}, torch {env.get('torch')}, "
           f"transformers {env.get('transformers')}, NCCL {env['nccl']} ({', '.join(f'{k}={v}' for k, v in env['nccl_env'].items())}), "
           f"{env.get('date')}.", "",
           "bench/e2e_tp.py's docstring says what is measured. ms = median of "
           f"{env['steps']} replays of the whole step as one CUDA graph after {env['warm']} warm-up replays; "
           "x = tokens/s on the split model / on 1 GPU; all-reduce in step = step - the same step without "
           f"its all-reduces; alone = the {2 * env['layers']} all-reduces as one graph; greedy = steps of "
           f"{env['greedy']} equal to 1 GPU's, per sequence.", "",
           f"| config | B | context | 1 GPU ms | 1 GPU tok/s | {w} GPUs ms | {w} GPUs tok/s | x | "
           "all-reduce in step ms | all-reduces alone ms | greedy |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["gpus"] == 1:
            continue
        one = single.get((r["batch"], r["ctx"], r["config"]))
        head = f"| {r['config']} | {r['batch']} | {ctx_name(r['ctx'])} "
        first = (f"| {one['ms']:.3f} | {one['tok_s']:.1f} " if one and one["status"] == "ok"
                 else f"| {one['status'] if one else 'not run'} | ")
        if r["status"] != "ok":
            out.append(head + first + f"| {r['status']} | | | | | |")
            continue
        out.append(head + first + f"| {r['ms']:.3f} | {r['tok_s']:.1f} | {r.get('vs_1gpu', '')} "
                   f"| {r.get('allreduce_in_step_ms', '')} | {r.get('allreduce_alone_ms', '')} "
                   f"| {greedy_text(r.get('greedy'), env['greedy'])} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
