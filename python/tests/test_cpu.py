"""test_cpu.py — the qgen package on the CPU backend (NumPy arrays): dense attention
against a NumPy float64 reference, sparse at coverage 1 equal to dense bit for bit, the
selection read back, and every bad argument raising qgen.Error with its reason while the
cache stays as it was."""
import os
import subprocess
import sys

import numpy as np
import pytest

import qgen

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIELDS = dict(head_dim=64, n_head=8, n_head_kv=2, sparse={"block": 32, "coverage": 0.25, "sink": 32, "recent": 32})


def rand(rng, shape, dtype):
    return rng.uniform(-1, 1, shape).astype(dtype)


def reference(q, k, v, scale, lens, pages=None, block=None):
    """fp64 attention of each q row over its sequence's rows of k, v (every token, or the
    tokens of pages[h] for KV head h); q [n, H, D], k, v [tokens, Hkv, D] in sequence order."""
    n, H, D = q.shape
    Hkv = k.shape[1]
    out = np.zeros((n, H, D))
    start = 0
    for i, length in enumerate(lens):
        kk = k[start:start + length].astype(np.float64)
        vv = v[start:start + length].astype(np.float64)
        start += length
        for h in range(H):
            g = h // (H // Hkv)
            rows = np.arange(length)
            if pages is not None:
                rows = np.concatenate([np.arange(p * block, min((p + 1) * block, length)) for p in pages[i][g]])
            s = kk[rows, g] @ q[i, h].astype(np.float64) * scale
            w = np.exp(s - s.max())
            out[i, h] = (w / w.sum()) @ vv[rows, g]
    return out


@pytest.fixture
def ctx():
    with qgen.Context(backend="cpu", in_type="f32", out_type="f32", **FIELDS) as c:
        yield c


def filled(ctx, lens, seed=1, dtype=np.float32, max_tokens=1024):
    rng = np.random.default_rng(seed)
    i = ctx.info
    kv = ctx.cache(len(lens), max_tokens)
    k = rand(rng, (sum(lens), i["n_head_kv"], i["head_dim"]), dtype)
    v = rand(rng, k.shape, dtype)
    kv.append(k, v, seqs=list(range(len(lens))), n_new=lens)
    q = rand(rng, (len(lens), i["n_head"], i["head_dim"]), dtype)
    return kv, q, k, v


def test_info_and_spec_text(ctx):
    i = ctx.info
    assert (i["head_dim"], i["n_head"], i["n_head_kv"], i["group"], i["block"]) == (64, 8, 2, 4, 32)
    assert i["backend"] == "cpu" and i["sparse"] == 1 and i["coverage"] == 0.25 and i["in_type"] == "f32"
    assert qgen.spec_text(name="a", head_dim=64, sparse={"block": 32}) == \
        'return spec{ name = "a", head_dim = 64, sparse = { block = 32 } }\n'


def test_open_from_file_and_text():
    with qgen.Context(os.path.join(ROOT, "specs", "qwen3-4b.lua"), variant="qwen3-4b-q8_0", backend="cpu") as c:
        assert c.info["name"] == "qwen3-4b-q8_0" and c.info["k_type"] == "q8_0" and c.info["n_head"] == 32
    with qgen.Context(text="return spec{ name = 't', head_dim = 32, n_head = 2, n_head_kv = 1 }", backend="cpu") as c:
        assert c.info["name"] == "t" and c.info["sparse"] == 0


def test_dense_matches_fp64_reference(ctx):
    lens = [300, 77, 1]
    kv, q, k, v = filled(ctx, lens)
    assert [kv.seq_len(s) for s in range(3)] == lens
    out = kv.attend(q, dense=True)
    # the cache holds f16: the reference sees the same rounded K and V
    ref = reference(q, k.astype(np.float16), v.astype(np.float16), ctx.info["scale"], lens)
    np.testing.assert_allclose(out, ref, rtol=0, atol=2e-5)


def test_dense_f16_io():
    with qgen.Context(backend="cpu", **FIELDS) as c:
        kv, q, k, v = filled(c, [200], dtype=np.float16)
        out = kv.attend(q, dense=True)
        assert out.dtype == np.float16
        np.testing.assert_allclose(out, reference(q, k, v, c.info["scale"], [200]), rtol=0, atol=2e-3)


def test_sparse_full_coverage_is_dense_bit_for_bit(ctx):
    kv, q, _, _ = filled(ctx, [500, 260])
    dense = kv.attend(q, dense=True)
    full = kv.attend(q, coverage=1.0, sink=0, recent=0)
    assert full.tobytes() == dense.tobytes()
    lists, counts = kv.selection(1)
    assert list(counts) == [9, 9] and all(sorted(lists[h, :9]) == list(range(9)) for h in range(2))


def test_selection_matches_the_sparse_output(ctx):
    lens = [700, 400]
    kv, q, k, v = filled(ctx, lens, seed=3)
    out = kv.attend(q)  # the spec's budget: 25 % of the pages plus sink and recent
    assert not np.array_equal(out, kv.attend(q, dense=True))
    out = kv.attend(q)
    pages = []
    for s, length in enumerate(lens):
        lists, counts = kv.selection(s)
        n = -(-length // 32)
        sel = [lists[h, :counts[h]] for h in range(2)]
        for p in sel:
            assert len(set(p.tolist())) == len(p) and p.min() >= 0 and p.max() < n
            assert 0 in p and n - 1 in p  # the sink's and the recent tokens' pages
            assert len(p) >= int(0.25 * n)
        pages.append(sel)
    ref = reference(q, k.astype(np.float16), v.astype(np.float16), ctx.info["scale"], lens, pages, 32)
    np.testing.assert_allclose(out, ref, rtol=0, atol=2e-5)


def test_top_p_cuts_the_two_stage_lists():
    """sparse.rescore.top_p: each head's list is a subset of the two-stage one (never longer,
    shorter somewhere on random keys), and the output is attention over exactly it."""
    lens = [700, 400]
    counts_of = {}
    for p in (1.0, 0.1):
        sparse = dict(FIELDS["sparse"], rescore={"candidates": 4, "top_p": p})
        fields = dict(FIELDS, sparse=sparse)
        with qgen.Context(backend="cpu", in_type="f32", out_type="f32", **fields) as c:
            kv, q, k, v = filled(c, lens, seed=5)
            out = kv.attend(q)
            sel = [[kv.selection(s)[0][h, :kv.selection(s)[1][h]] for h in range(2)] for s in range(2)]
            counts_of[p] = [[len(x) for x in s] for s in sel]
            ref = reference(q, k.astype(np.float16), v.astype(np.float16), c.info["scale"], lens, sel, 32)
            np.testing.assert_allclose(out, ref, rtol=0, atol=2e-5)
            if p < 1:
                for s in range(2):
                    for h in range(2):
                        assert set(sel[s][h].tolist()) <= set(two[s][h].tolist())
            else:
                two = sel
    assert all(a <= b for s in range(2) for a, b in zip(counts_of[0.1][s], counts_of[1.0][s]))
    assert counts_of[0.1] != counts_of[1.0]


def test_reuse_extends_the_last_selection(ctx):
    """attend(reuse=True): the last sparse selection plus the pages begun since, attended
    exactly (fp64 over those pages); refused before a selection, after a reset, with a budget."""
    lens = [700, 77]
    kv, q, k, v = filled(ctx, lens, seed=5)
    with pytest.raises(qgen.Error, match="no sparse selection"):
        kv.attend(q, reuse=True)
    kv.attend(q)
    before = [kv.selection(s) for s in range(2)]
    rng = np.random.default_rng(6)
    more = [37, 1]  # sequence 0 (700 tokens: 22 pages) begins two pages, sequence 1 none
    k2, v2 = rand(rng, (sum(more), 2, 64), np.float32), rand(rng, (sum(more), 2, 64), np.float32)
    kv.append(k2, v2, seqs=[0, 1], n_new=more)
    q2 = rand(rng, q.shape, np.float32)
    out = kv.attend(q2, reuse=True)
    pages, kk, vv, start = [], [], [], 0
    for s in range(2):
        lists, counts = kv.selection(s)
        old_l, old_c = before[s]
        n = -(-(lens[s] + more[s]) // 32)
        sel = []
        for h in range(2):
            want = list(old_l[h, :old_c[h]]) + list(range(old_l[h, old_c[h] - 1] + 1, n))
            assert list(lists[h, :counts[h]]) == want
            sel.append(lists[h, :counts[h]])
        pages.append(sel)
        kk.append(np.concatenate([k[start:start + lens[s]], k2[sum(more[:s]):sum(more[:s + 1])]]))
        vv.append(np.concatenate([v[start:start + lens[s]], v2[sum(more[:s]):sum(more[:s + 1])]]))
        start += lens[s]
    assert kv.selection(0)[1][0] == before[0][1][0] + 2  # sequence 0's pages 22 and 23 begun since
    full = [x + y for x, y in zip(lens, more)]
    ref = reference(q2, np.concatenate(kk).astype(np.float16), np.concatenate(vv).astype(np.float16), ctx.info["scale"],
                    full, pages, 32)
    np.testing.assert_allclose(out, ref, rtol=0, atol=2e-5)
    with pytest.raises(qgen.Error, match="reuse=True takes no"):
        kv.attend(q2, reuse=True, coverage=0.5)
    kv.reset(1)
    with pytest.raises(qgen.Error, match="sequence 1 has no sparse selection"):
        kv.attend(q2[1:], seqs=[1], reuse=True)


def test_budget_in_tokens_and_reset(ctx):
    kv, q, _, _ = filled(ctx, [640])
    kv.attend(q, budget=128, sink=0, recent=0)
    _, counts = kv.selection(0)
    assert list(counts) == [4, 4]
    kv.reset(0)
    assert kv.seq_len(0) == 0
    assert not kv.attend(q).any()  # an empty sequence gives zeros


def test_rollback_leaves_the_cache_of_the_tokens_kept():
    """Draft tokens removed: the bytes of a cache fed only the tokens kept (f16 keys into an
    f16 K: the bounds of the page cut back are the same bytes too)."""
    with qgen.Context(backend="cpu", in_type="f16", out_type="f16", **FIELDS) as c:
        rng = np.random.default_rng(7)
        i = c.info
        k = rand(rng, (90, i["n_head_kv"], i["head_dim"]), np.float16)
        v = rand(rng, k.shape, np.float16)
        kv = c.cache(3, 256)
        kv.append(k, v, seqs=[0, 1, 2], n_new=[45, 32, 13])  # 45 = a page and 13 tokens
        kv.rollback(0, 6)
        kv.rollback(1, 32)
        kv.rollback(2, 0)
        fresh = c.cache(3, 256)
        fresh.append(np.concatenate([k[:39], k[77:]]), np.concatenate([v[:39], v[77:]]), seqs=[0, 2], n_new=[39, 13])
        assert kv.seq_len([0, 1, 2]) == [39, 0, 13]
        assert snapshot(kv) == snapshot(fresh)
        before = snapshot(kv)
        for call, words, err in [(lambda: kv.rollback(0, 40), "n = 40 is outside [0, 39]", ValueError),
                                 (lambda: kv.rollback(0, -1), "must be >= 0 tokens", ValueError),
                                 (lambda: kv.rollback(3, 1), "seqs[0] = 3 is outside [0, 3)", ValueError),
                                 (lambda: kv.rollback([0, 1], 1), "takes one sequence id", TypeError),
                                 (lambda: kv.rollback(0, 1.5), "is not an integer", TypeError)]:
            with pytest.raises(err) as e:
                call()
            assert isinstance(e.value, qgen.Error) and words in str(e.value), str(e.value)
        assert snapshot(kv) == before


def test_verify_step_of_several_tokens_is_causal(ctx):
    """attend(n_q=...): a speculative verify step; token j of a sequence sees all but the
    step's later tokens (against NumPy's fp64 attention), one selection per sequence."""
    kv, _, k, v = filled(ctx, [200, 37])
    rng = np.random.default_rng(3)
    i = ctx.info
    q = rand(rng, (6, i["n_head"], i["head_dim"]), np.float32)  # 4 tokens of sequence 1, 2 of 0
    out = kv.attend(q, seqs=[1, 0], n_q=[4, 2], dense=True)
    k16, v16 = k.astype(np.float16), v.astype(np.float16)
    for row, (s, j, n) in enumerate([(1, 0, 4), (1, 1, 4), (1, 2, 4), (1, 3, 4), (0, 0, 2), (0, 1, 2)]):
        start, length = (0, 200) if s == 0 else (200, 37)
        vis = length - (n - 1 - j)
        ref = reference(q[row:row + 1], k16[start:start + vis], v16[start:start + vis], i["scale"], [vis])
        np.testing.assert_allclose(out[row:row + 1], ref, rtol=0, atol=2e-5)
    kv.attend(q, seqs=[1, 0], n_q=[4, 2], coverage=0.25, sink=0, recent=0)
    assert list(kv.selection(0)[1]) == [2, 2]  # 7 pages of 32: ceil(0.25 * 7) = 2 for the step's 2 tokens
    for call, words, err in [(lambda: kv.attend(q, n_q=[4, 1]), "summing to 5", ValueError),
                             (lambda: kv.attend(q, seqs=[0, 1], n_q=[0, 6]), "n_q[0] = 0 is outside", ValueError),
                             (lambda: kv.attend(q[:2], n_q=[17, -15]), "n_q[0] = 17 is outside [1, QGEN_MAX_STEP_TOKENS = 16]",
                              ValueError),
                             (lambda: kv.attend(q, n_q=6), "n_q must be a list", TypeError)]:
        with pytest.raises(err) as e:
            call()
        assert isinstance(e.value, qgen.Error) and words in str(e.value), str(e.value)


def test_sinks_and_window(ctx):
    """attend(sinks=..., window=...): gpt-oss's learned sinks (one more softmax term a head,
    weighing no value) and a sliding window, against NumPy's fp64 attention."""
    kv, q, k, v = filled(ctx, [150])
    i = ctx.info
    sinks = np.linspace(-2, 3, i["n_head"]).astype(np.float32)
    out = kv.attend(q, dense=True, sinks=sinks, window=40)
    kk, vv = k[110:].astype(np.float16).astype(np.float64), v[110:].astype(np.float16).astype(np.float64)
    for h in range(i["n_head"]):
        g = h // (i["n_head"] // i["n_head_kv"])
        sc = kk[:, g] @ q[0, h].astype(np.float64) * i["scale"]
        m = max(sc.max(), sinks[h])
        w = np.exp(sc - m)
        np.testing.assert_allclose(out[0, h], (w @ vv[:, g]) / (w.sum() + np.exp(sinks[h] - m)), rtol=0, atol=2e-6)
    with pytest.raises(TypeError, match="float32 logits"):
        kv.attend(q, dense=True, sinks=sinks.astype(np.float64))
    with pytest.raises(ValueError, match="shape"):
        kv.attend(q, dense=True, sinks=sinks[:3])
    with pytest.raises(ValueError, match="a window attends dense"):
        kv.attend(q, coverage=0.5, window=40)


def test_share_prefix(ctx):
    """Two requests over one prompt: the second takes the first's 70-token prefix, each
    goes on with its own tokens, and each attends as a cache fed its tokens alone would."""
    rng = np.random.default_rng(11)
    i = ctx.info
    k = rand(rng, (130, i["n_head_kv"], i["head_dim"]), np.float32)
    v = rand(rng, k.shape, np.float32)
    q = rand(rng, (2, i["n_head"], i["head_dim"]), np.float32)
    kv = ctx.cache(2, 256)
    kv.append(k[:100], v[:100], seqs=[0])
    kv.share_prefix(0, 1, 70)
    kv.append(k[100:], v[100:], seqs=[1])
    alone = ctx.cache(2, 256)
    alone.append(np.concatenate([k[:100], k[:70], k[100:]]), np.concatenate([v[:100], v[:70], v[100:]]), seqs=[0, 1],
                 n_new=[100, 100])
    for kw in (dict(dense=True), dict(coverage=0.5, sink=0, recent=0)):
        assert np.array_equal(kv.attend(q, **kw), alone.attend(q, **kw))
    with pytest.raises(ValueError, match="empty sequence"):
        kv.share_prefix(0, 1, 10)
    with pytest.raises(ValueError, match="shares"):
        kv.rollback(1, 40)
    with pytest.raises(TypeError, match="one sequence id"):
        kv.share_prefix([0], 1, 10)


def snapshot(kv):
    return {w: kv.read(w).tobytes() for w in ("k", "v", "bounds", "page_table", "seq_len")} | \
        {"len": [kv.seq_len(s) for s in range(kv.max_seqs)]}


def bad_calls(kv, q, k, v):
    """(call, words its message must hold, the status name)"""
    inv = "QGEN_ERR_INVALID_ARG"
    k3 = np.zeros((4, 2, 64), np.float32)
    return [
        (lambda: kv.append(k3[:, :1], k3[:, :1]), "shape [4, 1, 64], expected [4, 2, 64]", inv),
        (lambda: kv.append(k3.astype(np.float16), k3), "dtype float16", inv),
        (lambda: kv.append(k3, k3[:3]), "v has shape [3, 2, 64]", inv),
        (lambda: kv.append(np.zeros((2, 4, 64), np.float32).transpose(1, 0, 2), k3), "not contiguous", inv),
        (lambda: kv.append(k3.tolist(), k3), "k must be a NumPy array or a torch tensor, got list", inv),
        (lambda: kv.append(k3, k3, seqs=[5]), "seqs[0] = 5 is outside [0, 2)", inv),
        (lambda: kv.append(k3, k3, seqs=[-1]), "seqs[0] = -1", inv),
        (lambda: kv.append(k3, k3, seqs=[1, 1]), "listed twice", inv),
        (lambda: kv.append(k3, k3, seqs=[0, 1], n_new=[3, 3]), "sums to 6 but k and v hold 4", inv),
        (lambda: kv.append(k3, k3, seqs=[0, 1], n_new=[5, -1]), "n_new[1] = -1", inv),
        (lambda: kv.append(k3, k3, seqs=[0, 1], n_new=[4]), "1 entries for 2 sequences", inv),
        (lambda: kv.append(k3[:3], k3[:3], seqs=[0, 1]), "do not split equally", inv),
        (lambda: kv.append(k3, k3, seqs=[0.5]), "not an integer", inv),
        (lambda: kv.append(np.zeros((1000, 2, 64), np.float32), np.zeros((1000, 2, 64), np.float32)),
         "exceed its capacity 1024", "QGEN_ERR_CAPACITY"),
        (lambda: kv.attend(q[:, :4]), "shape [2, 4, 64], expected [2, 8, 64]", inv),
        (lambda: kv.attend(q[0]), "q must be [n_seq, 8, 64]", inv),
        (lambda: kv.attend(q.tolist()), "q must be a NumPy array or a torch tensor, got list", inv),
        (lambda: kv.append_decode(k3[:2].tolist(), k3[:2]), "k must be a NumPy array or a torch tensor", inv),
        (lambda: kv.attend(q, seqs=[0]), "2 rows for 1 sequences", inv),
        (lambda: kv.attend(q, out=np.zeros(q.shape, np.float16)), "out has dtype float16", inv),
        (lambda: kv.attend(q, out=np.zeros(q.shape, np.float32)[:, :, :32]), "out has shape", inv),
        (lambda: kv.attend(q, coverage=0.0), "coverage = 0 must be in (0, 1]", inv),
        (lambda: kv.attend(q, coverage=1.5), "coverage = 1.5", inv),
        (lambda: kv.attend(q, budget=-5), "budget = -5 must be > 0", inv),
        (lambda: kv.attend(q, budget=64, coverage=0.5), "not both", inv),
        (lambda: kv.attend(q, dense=True, coverage=0.5), "dense=True takes no coverage", inv),
        (lambda: kv.attend(q, sink=-1), "must be >= 0", inv),
        (lambda: kv.append_decode(k3[:2], k3[:2], seqs=[0]), "2 rows for 1 sequences", inv),
        (lambda: kv.append_decode(k3[:2, :1], k3[:2, :1]), "shape [2, 1, 64], expected [2, 2, 64]", inv),
        (lambda: kv.append_decode(k3[:2], k3[:2], seqs=[1, 1]), "listed twice", inv),
        (lambda: kv.append_decode(k3[:1], k3[:1], seqs=[3]), "seqs[0] = 3 is outside", inv),
        (lambda: kv.reset(2), "seqs[0] = 2 is outside", inv),
        (lambda: kv.seq_len(-3), "seqs[0] = -3", inv),
        (lambda: kv.selection(7), "seqs[0] = 7", inv),
        (lambda: kv.read("nope"), "'nope' is not one of k, v, bounds", inv),
    ]


def test_append_decode_equals_append_one_token_at_a_time(ctx):
    rng = np.random.default_rng(5)
    a, b = ctx.cache(2, 80), ctx.cache(2, 80)
    k, v = rand(rng, (70, 2, 64), np.float32), rand(rng, (70, 2, 64), np.float32)
    for c in (a, b):
        c.append(k, v, seqs=[0, 1], n_new=[63, 7])
    for _ in range(10):
        kd, vd, q = rand(rng, (2, 2, 64), np.float32), rand(rng, (2, 2, 64), np.float32), rand(rng, (2, 8, 64), np.float32)
        a.append_decode(kd, vd, seqs=[1, 0])
        b.append(kd, vd, seqs=[1, 0])
        assert np.array_equal(a.attend(q, seqs=[1, 0]), b.attend(q, seqs=[1, 0]))
        assert np.array_equal(a.attend(q, seqs=[1, 0], dense=True), b.attend(q, seqs=[1, 0], dense=True))
    assert snapshot(a) == snapshot(b) and [a.seq_len(0), a.seq_len(1)] == [73, 17]
    a.sync()
    for _ in range(8):  # 7 fill sequence 0 to its capacity of 80, the 8th is dropped
        a.append_decode(kd[:1], vd[:1], seqs=[0])
    assert a.seq_len(0) == 80
    with pytest.raises(qgen.Error) as e:
        a.sync()
    assert e.value.name == "QGEN_ERR_CAPACITY" and "dropped 1 token" in e.value.message and "sequence 0" in e.value.message
    a.sync()  # reported once


def test_every_bad_argument_raises_and_changes_nothing(ctx):
    kv, q, k, v = filled(ctx, [100, 50])
    kv.attend(q)
    before = snapshot(kv)
    sel_before = [kv.selection(s) for s in range(2)]
    for call, words, status in bad_calls(kv, q, k, v):
        with pytest.raises(qgen.Error) as e:
            call()
        assert e.value.name == status and words in e.value.message, (words, str(e.value))
        assert snapshot(kv) == before, words
    for s in range(2):
        lists, counts = kv.selection(s)
        assert np.array_equal(lists, sel_before[s][0]) and np.array_equal(counts, sel_before[s][1])


def test_read_only_out_and_closed_objects(ctx):
    kv, q, _, _ = filled(ctx, [10])
    out = np.zeros((1, 8, 64), np.float32)
    out.flags.writeable = False
    with pytest.raises(qgen.Error, match="read-only"):
        kv.attend(q[:1], out=out)
    kv.close()
    with pytest.raises(qgen.Error, match="the cache is closed"):
        kv.seq_len(0)
    kv2 = ctx.cache(1, 64)
    ctx.close()
    with pytest.raises(qgen.Error, match="closed"):
        kv2.attend(q[:1])
    with pytest.raises(qgen.Error, match="the context is closed"):
        ctx.cache(1, 64)


def test_dense_spec_refuses_sparse_requests():
    with qgen.Context(backend="cpu", head_dim=32, n_head=2, n_head_kv=1, in_type="f32", out_type="f32") as c:
        kv, q, _, _ = filled(c, [40])
        with pytest.raises(qgen.Error) as e:
            kv.attend(q, coverage=0.5)
        assert e.value.name == "QGEN_ERR_UNSUPPORTED" and "dense" in e.value.message
        with pytest.raises(qgen.Error, match="dense spec"):
            kv.selection(0)
        with pytest.raises(qgen.Error, match="no array 2"):
            kv.read("bounds")


@pytest.mark.parametrize("args, kwargs, words, status", [
    ((), {}, "give exactly one of", "QGEN_ERR_INVALID_ARG"),
    (("x.lua",), {"text": "return {}"}, "got spec, text", "QGEN_ERR_INVALID_ARG"),
    ((), {"text": "return 1", "backend": "tpu"}, "backend = 'tpu'", "QGEN_ERR_INVALID_ARG"),
    ((), {"head_dim": 100, "n_head": 2, "n_head_kv": 1}, "head_dim = 100 is not a multiple of 32", "QGEN_ERR_SPEC"),
    ((), {"head_dim": 64, "n_head": 2, "n_head_kv": 1, "colour": "red"}, "colour", "QGEN_ERR_SPEC"),
    ((), {"head_dim": 64, "n_head": 2, "n_head_kv": 1, "scale": object()}, "has no Lua spelling", "QGEN_ERR_INVALID_ARG"),
    ((), {"name": "x\"); os.exit(1) --", "head_dim": 64, "n_head": 2, "n_head_kv": 1}, "contains", "QGEN_ERR_SPEC"),
    ((), {"text": "return spec{"}, "text:1", "QGEN_ERR_SPEC"),
    (("/nonexistent/spec.lua",), {}, "/nonexistent/spec.lua", "QGEN_ERR_SPEC"),
])
def test_bad_contexts(args, kwargs, words, status):
    kwargs.setdefault("backend", "cpu")
    with pytest.raises(qgen.Error) as e:
        qgen.Context(*args, **kwargs)
    assert e.value.name == status and words in e.value.message, str(e.value)


def test_qgen_library_must_exist():
    env = dict(os.environ, QGEN_LIBRARY="/nonexistent/libqgen.so")
    r = subprocess.run([sys.executable, "-c", "import qgen; qgen.Context(text='', backend='cpu')"], env=env,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))), capture_output=True, text=True)
    assert r.returncode != 0 and "QGEN_LIBRARY=/nonexistent/libqgen.so: no such file" in r.stderr
