"""reference_parity's recompute and verdict on synthetic logits logs."""

from __future__ import annotations

import sys

import pytest

REF_TOL = {"tol_max_abs_delta_logit": 1e-3, "tol_mean_kl": 1e-8, "tol_top1_agreement_decisive": 1.0,
           "tol_min_decisive_fraction": 0.5, "tie_margin": 0.1}


def _logits(n=6, v=32, seed=0):
    import numpy as np
    return np.random.default_rng(seed).normal(0, 3, (n, v))


def _ref_logs(tmp_path, ref, got, **extra):
    import numpy as np

    from tools.runner import log_blocks
    from tools.runner.checks import reference_parity as rp
    config = {k: repr(v) for k, v in REF_TOL.items()}
    config.update({f"fa_on.{k}": repr(v) for k, v in FA_TOL.items()}, prompt="a prompt")
    log_blocks.write_config(log_blocks.config_path(tmp_path, rp.STEP), config)
    tokens = np.arange(len(ref), dtype=np.int32)
    arrays = {"tokens": tokens, "expected_tokens": tokens, "lane": got, "reference": ref}
    arrays.update(extra)
    rp.save_logits(tmp_path / rp.LOGITS_FILE, arrays)
    return rp.recompute(tmp_path)


FA_TOL = {"tol_max_abs_delta_logit": 0.05, "tol_mean_kl": 1e-4, "tol_top1_agreement_decisive": 1.0,
          "tol_min_decisive_fraction": 0.5, "tie_margin": 0.1}


def test_lane_tokens_must_be_the_vocabularys_and_enough(tmp_path):
    """A lane that tokenizes the prompt as BOS alone is compared on one position: refused, and so is
    one whose tokens are not the ones the model's vocabulary gives (computed without the lane)."""
    import numpy as np

    from tools.runner import log_blocks
    from tools.runner.checks import reference_parity as rp
    ref = _logits(n=20)
    _ref_logs(tmp_path, ref[:1], ref[:1].astype(np.float32))
    assert any("only 1 token positions compared; need at least 16" in p for p in rp.problems(tmp_path))
    _ref_logs(tmp_path, ref, ref.astype(np.float32))
    assert rp.problems(tmp_path) == []
    with np.load(tmp_path / rp.LOGITS_FILE) as z:
        arrays = dict(z)
    arrays["expected_tokens"] = arrays["expected_tokens"] + 1
    rp.save_logits(tmp_path / rp.LOGITS_FILE, arrays)
    assert any("the lane's 20 prompt token(s) differ from the model vocabulary's 20 tokens" in p for p in rp.problems(tmp_path))
    # An older run recorded no prompt: judged as it was made (its tokens were not recorded).
    config = log_blocks.step_config(tmp_path, rp.STEP)
    del config["prompt"]
    log_blocks.write_config(log_blocks.config_path(tmp_path, rp.STEP), config)
    assert rp.problems(tmp_path) == []


def test_flash_attention_on_is_compared_end_to_end(tmp_path):
    import numpy as np

    from tools.runner.checks import reference_parity as rp
    ref = _logits(n=20)
    lane = ref.astype(np.float32)
    _ref_logs(tmp_path, ref, lane, lane_fa_on=(ref + 1e-3).astype(np.float32))
    assert rp.problems(tmp_path) == []
    counts, metrics = _ref_logs(tmp_path, ref, lane, lane_fa_on=(ref + 0.2).astype(np.float32))
    assert metrics["fa_on.max_abs_delta_logit"] > 0.1
    assert any(p.startswith("flash attention on vs float64: max |delta logit|") for p in rp.problems(tmp_path))


def test_an_accelerator_identical_to_the_cpu_lane_is_not_computed_on_the_device(tmp_path):
    import numpy as np

    from tools.runner.checks import reference_parity as rp
    ref = _logits(n=20).astype(np.float32)
    _ref_logs(tmp_path, ref, ref.copy(), cpu_lane=ref)
    assert any("bit-identical to the CPU lane's" in p for p in rp.problems(tmp_path))
    _ref_logs(tmp_path, ref, ref + np.float32(1e-4), cpu_lane=ref)
    assert rp.problems(tmp_path) == []


def test_reference_parity_recompute_and_pass(tmp_path):
    import numpy as np

    from tools.runner.checks import reference_parity as rp
    ref = _logits(n=20)
    counts, metrics = _ref_logs(tmp_path, ref, (ref + 1e-5).astype(np.float32))
    assert counts["n_tokens"] == 20 and counts["n_decisive"] >= 3 and counts["nonfinite_lane"] == 0
    assert metrics["max_abs_delta_logit"] < 1e-4 and metrics["top1_agreement_decisive"] == 1.0
    assert metrics["tol_mean_kl"] == 1e-8
    assert rp.judge(counts, metrics, REF_TOL) == []


def test_reference_parity_nan_logits_fail(tmp_path):
    """The former loophole: `nan > tol` is false, so NaN logits passed."""
    import numpy as np

    from tools.runner.checks import reference_parity as rp
    ref = _logits(n=20)
    got = ref.copy()
    got[2, 5] = np.nan
    counts, metrics = _ref_logs(tmp_path, ref, got)
    assert counts["nonfinite_lane"] == 1 and "max_abs_delta_logit" not in metrics
    problems = rp.judge(counts, metrics, REF_TOL)
    assert problems and "non-finite" in problems[0]
    got[2, 5] = np.inf
    counts, metrics = _ref_logs(tmp_path, ref, got)
    assert rp.judge(counts, metrics, REF_TOL)
    # A NaN that reaches a metric by any other path fails too.
    assert rp.judge({"n_tokens": 6, "n_decisive": 6}, {"max_abs_delta_logit": float("nan"), "mean_kl": 0.0,
                                                        "top1_agreement_decisive": 1.0}, REF_TOL)


def test_reference_parity_all_tie_logits_fail(tmp_path):
    """Where no position has a clear top-1, top-1 agreement proves nothing: FAIL, not a vacuous 1.0."""
    import numpy as np

    from tools.runner.checks import reference_parity as rp
    ref = np.zeros((20, 32))
    counts, metrics = _ref_logs(tmp_path, ref, ref.astype(np.float32))
    assert counts["n_decisive"] == 0 and "top1_agreement_decisive" not in metrics
    problems = rp.judge(counts, metrics, REF_TOL)
    assert any("decisive" in p for p in problems)


def _typed_gguf(path, qtype):
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama")
    data = np.random.default_rng(0).normal(size=(4, 64)).astype(np.float32)
    if qtype is None:
        w.add_tensor("t.weight", data)
    else:
        import gguf.quants
        w.add_tensor("t.weight", gguf.quants.quantize(data, qtype), raw_dtype=qtype)
    w.add_tensor("n.weight", np.ones(64, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_quantized_models_get_the_measured_bounds_and_f32_models_none(tmp_path):
    import gguf

    from tools.runner.checks import reference_parity as rp
    assert rp.model_bounds(_typed_gguf(tmp_path / "f32.gguf", None)) == {}
    q8 = _typed_gguf(tmp_path / "q8.gguf", gguf.GGMLQuantizationType.Q8_0)
    assert rp.quantized_types(q8) == ("Q8_0",)
    assert rp.model_bounds(q8) == rp.QUANTIZED_BOUNDS


def test_an_unmeasured_quantized_type_is_refused_by_name(tmp_path):
    import gguf

    from tools.runner.checks import reference_parity as rp
    q51 = _typed_gguf(tmp_path / "q51.gguf", gguf.GGMLQuantizationType.Q5_1)
    with pytest.raises(rp.UnmeasuredQuantizationError, match="tensor type.s. Q5_1"):
        rp.model_bounds(q51)


def test_a_config_looser_than_the_quantized_bounds_fails():
    from tools.runner.checks import reference_parity as rp
    config = {k: repr(v) for k, v in rp.QUANTIZED_BOUNDS.items()} | {"quantized_types": "Q4_K,Q6_K"}
    assert rp.loosened_bounds(config) == []
    assert rp.loosened_bounds(config | {"tol_mean_kl": "0.5"}) == ["tol_mean_kl=0.5 is looser than the quantized bound 0.03"]
    assert rp.loosened_bounds(config | {"fa_on.tol_top1_agreement_decisive": "0.5"})
    assert rp.loosened_bounds(config | {"tie_margin": "2.0"})
    assert rp.loosened_bounds(config | {"quantized_types": "IQ2_XS"})
    # An F32 model's run records no quantized types: the flags' bounds apply.
    assert rp.loosened_bounds({"quantized_types": ""}) == []


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
