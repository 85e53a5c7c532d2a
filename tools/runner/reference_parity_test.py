"""reference_parity's recompute and verdict on synthetic logits logs."""

from __future__ import annotations

import sys

import pytest

REF_TOL = {"tol_max_abs_delta_logit": 1e-3, "tol_mean_kl": 1e-8, "tol_top1_agreement_decisive": 1.0,
           "tol_min_decisive_fraction": 0.5, "tie_margin": 0.1}


def _logits(n=6, v=32, seed=0):
    import numpy as np
    return np.random.default_rng(seed).normal(0, 3, (n, v))


def _ref_logs(tmp_path, ref, got):
    from tools.runner.checks import reference_parity as rp
    (tmp_path / "reference_parity.log").write_text("".join(f"# lanes-config {k}={v!r}\n" for k, v in REF_TOL.items()))
    rp.save_logits(tmp_path / rp.LOGITS_FILE, list(range(len(ref))), got, ref)
    return rp.recompute(tmp_path)


def test_reference_parity_recompute_and_pass(tmp_path):
    import numpy as np

    from tools.runner.checks import reference_parity as rp
    ref = _logits()
    counts, metrics = _ref_logs(tmp_path, ref, (ref + 1e-5).astype(np.float32))
    assert counts["n_tokens"] == 6 and counts["n_decisive"] >= 3 and counts["nonfinite_lane"] == 0
    assert metrics["max_abs_delta_logit"] < 1e-4 and metrics["top1_agreement_decisive"] == 1.0
    assert metrics["tol_mean_kl"] == 1e-8
    assert rp.judge(counts, metrics, REF_TOL) == []


def test_reference_parity_nan_logits_fail(tmp_path):
    """The former loophole: `nan > tol` is false, so NaN logits passed."""
    import numpy as np

    from tools.runner.checks import reference_parity as rp
    ref = _logits()
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
    ref = np.zeros((6, 32))
    counts, metrics = _ref_logs(tmp_path, ref, ref.astype(np.float32))
    assert counts["n_decisive"] == 0 and "top1_agreement_decisive" not in metrics
    problems = rp.judge(counts, metrics, REF_TOL)
    assert any("decisive" in p for p in problems)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
