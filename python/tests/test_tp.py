"""test_tp.py — tensor parallelism with qgen (qgen.tp): a rank needs only a spec with its
share of the heads.

    rank_fields divides n_head and n_head_kv by the world size and refuses what does not split;
    two caches over halves of the KV heads, attended with halves of the query heads, give
      concatenated the output of one full-width cache (dense and sparse, with the same page
      lists per KV head): bit for bit on the CPU backend, within 2e-3 on the GPU;
    a Qwen3 config with random weights split over 2 processes (torchrun, gloo; the CPU, or
      both ranks on one GPU) and generating through QgenCache(tp_size=2) on every rank gives
      the greedy tokens of the whole model in one process, logits within a measured error
      (float32: the same tokens; bfloat16: where a token differs, the top-2 gap there is
      below the logit error), dense and sparse 25 %.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

import qgen
from qgen.tp import head_range, rank_fields

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "python", "tp_generate.py")
FIELDS = dict(name="tp-test", head_dim=64, n_head=32, n_head_kv=8, in_type="f32", out_type="f32",
              sparse={"block": 32, "coverage": 0.25, "sink": 32, "recent": 32})


def test_rank_fields():
    f = rank_fields(FIELDS, 2)
    assert (f["n_head"], f["n_head_kv"], f["name"]) == (16, 4, "tp-test-tp2")
    assert {k: v for k, v in f.items() if k not in ("n_head", "n_head_kv", "name")} == \
        {k: v for k, v in FIELDS.items() if k not in ("n_head", "n_head_kv", "name")}
    assert rank_fields(FIELDS, 8)["n_head_kv"] == 1
    assert rank_fields(FIELDS, 1) == FIELDS
    assert head_range(8, 2, 1) == (4, 8)


@pytest.mark.parametrize("world, err", [(3, "divisible"), (16, "divisible"), (0, ">= 1"), (2.0, "integer")])
def test_rank_fields_refuses(world, err):
    with pytest.raises(ValueError, match=err):
        rank_fields(FIELDS, world)
    with pytest.raises(ValueError, match="outside"):
        head_range(8, 2, 2)


def _gpu_ready():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.parametrize("backend", ["cpu", "gpu"])
def test_head_split(backend):
    """Rank r: KV heads [4r, 4r+4) of the tokens, query heads [16r, 16r+16). On the CPU
    backend bit for bit; on the GPU (whose launch plan may split a sequence differently
    for fewer heads) within the GPU check's tolerance, printing whether bit for bit."""
    if backend == "gpu" and not _gpu_ready():
        pytest.skip("needs torch and a CUDA device")
    rng = np.random.default_rng(3)
    lens = [700, 1000]
    k = rng.uniform(-1, 1, (sum(lens), 8, 64)).astype(np.float32)
    v = rng.uniform(-1, 1, k.shape).astype(np.float32)
    q = rng.uniform(-1, 1, (len(lens), 32, 64)).astype(np.float32)
    seqs = list(range(len(lens)))

    def arr(x):
        x = np.ascontiguousarray(x)
        if backend == "cpu":
            return x
        import torch

        return torch.from_numpy(x).cuda()

    def run(fields, kk, vv, qq):
        with qgen.Context(backend=backend, **fields) as ctx:
            kv = ctx.cache(len(lens), 1024)
            kv.append(arr(kk), arr(vv), seqs=seqs, n_new=lens)
            dense = kv.attend(arr(qq), dense=True)
            sparse = kv.attend(arr(qq))
            lists = [kv.selection(s) for s in seqs]
            host = [x if backend == "cpu" else x.cpu().numpy() for x in (dense, sparse)]
            return host[0], host[1], lists

    full = run(FIELDS, k, v, q)
    parts = []
    for r in range(2):
        (q0, q1), (k0, k1) = head_range(32, 2, r), head_range(8, 2, r)
        parts.append(run(rank_fields(FIELDS, 2), k[:, k0:k1], v[:, k0:k1], q[:, q0:q1]))
    for i, what in enumerate(("dense", "sparse")):
        joined = np.concatenate([p[i] for p in parts], axis=1)
        if backend == "cpu":
            assert np.array_equal(joined, full[i]), f"{what} differs"
        else:
            np.testing.assert_allclose(joined, full[i], rtol=2e-3, atol=2e-3, err_msg=what)
            print(f"gpu {what}: the halves equal the whole {'bit for bit' if np.array_equal(joined, full[i]) else 'within 2e-3'}"
                  f" (max |difference| {float(np.abs(joined - full[i]).max()):.3g})")
    for s in seqs:
        lists, counts = full[2][s]
        assert np.array_equal(np.concatenate([p[2][s][1] for p in parts]), counts)
        assert np.array_equal(np.concatenate([p[2][s][0] for p in parts]), lists)
    assert (full[2][0][1] < full[2][0][0].shape[1]).all(), "the sparse step attended every page"


# ---- 2 processes: a transformers model split over 2 ranks ----------------------------------

try:
    import torch
    import transformers  # noqa: F401
except ImportError:
    torch = None

CASES = [("cpu", "float32"), ("cuda", "float32"), ("cuda", "bfloat16")]
REL_TOL = {"float32": 1e-4, "bfloat16": 2e-2}


def launch(nproc, device, dtype, out):
    """The example under torchrun (nproc ranks) or alone (nproc 0: no process group)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.path.join(ROOT, "python"),
                                                                    os.environ.get("PYTHONPATH")])))
    args = [EXAMPLE, "--device", device, "--dtype", dtype, "--new", "32", "--out", str(out)]
    cmd = [sys.executable] + (["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
                              if nproc else []) + args
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
    print(res.stdout.strip())
    return torch.load(out)


@pytest.mark.skipif(torch is None, reason="needs torch and transformers")
@pytest.mark.parametrize("device, dtype", CASES)
def test_two_ranks_equal_whole_model(device, dtype, tmp_path):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    whole = launch(0, device, dtype, tmp_path / "whole.pt")
    split = launch(2, device, dtype, tmp_path / "tp2.pt")
    assert (whole["world"], split["world"]) == (1, 2)
    for mode, ref in whole["modes"].items():
        got = split["modes"][mode]
        assert (got["n_head"], got["n_head_kv"]) == (ref["n_head"] // 2, ref["n_head_kv"] // 2)
        tok, log, tok_r, log_r = got["tokens"], got["logits"], ref["tokens"], ref["logits"]
        worst, first_diff = 0.0, None
        for step in range(tok_r.shape[1]):
            diff = log[0, step] - log_r[0, step]
            rel = float(diff.norm() / log_r[0, step].norm())
            worst = max(worst, rel)
            assert rel <= REL_TOL[dtype], f"{mode} step {step}: logits relative error {rel:.3g} > {REL_TOL[dtype]}"
            if tok[0, step] != tok_r[0, step]:
                top2 = log_r[0, step].topk(2).values
                gap, err = float(top2[0] - top2[1]), float(diff.abs().max())
                assert dtype != "float32", f"{mode} step {step}: float32 tokens differ (top-2 gap {gap:.3g})"
                assert gap < err, f"{mode} step {step}: tokens differ with a top-2 gap {gap:.3g} >= error {err:.3g}"
                first_diff = (step, gap, err)
                break  # later steps are conditioned on different tokens
        print(f"{device} {dtype} {mode}: 2 ranks vs the whole model, logits worst relative error {worst:.3g}"
              + (f"; tokens differ first at step {first_diff[0]} (top-2 gap {first_diff[1]:.3g} < error "
                 f"{first_diff[2]:.3g})" if first_diff else f"; the same {tok_r.shape[1]} tokens"))
