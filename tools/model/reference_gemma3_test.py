"""Tests for reference_gemma3: a tiny gemma3 GGUF written here from a fixed seed checks the maths
against a per-token loop re-statement; gguf-py dequantization per quant type; refusals; and, where
/srv/models holds it, the real gemma-3-270m's hyper-parameters. No llama.cpp binaries needed.

Run: PYTHONPATH=/work/main python3 -m pytest tools/model/reference_gemma3_test.py
"""

from __future__ import annotations

import math
import pathlib

import gguf
import gguf.quants
import numpy as np
import pytest

from tools.model import reference_forward as rf
from tools.model import reference_gemma3 as g3

REAL_MODEL = pathlib.Path("/srv/models/gemma-3-270m-q4_k_m.gguf")

# Tiny gemma3: 3 layers, pattern 2 -> layer 0 local, layer 1 global, layer 2 local; window 3.
N_VOCAB, N_EMBD, N_HEAD, N_HEAD_KV, HEAD_DIM, N_FF, N_LAYER = 50, 64, 4, 2, 16, 96, 3
WINDOW, PATTERN, BASE, BASE_SWA, EPS = 3, 2, 1_000_000.0, 10_000.0, 1e-6


def _tiny_tensors(seed: int = 7) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def mat(n_out: int, n_in: int) -> np.ndarray:
        return (rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)).astype(np.float32)

    def norm(n: int) -> np.ndarray:  # stored with the +1 already, as convert_hf_to_gguf does
        return (1 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    t = {"token_embd.weight": (0.3 * rng.standard_normal((N_VOCAB, N_EMBD))).astype(np.float32),
         "output_norm.weight": norm(N_EMBD)}
    for i in range(N_LAYER):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = norm(N_EMBD)
        t[p + "attn_q.weight"] = mat(N_HEAD * HEAD_DIM, N_EMBD)
        t[p + "attn_k.weight"] = mat(N_HEAD_KV * HEAD_DIM, N_EMBD)
        t[p + "attn_v.weight"] = mat(N_HEAD_KV * HEAD_DIM, N_EMBD)
        t[p + "attn_q_norm.weight"] = norm(HEAD_DIM)
        t[p + "attn_k_norm.weight"] = norm(HEAD_DIM)
        t[p + "attn_output.weight"] = mat(N_EMBD, N_HEAD * HEAD_DIM)
        t[p + "post_attention_norm.weight"] = norm(N_EMBD)
        t[p + "ffn_norm.weight"] = norm(N_EMBD)
        t[p + "ffn_gate.weight"] = mat(N_FF, N_EMBD)
        t[p + "ffn_up.weight"] = mat(N_FF, N_EMBD)
        t[p + "ffn_down.weight"] = mat(N_EMBD, N_FF)
        t[p + "post_ffw_norm.weight"] = norm(N_EMBD)
    return t


def _write_gguf(path: pathlib.Path, tensors: dict[str, np.ndarray], arch: str = "gemma3",
                raw: dict[str, tuple[np.ndarray, gguf.GGMLQuantizationType]] | None = None,
                softcap: float | None = None) -> pathlib.Path:
    """A GGUF with the keys the real gemma-3-270m has (tokenizer omitted: the reference does not read it)."""
    w = gguf.GGUFWriter(path, arch)
    w.add_context_length(128)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_layer_norm_rms_eps(EPS)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_freq_base(BASE)
    w.add_float32(f"{arch}.rope.freq_base_swa", BASE_SWA)
    w.add_sliding_window(WINDOW)
    w.add_uint32(f"{arch}.attention.sliding_window_pattern", PATTERN)
    if softcap is not None:
        w.add_float32(f"{arch}.final_logit_softcapping", softcap)
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    for name, (arr, qtype) in (raw or {}).items():
        w.add_tensor(name, arr, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> g3.Model:
    return g3.load_model(_write_gguf(tmp_path_factory.mktemp("g3") / "tiny.gguf", _tiny_tensors()))


TOKENS = [2, 17, 5, 33, 41, 8, 12, 29]


# ---- an independent, deliberately plain re-statement: one query position at a time, loops ----

def _loop_logits(t: dict[str, np.ndarray], tokens: list[int], layer_local: list[bool]) -> np.ndarray:
    f = {k: v.astype(np.float64) for k, v in t.items()}

    def rmsn(v: np.ndarray, w: np.ndarray) -> np.ndarray:
        return v / math.sqrt(sum(a * a for a in v) / len(v) + EPS) * w

    def rot(v: np.ndarray, pos: int, base: float) -> np.ndarray:
        # NEOX: element i pairs with i + d/2, as a complex number turned by pos * base^(-2i/d).
        half = len(v) // 2
        z = (v[:half] + 1j * v[half:]) * np.exp(1j * pos * base ** (-2.0 * np.arange(half) / len(v)))
        return np.concatenate([z.real, z.imag])

    xs = [f["token_embd.weight"][tok] * math.sqrt(N_EMBD) for tok in tokens]
    for il in range(N_LAYER):
        p = f"blk.{il}."
        base = BASE_SWA if layer_local[il] else BASE
        hs = [rmsn(x, f[p + "attn_norm.weight"]) for x in xs]
        ks, vs = [], []
        for pos, h in enumerate(hs):
            k = (f[p + "attn_k.weight"] @ h).reshape(N_HEAD_KV, HEAD_DIM)
            ks.append([rot(rmsn(k[j], f[p + "attn_k_norm.weight"]), pos, base) for j in range(N_HEAD_KV)])
            vs.append((f[p + "attn_v.weight"] @ h).reshape(N_HEAD_KV, HEAD_DIM))
        new = []
        for pos, h in enumerate(hs):
            q = (f[p + "attn_q.weight"] @ h).reshape(N_HEAD, HEAD_DIM)
            heads = []
            for hh in range(N_HEAD):
                qh = rot(rmsn(q[hh], f[p + "attn_q_norm.weight"]), pos, base)
                kv = hh // (N_HEAD // N_HEAD_KV)
                keys = [j for j in range(pos + 1) if not (layer_local[il] and pos - j >= WINDOW)]
                s = [float(qh @ ks[j][kv]) / math.sqrt(HEAD_DIM) for j in keys]
                m = max(s)
                e = [math.exp(a - m) for a in s]
                heads.append(sum(ej / sum(e) * vs[j][kv] for ej, j in zip(e, keys)))
            a = rmsn(f[p + "attn_output.weight"] @ np.concatenate(heads), f[p + "post_attention_norm.weight"])
            x = xs[pos] + a
            hn = rmsn(x, f[p + "ffn_norm.weight"])
            gte, up = f[p + "ffn_gate.weight"] @ hn, f[p + "ffn_up.weight"] @ hn
            gelu = np.array([0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3))) for v in gte])
            x = x + rmsn(f[p + "ffn_down.weight"] @ (gelu * up), f[p + "post_ffw_norm.weight"])
            new.append(x)
        xs = new
    return np.array([f["token_embd.weight"] @ rmsn(x, f["output_norm.weight"]) for x in xs])


def test_hparams_of_tiny(tiny: g3.Model) -> None:
    hp = tiny.hp
    assert (hp.n_layer, hp.n_embd, hp.n_head, hp.n_head_kv, hp.head_dim, hp.n_ff, hp.n_vocab) == (
        N_LAYER, N_EMBD, N_HEAD, N_HEAD_KV, HEAD_DIM, N_FF, N_VOCAB)
    assert [hp.is_local(i) for i in range(N_LAYER)] == [True, False, True]
    assert [hp.rope_base(i) for i in range(N_LAYER)] == [BASE_SWA, BASE, BASE_SWA]
    assert hp.attention_scale == pytest.approx(1 / math.sqrt(HEAD_DIM))
    assert hp.final_logit_softcapping == 0.0


def test_forward_matches_per_token_loop(tiny: g3.Model) -> None:
    got = g3.forward(tiny, TOKENS)
    want = _loop_logits(tiny.tensors, TOKENS, [True, False, True])
    assert got.shape == (len(TOKENS), N_VOCAB) and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_loop_restatement_is_sensitive_to_layer_kinds(tiny: g3.Model) -> None:
    # The check above would be vacuous if the window and rope base made no difference.
    got = g3.forward(tiny, TOKENS)
    for kinds in ([False, False, False], [True, True, True]):
        assert np.max(np.abs(got - _loop_logits(tiny.tensors, TOKENS, kinds))) > 1e-3


def test_sliding_window_masks_only_local_layers(tiny: g3.Model) -> None:
    # Position 5 sees positions 3..5 on a local layer (window 3): changing token 1 leaves layer 0's
    # output at position 5 unchanged but changes global layer 1's (and positions < window-distance).
    a = g3.forward_nodes(tiny, TOKENS)
    changed = list(TOKENS)
    changed[1] = 44
    b = g3.forward_nodes(tiny, changed)
    np.testing.assert_array_equal(a["l_out-0"][4:], b["l_out-0"][4:])
    assert np.max(np.abs(a["l_out-0"][1:4] - b["l_out-0"][1:4])) > 1e-3  # inside the window
    assert np.max(np.abs(a["l_out-1"][5] - b["l_out-1"][5])) > 1e-3
    np.testing.assert_array_equal(a["l_out-1"][0], b["l_out-1"][0])  # causal


def test_rope_base_per_layer(tiny: g3.Model) -> None:
    n = g3.forward_nodes(tiny, TOKENS)
    pos = np.arange(len(TOKENS))
    for il, base in enumerate([BASE_SWA, BASE, BASE_SWA]):
        other = BASE if base == BASE_SWA else BASE_SWA
        np.testing.assert_allclose(n[f"Qcur-{il}"], g3.rope_neox(n[f"Qcur_normed-{il}"], pos, base), rtol=0, atol=1e-12)
        assert np.max(np.abs(n[f"Kcur-{il}"] - g3.rope_neox(n[f"Kcur_normed-{il}"], pos, other))) > 1e-3


def test_rope_neox_by_hand() -> None:
    # d 4: pair (x0, x2) turns by pos * 1, pair (x1, x3) by pos * base^(-1/2) = pos / 100.
    got = g3.rope_neox(np.array([[[1.0, 1.0, 0.0, 0.0]]]), np.array([3]), 10000.0)[0, 0]
    np.testing.assert_allclose(got, [np.cos(3), np.cos(0.03), np.sin(3), np.sin(0.03)])


def test_gelu_tanh_values() -> None:
    # tanh approximation (ggml_gelu), not the erf form (whose value at 1 is 0.8413447).
    np.testing.assert_allclose(g3.gelu_tanh(np.array([0.0, 1.0, -1.0, 10.0, -10.0])),
                               [0.0, 0.8411919906082768, -0.15880800939172324, 10.0, 0.0], rtol=1e-12, atol=1e-12)


def test_embedding_scale_and_nodes(tiny: g3.Model) -> None:
    n = g3.forward_nodes(tiny, TOKENS)
    np.testing.assert_allclose(n["inp_scaled"], n["embd"] * math.sqrt(N_EMBD))
    for il in range(N_LAYER):
        for k in ("attn_norm", "Qcur", "Kcur", "Vcur", "attn_out", "ffn_out", "l_out"):
            assert f"{k}-{il}" in n
    np.testing.assert_array_equal(n["result_output"], g3.forward(tiny, TOKENS))


def test_final_logit_softcapping(tmp_path: pathlib.Path, tiny: g3.Model) -> None:
    m = g3.load_model(_write_gguf(tmp_path / "cap.gguf", _tiny_tensors(), softcap=2.0))
    assert m.hp.final_logit_softcapping == 2.0
    np.testing.assert_allclose(g3.forward(m, TOKENS), 2.0 * np.tanh(g3.forward(tiny, TOKENS) / 2.0), rtol=1e-12)


def test_single_token_is_prefix_of_longer(tiny: g3.Model) -> None:
    full = g3.forward(tiny, TOKENS)
    np.testing.assert_allclose(g3.forward(tiny, TOKENS[:1])[0], full[0], rtol=1e-12, atol=1e-12)


# ---- dequantization (gguf-py) ----

Q = gguf.GGMLQuantizationType
F16_D = 2.0 ** -11


@pytest.mark.parametrize("qtype,rel_bound", [(Q.Q8_0, 1 / 254 + F16_D), (Q.Q5_0, 1 / 16 + F16_D),
                                              (Q.Q4_0, 1 / 8 + F16_D), (Q.F16, 1e-3)])
def test_quantize_dequantize_round_trip(qtype: gguf.GGMLQuantizationType, rel_bound: float) -> None:
    # Per block of 32 the step is amax / 127 (Q8_0, symmetric: error <= step / 2), amax / 16 (Q5_0) and
    # amax / 8 (Q4_0): d = amax / -16 (-8) maps the extreme to -16 (-8), so +amax clamps to 15 (7),
    # an error of one step; everything else rounds to within half a step. d itself is stored as f16,
    # which adds up to amax * 2^-11 (F16_D).
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 256)).astype(np.float32)
    y = gguf.quants.dequantize(gguf.quants.quantize(x, qtype), qtype).reshape(x.shape)
    blocks_x, blocks_e = x.reshape(-1, 32), np.abs(y - x).reshape(-1, 32)
    assert np.all(blocks_e.max(axis=1) <= rel_bound * np.abs(blocks_x).max(axis=1))
    assert np.max(np.abs(y - x)) > 0 or qtype == Q.F16


def _f16(b: np.ndarray) -> float:
    return float(np.frombuffer(b.tobytes(), dtype=np.float16)[0])


def _q4_k_by_hand(block: np.ndarray) -> np.ndarray:
    """ggml's block_q4_K: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins for 8 sub-blocks, 128 bytes of nibbles."""
    d, dmin, sc, qs = _f16(block[0:2]), _f16(block[2:4]), [int(v) for v in block[4:16]], block[16:144]
    out = []
    for j in range(8):
        if j < 4:
            s, m = sc[j] & 63, sc[j + 4] & 63
        else:
            s = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4)
            m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4)
        chunk = qs[32 * (j // 2): 32 * (j // 2) + 32]
        q = [(int(v) >> 4) if j % 2 else (int(v) & 0xF) for v in chunk]
        out += [d * s * v - dmin * m for v in q]
    return np.array(out)


def _q6_k_by_hand(block: np.ndarray) -> np.ndarray:
    """ggml's block_q6_K: 128 bytes low 4 bits, 64 bytes high 2 bits, 16 int8 scales, f16 d."""
    ql, qh, sc, d = block[0:128], block[128:192], block[192:208].view(np.int8), _f16(block[208:210])
    y = np.zeros(256)
    for half in range(2):
        L, H, S, Y = ql[64 * half:], qh[32 * half:], sc[8 * half:], 128 * half
        for i in range(32):
            s = i // 16
            q1 = ((int(L[i]) & 0xF) | (((int(H[i]) >> 0) & 3) << 4)) - 32
            q2 = ((int(L[i + 32]) & 0xF) | (((int(H[i]) >> 2) & 3) << 4)) - 32
            q3 = ((int(L[i]) >> 4) | (((int(H[i]) >> 4) & 3) << 4)) - 32
            q4 = ((int(L[i + 32]) >> 4) | (((int(H[i]) >> 6) & 3) << 4)) - 32
            y[Y + i], y[Y + i + 32] = d * int(S[s]) * q1, d * int(S[s + 2]) * q2
            y[Y + i + 64], y[Y + i + 96] = d * int(S[s + 4]) * q3, d * int(S[s + 6]) * q4
    return y


@pytest.mark.parametrize("qtype,by_hand", [(Q.Q4_K, _q4_k_by_hand), (Q.Q6_K, _q6_k_by_hand)])
def test_k_quant_dequantize_matches_block_layout(qtype: gguf.GGMLQuantizationType, by_hand) -> None:
    # gguf-py 0.19 cannot quantize K-quants, so random blocks (with small finite f16 scales) are
    # decoded by gguf-py and by a per-element re-statement of the block layout.
    rng = np.random.default_rng(5)
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(3, type_size), dtype=np.uint8)
    scale = np.frombuffer(np.float16(0.01).tobytes(), np.uint8)
    for r in raw:
        if qtype == Q.Q4_K:
            r[0:2], r[2:4] = scale, np.frombuffer(np.float16(0.02).tobytes(), np.uint8)
        else:
            r[208:210] = scale
    got = gguf.quants.dequantize(raw, qtype).reshape(3, block_size)
    for r, row in zip(raw, got):
        np.testing.assert_allclose(row, by_hand(r), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q5_0])
def test_loader_dequantizes_quantized_tensors(tmp_path: pathlib.Path, qtype: gguf.GGMLQuantizationType) -> None:
    t = _tiny_tensors()
    w = t.pop("blk.0.ffn_up.weight")
    q = gguf.quants.quantize(w, qtype)
    m = g3.load_model(_write_gguf(tmp_path / "q.gguf", t, raw={"blk.0.ffn_up.weight": (q, qtype)}))
    got = m.tensors["blk.0.ffn_up.weight"]
    assert got.shape == w.shape
    np.testing.assert_array_equal(got, gguf.quants.dequantize(q, qtype).reshape(w.shape))
    assert np.max(np.abs(got - w)) < 0.1 * np.max(np.abs(w))


# ---- refusals ----

def test_refuses_other_architecture(tmp_path: pathlib.Path) -> None:
    path = _write_gguf(tmp_path / "llama.gguf", _tiny_tensors(), arch="llama")
    with pytest.raises(rf.UnsupportedModelError, match="architecture 'llama'"):
        g3.load_model(path)


def test_refuses_tensor_type_gguf_py_cannot_dequantize(tmp_path: pathlib.Path) -> None:
    # Q8_1 has no gguf-py dequantization: the loader names it, never approximates.
    t = _tiny_tensors()
    w = t.pop("blk.0.ffn_up.weight")
    block_size, type_size = gguf.GGML_QUANT_SIZES[Q.Q8_1]
    raw = np.zeros((w.shape[0], w.shape[1] // block_size * type_size), dtype=np.uint8)
    path = _write_gguf(tmp_path / "q81.gguf", t, raw={"blk.0.ffn_up.weight": (raw, Q.Q8_1)})
    with pytest.raises(rf.UnsupportedModelError, match="Q8_1"):
        g3.load_model(path)


# ---- the real model, where installed ----

@pytest.mark.skipif(not REAL_MODEL.exists(), reason=f"{REAL_MODEL} is not installed on this machine")
def test_real_gemma3_270m_hparams() -> None:
    hp = g3.load_model(REAL_MODEL).hp
    assert (hp.n_layer, hp.n_embd, hp.n_head, hp.n_head_kv, hp.head_dim, hp.n_ff, hp.n_vocab) == (
        18, 640, 4, 1, 256, 2048, 262144)
    assert [il for il in range(18) if not hp.is_local(il)] == [5, 11, 17]
    assert (hp.rope_freq_base, hp.rope_freq_base_swa, hp.sliding_window) == (1_000_000.0, 10_000.0, 512)
    assert hp.attention_scale == pytest.approx(1 / 16)


if __name__ == "__main__":
    import sys

    # importlib mode: no sys.path or package guessing, which Bazel runfiles could confuse.
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--import-mode=importlib", *sys.argv[1:]]))
