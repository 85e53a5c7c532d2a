"""A check is its module plus one line in the registry: a synthetic check, defined here, runs in a
runner run over the fake lane, is recomputed by the audit and shows in the summary table; one whose
run() figures disagree with recompute() fails the run and the audit names it."""

from __future__ import annotations

import shutil
import sys
import types

import pytest

from proto import runner_report_pb2 as rpb
from tools.audit import audit
from tools.runner import checks, config
from tools.runner import report as report_lib
from tools.runner.testing import fake_lane

CR = rpb.CheckResult

# The whole synthetic check: its module. `claimed` is what run() reports, the log says 3 widgets.
SYNTHETIC_SOURCE = '''
import dataclasses
import re

from proto import runner_report_pb2 as rpb
from tools.runner.checks.base import Check, option

LOG = "synthetic.log"


@dataclasses.dataclass(frozen=True)
class Options:
    synthetic_widgets: int = option(3, "synthetic: widgets to count.")


def run(ctx, step, report):
    for i in range(ctx.config.synthetic_widgets):
        step.log(f"widget {i}")
    step.result.counts["widgets"] = CLAIMED
    return rpb.CheckResult.PASS, "counted the widgets"


def recompute(logs_dir):
    text = (logs_dir / LOG).read_text()
    return {"widgets": len(re.findall(r"^widget \\d+$", text, re.M))}, {}


def problems(logs_dir):
    return [] if recompute(logs_dir)[0]["widgets"] else ["no widget"]


CHECK = Check(name="synthetic", run=run, recompute=recompute, problems=problems, figures=("widgets",),
              options=Options)
'''


def _synthetic_module(monkeypatch, claimed: int) -> types.ModuleType:
    module = types.ModuleType("synthetic_check")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # dataclasses look their module up
    module.__dict__["CLAIMED"] = claimed
    exec(compile(SYNTHETIC_SOURCE, "synthetic_check.py", "exec"), module.__dict__)
    return module


@pytest.fixture
def lane(tmp_path):
    return fake_lane.make_inputs(tmp_path)


def _run_with(monkeypatch, tmp_path, lane, claimed: int):
    module = _synthetic_module(monkeypatch, claimed)
    registry = list(checks.REGISTRY)
    registry.insert(1, module.CHECK)  # the one registry line
    monkeypatch.setattr(checks, "REGISTRY", registry)
    # RunnerConfig is flattened from the registry when tools.runner.config is imported: rebuild it.
    monkeypatch.setattr(config, "RunnerConfig", config._make_config_class())
    monkeypatch.setattr(fake_lane, "RunnerConfig", config.RunnerConfig)
    lane_dir, evidence, model = lane
    skip = tuple(c.name for c in registry if c.name not in ("preflight", "synthetic"))
    report, code = fake_lane.run(fake_lane.config(tmp_path, lane_dir, evidence, model, skip=skip))
    run_dir = tmp_path / "out"
    shutil.copyfile(evidence, run_dir / audit.BUILD_EVIDENCE_PB)
    return report, code, audit.audit_run(run_dir, require_readme=False)


def _check(report, name):
    return next(c for c in report.checks if c.name == name)


def test_synthetic_check_runs_is_audited_and_reported(monkeypatch, tmp_path, lane):
    report, code, audited = _run_with(monkeypatch, tmp_path, lane, claimed=3)
    synthetic = _check(report, "synthetic")
    assert synthetic.status == CR.PASS, synthetic.message
    assert dict(synthetic.counts) == {"widgets": 3}
    assert [c.name for c in report.checks][:2] == ["preflight", "synthetic"]
    assert "synthetic" in audited.checks_recomputed and "synthetic" in audited.verdicts_rederived
    assert not [f for f in audited.findings if f.where == "synthetic"], audited.summary()
    assert "widgets=3" in report_lib.summary_table(report)
    # Its option is a runner flag too, from the same field.
    assert "synthetic_widgets" in [f.name for f in config.option_fields()]
    assert code != 0  # the other checks were skipped: never recordable


def test_synthetic_check_whose_figures_differ_from_recompute_fails(monkeypatch, tmp_path, lane):
    report, _, audited = _run_with(monkeypatch, tmp_path, lane, claimed=4)
    synthetic = _check(report, "synthetic")
    assert synthetic.status == CR.FAIL
    assert "widgets 4 != 3" in synthetic.message
    assert report.status == rpb.RunnerReport.FAIL
    # The report carries recompute's figure; the audit re-derives the verdict from the raw log and
    # flags the FAIL the runner wrote as not what the log says.
    assert any(f.kind == "verdict" and f.where == "synthetic" for f in audited.findings), audited.summary()


def test_a_check_is_required_only_of_runs_made_after_it_was_added():
    from tools.runner import lane_spec, log_blocks
    lane = lane_spec.Lane("linux-x86_64-cpu", "cpu", "linux", "x86_64", "cpu", "host-cc", (), (), ())
    added = [c for c in checks.REGISTRY if c.since]
    assert added, "no check records the runner version that added it"
    for c in added:
        older = "lanes-runner " + ".".join(str(v) for v in (*c.since[:-1], c.since[-1] - 1)) if c.since[-1] else \
            "lanes-runner 0.0.1"
        with log_blocks.judging_run_of(older):
            assert c.name not in audit.required_checks(lane, [])
        with log_blocks.judging_run_of("lanes-runner " + ".".join(map(str, c.since))):
            assert c.name in audit.required_checks(lane, [])
        with log_blocks.judging_run_of(older):  # the policy may still require it of any run
            assert c.name in audit.required_checks(lane, [c.name])


def test_the_registry_is_the_only_list():
    assert config.CHECKS == checks.names()
    assert len(set(checks.names())) == len(checks.names())
    for check in checks.REGISTRY:
        assert check.run is not None and check.recompute is not None, check.name


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
