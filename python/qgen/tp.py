"""qgen.tp — what one rank of a tensor-parallel model needs from qgen: the spec with its
share of the heads.

Tensor parallelism is the engine's. Splitting q, k and v by columns (whole heads) and the
output projection by rows, as transformers' plans (q/k/v "colwise", o "rowwise"), vLLM and
SGLang do, gives rank r of a group of `world` the query heads [r*H/world, (r+1)*H/world)
and the KV heads [r*Hkv/world, (r+1)*Hkv/world): a GQA group never straddles two ranks, so
the rank's attention is plain attention over its own heads. A qgen cache whose spec has
n_head/world and n_head_kv/world heads is all the rank needs; qgen itself never
communicates and knows nothing else about the split.

    fields = qgen.tp.rank_fields(spec_fields, world)       # any qgen.Context keyword fields
    QgenCache(model.config, max_tokens, tp_size=world)    # qgen.transformers does the same

split_model() is a plain column/row split of a Llama/Qwen3-style transformers model with an
all-reduce after the two row-split projections, and init_ranks() starts torchrun's process
group: the engine's part, kept here for the tests, the example and the benchmark (engines
bring their own).
"""
import os

# NVLink multicast is kept off by default: NCCL's NVLS, torch's symmetric memory and
# NVSHMEM each read one of these when they start.
MULTICAST_OFF = (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1"))


def _count(value, what):
    if isinstance(value, bool) or not hasattr(value, "__index__"):  # ints, NumPy and torch integers
        raise ValueError(f"qgen.tp: {what} = {value!r} is not an integer")
    return value.__index__()


def rank_fields(fields, world):
    """The spec fields of one rank: fields (qgen.Context keywords with n_head and
    n_head_kv) with both head counts divided by world, validated."""
    world = _count(world, "world (the tensor-parallel size)")
    if world < 1:
        raise ValueError(f"qgen.tp: the tensor-parallel size is {world}; it must be >= 1")
    out = dict(fields)
    n_head = _count(out.get("n_head"), "n_head")
    n_kv = _count(out.get("n_head_kv", n_head), "n_head_kv")
    if n_head % world or n_kv % world:
        raise ValueError(f"qgen.tp: {n_head} query and {n_kv} KV heads do not split over {world} ranks; both "
                         "head counts must be divisible by the tensor-parallel size (replicated KV heads, "
                         "as when the size exceeds the KV heads, are not supported)")
    out.update(n_head=n_head // world, n_head_kv=n_kv // world)  # plain ints, whatever the caller's type
    if world > 1 and "name" in out:
        out["name"] = f"{out['name']}-tp{world}"
    return out


def head_range(n_heads, world, rank):
    """The heads [start, stop) of rank among n_heads split over world ranks."""
    n_heads, world, rank = _count(n_heads, "n_heads"), _count(world, "world"), _count(rank, "rank")
    if world < 1:
        raise ValueError(f"qgen.tp: the tensor-parallel size is {world}; it must be >= 1")
    if not 0 <= rank < world:
        raise ValueError(f"qgen.tp: rank {rank} is outside [0, {world})")
    if n_heads % world:
        raise ValueError(f"qgen.tp: {n_heads} heads do not split over {world} ranks")
    per = n_heads // world
    return rank * per, (rank + 1) * per


def split_model(model, rank, world, group=None):
    """Keep rank's share of every decoder layer of a Llama/Qwen3-style transformers model
    (self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj), in place: q/k/v and gate/up by
    output rows (whole heads; intermediate channels), o and down by input columns, their
    bias on rank 0 only, and an all-reduce (over group) of o's and down's outputs.
    Embeddings, norms and the head stay whole. world = 1 leaves the model as it is."""
    import torch
    import torch.distributed as dist

    if world == 1:
        return model
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    n_head = int(cfg.num_attention_heads)
    n_kv = int(getattr(cfg, "num_key_value_heads", None) or n_head)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // n_head)

    def rows(linear, start, stop):
        linear.weight = torch.nn.Parameter(linear.weight.data[start:stop].clone(), requires_grad=False)
        if linear.bias is not None:
            linear.bias = torch.nn.Parameter(linear.bias.data[start:stop].clone(), requires_grad=False)
        linear.out_features = stop - start

    def cols(linear, start, stop):
        linear.weight = torch.nn.Parameter(linear.weight.data[:, start:stop].clone(), requires_grad=False)
        if linear.bias is not None and rank != 0:
            linear.bias = torch.nn.Parameter(torch.zeros_like(linear.bias.data), requires_grad=False)
        linear.in_features = stop - start
        linear.register_forward_hook(lambda mod, inputs, out: _all_reduce(dist, out, group))

    q0, q1 = head_range(n_head, world, rank)
    k0, k1 = head_range(n_kv, world, rank)
    for layer in model.model.layers:
        a, mlp = layer.self_attn, layer.mlp
        rows(a.q_proj, q0 * head_dim, q1 * head_dim)
        rows(a.k_proj, k0 * head_dim, k1 * head_dim)
        rows(a.v_proj, k0 * head_dim, k1 * head_dim)
        cols(a.o_proj, q0 * head_dim, q1 * head_dim)
        i0, i1 = head_range(mlp.gate_proj.out_features, world, rank)
        rows(mlp.gate_proj, i0, i1)
        rows(mlp.up_proj, i0, i1)
        cols(mlp.down_proj, i0, i1)
    return model


def _all_reduce(dist, out, group):
    if dist.get_backend(group) == "gloo":
        # through a float32 copy on the host: gloo sums no bf16, and its CUDA support varies
        wide = out.float().cpu()
        dist.all_reduce(wide, group=group)
        return out.copy_(wide)
    dist.all_reduce(out, group=group)
    return out


def multicast_off():
    """Keep NVLink multicast off in this process (MULTICAST_OFF), each variable only where the
    caller has not set it. Call it before torch starts NCCL: a script that wants it settled
    before anything else calls it before importing torch; init_ranks() calls it too."""
    for name, value in MULTICAST_OFF:
        os.environ.setdefault(name, value)


def init_ranks(device, backend="auto", timeout_s=1800):
    """(rank, world, torch.device) of this process under torchrun (WORLD_SIZE, RANK,
    LOCAL_RANK; one rank without them), starting the process group when there is more than
    one rank, multicast off. device "cuda": GPU local_rank modulo the GPUs there are, so
    ranks may share one (then gloo, which backend "auto" picks: NCCL refuses that); "cpu":
    gloo. backend: "auto", "nccl" or "gloo"."""
    import datetime

    multicast_off()
    import torch
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", str(rank)))
    if device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("qgen.tp.init_ranks: device cuda needs a CUDA device")
        n_gpu = torch.cuda.device_count()
        dev = torch.device("cuda", local % n_gpu)
        torch.cuda.set_device(dev)
        auto = "nccl" if n_gpu >= int(os.environ.get("LOCAL_WORLD_SIZE", str(world))) else "gloo"
    else:
        dev, auto = torch.device("cpu"), "gloo"
    if world > 1:
        dist.init_process_group(backend=auto if backend == "auto" else backend, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout_s))
    return rank, world, dev
