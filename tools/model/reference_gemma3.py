"""Independent float64 NumPy forward pass of a gemma3-architecture GGUF (text model).

Written from the model definition (Gemma 3: google/gemma_pytorch, as llama.cpp's gemma3 graph
states it), not from ggml:
  x = token_embd[tokens] * sqrt(n_embd)
  per block il:
    h = RMSNorm(x) * attn_norm                     (GGUF norm weights already hold 1 + w)
    q, k, v = h Wq, h Wk, h Wv; per-head RMSNorm of q and k (attn_q_norm, attn_k_norm)
    RoPE NEOX mode (rotates x[i], x[i + d/2]) with base freq_base_swa on local (sliding-window)
    layers and freq_base on global layers
    attention: scores = q k / sqrt(key_length), causal; local layers also mask keys with
    pos_q - pos_k >= sliding_window; GQA (consecutive query heads share a KV head)
    x = x + RMSNorm(attn @ Wo) * post_attention_norm
    x = x + RMSNorm(W_down (gelu_tanh(h W_gate) * (h W_up))) * post_ffw_norm, h = RMSNorm(x) * ffn_norm
  logits = (RMSNorm(x) * output_norm) @ token_embd.T (tied), optionally soft-capped.
Layer il is local iff il % pattern < pattern - 1 (pattern 6 unless the GGUF says otherwise).

Weights are dequantized with gguf-py's NumPy code (gguf.quants.dequantize), not ggml. They are
kept as the float32 arrays that gguf-py returns (each dequantized value is a float32 product that
float32 holds exactly as computed, so float32 storage loses nothing; float64 would double the
~1.1 GB); every matmul upcasts the weight to float64 (per block of rows for the 262144-row
embedding) so all arithmetic is float64.

Usage:
  reference_gemma3 --model=gemma.gguf --logits=llama_logits.bin
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any

import gguf
import gguf.quants
import numpy as np
from absl import app, flags

from tools.model import reference_forward
from tools.model.reference_forward import UnsupportedModelError, compare_logits, read_logits_file, rms_norm

ARCHITECTURES = ("gemma3",)
Q = gguf.GGMLQuantizationType
# Types this reference reads: F32/F16/BF16 directly, quantized ones through gguf.quants.
TENSOR_TYPES = (Q.F32, Q.F16, Q.BF16, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K,
                Q.Q6_K)


@dataclasses.dataclass(frozen=True)
class HParams:
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int  # key_length (== value_length)
    n_ff: int
    n_vocab: int
    rms_eps: float
    rope_freq_base: float  # global layers
    rope_freq_base_swa: float  # local (sliding-window) layers
    sliding_window: int  # 0: no sliding window, every layer is global
    swa_pattern: int
    attention_scale: float
    final_logit_softcapping: float  # 0: none

    def is_local(self, il: int) -> bool:
        if self.sliding_window <= 0:
            return False
        return self.swa_pattern == 0 or il % self.swa_pattern < self.swa_pattern - 1

    def rope_base(self, il: int) -> float:
        return self.rope_freq_base_swa if self.is_local(il) else self.rope_freq_base


@dataclasses.dataclass
class Model:
    hp: HParams
    tensors: dict[str, np.ndarray]  # float32 (gguf-py's dequantized values), numpy layout (ggml ne reversed)


def _field(reader: gguf.GGUFReader, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    if field is None:
        if default is None:
            raise ValueError(f"GGUF lacks required key {key}")
        return default
    return field.contents()


def unsupported(reader: gguf.GGUFReader) -> list[str]:
    """Why this reference cannot compute the model (empty: it can)."""
    return reference_forward.unsupported(reader, ARCHITECTURES, TENSOR_TYPES)


def dequantize(t: gguf.ReaderTensor) -> np.ndarray:
    """A tensor's values as float32, numpy shape = ggml ne reversed; gguf-py's NumPy dequantization."""
    shape = tuple(int(x) for x in reversed(t.shape.tolist()))
    if t.tensor_type not in TENSOR_TYPES:
        raise UnsupportedModelError(f"tensor {t.name}: type {t.tensor_type.name} is not implemented")
    if t.tensor_type in (Q.F32, Q.F16):
        out = np.asarray(t.data, dtype=np.float32)
    else:
        out = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32, copy=False)
    return out.reshape(shape)


def load_hparams(path: pathlib.Path, reader: gguf.GGUFReader) -> HParams:
    """The hyper-parameters of a gemma3 GGUF (refused by name if this reference lacks them)."""
    reasons = unsupported(reader)
    if reasons:
        raise UnsupportedModelError(f"{path}: the float64 gemma3 reference does not implement {'; '.join(reasons)}")
    a = "gemma3."
    n_embd = int(_field(reader, a + "embedding_length"))
    n_head = int(_field(reader, a + "attention.head_count"))
    head_dim = int(_field(reader, a + "attention.key_length", n_embd // n_head))
    value_length = int(_field(reader, a + "attention.value_length", head_dim))
    if value_length != head_dim:
        raise UnsupportedModelError(f"{path}: key_length {head_dim} != value_length {value_length}")
    for key in ("rope.scaling.type", "rope.scaling.factor"):
        if a + key in reader.fields and _field(reader, a + key) not in ("none", 1.0):
            raise UnsupportedModelError(f"{path}: {a + key} = {_field(reader, a + key)!r} is not implemented")
    if a + "attention.sliding_window_pattern" in reader.fields and not isinstance(
            _field(reader, a + "attention.sliding_window_pattern"), int):
        raise UnsupportedModelError(f"{path}: per-layer sliding_window_pattern arrays are not implemented")
    n_layer = int(_field(reader, a + "block_count"))
    embd = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    if embd is None:
        raise UnsupportedModelError(f"{path}: no token_embd.weight")
    return HParams(
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=int(_field(reader, a + "attention.head_count_kv", n_head)),
        head_dim=head_dim,
        n_ff=int(_field(reader, a + "feed_forward_length")),
        n_vocab=int(embd.shape[-1]),
        rms_eps=float(_field(reader, a + "attention.layer_norm_rms_epsilon")),
        rope_freq_base=float(_field(reader, a + "rope.freq_base", 10000.0)),
        rope_freq_base_swa=float(_field(reader, a + "rope.freq_base_swa", 10000.0)),
        sliding_window=int(_field(reader, a + "attention.sliding_window", 0)),
        swa_pattern=int(_field(reader, a + "attention.sliding_window_pattern", 6)),
        # gemma_pytorch: query_pre_attn_scalar = head_dim except the 27B (62 layers): n_embd / n_head.
        attention_scale=1.0 / np.sqrt(n_embd / n_head if n_layer == 62 else head_dim),
        final_logit_softcapping=float(_field(reader, a + "final_logit_softcapping", 0.0)),
    )


def load_model(path: pathlib.Path) -> Model:
    """Loads hyper-parameters and all tensors (dequantized to float32) of a gemma3 GGUF."""
    reader = gguf.GGUFReader(path, "r")
    hp = load_hparams(path, reader)
    return Model(hp, {t.name: dequantize(t) for t in reader.tensors})


def rope_neox(x: np.ndarray, positions: np.ndarray, base: float) -> np.ndarray:
    """Rotary embedding, NEOX mode: pairs (x[i], x[i + d/2]), theta = pos * base^(-2i/d).

    x: [n_tokens, n_heads, d] (the whole head is rotated).
    """
    d = x.shape[-1]
    half = d // 2
    i = np.arange(half, dtype=np.float64)
    theta = positions.astype(np.float64)[:, None] * base ** (-2.0 * i / d)
    cos, sin = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    x0, x1 = x[..., :half], x[..., half:]
    return np.concatenate([x0 * cos - x1 * sin, x0 * sin + x1 * cos], axis=-1)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def attention_mask(positions: np.ndarray, window: int) -> np.ndarray:
    """[n_q, n_k] True where query i may read key j: causal, and pos_i - pos_j < window if window > 0."""
    d = positions[:, None] - positions[None, :]
    visible = d >= 0
    if window > 0:
        visible &= d < window
    return visible


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, visible: np.ndarray) -> np.ndarray:
    """q: [T, n_head, d]; k, v: [T, n_head_kv, d]; query head h reads KV head h // (n_head / n_head_kv)."""
    group = q.shape[1] // k.shape[1]
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    scores = np.einsum("thd,shd->hts", q, k) * scale
    scores = np.where(visible[None], scores, -np.inf)
    scores -= scores.max(axis=-1, keepdims=True)
    probs = np.exp(scores)
    probs /= probs.sum(axis=-1, keepdims=True)
    return np.einsum("hts,shd->thd", probs, v)


def _mm(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x [T, in] float64 times a (out, in) weight, in float64."""
    return x @ w.astype(np.float64).T


def _layer(model: Model, il: int, x: np.ndarray, positions: np.ndarray, nodes: dict[str, np.ndarray]) -> np.ndarray:
    hp, t = model.hp, model.tensors
    p = f"blk.{il}."
    n_tokens, hd = x.shape[0], hp.head_dim
    w = lambda name: t[p + name + ".weight"].astype(np.float64)  # noqa: E731

    nodes[f"attn_norm-{il}"] = h = rms_norm(x, w("attn_norm"), hp.rms_eps)
    q = _mm(h, t[p + "attn_q.weight"]).reshape(n_tokens, hp.n_head, hd)
    k = _mm(h, t[p + "attn_k.weight"]).reshape(n_tokens, hp.n_head_kv, hd)
    nodes[f"Vcur-{il}"] = v = _mm(h, t[p + "attn_v.weight"]).reshape(n_tokens, hp.n_head_kv, hd)
    nodes[f"Qcur_normed-{il}"] = q = rms_norm(q, w("attn_q_norm"), hp.rms_eps)
    nodes[f"Kcur_normed-{il}"] = k = rms_norm(k, w("attn_k_norm"), hp.rms_eps)
    base = hp.rope_base(il)
    nodes[f"Qcur-{il}"] = q = rope_neox(q, positions, base)
    nodes[f"Kcur-{il}"] = k = rope_neox(k, positions, base)
    visible = attention_mask(positions, hp.sliding_window if hp.is_local(il) else 0)
    a = attention(q, k, v, hp.attention_scale, visible)
    nodes[f"kqv_out-{il}"] = a = a.reshape(n_tokens, hp.n_head * hd)
    nodes[f"attn_out-{il}"] = a = _mm(a, t[p + "attn_output.weight"])
    nodes[f"attn_post_norm-{il}"] = a = rms_norm(a, w("post_attention_norm"), hp.rms_eps)
    nodes[f"sa_out-{il}"] = x = x + a

    nodes[f"ffn_norm-{il}"] = h = rms_norm(x, w("ffn_norm"), hp.rms_eps)
    nodes[f"ffn_gate-{il}"] = g = _mm(h, t[p + "ffn_gate.weight"])
    nodes[f"ffn_up-{il}"] = u = _mm(h, t[p + "ffn_up.weight"])
    nodes[f"ffn_geglu-{il}"] = f = gelu_tanh(g) * u
    nodes[f"ffn_out-{il}"] = f = _mm(f, t[p + "ffn_down.weight"])
    nodes[f"ffn_post_norm-{il}"] = f = rms_norm(f, w("post_ffw_norm"), hp.rms_eps)
    nodes[f"l_out-{il}"] = x = x + f
    return x


def forward_nodes(model: Model, tokens: np.ndarray | list[int], keep_nodes: bool = True) -> dict[str, np.ndarray]:
    """Every intermediate of the forward pass (float64), keyed by llama.cpp's gemma3 graph node names:
    inp_scaled (the scaled embedding; "embd" is the raw lookup), per block attn_norm, Qcur_normed,
    Kcur_normed, Qcur, Kcur (after RoPE, before the attention scale), Vcur, kqv_out, attn_out,
    attn_post_norm, sa_out, ffn_norm, ffn_gate, ffn_up, ffn_geglu, ffn_out, ffn_post_norm, l_out; then
    result_norm and result_output (logits [n_tokens, n_vocab]). keep_nodes=False keeps only the logits.
    """
    tokens = np.asarray(tokens, dtype=np.int64)
    hp, t = model.hp, model.tensors
    nodes: dict[str, np.ndarray] = {}
    emb = t["token_embd.weight"]
    nodes["embd"] = x = emb[tokens].astype(np.float64)
    nodes["inp_scaled"] = x = x * np.sqrt(float(hp.n_embd))
    positions = np.arange(len(tokens))
    for il in range(hp.n_layer):
        x = _layer(model, il, x, positions, nodes)
        if not keep_nodes:
            nodes.clear()
    nodes["result_norm"] = x = rms_norm(x, t["output_norm.weight"].astype(np.float64), hp.rms_eps)
    out_w = t.get("output.weight", emb)
    logits = np.empty((x.shape[0], out_w.shape[0]))
    for r in range(0, out_w.shape[0], 16384):  # bounds the float64 copy of the 262144-row embedding
        logits[:, r:r + 16384] = _mm(x, out_w[r:r + 16384])
    if hp.final_logit_softcapping:
        c = hp.final_logit_softcapping
        logits = np.tanh(logits / c) * c
    nodes["result_output"] = logits
    return nodes


def forward(model: Model, tokens: np.ndarray | list[int]) -> np.ndarray:
    """Returns float64 logits [n_tokens, n_vocab] for tokens at positions 0..n_tokens-1."""
    return forward_nodes(model, tokens, keep_nodes=False)["result_output"]


FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string("model", None, "gemma3 GGUF.")
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
