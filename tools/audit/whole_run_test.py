"""The whole-run audit over real runner runs of the fake lane: which checks are required comes from
the lane spec and the policy (never the report's `required`), every check's verdict is re-derived by
its problems(), the recipe, device class, model and artifacts are recomputed from the raw files, and a
raw file deleted together with its digest is named. Also the problems() of preflight,
artifact_integrity and graph_smoke, on the raw files that pass and fail them."""

from __future__ import annotations

import json
import pathlib
import shutil
import sys

import pytest

from proto import runner_report_pb2 as rpb
from tools.audit import audit, synthetic_run
from tools.runner import lane_spec, log_blocks
from tools.runner.checks import artifact_integrity, graph_smoke, preflight
from tools.runner.testing import fake_lane

CR = rpb.CheckResult
TESTDATA = pathlib.Path(__file__).resolve().parents[1] / "runner" / "testdata"


@pytest.fixture(scope="module")
def fake_run_once(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fake")
    lane_dir, evidence, model = fake_lane.make_inputs(tmp)
    report, _ = fake_lane.run(fake_lane.config(tmp, lane_dir, evidence, model))
    shutil.copyfile(evidence, tmp / "out" / audit.BUILD_EVIDENCE_PB)
    return tmp / "out", report


@pytest.fixture
def run(fake_run_once, tmp_path):
    """A fresh copy of the fake lane's run directory (several checks FAIL on the fake lane)."""
    shutil.copytree(fake_run_once[0], tmp_path / "run")
    return tmp_path / "run"


def _audit(run_dir, **kw):
    return audit.audit_run(run_dir, require_readme=False, spec=fake_lane.SPEC, **kw)


def _findings(result, kind, where=None):
    return [f for f in result.findings if f.kind == kind and (where is None or f.where == where)]


def _check(report, name):
    return next(c for c in report.checks if c.name == name)


def test_required_checks_match_the_runner(fake_run_once):
    """The audit's derivation says what each check's run() decides (required=False where it does not apply)."""
    _, report = fake_run_once
    lane = lane_spec.load_lane(fake_lane.SPEC, report.lane_id)
    assert set(audit.required_checks(lane, [])) == {c.name for c in report.checks if c.required}
    assert "op_oracle" in audit.required_checks(lane, []) and "cpu_variants" not in audit.required_checks(lane, [])
    cuda = lane_spec.load_lane(fake_lane.SPEC, "linux-x86_64-cuda")
    assert "op_oracle" not in audit.required_checks(cuda, [])
    assert "upstream_ctest" in audit.required_checks(cuda, ["upstream_ctest"])


def test_the_unedited_run_has_no_structural_finding(run):
    result = _audit(run)
    kinds = {"required", "raw-file", "recipe", "device-class", "model", "artifacts", "digest", "undigested", "twin"}
    assert not [f for f in result.findings if f.kind in kinds], result.summary()
    # Its FAILs are what the raw files say.
    for name in ("artifact_integrity", "graph_smoke", "preflight"):
        assert name in result.verdicts_rederived and not _findings(result, "verdict", name), result.summary()


def test_fail_edited_to_pass_is_named(run):
    def edit(r):
        _check(r, "graph_smoke").status = CR.PASS
    synthetic_run.rewrite_report(run, edit)
    result = _audit(run)
    (found,) = _findings(result, "verdict", "graph_smoke")
    assert "report says PASS, the raw files say FAIL (f16: backend log lacks" in found.detail
    assert [f.detail for f in _findings(result, "raw-file", "graph_smoke")] == ["logs/graph_smoke.exit says FAIL, the report PASS"]


def test_required_comes_from_the_spec_and_the_policy(run, tmp_path):
    def edit(r):
        _check(r, "op_oracle").required = False
        r.status, r.pass_recordable = rpb.RunnerReport.FAIL, False
    synthetic_run.rewrite_report(run, edit)
    (found,) = _findings(_audit(run), "required", "op_oracle")
    assert found.detail == "the report marks it not required; the lane spec (linux-x86_64-cpu) requires it (status FAIL)"
    # The policy adds its own: cpu_variants (not applicable on this lane by the spec) required by it.
    result = _audit(run, policy_required=["preflight", "cpu_variants"])
    assert any("the policy's required checks" in f.detail for f in _findings(result, "required", "cpu_variants")), \
        result.summary()


def test_a_check_left_out_of_the_report_and_no_spec_are_findings(run, monkeypatch):
    synthetic_run.rewrite_report(run, lambda r: r.checks.remove(_check(r, "cancellation")))
    result = _audit(run)
    assert _findings(result, "required", "cancellation")
    monkeypatch.delenv("LANES_SPEC", raising=False)
    monkeypatch.chdir(run)
    result = audit.audit_run(run, require_readme=False)
    assert any("no lane spec" in f.detail for f in _findings(result, "required", "lane spec"))


@pytest.mark.parametrize("edit,kind", [
    (lambda r: r.recipe.kv_cache_types.append("q4_0"), "recipe"),
    (lambda r: setattr(r.device_class, "device_name", "NVIDIA H200"), "device-class"),
    (lambda r: setattr(r.model, "sha256", "0" * 64), "model"),
    (lambda r: setattr(r.artifacts[0], "sha256", "0" * 64), "artifacts"),
    (lambda r: r.artifacts.pop(), "artifacts"),
    (lambda r: setattr(r, "upstream_commit", "f" * 40), "artifacts"),
])
def test_run_facts_are_recomputed(run, edit, kind):
    synthetic_run.rewrite_report(run, edit)
    assert _findings(_audit(run), kind), kind


def test_artifact_bindings_are_the_build_evidence(run):
    config = run / "logs" / "artifact_integrity.config.json"
    values = json.loads(config.read_text())
    values["patch_stack_digest"] = "forged"
    config.write_text(json.dumps(values))

    def redigest(r):
        for d in list(r.logs) + [d for c in r.checks for d in c.logs]:
            if d.path.endswith("artifact_integrity.config.json"):
                d.CopyFrom(audit.rpb.LogDigest(path=d.path, sha256=audit.sha256_file(config), size=config.stat().st_size))
    synthetic_run.rewrite_report(run, redigest)
    result = _audit(run)
    assert any("patch_stack_digest 'forged'" in f.detail for f in _findings(result, "artifacts")), result.summary()


def test_raw_file_deleted_with_its_digest_is_named(run):
    for name in ("logs/graph_smoke.exit", "logs/concurrency.server.log"):
        (run / name).unlink()

    def edit(r):
        for logs in [r.logs] + [c.logs for c in r.checks]:
            kept = [d for d in logs if d.path not in ("logs/graph_smoke.exit", "logs/concurrency.server.log")]
            del logs[:]
            logs.extend(kept)
        _check(r, "concurrency").status = CR.PASS  # what the deleted server log would have contradicted
    synthetic_run.rewrite_report(run, edit)
    result = _audit(run)
    assert not _findings(result, "digest"), result.summary()
    named = {f.detail.split(" ")[0] for f in _findings(result, "raw-file")}
    assert {"logs/graph_smoke.exit", "logs/concurrency.server.log"} <= named, result.summary()


def test_a_recompute_that_cannot_run_is_named_in_the_summary(run):
    result = _audit(run)  # op_oracle needs the model its log names; the auditor has none
    (found,) = _findings(result, "recompute", "op_oracle")
    assert "recompute cannot run" in found.detail
    assert "NOT VERIFIED (recompute did not run, see the findings): " in result.summary()
    # Deterministic: the same run audits to the same findings.
    assert [str(f) for f in _audit(run).findings] == [str(f) for f in result.findings]


# ---- problems() of preflight, artifact_integrity and graph_smoke ---------------------------------

def test_preflight_problems(run):
    logs = run / "logs"
    assert preflight.problems(logs) == []
    dc = preflight.device_class_from_logs(logs)
    assert dc is not None and dc.backend == "cpu"
    config = json.loads((logs / "preflight.config.json").read_text())
    (logs / "preflight.config.json").write_text(json.dumps({**config, "refused": "FAIL: missing artifact bin/llama-bench"}))
    assert preflight.problems(logs) == ["FAIL: missing artifact bin/llama-bench"]
    (logs / "preflight.config.json").write_text(json.dumps({**config, "evidence_lane_id": "linux-x86_64-cuda"}))
    assert preflight.problems(logs) == ["build evidence is for lane linux-x86_64-cuda, not linux-x86_64-cpu"]
    (logs / "preflight.config.json").unlink()
    assert "cannot be re-derived" in preflight.problems(logs)[0]


def test_artifact_integrity_problems(run):
    logs = run / "logs"
    assert any("stamp" in p for p in artifact_integrity.problems(logs))
    log = logs / "artifact_integrity.log"
    version = "version: 1 (build 1, commit 0c1e570)\nlanes: lane linux-x86_64-cpu, patch stack test"
    text = log.read_text().replace("--version\nfake\n", f"--version\n{version}\n")
    log.write_text(text)
    assert artifact_integrity.problems(logs) == []
    # A hash line inside the command's output (lane bytes) is not the runner's: ignored.
    log.write_text(text.replace(version, version + "\nfound lib/extra.so sha256=" + "1" * 64))
    assert artifact_integrity.problems(logs) == []
    found = [l for l in text.splitlines() if l.startswith("found ")][0]
    log.write_text(text.replace(found, found[:-4] + "0000"))
    assert [p for p in artifact_integrity.problems(logs) if "!= evidence" in p]


def _smoke_log(logs: pathlib.Path, output: str, kv: str = "q8_0", code: int = 0) -> None:
    argv = ["/lane/bin/llama-completion", "-m", "/m.gguf", "-ctk", kv, "-ctv", kv, "-fa", "on"]
    (logs / "graph_smoke.log").write_text("\n".join([f"## kv cache type {kv}", log_blocks.command_line(argv), output,
                                                     log_blocks.exit_line(code, 1.0)]) + "\n")


def test_graph_smoke_problems(tmp_path):
    logs = tmp_path
    evidence = json.loads((TESTDATA / "spec.json").read_text())["lanes"]["linux-x86_64-cpu"]["log_evidence"]
    log_blocks.write_config(logs / "graph_smoke.config.json", {"kv_types": "q8_0", "log_evidence": json.dumps(evidence)})
    output = (TESTDATA / "llama_completion_cpu_q8_0.log").read_text()
    _smoke_log(logs, output)
    assert graph_smoke.problems(logs) == []
    _smoke_log(logs, output, code=1)
    assert graph_smoke.problems(logs) == ["q8_0: llama-completion exited 1"]
    _smoke_log(logs, output.replace("K (q8_0)", "K (f16)"))
    assert graph_smoke.problems(logs) == ["q8_0: KV cache reported as ('f16', 'q8_0'), not K (q8_0) V (q8_0)"]
    _smoke_log(logs, output.replace("CPU KV buffer size", "KV size"))
    assert graph_smoke.problems(logs) == ["q8_0: backend log lacks ['llama_kv_cache: +CPU KV buffer size']"]
    log_blocks.write_config(logs / "graph_smoke.config.json", {"kv_types": "q8_0,f16", "log_evidence": json.dumps(evidence)})
    _smoke_log(logs, output)
    assert graph_smoke.problems(logs) == ["f16: no smoke run in the log"]
    (logs / "graph_smoke.config.json").unlink()
    assert "cannot be re-derived" in graph_smoke.problems(logs)[0]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
