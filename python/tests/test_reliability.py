"""test_reliability.py — the binding's own safety on the CPU backend: handles that cannot be
copied, closed in either order of collection, serialised across threads; outputs that
may not overlap what a step reads; integers, strings and arrays checked before they reach
C; lists of sequences taken whole; errors that are also the standard Python exceptions;
names, reprs and messages that say what things are.

Checks whose failure used to crash the interpreter (a double free, a wild pointer) run in
a child Python, so that a regression fails one test instead of ending the run."""
import copy
import gc
import os
import pickle
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import qgen

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = os.path.dirname(os.path.dirname(os.path.abspath(qgen.__file__)))  # the qgen under test, for child Pythons
FIELDS = dict(head_dim=64, n_head=8, n_head_kv=2, in_type="f32", out_type="f32",
              sparse={"block": 32, "coverage": 0.25, "sink": 32, "recent": 32})
INV = "QGEN_ERR_INVALID_ARG"


@pytest.fixture
def ctx():
    with qgen.Context(backend="cpu", **FIELDS) as c:
        yield c


def filled(ctx, lens, seed=1, max_tokens=1024):
    rng = np.random.default_rng(seed)
    kv = ctx.cache(len(lens), max_tokens)
    k = rng.uniform(-1, 1, (sum(lens), 2, 64)).astype(np.float32)
    v = rng.uniform(-1, 1, k.shape).astype(np.float32)
    kv.append(k, v, seqs=list(range(len(lens))), n_new=lens)
    q = rng.uniform(-1, 1, (len(lens), 8, 64)).astype(np.float32)
    return kv, q


def isolated(body):
    """Run body (Python source, with qgen, numpy as np and a CPU context `ctx` of FIELDS
    ready) in a child interpreter; its exit status and output."""
    code = f"import sys\nsys.path.insert(0, {PKG!r})\nimport numpy as np, qgen\n" \
           f"ctx = qgen.Context(backend='cpu', **{FIELDS!r})\n" + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def expect_ok(r):
    assert r.returncode == 0 and "OK" in r.stdout, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"


# ---- handles: copies, cycles, threads ----------------------------------------------------

def test_copy_and_pickle_are_refused():
    """A copy shared the handle: closing one left the other on freed memory (a segfault,
    or a double free when both were collected)."""
    expect_ok(isolated("""
        import copy, pickle
        kv = ctx.cache(2, 64)
        k = np.zeros((4, 2, 64), np.float32)
        bt, lens = np.zeros((2, 2), np.int32), np.zeros(2, np.int32)
        pool = np.zeros((4, 32, 2, 64), np.float16)
        vctx = qgen.Context(backend='cpu', head_dim=64, n_head=8, n_head_kv=2, sparse={'block': 32})
        view = qgen.View(vctx, pool, pool, bt, lens)
        for obj in (ctx, kv, view):
            for how in (copy.copy, copy.deepcopy, pickle.dumps):
                try:
                    twin = how(obj)
                except qgen.Error as e:
                    assert isinstance(e, TypeError) and e.status == 1 and "cannot be" in e.message, e
                else:
                    raise SystemExit(f"{how.__name__} of {type(obj).__name__} was allowed")
        kv.append(k, k, seqs=[0, 1])  # the original still works
        assert kv.seq_len([0, 1]) == [2, 2]
        kv.close()
        del kv
        gc = __import__('gc'); gc.collect()
        print('OK')
    """))


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def test_context_and_cache_in_a_cycle_do_not_leak():
    """ctx.keep = kv makes a cycle; the collector finalised the context first, which then
    closed without destroying the cache, and the cache skipped its own close: the cache's
    memory (16 MiB here, touched by the append) leaked every round."""
    tokens = 32768
    k = np.ones((tokens, 2, 64), np.float32)

    def round_():
        c = qgen.Context(backend="cpu", **FIELDS)
        kv = c.cache(1, tokens)
        kv.append(k, k)
        c.keep = kv
        kv.me = kv  # a second cycle through the cache alone
        del c, kv
        gc.collect()

    round_()
    before = rss_mib()
    for _ in range(5):
        round_()
    grown = rss_mib() - before
    assert grown < 12, f"RSS grew {grown:.0f} MiB over 5 rounds (16 MiB a leaked cache)"


def test_context_closes_its_caches_whatever_the_order():
    c = qgen.Context(backend="cpu", **FIELDS)
    a, b = c.cache(1, 64), c.cache(1, 64)
    a.close()  # closed first: it leaves the context's set
    c.close()
    for kv in (a, b):
        with pytest.raises(qgen.Error, match="closed"):
            kv.seq_len(0)
    with pytest.raises(qgen.Error, match="its context was closed"):
        b.attend(np.zeros((1, 8, 64), np.float32))
    a.close(), b.close(), c.close()  # all idempotent


def test_threads_on_one_cache_are_serialised():
    """ctypes drops the GIL, so two threads ran attend on one qgen_kv at once and got each
    other's rows (26 to 29 of 30 outputs wrong, no error)."""
    with qgen.Context(backend="cpu", **FIELDS) as c:
        rng = np.random.default_rng(0)
        kv = c.cache(4, 8192)
        k = rng.uniform(-1, 1, (4 * 8192, 2, 64)).astype(np.float32)
        kv.append(k, k, seqs=[0, 1, 2, 3])
        qs = [rng.uniform(-1, 1, (4, 8, 64)).astype(np.float32) for _ in range(30)]
        want = [kv.attend(q) for q in qs]
        got = [None] * len(qs)
        errors = []

        def work(first):
            try:
                for i in range(first, len(qs), 2):
                    got[i] = kv.attend(qs[i])
                    kv.seq_len([0, 1, 2, 3])
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(j,)) for j in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        wrong = sum(not np.array_equal(a, b) for a, b in zip(want, got))
        assert wrong == 0, f"{wrong} of {len(qs)} outputs differ from the serial ones"
    assert "serialised" in qgen.Cache.__doc__ and "lock" in qgen.Cache.__doc__


# ---- overlapping memory ----------------------------------------------------------------

def test_out_overlapping_q_is_refused(ctx):
    """attend(buf[:3], out=buf[1:4]) read rows it had already written: wrong rows, no error."""
    kv, _ = filled(ctx, [100, 50, 70, 10])
    rng = np.random.default_rng(3)
    buf = rng.uniform(-1, 1, (4, 8, 64)).astype(np.float32)
    want = kv.attend(buf[:3].copy(), dense=True)
    for q, out in ((buf[:3], buf[1:4]), (buf[1:4], buf[:3]), (buf[:3], buf[:3])):
        with pytest.raises(qgen.Error) as e:
            kv.attend(q, out=out, dense=True)
        assert isinstance(e.value, ValueError) and "out overlaps q" in e.value.message
    flat = np.zeros(2 * 3 * 8 * 64, np.float32)  # overlap through views of another shape
    q = flat[: 3 * 512].reshape(3, 8, 64)
    q[:] = buf[:3]
    with pytest.raises(qgen.Error, match="out overlaps q"):
        kv.attend(q, out=flat[100:100 + 3 * 512].reshape(3, 8, 64), dense=True)
    out = flat[3 * 512:].reshape(3, 8, 64)  # adjacent, not overlapping: fine
    assert kv.attend(q, out=out, dense=True) is out and np.array_equal(out, want)


def test_torch_cpu_out_overlapping_q_is_refused():
    torch = pytest.importorskip("torch")
    with qgen.Context(backend="cpu", **FIELDS) as c:
        kv, _ = filled(c, [100, 50, 70, 10])
        buf = torch.rand(4, 8, 64)
        with pytest.raises(qgen.Error, match="out overlaps q"):
            kv.attend(buf[:3], out=buf[1:4], dense=True)
        with pytest.raises(qgen.Error, match="out overlaps q"):  # numpy out over a tensor's memory
            kv.attend(buf[:3], out=buf.numpy()[1:4], dense=True)
        assert torch.equal(kv.attend(buf[:3], dense=True), kv.attend(buf[:3].clone(), dense=True))


def view_parts(page=32, pages=6):
    rng = np.random.default_rng(4)
    kp = rng.uniform(-1, 1, (pages, page, 2, 64)).astype(np.float16)
    vp = rng.uniform(-1, 1, kp.shape).astype(np.float16)
    bt = np.arange(pages, dtype=np.int32).reshape(2, pages // 2)
    lens = np.array([70, 90], np.int32)
    return kp, vp, bt, lens


def test_view_out_overlapping_the_pool_is_refused():
    """out over the view's pool, block table or lengths would overwrite what the step reads."""
    with qgen.Context(backend="cpu", head_dim=64, n_head=2, n_head_kv=2, k_type="f16", out_type="f16",
                      sparse={"block": 32}) as c:
        kp, vp, bt, lens = view_parts()
        view = qgen.View(c, kp, vp, bt, lens)
        q = np.random.default_rng(5).uniform(-1, 1, (2, 2, 64)).astype(np.float16)
        k_out = kp.reshape(-1)[1000:1000 + q.size].reshape(q.shape)
        v_out = vp.reshape(-1)[:q.size].reshape(q.shape)
        for out, what in ((k_out, "k pool"), (v_out, "v pool")):
            with pytest.raises(qgen.Error, match=f"out overlaps the view's {what}"):
                view.attend(q, out=out, dense=True)
        both = np.zeros(2 * 2 * 64 + 8, np.float16)
        bt2, lens2 = both[:8].view(np.int32).reshape(2, 2), np.array([0, 0], np.int32)
        v2 = qgen.View(c, kp[:4], vp[:4], bt2, lens2)
        with pytest.raises(qgen.Error, match="out overlaps the view's block_table"):
            v2.attend(q, out=both[4:4 + q.size].reshape(q.shape), dense=True)
        w = qgen.DecodeWrapper(view)
        with pytest.raises(qgen.Error, match="out overlaps the view's k pool"):
            w.plan([0, 1], out=k_out, dense=True)
        out = w.plan([0, 1], dense=True)
        with pytest.raises(qgen.Error, match="out overlaps q"):
            w.run(out)
        assert np.array_equal(w.run(q), view.attend(q, dense=True))
        assert np.array_equal(kp, view_parts()[0])  # the pool is untouched


# ---- values crossing into C ----------------------------------------------------------

def test_integers_are_range_checked_not_wrapped(ctx):
    """ctypes wraps: cache(2^32 + 2, 2^64 + 64) made a cache of 2 sequences of 64 tokens,
    Context(device=2^32) opened device 0."""
    for args, field in (((2**32 + 2, 64), "max_seqs = 4294967298"), ((-2**31 - 1, 64), "max_seqs"),
                        ((2, 2**64 + 64), "max_tokens = 18446744073709551680"), ((2**32 + 2, 2**64 + 64), "max_seqs")):
        with pytest.raises(qgen.Error) as e:
            ctx.cache(*args)
        assert isinstance(e.value, ValueError) and field in e.value.message and "out of range" in e.value.message
    for device in (2**32, -1, 2**31):
        with pytest.raises(qgen.Error, match="device = "):
            qgen.Context(backend="cpu", device=device, **FIELDS)
    kv, q = filled(ctx, [10])
    for kw, field in (({"coverage": 10**400}, "coverage"), ({"budget": 2**64 + 64}, "budget")):
        with pytest.raises(qgen.Error, match=field):  # coverage: an OverflowError escaped before
            kv.attend(q, **kw)
    for scales, field in (((10**400, 1.0), "k_scale"), ((1.0, 1e39), "v_scale"), (("2", 1.0), "k_scale")):
        with pytest.raises(qgen.Error, match=field):
            kv.set_scales(*scales)
    with pytest.raises(qgen.Error, match=r"n_new\[0\] = 4294967296 is out of range"):
        kv.append(np.zeros((4, 2, 64), np.float32), np.zeros((4, 2, 64), np.float32), seqs=[0], n_new=[2**32])
    with pytest.raises(qgen.Error, match="4294967302 is outside"):  # a sequence id past int32
        kv.seq_len(2**32 + 6)
    assert kv.seq_len(0) == 10


def test_lists_of_sequences_are_taken_whole(ctx):
    """reset([0, 1]) reset only sequence 0, seq_len([1, 0]) gave sequence 1's length,
    reset([]) raised IndexError."""
    kv, q = filled(ctx, [100, 50, 20])
    assert kv.seq_len([1, 0]) == [50, 100] and kv.seq_len(np.array([2])) == [20] and kv.seq_len(np.int64(1)) == 50
    assert kv.seq_len(range(3)) == [100, 50, 20]
    kv.reset([0, 1])
    assert kv.seq_len([0, 1, 2]) == [0, 0, 20]
    for call in (lambda: kv.reset([]), lambda: kv.seq_len([]), lambda: kv.reset(np.array([], np.int64))):
        with pytest.raises(qgen.Error) as e:
            call()
        assert isinstance(e.value, ValueError) and "no sequences given" in e.value.message
    with pytest.raises(qgen.Error, match="listed twice"):
        kv.reset([2, 2])
    with pytest.raises(qgen.Error, match=r"seqs\[1\] = 5 is outside"):  # checked before any reset
        kv.reset([2, 5])
    assert kv.seq_len(2) == 20
    kv.attend(q)
    with pytest.raises(qgen.Error) as e:
        kv.selection([0, 1])
    assert isinstance(e.value, TypeError) and "one sequence id" in e.value.message


def test_strings_with_nul_are_refused(tmp_path):
    """C strings end at the first NUL: "small.lua\\0/etc/passwd" opened small.lua."""
    spec = tmp_path / "small.lua"
    spec.write_text("return spec{ name = 'small', head_dim = 32, n_head = 2, n_head_kv = 1 }\n")
    text = spec.read_text()
    multi = os.path.join(ROOT, "specs", "qwen3-4b.lua")
    cases = [
        (lambda: qgen.Context(f"{spec}\0/etc/passwd", backend="cpu"), "the spec path"),
        (lambda: qgen.Context(os.fsencode(spec) + b"\0x", backend="cpu"), "the spec path"),
        (lambda: qgen.Context(text=text + "\0 os.exit(1)", backend="cpu"), "text"),
        (lambda: qgen.Context(multi, variant="qwen3-4b-q8_0\0junk", backend="cpu"), "variant"),
        (lambda: qgen.Context(text=text, cache_dir=f"{tmp_path}\0/etc", backend="cpu"), "cache_dir"),
    ]
    for call, what in cases:
        with pytest.raises(qgen.Error) as e:
            call()
        assert isinstance(e.value, ValueError) and e.value.name == INV, str(e.value)
        assert e.value.message.startswith(what) and "NUL byte" in e.value.message, str(e.value)
    with qgen.Context(spec, backend="cpu") as c:  # a pathlib.Path is a path
        assert c.info["name"] == "small"
    with pytest.raises(qgen.Error) as e:
        qgen.Context(text=12, backend="cpu")
    assert isinstance(e.value, TypeError) and "text must be a string" in e.value.message


def test_only_real_arrays_and_tensors_are_taken():
    """An object with its own __array_interface__ (or a class calling itself torch) was
    passed on as an address: qgen read or wrote wherever it pointed (a segfault)."""
    expect_ok(isolated("""
        kv = ctx.cache(2, 64)
        real = np.zeros((4, 2, 64), np.float32)

        class FakeArray:
            shape, dtype, strides = (4, 2, 64), np.dtype("float32"), None
            flags = {"C_CONTIGUOUS": True, "WRITEABLE": True}
            __array_interface__ = {"data": (16, False), "shape": (4, 2, 64), "typestr": "<f4", "version": 3}
            def tolist(self): return []

        class FakeDevice: type, index = "cpu", None
        class FakeTensor:
            shape, dtype, device, is_cuda = (4, 2, 64), "torch.float32", FakeDevice(), False
            def data_ptr(self): return 16
            def is_contiguous(self): return True
        FakeTensor.__module__ = "torch.fake"

        class Lying(np.ndarray):  # a real array whose attributes lie: its real memory is used
            @property
            def __array_interface__(self): return {"data": (16, False)}

        for fake in (FakeArray(), FakeTensor()):
            for call in (lambda: kv.append(fake, real), lambda: kv.append(real, fake),
                         lambda: kv.attend(np.zeros((1, 8, 64), np.float32), out=fake),
                         lambda: qgen.View(ctx, fake, fake, np.zeros((1, 1), np.int32), np.zeros(1, np.int32))):
                try:
                    call()
                except qgen.Error as e:
                    assert isinstance(e, TypeError) and "NumPy array or a torch tensor" in e.message, e
                else:
                    raise SystemExit(f"{type(fake).__name__} was taken")
        lying = real.view(Lying)
        lying[:] = 0.5
        kv.append(lying, lying, seqs=[0])
        assert (kv.read("k").view(np.float16) == 0.5).sum() == 4 * 2 * 64
        print("OK")
    """))


# ---- errors, names, reprs ------------------------------------------------------------

def test_errors_are_standard_exceptions(ctx, tmp_path):
    kv, q = filled(ctx, [10])
    cases = [
        (lambda: kv.attend(q, coverage=1.5), ValueError, qgen.InvalidArgumentError, INV),
        (lambda: kv.append(q.tolist(), q), TypeError, qgen.ArgumentTypeError, INV),
        (lambda: kv.attend(q.astype(np.float16)), TypeError, qgen.ArgumentTypeError, INV),
        (lambda: kv.append(np.zeros((2000, 2, 64), np.float32), np.zeros((2000, 2, 64), np.float32)), ValueError,
         qgen.CapacityError, "QGEN_ERR_CAPACITY"),
        (lambda: qgen.Context(str(tmp_path / "missing.lua"), backend="cpu"), FileNotFoundError, qgen.SpecNotFoundError,
         "QGEN_ERR_SPEC"),
        (lambda: qgen.Context(backend="cpu", head_dim=100, n_head=2, n_head_kv=1), ValueError, qgen.SpecError,
         "QGEN_ERR_SPEC"),
        # 2 x 1.9e9 tokens of 64 KiB: 2.5e14 bytes for K alone, past any address space
        (lambda: qgen.Context(backend="cpu", head_dim=256, n_head=64, n_head_kv=64).cache(2, 1_900_000_000),
         MemoryError, qgen.OutOfMemoryError, "QGEN_ERR_OUT_OF_MEMORY"),
        (lambda: qgen.Context(backend="gpu", device=2**31 - 1, **FIELDS), RuntimeError, qgen.Error, None),
        (lambda: qgen.Context(backend="cpu", head_dim=64, n_head=2, n_head_kv=1).cache(1, 64).attend(
            np.zeros((1, 2, 64), np.float16), coverage=0.5), NotImplementedError, qgen.UnsupportedError,
         "QGEN_ERR_UNSUPPORTED"),
    ]
    for call, std, cls, name in cases:
        with pytest.raises(qgen.Error) as e:
            call()
        assert isinstance(e.value, std) and isinstance(e.value, cls), (type(e.value).__mro__, str(e.value))
        assert name is None or e.value.name == name, str(e.value)
        assert e.value.status == qgen.STATUS_NAMES.index(e.value.name) and str(e.value).startswith(e.value.name)
    missing = str(tmp_path / "missing.lua")
    with pytest.raises(FileNotFoundError) as e:
        qgen.Context(missing, backend="cpu")
    assert e.value.filename == missing and missing in e.value.message
    e2 = pickle.loads(pickle.dumps(qgen.InvalidArgumentError(1, "x")))  # crosses processes intact
    assert type(e2) is qgen.InvalidArgumentError and e2.status == 1 and e2.message == "x"


def test_no_driver_suggests_the_cpu_backend():
    try:
        qgen.Context(backend="gpu", **FIELDS).close()
    except qgen.Error as e:
        if e.name != "QGEN_ERR_NO_DRIVER":
            pytest.skip(f"this machine has a CUDA driver ({e.name})")
        assert isinstance(e, RuntimeError) and 'backend="cpu"' in e.message, str(e)
    else:
        pytest.skip("this machine has a CUDA GPU")


def test_keyword_specs_are_named_after_their_shape_and_unprefixed():
    with qgen.Context(backend="cpu", head_dim=128, n_head=32, n_head_kv=8) as c:
        assert c.info["name"] == "d128-h32-kv8-f16"
    with qgen.Context(backend="cpu", head_dim=np.int64(64), n_head=8, n_head_kv=2, k_type="q8_0", v_type="f16") as c:
        assert c.info["name"] == "d64-h8-kv2-q8_0-f16"
    with qgen.Context(backend="cpu", name="mine", head_dim=64, n_head=8, n_head_kv=2) as c:
        assert c.info["name"] == "mine"
    assert 'name = "d64-h8-kv2-f16"' in qgen.spec_text(head_dim=64, n_head=8, n_head_kv=2)
    for kw, words in ((dict(head_dim=100, n_head=2, n_head_kv=1), "head_dim = 100 is not a multiple of 32"),
                      (dict(head_dim=64, n_head=2, n_head_kv=1, colour="red"), "unknown field 'colour'"),
                      (dict(head_dim=64, n_head=2, n_head_kv=1, k_type="q9 x"), 'k_type = "q9 x"')):
        with pytest.raises(qgen.Error) as e:
            qgen.Context(backend="cpu", **kw)
        assert e.value.message.startswith(words) and "fields:" not in e.value.message, str(e.value)
    with pytest.raises(qgen.Error, match="text:1:"):  # text keeps its line numbers
        qgen.Context(text="return spec{", backend="cpu")


def test_info_repr_and_selection_before_any_sparse_attend(ctx):
    assert ctx.info["sparse"] is True and ctx.info["cache_hit"] in (True, False)
    with qgen.Context(backend="cpu", head_dim=64, n_head=2, n_head_kv=1) as dense:
        assert dense.info["sparse"] is False
    kv, q = filled(ctx, [100, 50])
    r = repr(ctx)
    for words in ("qgen.Context", "'d64-h8-kv2-f16'", "cpu", "head_dim 64", "8 heads", "2 KV heads", "sparse", "open"):
        assert words in r, r
    r = repr(kv)
    for words in ("qgen.Cache", "'d64-h8-kv2-f16'", "cpu", "2 sequences", "1024 tokens", "150 tokens held", "open"):
        assert words in r, r
    with pytest.raises(qgen.Error) as e:  # was two arrays of zeros, as if nothing had been selected
        kv.selection(0)
    assert isinstance(e.value, ValueError) and "no sparse selection" in e.value.message
    kv.attend(q, dense=True)
    with pytest.raises(qgen.Error, match="sequence 1 has no sparse selection"):
        kv.selection(1)
    kv.attend(q)
    assert kv.selection(1)[1].sum() > 0
    kv.reset(1)
    with pytest.raises(qgen.Error, match="sequence 1 has no sparse selection"):
        kv.selection(1)
    assert kv.selection(0)[1].sum() > 0
    kp, vp, bt, lens = view_parts()
    with qgen.Context(backend="cpu", head_dim=64, n_head=2, n_head_kv=2, sparse={"block": 32}) as c2:
        view = qgen.View(c2, kp, vp, bt, lens)
        assert "qgen.View" in repr(view) and "6 pages of 32" in repr(view) and "open" in repr(view)
        with pytest.raises(qgen.Error, match="no sparse selection"):
            view.selection(0)
    assert "closed" in repr(view)  # its context closed it
    kv.close()
    ctx.close()
    assert "closed" in repr(kv) and "closed" in repr(ctx)


def test_gpu_tensors_overlap_copies_and_threads():
    """The same rules for torch CUDA tensors on the GPU backend (skipped without one)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    fields = dict(FIELDS, in_type="f16", out_type="f16")
    try:
        c = qgen.Context(backend="gpu", **fields)
    except qgen.Error as e:
        pytest.skip(f"the GPU backend does not open: {e}")
    with c:
        kv = c.cache(4, 4096)
        k = torch.rand((4 * 4000, 2, 64), device="cuda").half()
        kv.append(k, k, seqs=[0, 1, 2, 3])
        buf = torch.rand((5, 8, 64), device="cuda").half()
        with pytest.raises(qgen.Error, match="out overlaps q"):
            kv.attend(buf[:4], out=buf[1:5], dense=True)
        with pytest.raises(qgen.Error, match="must be a torch CUDA tensor"):
            kv.attend(buf[:4].cpu(), dense=True)
        for how in (copy.copy, copy.deepcopy):
            with pytest.raises(TypeError, match="cannot be copied"):
                how(kv)
        qs = [torch.rand((4, 8, 64), device="cuda").half() for _ in range(16)]
        want = [kv.attend(q).clone() for q in qs]
        got = [None] * len(qs)

        def work(first):
            for i in range(first, len(qs), 2):
                got[i] = kv.attend(qs[i])
                torch.cuda.current_stream().synchronize()

        threads = [threading.Thread(target=work, args=(j,)) for j in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(torch.equal(a, b) for a, b in zip(want, got))
        assert "gpu:0" in repr(kv) and "16000 tokens held" in repr(kv)
