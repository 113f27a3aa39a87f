"""test_views_cpu.py — qgen.View on the CPU backend (NumPy pools): views in vLLM's NHD and HND
layouts, SGLang's [slots, H, D] with pages of the block and of half of it, and transformers'
[num_blocks * block_size + 2, H, D], shuffled page tables, a ragged batch of 8 sequences:
dense output bit-identical to an owned cache holding the same tokens, sparse page lists
equal (the default 8-bit bounds; a view of half-block pages ranks by its f16 bounds, so it
equals an f16-bounds spec's cache); DecodeWrapper.run equal to attend; a tensor-parallel split (two views over halves of
the KV heads with a per-rank spec) concatenated equal to the full width; refusals, and
hostile arguments (sizes ctypes would wrap, wrong types, lengths past the pool) as qgen.Error."""
import numpy as np
import pytest

import qgen
import qgen.tp

D, HQ, HKV, BLOCK = 64, 8, 2, 32
SPARSE = {"block": BLOCK, "coverage": 0.3, "sink": 0, "recent": 0}
LENS = [700, 1, 333, 64, 65, 512, 31, 200]  # ragged: one token, partial and whole pages


def spec(n_head=HQ, n_head_kv=HKV, **sparse):
    return qgen.Context(backend="cpu", head_dim=D, n_head=n_head, n_head_kv=n_head_kv, k_type="f16", v_type="f16",
                        out_type="f32", sparse=dict(SPARSE, **sparse))


def tokens(seed=0, hkv=HKV):
    rng = np.random.default_rng(seed)
    k = rng.uniform(-2, 2, (sum(LENS), hkv, D)).astype(np.float16)
    v = rng.uniform(-1, 1, k.shape).astype(np.float16)
    q = rng.uniform(-1, 1, (len(LENS), hkv * (HQ // HKV), D)).astype(np.float16)
    return k, v, q


def owned(ctx, k, v):
    kv = ctx.cache(len(LENS), max(LENS))
    kv.append(k, v, seqs=list(range(len(LENS))), n_new=LENS)
    return kv


def pool(k, v, page, seed=1, extra=3):
    """Slot-major pools [pages * page, H, D] holding the tokens on shuffled pages, the block
    table, the lengths and every written slot."""
    rng = np.random.default_rng(seed)
    max_blocks = -(-max(LENS) // page)
    n_pages = len(LENS) * max_blocks + extra
    perm = rng.permutation(n_pages).astype(np.int32)
    bt = perm[: len(LENS) * max_blocks].reshape(len(LENS), max_blocks).copy()
    kp = np.zeros((n_pages * page,) + k.shape[1:], np.float16)
    vp = np.zeros_like(kp)
    slots, r = [], 0
    for s, n in enumerate(LENS):
        t = np.arange(n)
        sl = bt[s, t // page].astype(np.int64) * page + t % page
        kp[sl], vp[sl] = k[r:r + n], v[r:r + n]
        slots.append(sl)
        r += n
    return kp, vp, bt, np.array(LENS, np.int32), np.concatenate(slots)


def same_as_owned(ctx, own, view, q):
    seqs = list(range(len(LENS)))
    assert np.array_equal(view.attend(q, seqs, dense=True), own.attend(q, seqs, dense=True))
    a, b = view.attend(q, seqs), own.attend(q, seqs)
    assert np.array_equal(a, b)
    for s in seqs:
        (l1, c1), (l2, c2) = view.selection(s), own.selection(s)
        assert np.array_equal(c1, c2)
        for h in range(len(c1)):
            assert np.array_equal(l1[h, :c1[h]], l2[h, :c2[h]])


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_vllm(layout):
    k, v, q = tokens()
    with spec() as ctx:
        own = owned(ctx, k, v)
        kp, vp, bt, lens, slots = pool(k, v, BLOCK)
        nhd = np.stack([kp, vp]).reshape(2, -1, BLOCK, HKV, D)
        cache = nhd if layout == "NHD" else np.ascontiguousarray(nhd.transpose(0, 1, 3, 2, 4))
        view = qgen.View.vllm(ctx, cache, bt, lens, layout=layout)
        view.update(slots[: len(slots) // 2])
        view.update(slots[len(slots) // 2:])
        same_as_owned(ctx, own, view, q)


@pytest.mark.parametrize("page", [BLOCK, BLOCK // 2])
def test_sglang(page):
    k, v, q = tokens(2)
    with spec() as ctx, spec(bounds="f16") as c16:
        own = owned(ctx if page == BLOCK else c16, k, v)  # half-block pages rank by their f16 bounds
        kp, vp, bt, lens, slots = pool(k, v, page)
        req_to_token = (bt[:, :, None].astype(np.int64) * page + np.arange(page)).reshape(len(LENS), -1)
        assert np.array_equal(qgen.sglang_block_table(req_to_token, page), bt)
        view = qgen.View.sglang(ctx, kp, vp, page, bt, lens)
        view.update(slots.astype(np.int32))
        same_as_owned(ctx, own, view, q)


def test_transformers_paged():
    k, v, q = tokens(3)
    with spec() as ctx, spec(bounds="f16") as c16:  # block_size 16 under a block-32 spec: two engine pages a selection page
        own = owned(c16, k, v)  # which rank by their f16 bounds
        kp, vp, bt, lens, slots = pool(k, v, BLOCK // 2)
        pad = np.zeros((2, HKV, D), np.float16)
        view = qgen.View.transformers(ctx, np.concatenate([kp, pad]), np.concatenate([vp, pad]), BLOCK // 2, bt, lens)
        view.update(np.concatenate([slots, [-1, -1]]))  # padding slots are skipped
        same_as_owned(ctx, own, view, q)


def test_wrapper_and_engine_changes():
    k, v, q = tokens(4)
    with spec() as ctx:
        kp, vp, bt, lens, slots = pool(k, v, BLOCK)
        view = qgen.View.sglang(ctx, kp, vp, BLOCK, bt, lens)
        view.update(slots)
        w = qgen.DecodeWrapper(view)
        out = w.plan(range(len(LENS)), coverage=0.3)
        assert w.run(q) is out
        assert np.array_equal(out, view.attend(q, list(range(len(LENS))), coverage=0.3))
        lens[0] = 100  # the engine shortens a sequence in place: the next step sees it
        want = view.attend(q, list(range(len(LENS))), coverage=0.3)
        assert np.array_equal(w.run(q), want)
        with spec() as c2:
            short = c2.cache(1, 100)
            short.append(k[:100], v[:100])
            assert np.array_equal(want[:1], short.attend(q[:1], coverage=0.3))


def test_tensor_parallel_split():
    k, v, q = tokens(5)
    with spec() as full_ctx, spec(HQ // 2, HKV // 2) as rank_ctx:
        full = owned(full_ctx, k, v)
        kp, vp, bt, lens, slots = pool(k, v, BLOCK)
        outs = []
        for r in range(2):  # rank r: KV heads [r*HKV/2, (r+1)*HKV/2) and their query heads
            kr, vr = kp[:, r * HKV // 2:(r + 1) * HKV // 2], vp[:, r * HKV // 2:(r + 1) * HKV // 2]
            view = qgen.View.sglang(rank_ctx, kr, vr, BLOCK, bt, lens)  # strided heads, in place
            view.update(slots)
            outs.append((view.attend(q[:, r * HQ // 2:(r + 1) * HQ // 2].copy(), list(range(len(LENS)))), view))
        seqs = list(range(len(LENS)))
        assert np.array_equal(np.concatenate([o for o, _ in outs], axis=1), full.attend(q, seqs))
        for s in seqs:
            lf, cf = full.selection(s)
            for r, (_, view) in enumerate(outs):
                lr, cr = view.selection(s)
                assert np.array_equal(cr, cf[r * HKV // 2:(r + 1) * HKV // 2])


def test_refusals():
    k, v, q = tokens(6)
    with spec() as ctx:
        kp, vp, bt, lens, slots = pool(k, v, BLOCK)
        view = qgen.View.sglang(ctx, kp, vp, BLOCK, bt, lens)
        with pytest.raises(qgen.Error, match="view"):
            view.append(k[:1], v[:1])
        with pytest.raises(qgen.Error, match="page_size"):
            qgen.View.sglang(ctx, kp, vp, 8, np.zeros((8, 2 * bt.shape[1] * 4), np.int32), lens)
        with pytest.raises(qgen.Error, match="dtype"):
            qgen.View.sglang(ctx, kp.astype(np.float32), vp, BLOCK, bt, lens)
        with pytest.raises(qgen.Error, match="block_table"):
            qgen.View.sglang(ctx, kp, vp, BLOCK, bt.astype(np.int64), lens)
        with pytest.raises(qgen.Error, match="slot_mapping"):
            view.update(slots.astype(np.float32))


def test_hostile_arguments():
    """Arguments that used to escape as Python errors, pass silently or fail late: each a
    qgen.Error naming the argument, raised before anything runs."""
    k, v, q = tokens(7)
    with spec() as ctx:
        kp, vp, bt, lens, slots = pool(k, v, BLOCK)
        view = qgen.View.sglang(ctx, kp, vp, BLOCK, bt, lens)
        view.update(slots)
        seqs = list(range(len(LENS)))
        for bad, field in ((0, "block_size = 0"), (32.0, "block_size = 32.0")):
            with pytest.raises(qgen.Error, match=field):  # was ZeroDivisionError / TypeError
                qgen.View.transformers(ctx, kp, vp, bad, bt, lens)
        with pytest.raises(qgen.Error, match="slots, H, D"):  # was AttributeError
            qgen.View.sglang(ctx, kp.tolist(), vp, BLOCK, bt, lens)
        for kw, field in (({"sink": 2**64}, "sink"), ({"recent": 2**70}, "recent"), ({"budget": 2**64 + 64}, "budget")):
            with pytest.raises(qgen.Error, match=field):  # ctypes wrapped them (2^64 + 64 tokens ran as 64)
                view.attend(q, seqs, **kw)
        with pytest.raises(qgen.Error, match="seq_lens"):  # was QGEN_ERR_CUDA
            view.seq_len(0)
        w = qgen.DecodeWrapper(view)
        with pytest.raises(qgen.Error, match="coverage"):  # was refused only at every run()
            w.plan(seqs, coverage=2.0)
        lens[1] = 10**6  # past max_blocks * page_size: the CPU backend refuses the step
        with pytest.raises(qgen.Error, match=r"seq_lens\[1\]"):
            view.attend(q, seqs, dense=True)
        lens[1] = LENS[1]
        w.plan(seqs)
        view.close()
        with pytest.raises(qgen.Error, match="closed"):  # plan of a closed view
            w.plan(seqs)


def test_tp_counts():
    assert qgen.tp.head_range(np.int64(8), 2, np.int32(1)) == (4, 8)
    assert qgen.tp.rank_fields({"n_head": np.int64(8), "n_head_kv": 2}, 2)["n_head"] == 4
    one = qgen.tp.rank_fields({"n_head": np.int64(8)}, 1)  # world 1 too gives plain ints
    assert one == {"n_head": 8, "n_head_kv": 8} and all(type(v) is int for v in one.values())
    for args in ((8, 2, 1.5), (8, 0, 0), (8, -2, 0)):
        with pytest.raises(ValueError, match="qgen.tp"):  # 1.5 gave (6.0, 10.0)
            qgen.tp.head_range(*args)
