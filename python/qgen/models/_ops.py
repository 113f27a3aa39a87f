"""_ops.py — the few array operations the forward pass needs whose spelling differs
between NumPy and torch (axis/dim, keepdims/keepdim, cat/concatenate, dtype names).
Everything else (@, +, *, reshape, indexing) is written once in model.py and works on both.
"""
import math

import numpy as np


class NumpyOps:
    """Float32 NumPy arrays on the host."""

    name = "numpy"

    def __init__(self, dtype=None):
        if dtype not in (None, "float32", np.float32):
            raise ValueError(f"the NumPy runner computes in float32; dtype={dtype!r} is not supported "
                             "(use arrays='torch' for float16/bfloat16)")
        self.dtype = np.float32
        self.dtype_name = "float32"
        self.device = "cpu"

    def from_numpy(self, a):
        a = np.ascontiguousarray(a, dtype=np.float32)
        return a

    def numpy(self, x):
        return np.asarray(x, dtype=np.float32)

    def zeros(self, shape):
        return np.zeros(shape, dtype=np.float32)

    def empty(self, shape):
        return np.empty(shape, dtype=np.float32)

    def ids(self, ids):
        return np.asarray(ids, dtype=np.int64)

    def cat(self, xs, axis):
        return np.concatenate(xs, axis=axis)

    def permute(self, x, axes):
        return x.transpose(axes)

    def contiguous(self, x):
        return np.ascontiguousarray(x)

    def f32(self, x):
        return x if x.dtype == np.float32 else x.astype(np.float32)

    def cast(self, x):
        return x

    def amax(self, x, axis):
        return x.max(axis=axis, keepdims=True)

    def sum(self, x, axis):
        return x.sum(axis=axis, keepdims=True)

    def mean(self, x, axis):
        return x.mean(axis=axis, keepdims=True)

    def exp(self, x):
        return np.exp(x)

    def exp_(self, x):
        return np.exp(x, out=x)

    def tanh(self, x):
        return np.tanh(x)

    def sqrt(self, x):
        return np.sqrt(x)

    def sigmoid(self, x):
        return 1.0 / (1.0 + np.exp(-x))

    def argmax(self, x):
        """Row-wise argmax of [B, V] as a list of ints."""
        return [int(i) for i in np.argmax(x, axis=-1)]

    def freeze(self, x):
        """Make x read-only: the state's arrays are shared by every decode from it."""
        x.flags.writeable = False
        return x

    def copy(self, x):
        return x.copy()

    def sync(self):
        pass


class TorchOps:
    """torch tensors on one device, in float32, float16 or bfloat16; norms, softmax and
    rotary angles are computed in float32 whatever the dtype."""

    name = "torch"

    def __init__(self, device="cpu", dtype=None):
        import torch

        self.torch = torch
        self.device = torch.device(device)
        names = {None: torch.float32, "float32": torch.float32, "float16": torch.float16,
                 "bfloat16": torch.bfloat16, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
        if isinstance(dtype, torch.dtype):
            self.dtype = dtype
        elif dtype in names:
            self.dtype = names[dtype]
        else:
            raise ValueError(f"dtype={dtype!r}: use float32, float16 or bfloat16")
        self.dtype_name = str(self.dtype).replace("torch.", "")

    def from_numpy(self, a):
        return self.torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(self.device, self.dtype)

    def numpy(self, x):
        return x.detach().float().cpu().numpy()

    def zeros(self, shape):
        return self.torch.zeros(shape, dtype=self.dtype, device=self.device)

    def empty(self, shape):
        return self.torch.empty(shape, dtype=self.dtype, device=self.device)

    def ids(self, ids):
        return self.torch.as_tensor(list(ids), dtype=self.torch.long, device=self.device)

    def cat(self, xs, axis):
        return self.torch.cat(xs, dim=axis)

    def permute(self, x, axes):
        return x.permute(axes)

    def contiguous(self, x):
        return x.contiguous()

    def f32(self, x):
        return x.float()

    def cast(self, x):
        return x.to(self.dtype)

    def amax(self, x, axis):
        return x.amax(dim=axis, keepdim=True)

    def sum(self, x, axis):
        return x.sum(dim=axis, keepdim=True)

    def mean(self, x, axis):
        return x.mean(dim=axis, keepdim=True)

    def exp(self, x):
        return self.torch.exp(x)

    def exp_(self, x):
        return x.exp_()

    def tanh(self, x):
        return self.torch.tanh(x)

    def sqrt(self, x):
        return self.torch.sqrt(x)

    def sigmoid(self, x):
        return self.torch.sigmoid(x)

    def argmax(self, x):
        return [int(i) for i in self.torch.argmax(x, dim=-1).tolist()]

    def freeze(self, x):
        return x  # torch has no read-only flag; the runner never writes a state's tensors

    def copy(self, x):
        return x.clone()

    def sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)


def make_ops(arrays, device, dtype):
    if arrays == "numpy":
        if str(device) != "cpu":
            raise ValueError(f"NumPy arrays live on the host: device={device!r} needs arrays='torch'")
        return NumpyOps(dtype)
    if arrays == "torch":
        try:
            import torch  # noqa: F401
        except ImportError:
            raise ImportError("arrays='torch' (or a CUDA device) needs PyTorch, which is not installed") from None
        return TorchOps(device, dtype)
    raise ValueError(f"arrays={arrays!r}: use 'numpy' or 'torch'")


SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
