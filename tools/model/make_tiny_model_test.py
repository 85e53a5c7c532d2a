"""Tests for make_tiny_model. Needs the vocab GGUF (see testdata_paths), not llama.cpp binaries.

Run: PYTHONPATH=/work/main python3 tools/model/make_tiny_model_test.py [--vocab=PATH]
"""

from __future__ import annotations

import hashlib
import pathlib

import gguf
import numpy as np
import pytest

from tools.model import make_tiny_model as mtm
from tools.model import testdata_paths


@pytest.fixture(scope="module")
def vocab() -> pathlib.Path:
    path = testdata_paths.vocab_gguf()
    assert path.is_file(), f"vocab GGUF not found at {path}; set {testdata_paths.VOCAB_ENV} or pass --vocab="
    return path


@pytest.fixture(scope="module")
def built(vocab: pathlib.Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, pathlib.Path]:
    out_dir = tmp_path_factory.mktemp("models")
    paths = {}
    for dtype in mtm.DTYPES:
        paths[dtype] = out_dir / f"tiny_{dtype}.gguf"
        mtm.make_tiny_model(vocab, paths[dtype], dtype=dtype)
    return paths


def _sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_output_is_deterministic(vocab: pathlib.Path, built: dict[str, pathlib.Path], tmp_path: pathlib.Path) -> None:
    again = tmp_path / "again.gguf"
    mtm.make_tiny_model(vocab, again, dtype="f32")
    assert _sha256(again) == _sha256(built["f32"])


def test_seed_changes_weights(vocab: pathlib.Path, built: dict[str, pathlib.Path], tmp_path: pathlib.Path) -> None:
    other = tmp_path / "other.gguf"
    mtm.make_tiny_model(vocab, other, dtype="f16", seed=99)
    assert _sha256(other) != _sha256(built["f16"])


def test_no_temp_files_left(built: dict[str, pathlib.Path]) -> None:
    leftovers = [p.name for p in built["f32"].parent.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


@pytest.mark.parametrize("dtype", mtm.DTYPES)
def test_hparams_read_back(built: dict[str, pathlib.Path], dtype: str) -> None:
    cfg = mtm.TinyConfig()
    f = gguf.GGUFReader(built[dtype]).fields
    expected = {
        "general.architecture": "llama",
        "llama.block_count": cfg.n_layer,
        "llama.embedding_length": cfg.n_embd,
        "llama.feed_forward_length": cfg.n_ff,
        "llama.attention.head_count": cfg.n_head,
        "llama.attention.head_count_kv": cfg.n_head_kv,
        "llama.context_length": cfg.n_ctx,
        "llama.rope.dimension_count": cfg.head_dim,
        "llama.rope.freq_base": cfg.rope_freq_base,
        "general.file_type": {"f16": 1, "q4_0": 2}.get(dtype, 0),
    }
    for key, value in expected.items():
        assert f[key].contents() == value, key
    assert f["llama.attention.layer_norm_rms_epsilon"].contents() == pytest.approx(cfg.rms_eps)


def test_tokenizer_fields_copied_verbatim(vocab: pathlib.Path, built: dict[str, pathlib.Path]) -> None:
    src = gguf.GGUFReader(vocab).fields
    dst = gguf.GGUFReader(built["f32"]).fields
    src_keys = [k for k in src if k.startswith("tokenizer.")]
    assert src_keys, "vocab has no tokenizer fields"
    assert [k for k in dst if k.startswith("tokenizer.")] == src_keys
    for key in src_keys:
        assert src[key].types == dst[key].types, key
        src_parts = [bytes(src[key].parts[i]) for i in src[key].data]
        dst_parts = [bytes(dst[key].parts[i]) for i in dst[key].data]
        assert src_parts == dst_parts, key
    assert dst["llama.vocab_size"].contents() == len(src["tokenizer.ggml.tokens"].data)


@pytest.mark.parametrize("dtype", mtm.DTYPES)
def test_tensor_shapes_and_types(built: dict[str, pathlib.Path], dtype: str) -> None:
    cfg = mtm.TinyConfig()
    reader = gguf.GGUFReader(built[dtype])
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    d, hd = cfg.n_embd, cfg.head_dim
    # ggml ne order (fastest dimension first), as llama.cpp's create_tensor expects.
    want = {"token_embd.weight": [d, n_vocab], "output_norm.weight": [d], "output.weight": [d, n_vocab]}
    for i in range(cfg.n_layer):
        want |= {
            f"blk.{i}.attn_norm.weight": [d],
            f"blk.{i}.attn_q.weight": [d, cfg.n_head * hd],
            f"blk.{i}.attn_k.weight": [d, cfg.n_head_kv * hd],
            f"blk.{i}.attn_v.weight": [d, cfg.n_head_kv * hd],
            f"blk.{i}.attn_output.weight": [cfg.n_head * hd, d],
            f"blk.{i}.ffn_norm.weight": [d],
            f"blk.{i}.ffn_gate.weight": [d, cfg.n_ff],
            f"blk.{i}.ffn_up.weight": [d, cfg.n_ff],
            f"blk.{i}.ffn_down.weight": [cfg.n_ff, d],
        }
    got = {t.name: t for t in reader.tensors}
    assert sorted(got) == sorted(want)
    for name, ne in want.items():
        t = got[name]
        assert t.shape.tolist() == ne, name
        matrix_type = {"f16": gguf.GGMLQuantizationType.F16, "q4_0": gguf.GGMLQuantizationType.Q4_0}.get(
            dtype, gguf.GGMLQuantizationType.F32)
        assert t.tensor_type == (matrix_type if len(ne) == 2 else gguf.GGMLQuantizationType.F32), name
        values = gguf.quants.dequantize(t.data, t.tensor_type) if dtype == "q4_0" else np.asarray(t.data, dtype=np.float32)
        assert np.all(np.isfinite(values)), name


def test_q4_0_scales_like_the_float_models(built: dict[str, pathlib.Path]) -> None:
    """The speed-only Q4_0 weights have the float models' ~1/sqrt(fan_in) spread, not garbage."""
    t = {t.name: t for t in gguf.GGUFReader(built["q4_0"]).tensors}["blk.0.ffn_down.weight"]
    values = gguf.quants.dequantize(t.data, t.tensor_type)
    assert values.std() == pytest.approx(1 / np.sqrt(mtm.TinyConfig().n_ff), rel=0.05)


def test_q4_0_refuses_rows_that_are_not_whole_blocks(vocab: pathlib.Path, tmp_path: pathlib.Path) -> None:
    cfg = mtm.TinyConfig(n_embd=48, n_head=4, n_head_kv=2, n_ff=96)
    with pytest.raises(ValueError, match="multiple of 32"):
        mtm.make_tiny_model(vocab, tmp_path / "out.gguf", dtype="q4_0", cfg=cfg)


def test_f16_is_rounded_f32(built: dict[str, pathlib.Path]) -> None:
    t32 = {t.name: t for t in gguf.GGUFReader(built["f32"]).tensors}
    t16 = {t.name: t for t in gguf.GGUFReader(built["f16"]).tensors}
    for name in ("blk.1.attn_k.weight", "blk.0.attn_norm.weight"):
        assert np.array_equal(np.asarray(t16[name].data), np.asarray(t32[name].data).astype(t16[name].data.dtype))


def test_missing_vocab_names_file(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "no-such-vocab.gguf"
    out = tmp_path / "out.gguf"
    with pytest.raises(mtm.VocabError, match="no-such-vocab.gguf"):
        mtm.make_tiny_model(missing, out)
    assert list(tmp_path.iterdir()) == []


def test_invalid_vocab_names_file(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "garbage.gguf"
    bad.write_bytes(b"this is not a gguf file at all" * 4)
    with pytest.raises(mtm.VocabError, match="garbage.gguf"):
        mtm.make_tiny_model(bad, tmp_path / "out.gguf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["garbage.gguf"]


def test_vocab_without_tokenizer_is_rejected(tmp_path: pathlib.Path) -> None:
    no_tok = tmp_path / "notok.gguf"
    w = gguf.GGUFWriter(no_tok, "llama")
    w.add_block_count(1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(mtm.VocabError, match="lacks tokenizer.ggml.model"):
        mtm.make_tiny_model(no_tok, tmp_path / "out.gguf")


def test_bad_dtype(vocab: pathlib.Path, tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="dtype"):
        mtm.make_tiny_model(vocab, tmp_path / "out.gguf", dtype="q8_0")


if __name__ == "__main__":
    import sys

    import pytest

    args = testdata_paths.take_vocab_arg(sys.argv[1:])
    # importlib mode: no sys.path or package guessing, which Bazel runfiles (generated
    # __init__.py files, a top-level lanes/ package) could confuse.
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--import-mode=importlib", *args]))
