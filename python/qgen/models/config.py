"""config.py — a GGUF file's model: its metadata read into a Config (the facts the forward
pass needs, with the values llama.cpp's files leave implicit filled in and explained), and
its tensors dequantized to float32 NumPy arrays with the `gguf` package.
"""
import math
import os
from dataclasses import dataclass, field

SUPPORTED_ARCHS = ("llama", "gemma3")


class ModelError(Exception):
    """A model file that cannot be run: missing, unreadable, or of an unsupported kind."""


def import_gguf():
    try:
        import gguf
    except ImportError:
        raise ModelError("reading GGUF files needs the 'gguf' package (pure Python, it needs only numpy): "
                         "python3 -m pip install --no-deps gguf==0.19.0") from None
    return gguf


@dataclass
class Config:
    arch: str
    name: str
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    hidden: int
    ffn: int
    vocab: int
    context_length: int
    eps: float
    rope_base: float                 # the full-attention layers' rotary base
    rope_base_local: float           # the sliding-window layers' rotary base
    rope_scale: float                # linear position scaling of the full-attention layers (1: none)
    rope_dim: int                    # leading dimensions of each head that rotate
    rope_neox: bool                  # rotate (i, i + rope_dim/2) pairs, else (2i, 2i+1)
    attn_scale: float                # softmax scale applied to q·k
    embed_scale: float               # token embeddings are multiplied by this
    sliding_window: int = 0          # 0: no sliding-window layers
    global_layers: list = field(default_factory=list)  # layers that attend over the whole context
    tie: bool = True                 # the output projection is the token embedding
    chat_template: bool = False      # the file carries a chat template
    attn_softcap: float = 0.0        # tanh soft cap of attention logits (0: none)
    final_softcap: float = 0.0       # tanh soft cap of the output logits (0: none)

    def is_global(self, layer):
        return layer in self._global_set

    def __post_init__(self):
        self._global_set = frozenset(self.global_layers)

    def summary(self):
        g = "all" if len(self.global_layers) == self.n_layer else ",".join(map(str, self.global_layers))
        return (f"{self.name} ({self.arch}): {self.n_layer} layers, {self.n_head} q / {self.n_head_kv} kv heads "
                f"x {self.head_dim}, hidden {self.hidden}, vocab {self.vocab}, global layers {g}"
                + (f", sliding window {self.sliding_window}" if self.sliding_window else ""))


class GGUFFile:
    """An open GGUF file: get(key) reads metadata, tensor(name) dequantizes a tensor."""

    def __init__(self, path):
        path = os.fspath(path)
        if not os.path.exists(path):
            raise ModelError(f"{path}: no such file")
        gguf = import_gguf()
        self.gguf = gguf
        self.path = path
        try:
            self.reader = gguf.GGUFReader(path, "r")
        except Exception as e:  # a truncated or foreign file: say which, not a traceback
            raise ModelError(f"{path}: not a readable GGUF file ({type(e).__name__}: {e})") from None
        self.tensors = {t.name: t for t in self.reader.tensors}
        self.arch = self.get("general.architecture")

    def get(self, key, default=None):
        f = self.reader.get_field(key)
        if f is None:
            return default
        try:
            return f.contents()
        except Exception:
            return default

    def has(self, name):
        return name in self.tensors

    def tensor(self, name):
        """The tensor as float32 NumPy, in PyTorch's orientation ([out, in] for a matrix)."""
        import numpy as np

        t = self.tensors.get(name)
        if t is None:
            raise ModelError(f"{self.path}: tensor {name} is missing")
        w = self.gguf.quants.dequantize(t.data, t.tensor_type)
        return np.ascontiguousarray(w, dtype=np.float32)


def read_config(f):
    """The Config of an open GGUFFile (refuses architectures other than SUPPORTED_ARCHS)."""
    arch = f.arch
    if arch not in SUPPORTED_ARCHS:
        raise ModelError(f"{f.path}: architecture {arch!r} is not supported (supported: {', '.join(SUPPORTED_ARCHS)})")

    def need(key):
        v = f.get(f"{arch}.{key}")
        if v is None:
            raise ModelError(f"{f.path}: metadata {arch}.{key} is missing")
        return v

    n_layer = int(need("block_count"))
    hidden = int(need("embedding_length"))
    n_head = int(need("attention.head_count"))
    n_head_kv = f.get(f"{arch}.attention.head_count_kv", n_head)
    if isinstance(n_head_kv, list):  # per-layer counts: only a uniform one is runnable here
        if len(set(n_head_kv)) != 1:
            raise ModelError(f"{f.path}: per-layer KV head counts are not supported")
        n_head_kv = n_head_kv[0]
    n_head_kv = int(n_head_kv)
    head_dim = int(f.get(f"{arch}.attention.key_length", hidden // n_head))
    if int(f.get(f"{arch}.attention.value_length", head_dim)) != head_dim:
        raise ModelError(f"{f.path}: key and value head sizes differ, which is not supported")
    tokens = f.get("tokenizer.ggml.tokens")
    vocab = len(tokens) if tokens is not None else int(f.get(f"{arch}.vocab_size", 0))
    emb = f.tensors.get("token_embd.weight")
    if emb is not None:
        vocab = int(emb.shape[1])  # ggml order: [hidden, vocab]
    rope_base = float(f.get(f"{arch}.rope.freq_base", 10000.0))
    scaling = f.get(f"{arch}.rope.scaling.type", "none")
    factor = float(f.get(f"{arch}.rope.scaling.factor", 1.0) or 1.0)
    if scaling not in ("none", "linear") and factor != 1.0:
        raise ModelError(f"{f.path}: rope scaling {scaling!r} is not supported (none, linear)")
    rope_scale = factor if scaling == "linear" else 1.0
    name = f.get("general.name") or os.path.basename(f.path)
    common = dict(arch=arch, name=str(name), n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim,
                  hidden=hidden, ffn=int(need("feed_forward_length")), vocab=vocab,
                  context_length=int(f.get(f"{arch}.context_length", 4096)),
                  eps=float(need("attention.layer_norm_rms_epsilon")), rope_base=rope_base, rope_scale=rope_scale,
                  rope_dim=int(f.get(f"{arch}.rope.dimension_count", head_dim)),
                  tie=not f.has("output.weight"), chat_template=f.get("tokenizer.chat_template") is not None)
    if arch == "llama":
        # llama.cpp's converter permutes the Q and K rows of Llama checkpoints so that the
        # file's rotary pairs are adjacent dimensions (2i, 2i+1)
        return Config(rope_base_local=rope_base, rope_neox=False, attn_scale=1.0 / math.sqrt(head_dim),
                      embed_scale=1.0, sliding_window=0, global_layers=list(range(n_layer)), **common)
    # gemma3. Facts of the model family that the file does not spell out:
    # - every sixth layer (5, 11, 17, ...) attends globally, the others over a sliding window;
    #   a file may carry the pattern itself (a period, or one flag per layer: true = sliding)
    # - sliding layers rotate with base 10000 and are never position-scaled; the file's base
    #   and scaling belong to the global layers
    # - the query is scaled by query_pre_attn_scalar^-1/2, which is head_dim for every size but
    #   the 27B (62 layers), where it is hidden / n_head
    # - embeddings are multiplied by sqrt(hidden); rotary pairs are (i, i + head_dim/2)
    pattern = f.get(f"{arch}.attention.sliding_window_pattern", 6)
    if isinstance(pattern, list):
        global_layers = [i for i, sliding in enumerate(pattern) if not sliding]
    else:
        pattern = int(pattern)
        global_layers = [i for i in range(n_layer) if pattern > 0 and i % pattern == pattern - 1]
    window = int(f.get(f"{arch}.attention.sliding_window", 0) or 0)
    if not window:
        global_layers = list(range(n_layer))
    pre_attn = hidden / n_head if n_layer == 62 else head_dim
    return Config(rope_base_local=float(f.get(f"{arch}.rope.freq_base_swa", 10000.0)), rope_neox=True,
                  attn_scale=1.0 / math.sqrt(pre_attn), embed_scale=math.sqrt(hidden), sliding_window=window,
                  global_layers=global_layers, attn_softcap=float(f.get(f"{arch}.attn_logit_softcapping", 0.0) or 0.0),
                  final_softcap=float(f.get(f"{arch}.final_logit_softcapping", 0.0) or 0.0), **common)
