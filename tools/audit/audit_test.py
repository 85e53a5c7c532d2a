"""The audit passes a run whose figures re-derive from its digested files, and names every way a
run can overstate: an edited log, an edited figure, a figure without a recompute, NaN, undigested
files, a twin or README that disagrees."""

import math
import sys

import pytest

from tools.audit import audit, synthetic_run


def _audit(run_dir, **kw):
    # The synthetic run holds two checks: only their digests, figures and verdicts are audited here
    # (whole_run_test audits whole runner runs).
    return audit.audit_run(run_dir, loader=synthetic_run.loader, verdicts=synthetic_run.verdicts, whole_run=False, **kw)


def _kinds(result):
    return sorted({f.kind for f in result.findings})


@pytest.fixture
def run(tmp_path):
    return synthetic_run.make_run(tmp_path)


def test_clean_synthetic_run_passes(run):
    result = _audit(run)
    assert result.ok, result.summary()
    assert result.figures_recomputed == result.figures_in_report > 0
    assert result.checks_recomputed == ["fixture_parity", "speed"]
    assert result.verdicts_rederived == ["fixture_parity", "speed"]
    assert "mismatches: 0" in result.summary() and "NOT VERIFIED" not in result.summary()


def test_one_edited_log_line_is_named(run):
    log = run / "logs" / "fixture_parity.log"
    log.write_text(log.read_text().replace("not supported [CPU]", "OK"))
    result = _audit(run)
    digest = [f for f in result.findings if f.kind == "digest"]
    assert [f.where for f in digest] == ["logs/fixture_parity.log"], result.summary()
    assert "report sha256" in digest[0].detail and "file sha256" in digest[0].detail
    # The edited file is not handed to recompute (only verified bytes are), so nothing re-derives from it.
    assert not result.ok and "fixture_parity" not in result.checks_recomputed


def test_edited_figure_in_report_is_named_with_both_values(run):
    synthetic_run.rewrite_report(run, lambda r: r.checks[1].metrics.__setitem__("tg_tokens_per_s", 5000.0))
    result = _audit(run, require_readme=False)
    figures = [f for f in result.findings if f.kind == "figure"]
    assert len(figures) == 1, result.summary()
    f = figures[0]
    assert (f.where, f.key, f.reported, f.recomputed) == ("speed", "metrics.tg_tokens_per_s", "5000.0", "4416.671938")
    assert "speed.metrics.tg_tokens_per_s: report 5000.0, recomputed 4416.671938" in result.summary()


def test_metric_tolerance_is_the_registrys_and_still_catches_an_edit(tmp_path):
    # op_oracle's float64 reference is CPU-dependent: the same raw files gave these two values on an
    # AVX-512 and an AVX2 host. 1e-6 apart is an edit, not the reference's kernels.
    reported = {"op.MUL_MAT.max_rel_err": 0.0004458736494544351, "op.SWIGLU.worst_tol_ratio": 0.5}
    recomputed = {"op.MUL_MAT.max_rel_err": 0.0004458736508143578, "op.SWIGLU.worst_tol_ratio": 0.5 * (1 + 1e-6)}
    result = audit.AuditResult(tmp_path)
    audit._compare("op_oracle", "metrics", reported, recomputed, result)
    assert [f.key for f in result.findings] == ["metrics.op.SWIGLU.worst_tol_ratio"], result.summary()
    assert result.figures_recomputed == 1
    # Every other check: summation order only, so the same 3e-9 is a mismatch there.
    result = audit.AuditResult(tmp_path)
    audit._compare("speed", "metrics", {"x": 0.0004458736494544351}, {"x": 0.0004458736508143578}, result)
    assert [f.key for f in result.findings] == ["metrics.x"]
    assert audit.metric_rel_tol("speed") == audit.REL_TOL == 1e-9
    assert audit.metric_rel_tol("op_oracle") == 1e-7
    assert audit.metric_rel_tol("no_such_check") == audit.REL_TOL


def test_edited_count_is_named(run):
    synthetic_run.rewrite_report(run, lambda r: r.checks[0].counts.__setitem__("op.MUL_MAT.evaluated", 2))
    result = _audit(run, require_readme=False)
    assert [(f.where, f.key, f.reported, f.recomputed) for f in result.findings if f.kind == "figure"] == [
        ("fixture_parity", "counts.op.MUL_MAT.evaluated", "2", "1")]


def test_figure_recompute_did_not_produce_is_a_mismatch(run):
    synthetic_run.rewrite_report(run, lambda r: r.checks[1].metrics.__setitem__("tg_roofline_fraction", 0.72))
    result = _audit(run, require_readme=False)
    f = next(f for f in result.findings if f.kind == "figure")
    assert (f.key, f.recomputed) == ("metrics.tg_roofline_fraction", "absent")


def test_recomputed_figure_missing_from_report_is_a_mismatch(run):
    synthetic_run.rewrite_report(run, lambda r: r.checks[1].counts.pop("n_gen"))
    result = _audit(run, require_readme=False)
    f = next(f for f in result.findings if f.kind == "figure")
    assert (f.key, f.reported) == ("counts.n_gen", "absent")


def test_nan_is_never_equal(run, monkeypatch):
    synthetic_run.rewrite_report(run, lambda r: r.checks[1].metrics.__setitem__("tg_tokens_per_s", math.nan))
    def nan_speed(logs_dir):
        counts, metrics = synthetic_run.recompute_speed(logs_dir)
        return counts, {**metrics, "tg_tokens_per_s": math.nan}
    loader = lambda name: nan_speed if name == "speed" else synthetic_run.loader(name)
    result = audit.audit_run(run, loader=loader, require_readme=False)
    f = next(f for f in result.findings if f.kind == "figure")
    assert f.key == "metrics.tg_tokens_per_s" and "NaN" in f.detail


def test_missing_or_failing_recompute_is_a_finding_not_a_pass(run):
    result = audit.audit_run(run, loader=lambda name: None)
    details = [f.detail for f in result.findings if f.kind == "recompute"]
    assert details == ["no recompute for check fixture_parity", "no recompute for check speed"]
    assert result.figures_recomputed == 0 and not result.ok

    def broken(name):
        def fn(logs_dir):
            raise ValueError("no summary line")
        return fn
    result = audit.audit_run(run, loader=broken)
    assert any("recompute cannot run: ValueError: no summary line" in f.detail for f in result.findings)
    # Named in the summary too, never a silent "not recomputed".
    assert "NOT VERIFIED (recompute did not run, see the findings): fixture_parity (7 figure(s)), speed (4 figure(s))" \
        in result.summary(), result.summary()


def test_a_verdict_nothing_re_derives_is_a_finding(run):
    result = audit.audit_run(run, loader=synthetic_run.loader, verdicts=lambda name: None, whole_run=False)
    assert [(f.where, f.detail) for f in result.findings if f.kind == "verdict"] == [
        ("fixture_parity", "verdict not derivable: the check has no problems()"),
        ("speed", "verdict not derivable: the check has no problems()")]


def test_default_loader_never_passes_an_unknown_check(run):
    synthetic_run.rewrite_report(run, lambda r: r.checks.add(name="graph_dispatch", status=1, required=True).counts.__setitem__("n", 1))
    result = audit.audit_run(run, require_readme=False)
    assert any(f.kind == "recompute" and f.where == "graph_dispatch" and "no recompute for check graph_dispatch" in f.detail
               for f in result.findings), result.summary()


def test_undigested_file_and_escaping_path_are_named(run):
    (run / "membw.json").write_text('{"gbs": 4249.3}')
    synthetic_run.rewrite_report(run, lambda r: r.logs.add(path="../../records/x", sha256="0" * 64, size=1))
    result = _audit(run, require_readme=False)
    assert any(f.kind == "undigested" and f.where == "membw.json" for f in result.findings)
    assert any(f.kind == "digest" and f.where == "../../records/x" and "leaves the run directory" in f.detail
               for f in result.findings)


def test_json_twin_must_equal_the_pb(run):
    twin = run / "runner_report.json"
    twin.write_text(twin.read_text().replace('"laneId": "linux-x86_64-cpu"', '"laneId": "linux-x86_64-cuda"'))
    result = _audit(run)
    assert [(f.kind, f.where) for f in result.findings] == [("twin", "runner_report.json")]


def test_build_evidence_must_be_the_one_named(run):
    (run / "build_evidence.pb").write_bytes(b"\x08\x02")
    result = _audit(run)
    assert [f.kind for f in result.findings] == ["build-evidence"]


def test_readme_edited_or_missing_is_flagged(run):
    readme = run / "README.md"
    readme.write_text(readme.read_text().replace("PASS", "PASS (hand-polished)", 1))
    assert [f.kind for f in _audit(run).findings] == ["readme"]
    readme.unlink()
    assert [f.kind for f in _audit(run).findings] == ["readme"]
    assert _audit(run, require_readme=False).ok


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
