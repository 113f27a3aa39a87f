"""qgen.models — run real pretrained models from GGUF files (Llama-architecture models such as
SmolLM2, and Gemma 3) on the CPU with NumPy or on a GPU with torch, with every
full-attention layer's decode attention going through qgen caches:

    from qgen import models
    m = models.load(models.path("smollm2"))              # or a .gguf path
    state = m.prefill(m.tokenizer.encode(m.tokenizer.chat("What is the capital of France?")))
    dense = m.generate(state, 32)                         # the runner's exact attention
    qa = models.QgenAttention(m, sparse={"coverage": 0.25, "rescore": {"candidates": 8}})
    sparse = m.generate(state, 32, attention=qa)          # qgen in every full-attention layer
    print(dense.text, sparse.text)

`python -m qgen.models fetch smollm2` downloads the models; `python -m qgen.run` is the demo.
"""
import os

from .attention import QgenAttention
from .config import SUPPORTED_ARCHS, Config, GGUFFile, ModelError, read_config
from .fetch import MODELS, model_dir, path
from .model import ExactAttention, Model, Result, State
from .tokenizer import Tokenizer, from_gguf_fields

__all__ = ["Config", "ExactAttention", "MODELS", "Model", "ModelError", "QgenAttention", "Result", "SUPPORTED_ARCHS", "State",
           "Tokenizer", "load", "load_tokenizer", "model_dir", "path"]


def load_tokenizer(file):
    """The Tokenizer of a GGUF file (a path or an open GGUFFile), without loading weights."""
    f = file if isinstance(file, GGUFFile) else GGUFFile(_resolve(file))
    try:
        return from_gguf_fields(f.get)
    except ValueError as e:
        raise ModelError(f"{f.path}: {e}") from None


def _resolve(p):
    """A model name (smollm2, gemma3) stands for its file in the model directory."""
    p = os.fspath(p)
    if p in MODELS and not os.path.exists(p):
        return path(p)
    return p


def load(file, device="cpu", dtype=None, arrays=None):
    """Load a GGUF model (a path, or a name of MODELS once fetched) for running.

    device: "cpu" or a torch device ("cuda", "cuda:1"). arrays: "numpy" (the default on the
    CPU: float32 NumPy) or "torch" (the default and only choice on a GPU; on "cpu" it runs
    the torch code path on CPU tensors). dtype: the weights' and activations' type under
    torch, "float32" (default), "float16" or "bfloat16"; NumPy is always float32.
    Every tensor is dequantized from its GGUF block type once, at load."""
    from ._ops import make_ops

    if arrays is None:
        arrays = "numpy" if str(device) == "cpu" else "torch"
    ops = make_ops(arrays, device, dtype)
    f = GGUFFile(_resolve(file))
    config = read_config(f)
    tokenizer = load_tokenizer(f)
    if tokenizer.vocab_size != config.vocab:
        raise ModelError(f"{f.path}: the tokenizer has {tokenizer.vocab_size} tokens, the embedding {config.vocab}")
    import numpy as np

    def t(name, keep_f32=False):
        a = f.tensor(name)
        if not a.flags.writeable:  # an F32 tensor is a view of the mapped file: own a copy
            a = a.copy()
        if keep_f32 and ops.name == "torch":
            import torch

            return torch.from_numpy(a).to(ops.device)
        return ops.from_numpy(a)

    def opt(name, keep_f32=False):
        return t(name, keep_f32) if f.has(name) else None

    # norm weights and the output projection stay float32 under float16/bfloat16: norms
    # work in float32, and logits rounded to 8 mantissa bits would flip near-tied argmaxes
    w = {"embed": t("token_embd.weight"), "output_norm": t("output_norm.weight", True)}
    out_name = "token_embd.weight" if config.tie else "output.weight"
    w["output"] = w["embed"] if config.tie and ops.dtype_name == "float32" else t(out_name, True)
    if f.has("rope_freqs.weight"):
        w["rope_freqs"] = f.tensor("rope_freqs.weight").astype(np.float64)
    layers = []
    for i in range(config.n_layer):
        p = f"blk.{i}."
        lw = {"attn_norm": t(p + "attn_norm.weight", True), "wq": t(p + "attn_q.weight"),
              "wk": t(p + "attn_k.weight"), "wv": t(p + "attn_v.weight"), "wo": t(p + "attn_output.weight"),
              "ffn_norm": t(p + "ffn_norm.weight", True), "w_gate": t(p + "ffn_gate.weight"),
              "w_up": t(p + "ffn_up.weight"), "w_down": t(p + "ffn_down.weight")}
        for key, name in (("q_norm", "attn_q_norm"), ("k_norm", "attn_k_norm"),
                          ("post_attn_norm", "post_attention_norm"), ("post_ffn_norm", "post_ffw_norm")):
            x = opt(p + name + ".weight", True)
            if x is not None:
                lw[key] = x
        if f.has(p + "attn_q.bias") or f.has(p + "attn_k.bias"):
            raise ModelError(f"{f.path}: attention biases are not supported")
        if config.arch == "gemma3" and not all(k in lw for k in ("q_norm", "k_norm", "post_attn_norm", "post_ffn_norm")):
            raise ModelError(f"{f.path}: layer {i} lacks one of Gemma 3's q/k/post-attention/post-feedforward norms")
        layers.append(lw)
    w["layers"] = layers
    return Model(f.path, config, tokenizer, w, ops)
