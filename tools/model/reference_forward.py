"""Independent float64 NumPy forward pass of a llama- or qwen2-architecture GGUF, and logit comparison.

Written from the model definitions, not from ggml: RMSNorm, causal GQA attention with RoPE (llama:
llama.cpp's NORM mode, rotating adjacent pairs x[2i], x[2i+1], with Llama-3's per-dimension
frequency factors where the GGUF has rope_freqs; qwen2: NEOX mode, rotating x[i], x[i + d/2]),
the Q/K/V/O biases where the model has them (qwen2: Q, K, V), SwiGLU FFN, tied output where the
GGUF has no output.weight. It reads weights with gguf.GGUFReader: F32 and F16 upcast to float64,
quantized types dequantized by gguf-py's NumPy code (gguf.quants, not ggml) and kept as float32
(each value is a float32 product float32 holds exactly), upcast to float64 in every matmul. It takes
token ids as given, so tokenization is not re-implemented here.

Usage:
  reference_forward --model=tiny.gguf --logits=llama_logits.bin
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import struct
from typing import Any

import gguf
import gguf.quants
import numpy as np
from absl import app, flags

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
    arch: str = "llama"
    head_dim: int = 0  # 0: n_embd // n_head
    rope_neox: bool = False  # qwen2 rotates (x[i], x[i + d/2]); llama adjacent pairs
    rope_freq_scale: float = 1.0  # linear RoPE scaling: positions * freq_scale

    @property
    def head_size(self) -> int:
        return self.head_dim or self.n_embd // self.n_head


@dataclasses.dataclass
class Model:
    hp: HParams
    tensors: dict[str, np.ndarray]  # float64 (F32/F16) or float32 (dequantized); numpy layout (ggml ne reversed)


def _field(reader: gguf.GGUFReader, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    if field is None:
        if default is None:
            raise ValueError(f"GGUF lacks required key {key}")
        return default
    return field.contents()


# What this forward implements; anything else is refused by name, never approximated.
ARCHITECTURES = ("llama", "qwen2")
Q = gguf.GGMLQuantizationType
# F32/F16 read directly; the rest through gguf-py's NumPy dequantization.
QUANTIZED_TYPES = (Q.BF16, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K)
TENSOR_TYPES = (Q.F32, Q.F16) + QUANTIZED_TYPES
# Architectures whose RoPE is NEOX mode (llama.cpp's llama_model_rope_type states the same).
_NEOX = ("qwen2",)


# forward_nodes follows llama.cpp's llama graph node by node only where the lane's nodes are the
# model's arithmetic in float32: an F32/F16 llama. Quantized matmuls quantize their activations
# to 8 bits in the lane, which a chained float64 node comparison at float32 tolerances cannot judge.
NODE_ARCHITECTURES = ("llama",)
NODE_TENSOR_TYPES = (Q.F32, Q.F16)


class UnsupportedModelError(ValueError):
    """The model's architecture or tensor types are not ones this reference implements."""


def unsupported(reader: gguf.GGUFReader, architectures: tuple[str, ...] = ARCHITECTURES,
                tensor_types: tuple[gguf.GGMLQuantizationType, ...] = TENSOR_TYPES) -> list[str]:
    """Why a reference implementing `architectures` and `tensor_types` (default: this one) cannot
    compute the model (empty: it can): its architecture, and each tensor type it does not read with
    the number of tensors of that type."""
    reasons = []
    arch = _field(reader, "general.architecture", "")
    if arch not in architectures:
        reasons.append(f"architecture {arch!r} (implemented: {', '.join(architectures)})")
    counts: dict[str, int] = {}
    for t in reader.tensors:
        if t.tensor_type not in tensor_types:
            counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    if counts:
        reasons.append("tensor types " + ", ".join(f"{k} ({v} tensors)" for k, v in sorted(counts.items()))
                       + f" (implemented: {', '.join(t.name for t in tensor_types)})")
    return reasons


def node_gaps(reader: gguf.GGUFReader) -> list[str]:
    """Why forward_nodes cannot be compared node by node with the lane's graph (empty: it can)."""
    return unsupported(reader, NODE_ARCHITECTURES, NODE_TENSOR_TYPES)


def dequantize(t: gguf.ReaderTensor) -> np.ndarray:
    """A tensor's values, numpy shape = ggml ne reversed: F32/F16 as float64, the quantized types
    as float32 through gguf-py's NumPy dequantization."""
    shape = tuple(int(x) for x in reversed(t.shape.tolist()))
    if t.tensor_type in (Q.F32, Q.F16):
        return np.asarray(t.data, dtype=np.float64).reshape(shape)
    if t.tensor_type not in QUANTIZED_TYPES:
        raise UnsupportedModelError(f"tensor {t.name}: type {t.tensor_type.name} is not implemented")
    return gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32, copy=False).reshape(shape)


def load_hparams(path: pathlib.Path, reader: gguf.GGUFReader) -> HParams:
    """The hyper-parameters of a llama or qwen2 GGUF (refused by name if this reference lacks them)."""
    reasons = unsupported(reader)
    if reasons:
        raise UnsupportedModelError(f"{path}: the float64 reference does not implement {'; '.join(reasons)}")
    arch = str(_field(reader, "general.architecture"))
    a = arch + "."
    n_embd = int(_field(reader, a + "embedding_length"))
    n_head = int(_field(reader, a + "attention.head_count"))
    head_dim = int(_field(reader, a + "attention.key_length", n_embd // n_head))
    if int(_field(reader, a + "attention.value_length", head_dim)) != head_dim:
        raise UnsupportedModelError(f"{path}: {a}attention.value_length differs from key_length")
    scaling = str(_field(reader, a + "rope.scaling.type", "none"))
    factor = float(_field(reader, a + "rope.scaling.factor", 1.0))
    if scaling not in ("none", "linear") or (scaling == "none" and factor not in (0.0, 1.0)):
        raise UnsupportedModelError(f"{path}: {a}rope.scaling.type {scaling!r} (factor {factor:g}) is not implemented")
    return HParams(
        n_layer=int(_field(reader, a + "block_count")),
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=int(_field(reader, a + "attention.head_count_kv", n_head)),
        n_rot=int(_field(reader, a + "rope.dimension_count", head_dim)),
        rope_freq_base=float(_field(reader, a + "rope.freq_base", 10000.0)),
        rms_eps=float(_field(reader, a + "attention.layer_norm_rms_epsilon")),
        arch=arch,
        head_dim=head_dim,
        rope_neox=arch in _NEOX,
        rope_freq_scale=1.0 / factor if scaling == "linear" and factor else 1.0,
    )


def load_model(path: pathlib.Path) -> Model:
    """Loads hyper-parameters and all tensors of a llama or qwen2 GGUF."""
    reader = gguf.GGUFReader(path, "r")
    hp = load_hparams(path, reader)
    return Model(hp, {t.name: dequantize(t) for t in reader.tensors})


def rms_norm(x: np.ndarray, weight: np.ndarray | float, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def _rope_angles(positions: np.ndarray, n_rot: int, base: float, freq_factors: np.ndarray | None,
                 freq_scale: float) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin [n_tokens, 1, n_rot/2] of theta_i = pos * freq_scale * base^(-2i/n_rot) / factor_i
    (Llama-3's rope_freqs divide each dimension's frequency)."""
    i = np.arange(n_rot // 2, dtype=np.float64)
    freq = base ** (-2.0 * i / n_rot)
    if freq_factors is not None:
        freq = freq / np.asarray(freq_factors, np.float64).reshape(-1)[:n_rot // 2]
    theta = positions.astype(np.float64)[:, None] * freq_scale * freq
    return np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]


def rope_norm(x: np.ndarray, positions: np.ndarray, n_rot: int, base: float, freq_factors: np.ndarray | None = None,
              freq_scale: float = 1.0) -> np.ndarray:
    """Rotary embedding, llama.cpp NORM mode: pairs (x[2i], x[2i+1]), theta = pos * base^(-2i/n_rot).

    x: [n_tokens, n_heads, head_dim]; dims beyond n_rot pass through unchanged.
    """
    out = x.copy()
    cos, sin = _rope_angles(positions, n_rot, base, freq_factors, freq_scale)
    x0, x1 = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
    out[..., 0:n_rot:2] = x0 * cos - x1 * sin
    out[..., 1:n_rot:2] = x0 * sin + x1 * cos
    return out


def rope_neox(x: np.ndarray, positions: np.ndarray, n_rot: int, base: float, freq_factors: np.ndarray | None = None,
              freq_scale: float = 1.0) -> np.ndarray:
    """Rotary embedding, NEOX mode: pairs (x[i], x[i + n_rot/2]); dims beyond n_rot pass through."""
    out = x.copy()
    half = n_rot // 2
    cos, sin = _rope_angles(positions, n_rot, base, freq_factors, freq_scale)
    x0, x1 = x[..., :half], x[..., half:n_rot]
    out[..., :half] = x0 * cos - x1 * sin
    out[..., half:n_rot] = x0 * sin + x1 * cos
    return out


def _linear(model: Model, x: np.ndarray, name: str) -> np.ndarray:
    """x @ W.T (+ bias where the model has one), in float64 whatever the weight's storage."""
    t = model.tensors
    y = x @ t[name + ".weight"].astype(np.float64, copy=False).T
    bias = t.get(name + ".bias")
    return y if bias is None else y + bias


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


@dataclasses.dataclass(frozen=True)
class KvCache:
    """Geometry of llama.cpp's KV cache for one fresh sequence (for the per-node outputs).

    The tokens occupy cells 0..n_tokens-1 of a zero-cleared cache of kv_size cells; attention
    reads the first n_kv cells (llama.cpp pads n_kv, the extra cells are masked).
    """

    kv_size: int
    n_kv: int
    flash_attn: bool = False


def round_f16(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even to IEEE half, back in float64 (what a ggml cast to F16 stores)."""
    return np.asarray(x, np.float64).astype(np.float16).astype(np.float64)


def _layer_nodes(model: Model, il: int, x: np.ndarray, positions: np.ndarray, nodes: dict[str, np.ndarray],
                 out_ids: np.ndarray | None, cache: KvCache | None) -> np.ndarray:
    """One block; records its intermediates in `nodes` under llama.cpp's graph node names.

    Layouts are numpy = ggml ne reversed (e.g. Qcur-0 after RoPE is [n_tokens, n_head, head_dim],
    ne {head_dim, n_head, n_tokens}). llama.cpp names both RMS norms of a block "norm-<il>"; they
    are "norm-<il>/attn" and "norm-<il>/ffn" here; the Q/K projections before RoPE are
    "Qcur-<il>/mul_mat", "Kcur-<il>/mul_mat".
    """
    hp, t = model.hp, model.tensors
    p = f"blk.{il}."
    n_tokens, head_dim = x.shape[0], hp.head_size

    nodes[f"norm-{il}/attn"] = n = rms_norm(x, 1.0, hp.rms_eps)
    nodes[f"attn_norm-{il}"] = h = n * t[p + "attn_norm.weight"]
    # Weight numpy shape is (out, in): y = h @ W.T. Heads are contiguous slices of the output.
    nodes[f"Qcur-{il}/mul_mat"] = q = _linear(model, h, p + "attn_q")
    nodes[f"Kcur-{il}/mul_mat"] = k = _linear(model, h, p + "attn_k")
    nodes[f"Vcur-{il}"] = v = _linear(model, h, p + "attn_v")
    q = q.reshape(n_tokens, hp.n_head, head_dim)
    k = k.reshape(n_tokens, hp.n_head_kv, head_dim)
    v = v.reshape(n_tokens, hp.n_head_kv, head_dim)
    rope = rope_neox if hp.rope_neox else rope_norm
    factors = t.get("rope_freqs.weight")
    nodes[f"Qcur-{il}"] = q = rope(q, positions, hp.n_rot, hp.rope_freq_base, factors, hp.rope_freq_scale)
    nodes[f"Kcur-{il}"] = k = rope(k, positions, hp.n_rot, hp.rope_freq_base, factors, hp.rope_freq_scale)
    if cache is not None:
        _attention_nodes(nodes, il, q, k, v, cache)
    if cache is not None and cache.flash_attn:
        # The graph casts the F32 cache views to F16 before FLASH_ATTN_EXT (a CPY node): that
        # rounding is part of the graph being checked, so the reference applies it too.
        a = nodes[f"fattn-{il}"]
    else:
        a = attention(q, k, v)
        if cache is not None:
            nodes[f"kqv-{il}"] = a.transpose(1, 0, 2)
    nodes[f"kqv_out-{il}"] = a = a.reshape(n_tokens, hp.n_head * head_dim)
    nodes[f"attn_out-{il}"] = a = _linear(model, a, p + "attn_output")
    if out_ids is not None:
        # The last block keeps only the rows whose logits were requested (inp_out_ids).
        a, x = a[out_ids], x[out_ids]
    nodes[f"ffn_inp-{il}"] = x = x + a

    nodes[f"norm-{il}/ffn"] = n = rms_norm(x, 1.0, hp.rms_eps)
    nodes[f"ffn_norm-{il}"] = h = n * t[p + "ffn_norm.weight"]
    nodes[f"ffn_gate-{il}"] = g = _linear(model, h, p + "ffn_gate")
    nodes[f"ffn_up-{il}"] = u = _linear(model, h, p + "ffn_up")
    nodes[f"ffn_swiglu-{il}"] = f = silu(g) * u
    nodes[f"ffn_out-{il}"] = f = _linear(model, f, p + "ffn_down")
    nodes[f"l_out-{il}"] = x = x + f
    return x


def _attention_nodes(nodes: dict[str, np.ndarray], il: int, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                     cache: KvCache) -> None:
    """KV-cache contents and attention intermediates as llama.cpp's graph holds them."""
    n_tokens, n_head, head_dim = q.shape
    n_head_kv = k.shape[1]
    if not n_tokens <= cache.n_kv <= cache.kv_size:
        raise ValueError(f"cache geometry n_tokens={n_tokens} n_kv={cache.n_kv} kv_size={cache.kv_size}")
    ck = np.zeros((cache.kv_size, n_head_kv * head_dim))
    cv = np.zeros_like(ck)
    ck[:n_tokens] = k.reshape(n_tokens, -1)
    cv[:n_tokens] = v.reshape(n_tokens, -1)
    nodes[f"cache_k_l{il}"] = ck  # [kv_size, n_embd_k]; the V cache is stored transposed without FA
    nodes[f"cache_v_l{il}"] = cv
    kc = ck[:cache.n_kv].reshape(cache.n_kv, n_head_kv, head_dim)  # cells beyond n_tokens are zero
    vc = cv[:cache.n_kv].reshape(cache.n_kv, n_head_kv, head_dim)
    group = n_head // n_head_kv
    if cache.flash_attn:
        kc, vc = round_f16(kc), round_f16(vc)
        nodes[f"cache_k_l{il}/f16"] = kc.transpose(1, 0, 2)  # [n_head_kv, n_kv, head_dim]
        nodes[f"cache_v_l{il}/f16"] = vc.transpose(1, 0, 2)
        # [n_tokens, n_head, head_dim]: masked cells carry no weight, so attend over the filled ones.
        nodes[f"fattn-{il}"] = attention(q, kc[:n_tokens], vc[:n_tokens])
        return
    kq = np.einsum("thd,shd->hts", q, np.repeat(kc, group, axis=1))  # [n_head, n_tokens, n_kv], unmasked
    nodes[f"kq-{il}"] = kq
    visible = np.arange(cache.n_kv)[None, :] <= np.arange(n_tokens)[:, None]  # causal; empty cells masked
    s = np.where(visible[None], kq / np.sqrt(head_dim), -np.inf)
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    nodes[f"kq_soft_max-{il}"] = s / s.sum(axis=-1, keepdims=True)


def forward_nodes(model: Model, tokens: np.ndarray | list[int], out_ids: np.ndarray | list[int] | None = None,
                  cache: KvCache | None = None) -> dict[str, np.ndarray]:
    """Every intermediate of the forward pass, keyed by llama.cpp's graph node names (float64).

    out_ids: the token rows whose logits are computed (llama.cpp's inp_out_ids; None = all).
    cache: also record the KV-cache and attention nodes (kq, kq_soft_max, kqv or, with
    flash_attn, the F16 cache views and fattn) for that cache geometry.
    Keys: embd, then per block il as in _layer_nodes, then norm, result_norm, result_output.
    """
    tokens = np.asarray(tokens, dtype=np.int64)
    t = model.tensors
    nodes: dict[str, np.ndarray] = {}
    nodes["embd"] = x = t["token_embd.weight"][tokens].astype(np.float64)
    positions = np.arange(len(tokens))
    rows = None if out_ids is None else np.asarray(out_ids, dtype=np.int64)
    for il in range(model.hp.n_layer):
        last = il == model.hp.n_layer - 1
        x = _layer_nodes(model, il, x, positions, nodes, rows if last else None, cache)
    nodes["norm"] = n = rms_norm(x, 1.0, model.hp.rms_eps)
    nodes["result_norm"] = x = n * t["output_norm.weight"]
    # No output.weight means tied embeddings, as llama.cpp falls back to token_embd.
    out_w = t.get("output.weight", t["token_embd.weight"])
    logits = np.empty((x.shape[0], out_w.shape[0]))
    for r in range(0, out_w.shape[0], 16384):  # bounds the float64 copy of a large vocabulary's matrix
        logits[:, r:r + 16384] = x @ out_w[r:r + 16384].astype(np.float64, copy=False).T
    nodes["result_output"] = logits
    return nodes


def forward(model: Model, tokens: np.ndarray | list[int]) -> np.ndarray:
    """Returns float64 logits [n_tokens, n_vocab] for tokens at positions 0..n_tokens-1."""
    return forward_nodes(model, tokens)["result_output"]


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
