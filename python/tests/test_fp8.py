"""test_fp8.py — fp8 KV caches (e4m3, e5m2) from Python on the CPU backend: the type names
(qgen's, torch's, vLLM's), the per-tensor scales, the pool bytes decoded by the formats'
definitions against the inputs, dense attention against a NumPy float64 reference over
those decoded values, and (with torch) the pool bytes equal to what torch.float8_e4m3fn /
float8_e5m2 store for x / scale; with a GPU, the GPU backend's bytes and output against the
CPU backend's."""
import numpy as np
import pytest

import qgen

D, H, HKV = 64, 4, 2
FORMATS = {"e4m3": (3, 7, 448.0), "e5m2": (2, 15, 57344.0)}  # mantissa bits, bias, largest finite value


def decode(codes, fmt):
    """fp8 codes (uint8) to float64 by the format's definition (finite codes)."""
    mbits, bias, _ = FORMATS[fmt]
    c = codes.astype(np.int64)
    e, m = (c & 0x7F) >> mbits, c & ((1 << mbits) - 1)
    v = np.where(e > 0, (1 + m / (1 << mbits)) * 2.0 ** (e - bias), m * 2.0 ** (1 - bias - mbits))
    return np.where(c & 0x80, -v, v)


def tokens_of(kv, which, n_tokens):
    """Sequence 0's rows [tokens, n_head_kv, head_dim] of the K or V pool [pages][n_head_kv][block][D]."""
    b, hkv, d = kv.ctx.info["block"], kv.ctx.info["n_head_kv"], kv.ctx.info["head_dim"]
    pages = -(-n_tokens // b)
    pool = kv.read(which)[:pages * hkv * b * d]
    return pool.reshape(pages, hkv, b, d).transpose(0, 2, 1, 3).reshape(-1, hkv, d)[:n_tokens]


def test_type_names():
    assert [qgen.kv_type(t) for t in ("fp8", "fp8_e4m3", "fp8_e5m2", "float8_e4m3fn", "q8_0")] == \
        ["e4m3", "e4m3", "e5m2", "e4m3", "q8_0"]
    with qgen.Context(backend="cpu", head_dim=D, n_head=H, n_head_kv=HKV, k_type="fp8", v_type="fp8_e5m2") as c:
        assert (c.info["k_type"], c.info["v_type"], c.info["k_row_bytes"], c.info["v_row_bytes"]) == ("e4m3", "e5m2", D, D)
    with pytest.raises(qgen.Error, match="e4m3"):
        qgen.Context(backend="cpu", head_dim=D, n_head=H, n_head_kv=HKV, k_type="e4m3fnuz")


def test_pool_bytes_and_dense_attention():
    n = 100
    with qgen.Context(backend="cpu", head_dim=D, n_head=H, n_head_kv=HKV, k_type="e4m3", v_type="e5m2",
                      in_type="f32", out_type="f32") as c:
        ks, vs = 0.3, 1.0 / 64
        kv = c.cache(1, 256, k_scale=ks, v_scale=vs)
        rng = np.random.default_rng(5)
        k = rng.normal(size=(n, HKV, D)).astype(np.float32)
        v = rng.normal(size=(n, HKV, D)).astype(np.float32)
        kv.append(k, v)
        kd = decode(tokens_of(kv, "k", n), "e4m3") * ks
        vd = decode(tokens_of(kv, "v", n), "e5m2") * vs
        # nearest: within half a step (relative 2^-4 / 2^-3) or half the least subnormal
        assert np.all(np.abs(kd - k) <= np.maximum(np.abs(k) * 2.0 ** -4, ks * 2.0 ** -10))
        assert np.all(np.abs(vd - v) <= np.maximum(np.abs(v) * 2.0 ** -3, vs * 2.0 ** -17))
        q = rng.normal(size=(1, H, D)).astype(np.float32)
        out = kv.attend(q, dense=True)
        ref = np.zeros((H, D))
        for h in range(H):
            s = kd[:, h // (H // HKV)] @ q[0, h].astype(np.float64) * c.info["scale"]
            w = np.exp(s - s.max())
            ref[h] = (w / w.sum()) @ vd[:, h // (H // HKV)]
        np.testing.assert_allclose(out[0], ref, rtol=0, atol=2e-5)


def test_scales_refused():
    with qgen.Context(backend="cpu", head_dim=D, n_head=H, n_head_kv=HKV, k_type="e4m3", v_type="f16") as c:
        kv = c.cache(1, 64)
        kv.set_scales(2.0, 1.0)
        with pytest.raises(qgen.Error, match="only fp8 caches"):
            kv.set_scales(2.0, 0.5)
        with pytest.raises(qgen.Error, match="finite number > 0"):
            kv.set_scales(0.0)


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_bytes_are_torch_float8(fmt):
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip(f"torch {torch.__version__} has no float8 dtypes (2.1 and later have)")
    dtype = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[fmt]
    n, scale = 96, 0.125
    with qgen.Context(backend="cpu", head_dim=D, n_head=H, n_head_kv=HKV, k_type=dtype, v_type=dtype,
                      in_type="f32", out_type="f32") as c:
        kv = c.cache(1, 128, k_scale=scale, v_scale=scale)
        g = torch.Generator().manual_seed(7)
        k = torch.randn((n, HKV, D), generator=g) * 16  # e4m3: a few beyond the range; qgen saturates, vLLM clamps
        kv.append(k, k.clone())
        top = FORMATS[fmt][2]
        want = (k / scale).clamp(-top, top).to(dtype).view(torch.uint8).numpy()
        assert np.array_equal(tokens_of(kv, "k", n), want)


def test_gpu_matches_cpu_and_torch_bytes():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    fields = dict(head_dim=128, n_head=32, n_head_kv=8, k_type=torch.float8_e4m3fn, v_type="fp8_e5m2",
                  sparse={"block": 64, "coverage": 0.25})
    try:
        gpu = qgen.Context(backend="gpu", **fields)
    except qgen.Error as e:
        pytest.skip(f"the GPU backend does not open: {e}")
    lens, ks, vs = [3000, 700], 0.05, 0.02
    g = torch.Generator().manual_seed(3)
    k = (torch.rand((sum(lens), 8, 128), generator=g) * 2 - 1).half()
    v = (torch.rand(k.shape, generator=g) * 2 - 1).half()
    q = (torch.rand((2, 32, 128), generator=g) * 2 - 1).half()
    with gpu, qgen.Context(backend="cpu", **fields) as cpu:
        ref, kv = cpu.cache(2, 4096, k_scale=ks, v_scale=vs), gpu.cache(2, 4096, k_scale=ks, v_scale=vs)
        ref.append(k.numpy(), v.numpy(), seqs=[0, 1], n_new=lens)
        kv.append(k.cuda(), v.cuda(), seqs=[0, 1], n_new=lens)
        assert np.array_equal(kv.read("k"), ref.read("k")) and np.array_equal(kv.read("v"), ref.read("v"))
        want = (k[:lens[0]].float() / ks).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
        assert np.array_equal(tokens_of(kv, "k", lens[0]), want)
        dense = kv.attend(q.cuda(), dense=True)
        np.testing.assert_allclose(dense.float().cpu().numpy(), ref.attend(q.numpy(), dense=True).astype(np.float32),
                                   rtol=0, atol=2e-3)
        assert torch.equal(kv.attend(q.cuda(), coverage=1.0, sink=0, recent=0), dense)
