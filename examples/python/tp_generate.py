#!/usr/bin/env python3
"""tp_generate.py — greedy decoding of a tensor-parallel transformers model whose attention
on every rank goes through that rank's own qgen caches.

    torchrun --nproc-per-node 2 examples/python/tp_generate.py --out tp2.pt    # 2 ranks
    python3 examples/python/tp_generate.py --out tp1.pt                         # the whole model

Every rank builds the same Qwen3 model from a config with seeded random weights, keeps its
share of each layer (qgen.tp.split_model: q/k/v and gate/up by output rows, o and down by
input columns, their outputs all-reduced) and generates through
QgenCache(model.config, ..., tp_size=world): rank r's caches hold its n_head_kv/world KV
heads, its attention their n_head/world query heads. The ranks compute the same logits;
rank 0 writes the tokens and per-step logits of each mode (dense, sparse) to --out
(torch.save). The process group (qgen.tp.init_ranks) is NCCL with one GPU per rank, else
gloo (on the CPU, or ranks sharing a GPU). NVLink multicast stays off (qgen.tp.multicast_off:
NCCL_NVLS_ENABLE=0 and its relatives, unless the caller set them).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

from qgen.tp import init_ranks, multicast_off, split_model  # noqa: E402

multicast_off()  # before torch.distributed starts NCCL: no NVLink multicast (the device notes ask for it)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import qgen.transformers as qt  # noqa: E402


def tiny_config(layers):
    from transformers import Qwen3Config

    # the Qwen3-4B head layout at a small width: 32 query / 8 KV heads (GQA 4) of 128
    return Qwen3Config(vocab_size=1000, hidden_size=512, intermediate_size=1024, num_hidden_layers=layers,
                       num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=8192)


def build(config, dtype, device, rank, world):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)  # every rank the same weights, then its share of them
    model = AutoModelForCausalLM.from_config(config, attn_implementation="qgen")
    model = split_model(model.to(dtype=dtype), rank, world).to(device).eval()
    model.generation_config.eos_token_id = None
    return model


def generate(model, ids, cache, new_tokens):
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), past_key_values=cache,
                             max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                             output_logits=True, return_dict_in_generate=True, pad_token_id=0)
    return out.sequences[:, ids.shape[1]:], torch.stack(out.logits, 1).float()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], default=None,
                    help="default: bfloat16 on cuda, float32 on the CPU")
    ap.add_argument("--backend", choices=["auto", "nccl", "gloo"], default="auto")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=1024, help="prompt tokens")
    ap.add_argument("--new", type=int, default=32, help="new tokens")
    ap.add_argument("--k-type", default="f16", help="the qgen cache type (f16, bf16, q8_0, q4_0, ...)")
    ap.add_argument("--coverage", type=float, default=0.25, help="the sparse mode's fraction of pages")
    ap.add_argument("--modes", default="dense,sparse")
    ap.add_argument("--out", help="rank 0 writes {world, modes: {mode: {tokens, logits}}} here")
    a = ap.parse_args()
    rank, world, dev = init_ranks(a.device, a.backend)
    dtype = getattr(torch, a.dtype or ("bfloat16" if dev.type == "cuda" else "float32"))
    model = build(tiny_config(a.layers), dtype, dev, rank, world)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (a.batch, a.prompt), generator=g).to(dev)
    result = {"world": world, "device": str(dev), "dtype": str(dtype), "modes": {}}
    for mode in [m.strip() for m in a.modes.split(",") if m.strip()]:
        if mode not in ("dense", "sparse"):
            raise SystemExit(f"tp_generate: unknown mode {mode!r}; allowed: dense, sparse")
        sparse = dict(coverage=a.coverage, block=64, sink=64, recent=64) if mode == "sparse" else {}
        cache = qt.QgenCache(model.config, max_tokens=a.prompt + a.new, k_type=a.k_type, tp_size=world, **sparse)
        tokens, logits = generate(model, ids, cache, a.new)
        if world > 1:  # every rank decoded the same tokens (NCCL sends GPU tensors, gloo host ones)
            first = tokens.to(dev if dist.get_backend() == "nccl" else "cpu", copy=True)
            dist.broadcast(first, 0)
            if not torch.equal(first.cpu(), tokens.cpu()):
                raise SystemExit(f"tp_generate: rank {rank} decoded other tokens than rank 0")
        result["modes"][mode] = {"tokens": tokens.cpu(), "logits": logits.cpu(), "spec": cache.info["name"],
                                 "n_head": cache.info["n_head"], "n_head_kv": cache.info["n_head_kv"]}
        if rank == 0:
            print(f"{mode}: world {world}, rank 0 spec {cache.info['name']} ({cache.info['n_head']} query / "
                  f"{cache.info['n_head_kv']} KV heads), tokens {tokens[0, :12].tolist()} ...", flush=True)
        cache.close()
    if rank == 0 and a.out:
        torch.save(result, a.out)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
