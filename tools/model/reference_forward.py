"""Independent float64 NumPy forward pass of a llama-architecture GGUF, and logit comparison.

Written from the model definition, not from ggml: RMSNorm, causal GQA attention with
RoPE in llama.cpp's NORM mode (rotates adjacent pairs x[2i], x[2i+1]), SwiGLU FFN.
It reads weights with gguf.GGUFReader (F32 and F16 tensors) and takes token ids from the
llama-logits output, so tokenization is not re-implemented here.

Usage:
  reference_forward --model=tiny.gguf --logits=llama_logits.bin
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import struct
from typing import Any

import numpy as np
from absl import app, flags

import gguf

LOGITS_MAGIC = b"LGT1"


@dataclasses.dataclass(frozen=True)
class HParams:
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_rot: int
    rope_freq_base: float
    rms_eps: float


@dataclasses.dataclass
class Model:
    hp: HParams
    tensors: dict[str, np.ndarray]  # float64, numpy layout (ggml ne reversed)


def _field(reader: gguf.GGUFReader, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    if field is None:
        if default is None:
            raise ValueError(f"GGUF lacks required key {key}")
        return default
    return field.contents()


def load_model(path: pathlib.Path) -> Model:
    """Loads hyper-parameters and all tensors (upcast to float64) of a llama GGUF."""
    reader = gguf.GGUFReader(path, "r")
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(f"{path}: architecture {arch!r}, only 'llama' is supported")
    n_embd = int(_field(reader, "llama.embedding_length"))
    n_head = int(_field(reader, "llama.attention.head_count"))
    hp = HParams(
        n_layer=int(_field(reader, "llama.block_count")),
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=int(_field(reader, "llama.attention.head_count_kv", n_head)),
        n_rot=int(_field(reader, "llama.rope.dimension_count", n_embd // n_head)),
        rope_freq_base=float(_field(reader, "llama.rope.freq_base", 10000.0)),
        rms_eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon")),
    )
    tensors = {}
    for t in reader.tensors:
        if t.tensor_type not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            raise ValueError(f"{path}: tensor {t.name} has type {t.tensor_type.name}; only F32/F16 supported")
        # ggml ne is [fastest, ...]; numpy shape is the reverse.
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))
        tensors[t.name] = np.asarray(t.data, dtype=np.float64).reshape(shape)
    return Model(hp, tensors)


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rope_norm(x: np.ndarray, positions: np.ndarray, n_rot: int, base: float) -> np.ndarray:
    """Rotary embedding, llama.cpp NORM mode: pairs (x[2i], x[2i+1]), theta = pos * base^(-2i/n_rot).

    x: [n_tokens, n_heads, head_dim]; dims beyond n_rot pass through unchanged.
    """
    out = x.copy()
    i = np.arange(n_rot // 2, dtype=np.float64)
    theta = positions.astype(np.float64)[:, None] * base ** (-2.0 * i / n_rot)  # [n_tokens, n_rot/2]
    cos, sin = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    x0, x1 = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
    out[..., 0:n_rot:2] = x0 * cos - x1 * sin
    out[..., 1:n_rot:2] = x0 * sin + x1 * cos
    return out


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Causal softmax attention with grouped KV heads.

    q: [T, n_head, d]; k, v: [T, n_head_kv, d]. Query head h reads KV head h // (n_head / n_head_kv),
    i.e. consecutive query heads share a KV head (as ggml's broadcasting mul_mat does).
    """
    n_tokens, n_head, head_dim = q.shape
    group = n_head // k.shape[1]
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(head_dim)
    future = np.triu(np.ones((n_tokens, n_tokens), dtype=bool), k=1)
    scores = np.where(future[None], -np.inf, scores)
    scores -= scores.max(axis=-1, keepdims=True)
    probs = np.exp(scores)
    probs /= probs.sum(axis=-1, keepdims=True)
    return np.einsum("hts,shd->thd", probs, v)


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def _layer(model: Model, il: int, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
    hp, t = model.hp, model.tensors
    p = f"blk.{il}."
    n_tokens, head_dim = x.shape[0], hp.n_embd // hp.n_head

    h = rms_norm(x, t[p + "attn_norm.weight"], hp.rms_eps)
    # Weight numpy shape is (out, in): y = h @ W.T. Heads are contiguous slices of the output.
    q = (h @ t[p + "attn_q.weight"].T).reshape(n_tokens, hp.n_head, head_dim)
    k = (h @ t[p + "attn_k.weight"].T).reshape(n_tokens, hp.n_head_kv, head_dim)
    v = (h @ t[p + "attn_v.weight"].T).reshape(n_tokens, hp.n_head_kv, head_dim)
    q = rope_norm(q, positions, hp.n_rot, hp.rope_freq_base)
    k = rope_norm(k, positions, hp.n_rot, hp.rope_freq_base)
    a = attention(q, k, v).reshape(n_tokens, hp.n_head * head_dim)
    x = x + a @ t[p + "attn_output.weight"].T

    h = rms_norm(x, t[p + "ffn_norm.weight"], hp.rms_eps)
    f = silu(h @ t[p + "ffn_gate.weight"].T) * (h @ t[p + "ffn_up.weight"].T)
    return x + f @ t[p + "ffn_down.weight"].T


def forward(model: Model, tokens: np.ndarray | list[int]) -> np.ndarray:
    """Returns float64 logits [n_tokens, n_vocab] for tokens at positions 0..n_tokens-1."""
    tokens = np.asarray(tokens, dtype=np.int64)
    t = model.tensors
    x = t["token_embd.weight"][tokens]
    positions = np.arange(len(tokens))
    for il in range(model.hp.n_layer):
        x = _layer(model, il, x, positions)
    x = rms_norm(x, t["output_norm.weight"], model.hp.rms_eps)
    # No output.weight means tied embeddings, as llama.cpp falls back to token_embd.
    out_w = t.get("output.weight", t["token_embd.weight"])
    return x @ out_w.T


def read_logits_file(path: pathlib.Path) -> tuple[np.ndarray, np.ndarray]:
    """Reads llama-logits output: b"LGT1", i32 n_tokens, i32 n_vocab, i32 tokens[], f32 logits[][]."""
    data = pathlib.Path(path).read_bytes()
    if data[:4] != LOGITS_MAGIC:
        raise ValueError(f"{path}: not an LGT1 logits file")
    n_tokens, n_vocab = struct.unpack_from("<ii", data, 4)
    expected = 12 + 4 * n_tokens + 4 * n_tokens * n_vocab
    if n_tokens <= 0 or n_vocab <= 0 or len(data) != expected:
        raise ValueError(f"{path}: size {len(data)} does not match n_tokens={n_tokens} n_vocab={n_vocab}")
    tokens = np.frombuffer(data, dtype="<i4", count=n_tokens, offset=12).astype(np.int64)
    logits = np.frombuffer(data, dtype="<f4", count=n_tokens * n_vocab, offset=12 + 4 * n_tokens)
    return tokens, logits.reshape(n_tokens, n_vocab).copy()


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def compare_logits(ref: np.ndarray, got: np.ndarray, tie_margin: float = 0.1) -> dict[str, float]:
    """Agreement of `got` with `ref` (both [n_tokens, n_vocab]).

    mean_kl is the per-position KL(softmax(ref) || softmax(got)) averaged over positions, in nats.
    Random 32k-way logits have near-ties (top1 - top2 of a few 1e-3), which legitimate float
    noise can flip, so top1_agreement_decisive counts only positions whose reference margin
    exceeds tie_margin (1.0 when there are none).
    """
    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    if ref.shape != got.shape:
        raise ValueError(f"shape mismatch: ref {ref.shape} vs got {got.shape}")
    lp_ref, lp_got = _log_softmax(ref), _log_softmax(got)
    kl = np.sum(np.exp(lp_ref) * (lp_ref - lp_got), axis=-1)
    same_top1 = ref.argmax(axis=-1) == got.argmax(axis=-1)
    top2 = np.sort(ref, axis=-1)[:, -2:] if ref.shape[1] > 1 else np.zeros((ref.shape[0], 2))
    margin = top2[:, 1] - top2[:, 0]
    decisive = margin > tie_margin
    return {
        "n_tokens": int(ref.shape[0]),
        "max_abs_delta_logit": float(np.max(np.abs(ref - got))),
        "top1_agreement": float(np.mean(same_top1)),
        "top1_agreement_decisive": float(np.mean(same_top1[decisive])) if decisive.any() else 1.0,
        "n_decisive": int(decisive.sum()),
        "min_ref_top1_margin": float(margin.min()),
        "mean_kl": float(np.mean(kl)),
        "max_kl": float(np.max(kl)),
    }


FLAGS = flags.FLAGS


def define_flags() -> None:
    # Defined only when run as a program, so importing this module never claims flag names
    # (e.g. --model) that an importing absl app may define itself.
    flags.DEFINE_string("model", None, "llama GGUF (F32/F16 tensors).")
    flags.DEFINE_string("logits", None, "llama-logits output (LGT1) whose tokens are replayed and compared.")
    flags.mark_flags_as_required(["model", "logits"])


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    tokens, got = read_logits_file(pathlib.Path(FLAGS.logits))
    ref = forward(load_model(pathlib.Path(FLAGS.model)), tokens)
    print(json.dumps(compare_logits(ref, got), indent=2))


if __name__ == "__main__":
    define_flags()
    app.run(main)
