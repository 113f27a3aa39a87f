"""test_gpu.py — the qgen package on the GPU backend with torch CUDA tensors: outputs
against the CPU backend, tensors checked (kind, device, dtype), torch's current stream
used, append + attend captured in a CUDA graph, replayed, equal to eager, and append_decode +
attend captured once and replayed for 1000 decode steps, equal to eager step by step. Skipped
without torch, a GPU, or a CUDA driver that qgen can open."""
import numpy as np
import pytest

import qgen

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device for torch", allow_module_level=True)

FIELDS = dict(head_dim=128, n_head=32, n_head_kv=8, sparse={"block": 64, "coverage": 0.25, "sink": 64, "recent": 64})


@pytest.fixture(scope="module")
def gpu():
    try:
        c = qgen.Context(backend="gpu", **FIELDS)
    except qgen.Error as e:
        pytest.skip(f"the GPU backend does not open: {e}")
    yield c
    c.close()


def data(lens, seed=0):
    g = torch.Generator().manual_seed(seed)
    k = torch.rand((sum(lens), 8, 128), generator=g, dtype=torch.float32).mul_(2).sub_(1).half()
    v = torch.rand(k.shape, generator=g, dtype=torch.float32).mul_(2).sub_(1).half()
    q = torch.rand((len(lens), 32, 128), generator=g, dtype=torch.float32).mul_(2).sub_(1).half()
    return k, v, q


def test_matches_the_cpu_backend(gpu):
    lens = [3000, 1200]
    k, v, q = data(lens)
    with qgen.Context(backend="cpu", **FIELDS) as cpu:
        ref = cpu.cache(2, 4096)
        ref.append(k.numpy(), v.numpy(), seqs=[0, 1], n_new=lens)
        want_dense = ref.attend(q.numpy(), dense=True)
        want_full = ref.attend(q.numpy(), coverage=1.0, sink=0, recent=0)
        kv = gpu.cache(2, 4096)
        kv.append(k.cuda(), v.cuda(), seqs=[0, 1], n_new=lens)
        dense = kv.attend(q.cuda(), dense=True)
        assert dense.is_cuda and dense.dtype == torch.float16 and tuple(dense.shape) == (2, 32, 128)
        np.testing.assert_allclose(dense.float().cpu().numpy(), want_dense.astype(np.float32), rtol=0, atol=2e-3)
        full = kv.attend(q.cuda(), coverage=1.0, sink=0, recent=0)
        assert torch.equal(full, dense)
        np.testing.assert_array_equal(want_full, want_dense)
        kv.attend(q.cuda())
        lists, counts = kv.selection(0)
        assert counts.min() >= int(0.25 * 47) and lists.shape == (8, kv.pages_per_seq)
        assert [kv.seq_len(s) for s in range(2)] == lens
        kv.close()


def test_tensors_are_checked(gpu):
    kv = gpu.cache(1, 256)
    k, v, q = data([16])
    before = kv.read("k").tobytes()
    for call, words in [
        (lambda: kv.append(k.numpy(), v.numpy()), "torch CUDA tensor"),
        (lambda: kv.append(k, v.cuda()), "torch CUDA tensor"),
        (lambda: kv.append(k.cuda().float(), v.cuda()), "dtype float32"),
        (lambda: kv.append(k.cuda().transpose(1, 2).contiguous().transpose(1, 2), v.cuda()), "not contiguous"),
        (lambda: kv.attend(q.cuda(), out=torch.empty((1, 32, 128), dtype=torch.bfloat16, device="cuda")),
         "out has dtype bfloat16"),
    ]:
        with pytest.raises(qgen.Error) as e:
            call()
        assert e.value.name == "QGEN_ERR_INVALID_ARG" and words in e.value.message, str(e.value)
    assert kv.read("k").tobytes() == before and kv.seq_len(0) == 0
    kv.close()


def test_uses_the_current_stream(gpu):
    k, v, q = data([2000], seed=1)
    k, v, q = k.cuda(), v.cuda(), q.cuda()
    a, b = gpu.cache(1, 4096), gpu.cache(1, 4096)
    a.append(k, v)
    want = a.attend(q)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        # the inputs are made on s, so only s ordering them before qgen's kernels makes this right
        k2, v2, q2 = k * 1, v * 1, q * 1
        b.append(k2, v2)
        got = b.attend(q2)
    s.synchronize()
    assert torch.equal(got, want)
    a.close(), b.close()


def test_cuda_graph_of_append_and_attend_equals_eager(gpu):
    k, v, q = data([1500], seed=2)
    step_k, step_v, step_q = data([1], seed=3)
    eager, graphed = gpu.cache(1, 4096), gpu.cache(1, 4096)
    for c in (eager, graphed):
        c.append(k.cuda(), v.cuda())
    sk, sv, sq = step_k.cuda(), step_v.cuda(), step_q.cuda()
    out = torch.empty((1, 32, 128), dtype=torch.float16, device="cuda")
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        graphed.append(sk, sv)
        graphed.attend(sq, out=out)
    g.replay()
    eager.append(sk, sv)
    want = eager.attend(sq)
    torch.cuda.synchronize()
    assert torch.equal(out, want)
    assert graphed.read("k").tobytes() == eager.read("k").tobytes()
    eager.close(), graphed.close()


def test_cuda_graph_of_append_decode_and_attend_replays_1000_steps(gpu):
    prompt, steps = 1500, 1000
    k, v, _ = data([prompt], seed=4)
    eager, graphed = gpu.cache(1, 4096), gpu.cache(1, 4096)
    for c in (eager, graphed):
        c.append(k.cuda(), v.cuda())
    g = torch.Generator(device="cuda").manual_seed(5)

    def rnd(shape):
        return torch.rand(shape, generator=g, device="cuda", dtype=torch.float32).mul_(2).sub_(1).half()

    ks, vs, qs = rnd((steps, 1, 8, 128)), rnd((steps, 1, 8, 128)), rnd((steps, 1, 32, 128))
    sk, sv, sq = ks[0].clone(), vs[0].clone(), qs[0].clone()  # the graph's fixed inputs
    out_d = torch.empty((1, 32, 128), dtype=torch.float16, device="cuda")
    out_s = torch.empty_like(out_d)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graphed.append_decode(sk, sv)
        graphed.attend(sq, out=out_d, dense=True)
        graphed.attend(sq, out=out_s)
    for t in range(steps):
        sk.copy_(ks[t]), sv.copy_(vs[t]), sq.copy_(qs[t])
        graph.replay()
        eager.append(ks[t], vs[t])
        want_d, want_s = eager.attend(qs[t], dense=True), eager.attend(qs[t])
        assert torch.equal(out_d, want_d) and torch.equal(out_s, want_s), f"step {t}"
    assert graphed.seq_len(0) == prompt + steps == eager.seq_len(0)
    graphed.sync()
    for w in ("k", "v", "bounds", "seq_len"):
        assert graphed.read(w).tobytes() == eager.read(w).tobytes(), w
    eager.close(), graphed.close()
