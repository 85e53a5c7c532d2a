"""Tests for reference_forward. Small synthetic models test the maths; one test runs the real
tiny model (needs the vocab GGUF, see testdata_paths). No llama.cpp binaries needed.

Run: PYTHONPATH=/work/main python3 tools/model/reference_forward_test.py [--vocab=PATH]
"""

from __future__ import annotations

import pathlib
import struct

import gguf
import numpy as np
import pytest

from tools.model import make_tiny_model as mtm
from tools.model import reference_forward as rf
from tools.model import testdata_paths


def _random_model(seed: int = 0, n_vocab: int = 37, n_embd: int = 16, n_head: int = 4, n_head_kv: int = 2,
                  n_ff: int = 24, n_layer: int = 2) -> rf.Model:
    rng = np.random.default_rng(seed)
    hd = n_embd // n_head
    hp = rf.HParams(n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, n_rot=hd,
                    rope_freq_base=10000.0, rms_eps=1e-5)
    t = {"token_embd.weight": rng.standard_normal((n_vocab, n_embd)),
         "output_norm.weight": 1 + 0.1 * rng.standard_normal(n_embd),
         "output.weight": rng.standard_normal((n_vocab, n_embd)) / np.sqrt(n_embd)}
    shapes = {"attn_q": (n_head * hd, n_embd), "attn_k": (n_head_kv * hd, n_embd), "attn_v": (n_head_kv * hd, n_embd),
              "attn_output": (n_embd, n_head * hd), "ffn_gate": (n_ff, n_embd), "ffn_up": (n_ff, n_embd),
              "ffn_down": (n_embd, n_ff)}
    for i in range(n_layer):
        t[f"blk.{i}.attn_norm.weight"] = 1 + 0.1 * rng.standard_normal(n_embd)
        t[f"blk.{i}.ffn_norm.weight"] = 1 + 0.1 * rng.standard_normal(n_embd)
        for name, shape in shapes.items():
            t[f"blk.{i}.{name}.weight"] = rng.standard_normal(shape) * (1.5 / np.sqrt(shape[1]))
    return rf.Model(hp, t)


# ---- building blocks, checked against hand-computed values ----

def test_rms_norm_by_hand() -> None:
    x = np.array([[3.0, 4.0]])  # mean square 12.5
    got = rf.rms_norm(x, np.array([1.0, 2.0]), eps=0.0)
    np.testing.assert_allclose(got, [[3 / np.sqrt(12.5), 8 / np.sqrt(12.5)]])


def test_rope_rotates_adjacent_pairs() -> None:
    # n_rot 4: pair (x0, x1) turns by pos * 1, pair (x2, x3) by pos * base^(-1/2) = pos / 100.
    x = np.array([[[1.0, 0.0, 1.0, 0.0]]])
    got = rf.rope_norm(x, np.array([3]), n_rot=4, base=10000.0)[0, 0]
    np.testing.assert_allclose(got, [np.cos(3), np.sin(3), np.cos(0.03), np.sin(0.03)])


def test_rope_leaves_dims_beyond_n_rot() -> None:
    x = np.arange(6, dtype=np.float64).reshape(1, 1, 6)
    got = rf.rope_norm(x, np.array([5]), n_rot=4, base=10000.0)
    np.testing.assert_array_equal(got[..., 4:], x[..., 4:])


def test_rope_scores_depend_on_relative_position_only() -> None:
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((1, 1, 8)), rng.standard_normal((1, 1, 8))

    def score(pq: int, pk: int) -> float:
        rq = rf.rope_norm(q, np.array([pq]), 8, 10000.0)
        rk = rf.rope_norm(k, np.array([pk]), 8, 10000.0)
        return float(np.sum(rq * rk))

    assert score(7, 3) == pytest.approx(score(4, 0), abs=1e-12)
    assert score(7, 3) != pytest.approx(score(7, 4), abs=1e-6)


def test_attention_by_hand_two_tokens() -> None:
    # One head, head_dim 1: scores are q*k/1; token 0 sees only itself.
    q = np.array([[[1.0]], [[2.0]]])
    k = np.array([[[0.0]], [[1.0]]])
    v = np.array([[[10.0]], [[20.0]]])
    got = rf.attention(q, k, v)
    w1 = np.exp(2.0) / (np.exp(0.0) + np.exp(2.0))  # token 1: softmax([2*0, 2*1])
    np.testing.assert_allclose(got[:, 0, 0], [10.0, 10.0 * (1 - w1) + 20.0 * w1])


def test_gqa_maps_consecutive_query_heads_to_a_kv_head() -> None:
    rng = np.random.default_rng(2)
    n, hd = 5, 3
    q = rng.standard_normal((n, 4, hd))
    k = rng.standard_normal((n, 2, hd))
    v = rng.standard_normal((n, 2, hd))
    got = rf.attention(q, k, v)
    for h in range(4):
        kv = h // 2  # heads 0,1 -> kv 0; heads 2,3 -> kv 1 (ggml broadcast order)
        single = rf.attention(q[:, h:h + 1], k[:, kv:kv + 1], v[:, kv:kv + 1])
        np.testing.assert_allclose(got[:, h], single[:, 0], atol=1e-12)


def test_forward_one_layer_one_token_by_hand() -> None:
    # At position 0 RoPE is the identity and attention returns V, so the layer is plain algebra.
    m = _random_model(seed=3, n_layer=1)
    t, eps = m.tensors, m.hp.rms_eps
    x = t["token_embd.weight"][5]

    def norm(v: np.ndarray, w: np.ndarray) -> np.ndarray:
        return v / np.sqrt(np.mean(v ** 2) + eps) * w

    h = norm(x, t["blk.0.attn_norm.weight"])
    v = t["blk.0.attn_v.weight"] @ h  # 2 kv heads of 4 dims; 4 query heads -> kv 0,0,1,1
    heads = np.concatenate([v[0:4], v[0:4], v[4:8], v[4:8]])
    x = x + t["blk.0.attn_output.weight"] @ heads
    h = norm(x, t["blk.0.ffn_norm.weight"])
    g = t["blk.0.ffn_gate.weight"] @ h
    x = x + t["blk.0.ffn_down.weight"] @ (g / (1 + np.exp(-g)) * (t["blk.0.ffn_up.weight"] @ h))
    want = t["output.weight"] @ norm(x, t["output_norm.weight"])
    np.testing.assert_allclose(rf.forward(m, [5])[0], want, rtol=1e-12, atol=1e-12)


# ---- whole-model properties ----

def test_forward_is_causal() -> None:
    m = _random_model(seed=4)
    a = rf.forward(m, [1, 5, 9, 3, 7, 2])
    b = rf.forward(m, [1, 5, 9, 30, 17, 12])
    np.testing.assert_allclose(a[:3], b[:3], rtol=0, atol=1e-12)
    assert np.max(np.abs(a[3:] - b[3:])) > 1e-3


def test_forward_depends_on_earlier_tokens() -> None:
    # Guards against attention silently reducing to "each token sees only itself".
    m = _random_model(seed=5)
    a = rf.forward(m, [1, 5, 9, 3])
    b = rf.forward(m, [1, 6, 9, 3])
    assert np.max(np.abs(a[2:] - b[2:])) > 1e-3


def test_forward_depends_on_order() -> None:
    # One layer: without RoPE, the last position attends to the same set of tokens in both
    # orders and would get identical logits; any difference comes from position encoding.
    m = _random_model(seed=6, n_layer=1)
    a = rf.forward(m, [1, 5, 9, 3])
    b = rf.forward(m, [1, 9, 5, 3])
    assert np.max(np.abs(a[3] - b[3])) > 1e-3


def test_tied_output_falls_back_to_token_embd() -> None:
    m = _random_model(seed=7)
    tied = rf.Model(m.hp, {**m.tensors, "output.weight": m.tensors["token_embd.weight"]})
    untied = rf.Model(m.hp, {k: v for k, v in m.tensors.items() if k != "output.weight"})
    np.testing.assert_array_equal(rf.forward(tied, [1, 2, 3]), rf.forward(untied, [1, 2, 3]))


# ---- LGT1 file and comparison ----

def _write_lgt(path: pathlib.Path, tokens: np.ndarray, logits: np.ndarray) -> None:
    path.write_bytes(b"LGT1" + struct.pack("<ii", *logits.shape) + tokens.astype("<i4").tobytes()
                     + logits.astype("<f4").tobytes())


def test_read_logits_file_round_trip(tmp_path: pathlib.Path) -> None:
    tokens = np.array([1, 450, 31999])
    logits = np.arange(3 * 5, dtype=np.float32).reshape(3, 5) - 7.5
    _write_lgt(tmp_path / "a.lgt", tokens, logits)
    got_tokens, got_logits = rf.read_logits_file(tmp_path / "a.lgt")
    np.testing.assert_array_equal(got_tokens, tokens)
    np.testing.assert_array_equal(got_logits, logits)


def test_read_logits_file_rejects_bad_input(tmp_path: pathlib.Path) -> None:
    tokens, logits = np.array([1, 2]), np.zeros((2, 4), np.float32)
    _write_lgt(tmp_path / "ok.lgt", tokens, logits)
    data = (tmp_path / "ok.lgt").read_bytes()
    (tmp_path / "short.lgt").write_bytes(data[:-1])
    (tmp_path / "magic.lgt").write_bytes(b"XXXX" + data[4:])
    with pytest.raises(ValueError, match="does not match"):
        rf.read_logits_file(tmp_path / "short.lgt")
    with pytest.raises(ValueError, match="LGT1"):
        rf.read_logits_file(tmp_path / "magic.lgt")


def test_compare_logits_identical() -> None:
    x = np.random.default_rng(8).standard_normal((4, 10))
    r = rf.compare_logits(x, x.copy())
    assert r["max_abs_delta_logit"] == 0.0 and r["top1_agreement"] == 1.0
    assert r["mean_kl"] == pytest.approx(0.0, abs=1e-15)


def test_compare_logits_by_hand() -> None:
    ref = np.array([[0.0, 0.0], [np.log(3.0), 0.0]])  # p = [.5,.5], [.75,.25]
    got = np.array([[np.log(3.0), 0.0], [np.log(3.0), 0.0]])  # q = [.75,.25] twice
    r = rf.compare_logits(ref, got)
    kl0 = 0.5 * np.log(0.5 / 0.75) + 0.5 * np.log(0.5 / 0.25)
    assert r["mean_kl"] == pytest.approx(kl0 / 2, rel=1e-12)
    assert r["max_abs_delta_logit"] == pytest.approx(np.log(3.0))
    # Row 0 of ref is a tie; numpy argmax picks index 0, as does got's row 0.
    assert r["top1_agreement"] == 1.0
    assert rf.compare_logits(ref, np.array([[1.0, 0.0], [0.0, 1.0]]))["top1_agreement"] == 0.5


def test_compare_logits_ignores_near_ties_in_decisive_agreement() -> None:
    ref = np.array([[1.0, 1.01, 0.0], [5.0, 0.0, 0.0]])  # row 0 is a near-tie (margin 0.01)
    got = np.array([[1.01, 1.0, 0.0], [0.0, 5.0, 0.0]])  # flips the tie, and the decisive row
    r = rf.compare_logits(ref, got, tie_margin=0.1)
    assert r["top1_agreement"] == 0.0
    assert r["n_decisive"] == 1 and r["top1_agreement_decisive"] == 0.0
    assert r["min_ref_top1_margin"] == pytest.approx(0.01)
    got[1] = ref[1]
    assert rf.compare_logits(ref, got, tie_margin=0.1)["top1_agreement_decisive"] == 1.0


# ---- the real tiny model, read from GGUF ----

@pytest.fixture(scope="module")
def tiny_f16(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    vocab = testdata_paths.vocab_gguf()
    assert vocab.is_file(), f"vocab GGUF not found at {vocab}; set {testdata_paths.VOCAB_ENV} or pass --vocab="
    out = tmp_path_factory.mktemp("tiny") / "tiny_f16.gguf"
    mtm.make_tiny_model(vocab, out, dtype="f16")
    return out


def test_load_model_reads_gguf(tiny_f16: pathlib.Path) -> None:
    m = rf.load_model(tiny_f16)
    cfg = mtm.TinyConfig()
    assert (m.hp.n_layer, m.hp.n_embd, m.hp.n_head, m.hp.n_head_kv, m.hp.n_rot) == (
        cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.n_head_kv, cfg.head_dim)
    assert m.tensors["blk.0.attn_k.weight"].shape == (cfg.n_head_kv * cfg.head_dim, cfg.n_embd)
    assert m.tensors["token_embd.weight"].dtype == np.float64
    # Upcasting is exact: F16 values survive the trip through float64.
    raw = {t.name: t for t in gguf.GGUFReader(tiny_f16).tensors}["blk.0.attn_q.weight"]
    assert raw.tensor_type == gguf.GGMLQuantizationType.F16
    np.testing.assert_array_equal(m.tensors["blk.0.attn_q.weight"].astype(np.float16), np.asarray(raw.data))


def test_tiny_model_logits_are_not_degenerate(tiny_f16: pathlib.Path) -> None:
    m = rf.load_model(tiny_f16)
    tokens = [1, 450, 4996, 17354, 1701, 29916, 432, 17204, 975, 278, 17366, 11203]
    logits = rf.forward(m, tokens)
    assert logits.shape == (len(tokens), 32000)
    assert np.all(np.isfinite(logits))
    assert np.min(logits.std(axis=-1)) > 1.0  # spread enough that top-1 is well defined
    assert len(set(logits.argmax(axis=-1).tolist())) >= len(tokens) // 2


def test_load_model_rejects_other_architectures(tmp_path: pathlib.Path) -> None:
    p = tmp_path / "gpt2.gguf"
    w = gguf.GGUFWriter(p, "gpt2")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ValueError, match="gpt2"):
        rf.load_model(p)


if __name__ == "__main__":
    import sys

    import pytest

    args = testdata_paths.take_vocab_arg(sys.argv[1:])
    # importlib mode: no sys.path or package guessing, which Bazel runfiles (generated
    # __init__.py files, a top-level lanes/ package) could confuse.
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--import-mode=importlib", *args]))
