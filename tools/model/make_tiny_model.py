"""Writes a tiny, deterministic llama-architecture GGUF for certification runs.

The model is random (seeded) but shaped exactly like a real llama.cpp "llama" model:
2 layers, n_embd 256, 4 query heads sharing 2 KV heads (GQA), SwiGLU FFN of 512,
and the tokenizer of a real vocab GGUF, so llama.cpp tokenizes prompts normally and
an independent NumPy reference (reference_forward.py) can recompute its logits.

Usage:
  make_tiny_model --vocab=ggml-vocab-llama-spm.gguf --out=tiny.gguf --dtype=f16 --seed=1234
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pathlib
import tempfile
from collections.abc import Callable
from typing import Any, TypeVar

import gguf
import numpy as np
from absl import app, flags

from tools.core.errors import LanesError

ARCH = "llama"
T = TypeVar("T")
DTYPES = ("f32", "f16", "q4_0")
# Q4_0: blocks of 32 weights, an F16 scale then 16 bytes of 4-bit values (ggml's block_q4_0).
_Q4_0_BLOCK, _Q4_0_BYTES = 32, 18


@dataclasses.dataclass(frozen=True)
class TinyConfig:
    """Hyper-parameters of the tiny model; reference_forward reads them back from the file."""

    n_layer: int = 2
    n_embd: int = 256
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 512
    n_ctx: int = 256
    rope_freq_base: float = 10000.0
    rms_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


class VocabError(LanesError, ValueError):
    """The vocab GGUF is missing or does not hold a usable tokenizer."""

    code = "tiny-model-vocab"


def load_tokenizer_fields(vocab_gguf: pathlib.Path) -> list[tuple[str, Any, gguf.GGUFValueType, gguf.GGUFValueType | None]]:
    """Returns every tokenizer.* KV of the vocab file as (key, value, type, sub_type), in file order."""
    if not vocab_gguf.is_file():
        raise VocabError(f"vocab GGUF not found: {vocab_gguf}")
    try:
        reader = gguf.GGUFReader(vocab_gguf, "r")
    except Exception as e:  # gguf raises assorted errors (ValueError, struct errors) on bad files
        raise VocabError(f"vocab GGUF is not a valid GGUF file: {vocab_gguf}: {e}") from e

    fields = []
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            fields.append((key, *_field_value(field)))
    keys = {f[0] for f in fields}
    for required in ("tokenizer.ggml.model", "tokenizer.ggml.tokens"):
        if required not in keys:
            raise VocabError(f"vocab GGUF {vocab_gguf} lacks {required}")
    return fields


def _field_value(field: gguf.ReaderField) -> tuple[Any, gguf.GGUFValueType, gguf.GGUFValueType | None]:
    """Extracts a reader field so that GGUFWriter re-encodes it byte for byte."""
    main = field.types[0]
    if main == gguf.GGUFValueType.ARRAY:
        sub = field.types[-1]
        if sub == gguf.GGUFValueType.STRING:
            # Raw bytes, not str: tokens need not round-trip through UTF-8 decoding.
            return [bytes(field.parts[i]) for i in field.data], main, sub
        return field.contents(), main, sub
    if main == gguf.GGUFValueType.STRING:
        return bytes(field.parts[-1]), main, None
    return field.contents(), main, None


def vocab_size(fields: list[tuple[str, Any, gguf.GGUFValueType, gguf.GGUFValueType | None]]) -> int:
    return next(len(v) for k, v, _, _ in fields if k == "tokenizer.ggml.tokens")


def _llama_tensors(cfg: TinyConfig, n_vocab: int, embd: Callable[[int, int], T], mat: Callable[[int, int, float], T],
                   norm: Callable[[int], T]) -> dict[str, T]:
    """The llama tensors in file order, each made by its constructor (one call each, in this order:
    a seeded generator's draws depend on it). A matrix with ggml ne {in, out} is made as (out, in)."""
    d, hd = cfg.n_embd, cfg.head_dim
    w = {"token_embd.weight": embd(n_vocab, d)}
    for i in range(cfg.n_layer):
        p = f"blk.{i}."
        w[p + "attn_norm.weight"] = norm(d)
        # Q/K gain > 1 sharpens attention so RoPE/position errors show up in the logits.
        w[p + "attn_q.weight"] = mat(cfg.n_head * hd, d, 2.0)
        w[p + "attn_k.weight"] = mat(cfg.n_head_kv * hd, d, 2.0)
        w[p + "attn_v.weight"] = mat(cfg.n_head_kv * hd, d, 1.0)
        w[p + "attn_output.weight"] = mat(d, cfg.n_head * hd, 1.0)
        w[p + "ffn_norm.weight"] = norm(d)
        w[p + "ffn_gate.weight"] = mat(cfg.n_ff, d, 1.0)
        w[p + "ffn_up.weight"] = mat(cfg.n_ff, d, 1.0)
        w[p + "ffn_down.weight"] = mat(d, cfg.n_ff, 1.0)
    w["output_norm.weight"] = norm(d)
    w["output.weight"] = mat(n_vocab, d, 3.0)
    return w


def make_weights(cfg: TinyConfig, n_vocab: int, seed: int) -> dict[str, np.ndarray]:
    """Random float32 weights in GGUF (numpy) layout.

    Scales are ~1/sqrt(fan_in) so attention and FFN change the residual stream as much as
    the embedding does: the logits then depend on context (not just the last token) and
    spread over several units, so top-1 varies across positions.
    """
    rng = np.random.default_rng(seed)

    def embd(n_out: int, n_in: int) -> np.ndarray:
        return rng.standard_normal((n_out, n_in)).astype(np.float32)

    def mat(n_out: int, n_in: int, gain: float) -> np.ndarray:
        return (rng.standard_normal((n_out, n_in)) * (gain / np.sqrt(n_in))).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    return _llama_tensors(cfg, n_vocab, embd, mat, norm)


def make_q4_0_weights(cfg: TinyConfig, n_vocab: int, seed: int) -> dict[str, tuple[np.ndarray, tuple[int, ...]]]:
    """Speed-only weights for a large synthetic model: every 2-D tensor as Q4_0 blocks of random
    4-bit values with one scale per tensor, norms F32 ones; name -> (stored bytes or F32, shape).

    Drawing bytes, not float weights, makes a 7B-shaped file in seconds; its logits are meaningless,
    which a speed measurement does not read (so the float models' gains are not applied).
    """
    rng = np.random.default_rng(seed)

    def q4(n_out: int, n_in: int, gain: float = 1.0) -> tuple[np.ndarray, tuple[int, ...]]:
        if n_in % _Q4_0_BLOCK:
            raise ValueError(f"Q4_0 needs rows of a multiple of {_Q4_0_BLOCK} weights, got {n_in}")
        blocks = rng.integers(0, 256, size=(n_out, n_in // _Q4_0_BLOCK, _Q4_0_BYTES), dtype=np.uint8)
        # 4-bit values -8..7 have a standard deviation of ~4.6: the scale gives ~1/sqrt(fan_in).
        blocks[:, :, :2] = np.frombuffer(np.float16(1.0 / (4.6 * np.sqrt(n_in))).tobytes(), dtype=np.uint8)
        return blocks.reshape(n_out, -1), (n_out, n_in)

    def ones(n: int) -> tuple[np.ndarray, tuple[int, ...]]:
        return np.ones(n, dtype=np.float32), (n,)

    return _llama_tensors(cfg, n_vocab, q4, q4, ones)


def _store_dtype(arr: np.ndarray, dtype: str) -> np.ndarray:
    # Like convert_hf_to_gguf: 1-D tensors (norms) stay F32 in an F16 model.
    if dtype == "f16" and arr.ndim >= 2:
        return arr.astype(np.float16)
    return arr


def _add_hparams(writer: gguf.GGUFWriter, cfg: TinyConfig, n_vocab: int, dtype: str, seed: int) -> None:
    writer.add_name(f"lanes-tiny-llama-{dtype}-s{seed}")
    writer.add_file_type({"f16": gguf.LlamaFileType.MOSTLY_F16, "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0}.get(dtype, gguf.LlamaFileType.ALL_F32))
    writer.add_context_length(cfg.n_ctx)
    writer.add_embedding_length(cfg.n_embd)
    writer.add_block_count(cfg.n_layer)
    writer.add_feed_forward_length(cfg.n_ff)
    writer.add_head_count(cfg.n_head)
    writer.add_head_count_kv(cfg.n_head_kv)
    writer.add_rope_dimension_count(cfg.head_dim)
    writer.add_rope_freq_base(cfg.rope_freq_base)
    writer.add_layer_norm_rms_eps(cfg.rms_eps)
    writer.add_vocab_size(n_vocab)


def make_tiny_model(vocab_gguf: pathlib.Path, out: pathlib.Path, dtype: str = "f32", seed: int = 1234,
                    cfg: TinyConfig | None = None) -> None:
    """Writes the model to `out` atomically (temp file in the same dir, then rename).

    `cfg` defaults to the embedded tiny model; larger shapes make synthetic models for speed
    measurements (e.g. a memory-bandwidth-bound one on a GPU host).
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    vocab_gguf, out = pathlib.Path(vocab_gguf), pathlib.Path(out)
    cfg = cfg or TinyConfig()
    if cfg.n_embd % cfg.n_head or cfg.n_head % cfg.n_head_kv:
        raise ValueError(f"n_embd {cfg.n_embd} must divide by n_head {cfg.n_head}, and n_head by n_head_kv {cfg.n_head_kv}")
    tok_fields = load_tokenizer_fields(vocab_gguf)
    n_vocab = vocab_size(tok_fields)

    writer = gguf.GGUFWriter(None, ARCH)
    _add_hparams(writer, cfg, n_vocab, dtype, seed)
    for key, value, vtype, sub in tok_fields:
        writer.add_key_value(key, value, vtype, sub)
    if dtype == "q4_0":
        for name, (arr, shape) in make_q4_0_weights(cfg, n_vocab, seed).items():
            raw = gguf.GGMLQuantizationType.Q4_0 if arr.dtype == np.uint8 else None
            # Quantized: the byte shape (rows x bytes per row); gguf-py derives the element shape.
            writer.add_tensor(name, arr, raw_dtype=raw)
    else:
        for name, arr in make_weights(cfg, n_vocab, seed).items():
            writer.add_tensor(name, _store_dtype(arr, dtype))

    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=out.name + ".", suffix=".tmp", dir=out.parent)
    os.close(fd)
    tmp = pathlib.Path(tmp_name)
    try:
        writer.write_header_to_file(tmp)
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; make it look like a normal output
        os.replace(tmp, out)
    except BaseException:
        writer.close()
        tmp.unlink(missing_ok=True)
        raise


FLAGS = flags.FLAGS


def define_flags() -> None:
    # Defined only when run as a program, so importing this module claims no flag names.
    flags.DEFINE_string("vocab", None, "GGUF whose tokenizer.* fields are copied (e.g. ggml-vocab-llama-spm.gguf).")
    flags.DEFINE_string("out", None, "Output GGUF path.")
    flags.DEFINE_enum("dtype", "f32", list(DTYPES), "Storage type of the 2-D weights; norms stay F32.")
    flags.DEFINE_integer("seed", 1234, "Seed of numpy.random.default_rng for the weights.")
    defaults = TinyConfig()
    for field in ("n_layer", "n_embd", "n_head", "n_head_kv", "n_ff"):
        flags.DEFINE_integer(field, getattr(defaults, field), f"{field} (default: the embedded tiny model).")
    flags.mark_flags_as_required(["vocab", "out"])


def main(argv: list[str]) -> None:
    logging.getLogger("gguf").setLevel(logging.WARNING)  # keep build output to what matters
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    try:
        cfg = dataclasses.replace(TinyConfig(), **{f: getattr(FLAGS, f) for f in ("n_layer", "n_embd", "n_head", "n_head_kv", "n_ff")})
        make_tiny_model(pathlib.Path(FLAGS.vocab), pathlib.Path(FLAGS.out), FLAGS.dtype, FLAGS.seed, cfg)
    except (VocabError, ValueError) as e:
        raise SystemExit(f"error: {e}") from e


if __name__ == "__main__":
    define_flags()
    app.run(main)
