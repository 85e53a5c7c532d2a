"""Small seeded GGUFs of each architecture the float64 references implement, with quantized weights.

Each is shaped like the real model family (llama with Llama-3 rope_freqs and GQA; qwen2 with its
Q/K/V biases and NEOX RoPE; gemma3 with its four norms per block, Q/K norms, embedding scale,
GELU and sliding-window layers) and carries a real vocabulary GGUF's tokenizer, so the lane loads
and tokenizes it as it would the real model. Matmul weights are quantized by gguf-py (gguf.quants)
to the given type; norms, biases and rope_freqs stay F32, as convert_hf_to_gguf leaves them.

Usage (tests call write_model directly):
  arch_models --arch=qwen2 --vocab=ggml-vocab-qwen2.gguf --qtype=Q8_0 --out=tiny-qwen2.gguf
"""

from __future__ import annotations

import dataclasses
import pathlib

import gguf
import gguf.quants
import numpy as np
from absl import app, flags

from tools.model.make_tiny_model import load_tokenizer_fields

ARCHITECTURES = ("llama", "qwen2", "gemma3")
Q = gguf.GGMLQuantizationType
# The seeded model each architecture's lane tests build: (upstream vocabulary file, matrix type).
LANE_TEST_CASES = {
    "llama": ("ggml-vocab-llama-spm.gguf", Q.Q4_1),
    "qwen2": ("ggml-vocab-qwen2.gguf", Q.Q8_0),
    "gemma3": ("ggml-vocab-llama-spm.gguf", Q.Q5_0),
}


def vocab_dir(argv: list[str]) -> pathlib.Path:
    """Upstream's models/ directory, from a --vocab= argument naming one of its vocabularies."""
    for arg in argv:
        if arg.startswith("--vocab="):
            return pathlib.Path(arg.split("=", 1)[1]).parent
    raise AssertionError("run through Bazel (--vocab=)")


@dataclasses.dataclass(frozen=True)
class Shape:
    n_layer: int = 3
    n_embd: int = 128
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 32
    n_ff: int = 256
    n_ctx: int = 512
    sliding_window: int = 4  # gemma3: layers 0 and 2 local (pattern 2), layer 1 global
    swa_pattern: int = 2


def _weights(arch: str, shape: Shape, n_vocab: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    d, hd = shape.n_embd, shape.head_dim

    def mat(n_out: int, n_in: int, gain: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((n_out, n_in)) * (gain / np.sqrt(n_in))).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    def bias(n: int) -> np.ndarray:
        return (0.5 * rng.standard_normal(n)).astype(np.float32)

    w: dict[str, np.ndarray] = {"token_embd.weight": rng.standard_normal((n_vocab, d)).astype(np.float32)}
    if arch == "gemma3":
        w["token_embd.weight"] *= np.float32(0.2)  # gemma scales the embedding by sqrt(n_embd); logits std ~2
    for i in range(shape.n_layer):
        p = f"blk.{i}."
        w[p + "attn_norm.weight"] = norm(d)
        # Q/K gain > 1 sharpens attention so RoPE/position errors show up in the logits.
        w[p + "attn_q.weight"] = mat(shape.n_head * hd, d, 2.0)
        w[p + "attn_k.weight"] = mat(shape.n_head_kv * hd, d, 2.0)
        w[p + "attn_v.weight"] = mat(shape.n_head_kv * hd, d)
        w[p + "attn_output.weight"] = mat(d, shape.n_head * hd)
        w[p + "ffn_norm.weight"] = norm(d)
        w[p + "ffn_gate.weight"] = mat(shape.n_ff, d)
        w[p + "ffn_up.weight"] = mat(shape.n_ff, d)
        w[p + "ffn_down.weight"] = mat(d, shape.n_ff)
        if arch == "qwen2":
            w[p + "attn_q.bias"] = bias(shape.n_head * hd)
            w[p + "attn_k.bias"] = bias(shape.n_head_kv * hd)
            w[p + "attn_v.bias"] = bias(shape.n_head_kv * hd)
        if arch == "gemma3":
            w[p + "attn_q_norm.weight"] = norm(hd)
            w[p + "attn_k_norm.weight"] = norm(hd)
            w[p + "post_attention_norm.weight"] = norm(d)
            w[p + "post_ffw_norm.weight"] = norm(d)
    w["output_norm.weight"] = norm(d)
    if arch == "llama":
        # Llama-3's per-dimension RoPE frequency divisors (rope_freqs): low frequencies stretched.
        w["rope_freqs.weight"] = np.geomspace(1.0, 8.0, hd // 2).astype(np.float32)
    if arch != "gemma3":  # gemma3 ties its output to the embedding
        w["output.weight"] = mat(n_vocab, d, 6.0)  # sharp enough that most positions have a decisive top-1
    return w


def write_model(arch: str, vocab: pathlib.Path, out: pathlib.Path, qtype: Q = Q.Q8_0, seed: int = 1234,
                shape: Shape = Shape()) -> pathlib.Path:
    """Writes the model with every matrix (2-D tensor) in `qtype`; returns `out`."""
    if arch not in ARCHITECTURES:
        raise ValueError(f"architecture {arch!r} is not one of {', '.join(ARCHITECTURES)}")
    fields = load_tokenizer_fields(vocab)
    n_vocab = next(len(v) for k, v, _, _ in fields if k == "tokenizer.ggml.tokens")
    tensors = _weights(arch, shape, n_vocab, seed)
    w = gguf.GGUFWriter(str(out), arch)
    w.add_name(f"lanes-tiny-{arch}-{qtype.name.lower()}-s{seed}")
    w.add_context_length(shape.n_ctx)
    w.add_embedding_length(shape.n_embd)
    w.add_block_count(shape.n_layer)
    w.add_feed_forward_length(shape.n_ff)
    w.add_head_count(shape.n_head)
    w.add_head_count_kv(shape.n_head_kv)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_key_length(shape.head_dim)
    w.add_value_length(shape.head_dim)
    w.add_rope_dimension_count(shape.head_dim)
    w.add_rope_freq_base(1_000_000.0 if arch == "gemma3" else 500_000.0)
    if arch == "gemma3":
        w.add_float32("gemma3.rope.freq_base_swa", 10_000.0)
        w.add_sliding_window(shape.sliding_window)
        w.add_uint32("gemma3.attention.sliding_window_pattern", shape.swa_pattern)
    for key, value, vtype, sub in fields:
        w.add_key_value(key, value, vtype, sub_type=sub)
    for name, arr in tensors.items():
        if arr.ndim == 2 and qtype not in (Q.F32, Q.F16):
            w.add_tensor(name, gguf.quants.quantize(arr, qtype), raw_dtype=qtype)
        elif arr.ndim == 2 and qtype == Q.F16:
            w.add_tensor(name, arr.astype(np.float16))
        else:
            w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_enum("arch", None, list(ARCHITECTURES), "Architecture.")
    flags.DEFINE_string("vocab", None, "Vocabulary GGUF whose tokenizer.* keys the model carries.")
    flags.DEFINE_string("qtype", "Q8_0", "Type of the matrices (gguf.quants can quantize Q4_0, Q4_1, Q5_0, Q5_1, Q8_0).")
    flags.DEFINE_integer("seed", 1234, "Weights seed.")
    flags.DEFINE_string("out", None, "Output GGUF.")
    flags.mark_flags_as_required(["arch", "vocab", "out"])


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    write_model(FLAGS.arch, pathlib.Path(FLAGS.vocab), pathlib.Path(FLAGS.out), Q[FLAGS.qtype], FLAGS.seed)


if __name__ == "__main__":
    define_flags()
    app.run(main)
