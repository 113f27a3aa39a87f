"""test_views_gpu.py — qgen.View over pools built in PyTorch on the device, as serving engines
lay them out: vLLM NHD and HND (block 64), SGLang [slots, H, D] with pages of 16 (under a
block-32 spec) and 64, transformers' paged [num_blocks * 32 + 2, H, D] (block 32 under a
block-64 spec); random contents, shuffled page tables, a ragged batch of 8 sequences. Each
view's output equals an owned qgen cache holding the same tokens (bit for bit dense; equal
page lists and output sparse; the specs take the default 8-bit bounds, which a view of
half-block pages does not keep, so it equals an owned cache of f16 bounds), dense is within
tolerance of torch's
scaled_dot_product_attention over the gathered K/V; a CUDA graph of update + run whose
block table, lengths and pool change between replays (the engine's decode loop) equals
eager; a tensor-parallel split (two views over halves of the KV heads, a per-rank spec)
concatenated equals one full-width cache. Skipped without torch, a GPU, or a CUDA driver
that qgen can open."""
import pytest

import qgen

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device for torch", allow_module_level=True)

D, HQ, HKV = 128, 32, 8
LENS = [5000, 1, 777, 64, 65, 2047, 3000, 129]  # ragged


def fields(block, n_head=HQ, n_head_kv=HKV, **sparse):
    return dict(head_dim=D, n_head=n_head, n_head_kv=n_head_kv,
                sparse={"block": block, "coverage": 0.25, "sink": 64, "recent": 64, **sparse})


@pytest.fixture(scope="module")
def ctxs():
    """Contexts by block (the default 8-bit bounds), and by (block, "f16") of f16 bounds."""
    try:
        cs = {b: qgen.Context(backend="gpu", **fields(b)) for b in (32, 64)}
        cs.update({(b, "f16"): qgen.Context(backend="gpu", **fields(b, bounds="f16")) for b in (32, 64)})
    except qgen.Error as e:
        pytest.skip(f"the GPU backend does not open: {e}")
    yield cs
    for c in cs.values():
        c.close()


def tokens(seed, hkv=HKV, hq=HQ):
    g = torch.Generator(device="cuda").manual_seed(seed)

    def rnd(*shape):
        return torch.rand(shape, generator=g, device="cuda").mul_(2).sub_(1).half()

    return rnd(sum(LENS), hkv, D), rnd(sum(LENS), hkv, D), rnd(len(LENS), hq, D)


def owned(ctx, k, v):
    kv = ctx.cache(len(LENS), max(LENS) + 64)
    kv.append(k, v, seqs=list(range(len(LENS))), n_new=LENS)
    return kv


def pool(k, v, page, seed, extra=64):
    """Slot-major pools [pages * page, H, D] with the tokens on shuffled pages (random
    contents elsewhere), the int32 block table and lengths, every written slot (int64)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    max_blocks = -(-(max(LENS) + 64) // page)
    n_pages = len(LENS) * max_blocks + extra
    perm = torch.randperm(n_pages, generator=g).int()
    bt = perm[: len(LENS) * max_blocks].reshape(len(LENS), max_blocks).cuda()
    kp = torch.randn((n_pages * page,) + tuple(k.shape[1:]), device="cuda").half()
    vp = torch.randn_like(kp)
    slots, r = [], 0
    for s, n in enumerate(LENS):
        t = torch.arange(n, device="cuda")
        sl = bt[s, t // page].long() * page + t % page
        kp[sl], vp[sl] = k[r:r + n], v[r:r + n]
        slots.append(sl)
        r += n
    return kp, vp, bt, torch.tensor(LENS, dtype=torch.int32, device="cuda"), torch.cat(slots)


def view_of(layout, ctx, kp, vp, bt, lens, page):
    if layout in ("NHD", "HND"):
        nhd = torch.stack([kp, vp]).reshape(2, -1, page, HKV, D)
        cache = nhd if layout == "NHD" else nhd.transpose(2, 3).contiguous()  # HND as vLLM allocates it
        return qgen.View.vllm(ctx, cache, bt, lens, layout=layout)
    if layout == "sglang":
        return qgen.View.sglang(ctx, kp, vp, page, bt, lens)
    pad = torch.zeros((2, HKV, D), dtype=kp.dtype, device="cuda")
    return qgen.View.transformers(ctx, torch.cat([kp, pad]), torch.cat([vp, pad]), page, bt, lens)


def sdpa(q, kp, vp, bt, page):
    """torch's attention over each sequence's gathered K/V (GQA by repeating the KV heads)."""
    out = []
    for s, n in enumerate(LENS):
        t = torch.arange(n, device="cuda")
        sl = bt[s, t // page].long() * page + t % page
        k = kp[sl].transpose(0, 1).repeat_interleave(HQ // HKV, 0).float()
        v = vp[sl].transpose(0, 1).repeat_interleave(HQ // HKV, 0).float()
        out.append(torch.nn.functional.scaled_dot_product_attention(q[s][:, None].float(), k, v)[:, 0])
    return torch.stack(out)


@pytest.mark.parametrize("layout,page,block", [("NHD", 64, 64), ("HND", 64, 64), ("sglang", 16, 32), ("sglang", 64, 64),
                                               ("transformers", 32, 64)])
def test_view_equals_owned_cache(ctxs, layout, page, block):
    ctx = ctxs[block]
    k, v, q = tokens(page + block)
    own = owned(ctx if page == block else ctxs[block, "f16"], k, v)  # half-block pages rank by f16 bounds
    kp, vp, bt, lens, slots = pool(k, v, page, seed=page)
    view = view_of(layout, ctx, kp, vp, bt, lens, page)
    view.update(slots[: len(slots) // 3])
    view.update(slots[len(slots) // 3:])
    seqs = list(range(len(LENS)))
    dense = view.attend(q, seqs, dense=True)
    assert torch.equal(dense, own.attend(q, seqs, dense=True))
    ref = sdpa(q, kp, vp, bt, page)
    assert ((dense.float() - ref).norm() / ref.norm()).item() < 5e-3
    assert torch.equal(view.attend(q, seqs), own.attend(q, seqs))
    for s in seqs:
        (l1, c1), (l2, c2) = view.selection(s), own.selection(s)
        assert (c1 == c2).all()
        for h in range(HKV):
            assert (l1[h, :c1[h]] == l2[h, :c2[h]]).all()
    view.close(), own.close()


def test_cuda_graph_with_changing_tables_equals_eager(ctxs):
    ctx, page = ctxs[64], 32  # two engine pages a selection page
    k, v, q = tokens(7)
    kp, vp, bt, lens, _ = pool(k, v, page, seed=7)
    view = qgen.View.transformers(ctx, kp, vp, page, bt, lens)
    view.update(torch.arange(kp.shape[0], device="cuda"))  # every slot: bounds of the whole pool
    w = qgen.DecodeWrapper(view)
    out = w.plan(range(len(LENS)))
    slot = torch.zeros(len(LENS), dtype=torch.int64, device="cuda")
    g = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        view.update(slot)
        w.run(q)
    gen = torch.Generator(device="cuda").manual_seed(8)
    free = list(range(len(LENS) * bt.shape[1], kp.shape[0] // page))  # unused pages, for sequences that grow
    for step in range(40):
        # the engine's step: each sequence gets one token (a fresh page when it crosses one),
        # written into the pool at its slot; a sequence is sometimes moved to other pages
        n = lens.tolist()
        for s in range(len(LENS)):
            if n[s] % page == 0 and step % 3 == 0 and free:
                bt[s, n[s] // page] = free.pop()
            if step == 20 and s == 2:
                bt[s, 0], bt[s, 1] = bt[s, 1].clone(), bt[s, 0].clone()
        idx = torch.tensor(n, device="cuda")
        slot.copy_(bt[torch.arange(len(LENS), device="cuda"), idx // page].long() * page + idx % page)
        kp[slot] = torch.rand((len(LENS), HKV, D), generator=gen, device="cuda").half()
        vp[slot] = torch.rand((len(LENS), HKV, D), generator=gen, device="cuda").half()
        lens += 1
        q.copy_(torch.rand(q.shape, generator=gen, device="cuda").half())
        g.replay()
        got = out.clone()
        view.update(slot)
        want = view.attend(q, list(range(len(LENS))))
        torch.cuda.synchronize()
        assert torch.equal(got, want), step
    view.close()


def test_tensor_parallel_split(ctxs):
    k, v, q = tokens(9)
    full = owned(ctxs[64], k, v)
    kp, vp, bt, lens, slots = pool(k, v, 64, seed=9)
    seqs = list(range(len(LENS)))
    want = full.attend(q, seqs)
    with qgen.Context(backend="gpu", **fields(64, HQ // 2, HKV // 2)) as rank:
        outs = []
        for r in range(2):  # rank r: its half of the KV heads, in place (strided), and of the query heads
            view = qgen.View.sglang(rank, kp[:, r * HKV // 2:(r + 1) * HKV // 2], vp[:, r * HKV // 2:(r + 1) * HKV // 2],
                                    64, bt, lens)
            view.update(slots)
            outs.append(view.attend(q[:, r * HQ // 2:(r + 1) * HQ // 2].contiguous(), seqs))
            for s in seqs:
                lr, cr = view.selection(s)
                lf, cf = full.selection(s)
                assert (cr == cf[r * HKV // 2:(r + 1) * HKV // 2]).all()
                for h in range(HKV // 2):
                    assert (lr[h, :cr[h]] == lf[r * HKV // 2 + h, :cr[h]]).all()
            view.close()
        got = torch.cat(outs, dim=1)
    # the split counts of a launch follow its KV heads, so the f32 merge order may differ
    assert ((got.float() - want.float()).norm() / want.float().norm()).item() < 2e-3
    full.close()


@pytest.mark.parametrize("kind", ["e4m3", "e5m2"])
def test_fp8_pool_as_its_torch_dtype(kind):
    """An fp8 pool given as torch.float8_* (as an engine may allocate it) is the same view as
    its uint8 bytes: outputs bit for bit equal, and both equal an owned fp8 cache of the tokens."""
    dt = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[kind]
    try:
        ctx = qgen.Context(backend="gpu", head_dim=D, n_head=HQ, n_head_kv=HKV, k_type=kind, v_type=kind)
    except qgen.Error as e:
        pytest.skip(f"the GPU backend does not open: {e}")
    with ctx:
        k, v, q = tokens(31)
        k, v = k.to(dt).half(), v.to(dt).half()  # values the fp8 cache holds exactly
        kp, vp, bt, lens, _ = pool(k, v, 64, 32)
        cache = torch.stack([kp, vp]).to(dt).reshape(2, -1, 64, HKV, D)
        seqs = list(range(len(LENS)))
        got = [qgen.View.vllm(ctx, c, bt, lens).attend(q, seqs=seqs) for c in (cache, cache.view(torch.uint8))]
        assert torch.equal(got[0], got[1])
        ref = owned(ctx, k, v).attend(q, seqs=seqs)
        assert torch.equal(got[0], ref)
        with pytest.raises(qgen.Error, match="float8"):
            qgen.View.vllm(ctx, cache.view(torch.int8), bt, lens)

