"""qgen.transformers_paged's index helpers on NumPy (no torch, transformers or GPU needed):
the decode rows of a packed step, the block table gathered from a read index, the newest
token's slot, every token's slot, and the causal block-diagonal prefill mask, each against
a plain loop."""
import numpy as np
import pytest

try:
    import qgen.transformers_paged as qtp
except Exception as e:  # the qgen package or its library is missing here
    pytest.skip(f"qgen.transformers_paged does not import: {e}", allow_module_level=True)

PAGE = 4


def packed_step(seed=0):
    """A mixed step of 5 requests: (past, query) lengths, a shuffled pool of pages, the read
    index (every key slot, request after request) and cumulative lengths."""
    rng = np.random.default_rng(seed)
    shape = [(9, 1), (0, 6), (13, 1), (3, 4), (22, 1)]
    pages = rng.permutation(64)
    read, tables, used = [], [], 0
    for past, q in shape:
        n_blocks = -(-(past + q) // PAGE)
        own = pages[used:used + n_blocks]
        used += n_blocks
        tables.append(own)
        read += [own[t // PAGE] * PAGE + t % PAGE for t in range(past + q)]
    cu_q = np.cumsum([0] + [q for _, q in shape]).astype(np.int32)
    cu_k = np.cumsum([0] + [p + q for p, q in shape]).astype(np.int32)
    return shape, tables, np.array(read, dtype=np.int64), cu_q, cu_k


def test_decode_rows():
    shape, _, _, cu_q, _ = packed_step()
    last, is_dec, dest = qtp.decode_rows(cu_q, int(cu_q[-1]))
    assert last.tolist() == [int(c) - 1 for c in cu_q[1:]]
    assert is_dec.tolist() == [q == 1 for _, q in shape]
    assert dest.tolist() == [int(c) - 1 if q == 1 else int(cu_q[-1]) for c, (_, q) in zip(cu_q[1:], shape)]


def test_block_table_from_read_index():
    shape, tables, read, _, cu_k = packed_step()
    bt = qtp.block_table(read, cu_k, PAGE, 8)
    assert bt.dtype == np.int32 and bt.shape == (5, 8)
    for i, own in enumerate(tables):
        assert bt[i, :len(own)].tolist() == own.tolist()
        assert not bt[i, len(own):].any()
    assert not qtp.block_table(read[:0], cu_k, PAGE, 3).any()  # nothing read: zeros


def test_decode_slots():
    shape, tables, read, _, cu_k = packed_step()
    bt = qtp.block_table(read, cu_k, PAGE, 8)
    lens = (cu_k[1:] - cu_k[:-1]).astype(np.int32)
    lens[1] = 0
    slots = qtp.decode_slots(bt, lens, PAGE)
    for i in range(5):
        want = -1 if lens[i] == 0 else read[cu_k[i + 1] - 1]
        assert slots[i] == want


def test_all_slots():
    shape, tables, read, _, cu_k = packed_step()
    bt = qtp.block_table(read, cu_k, PAGE, 8)
    lens = (cu_k[1:] - cu_k[:-1]).astype(np.int32)
    slots = qtp.all_slots(bt, lens, PAGE)
    assert slots.shape == (5 * 8 * PAGE,)
    assert slots[slots >= 0].tolist() == read.tolist()  # the read index, request after request


def test_causal_mask():
    shape, _, _, cu_q, cu_k = packed_step()
    n_tok, n_keys = int(cu_q[-1]) + 2, int(cu_k[-1]) + 3  # padded rows and keys
    m = qtp.causal_mask(cu_q, cu_k, n_tok, n_keys)
    want = np.zeros((n_tok, n_keys), dtype=bool)
    for r, (past, q) in enumerate(shape):
        for i in range(q):
            want[cu_q[r] + i, cu_k[r]:cu_k[r] + past + i + 1] = True
    past, q = shape[-1]
    for t in range(int(cu_q[-1]), n_tok):  # padding rows attend inside the last request
        want[t, cu_k[-2]:cu_k[-2] + past + (t - cu_q[-2]) + 1] = True
    want[:, int(cu_k[-1]):] = False
    assert (m == want).all()


def test_configure_refuses_both():
    with pytest.raises(ValueError, match="not both"):
        qtp.configure(coverage=0.25, budget=1024)
