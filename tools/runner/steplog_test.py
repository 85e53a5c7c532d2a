"""The step-log grammar: a check's configuration is the runner's own file, never a line of tool output."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from proto import runner_report_pb2 as rpb
from tools.runner import log_blocks, steps
from tools.runner.checks import fixture_parity, op_oracle, op_oracle_log, reference_parity
from tools.runner.context import RunContext
from tools.runner.lane_spec import load_lane
from tools.runner.steps import REDACTED, ProcessTracker, Step
from tools.runner.testing import fake_lane

FORGED = "# lanes-config required_ops=\n# lanes-config tol_max_abs_delta_logit=1000000.0\n# lanes-config tol.ADD=1e9,1e9\n"


def _forging_tool(path):
    """A lane binary that prints config lines, as a red-team lane would."""
    path.write_text("#!/bin/sh\nprintf '%s' '" + FORGED + "'\n")
    path.chmod(0o755)
    return path


def test_config_lines_printed_by_a_tool_do_not_change_the_step_config(tmp_path):
    tracker = ProcessTracker()
    step = Step("op_oracle", tmp_path, tracker)
    step.config("required_ops", "ADD,MUL")
    step.config("tol.ADD", "1e-06,0.0001")
    step.config("tol_max_abs_delta_logit", "0.05")
    step.run([_forging_tool(tmp_path / "tool")], 30)
    step.finish(rpb.CheckResult.FAIL, "test")
    tracker.release()
    text = step.log_path.read_text()
    assert "# lanes-config required_ops=\n" in text  # the tool's lines are in the log ...
    config = log_blocks.step_config(tmp_path, "op_oracle")  # ... and change nothing
    assert config == {"required_ops": "ADD,MUL", "tol.ADD": "1e-06,0.0001", "tol_max_abs_delta_logit": "0.05"}
    assert op_oracle.step_config(tmp_path, text)["required_ops"] == "ADD,MUL"
    assert reference_parity.read_tolerances(config) == {"tol_max_abs_delta_logit": 0.05}
    assert step.config_path in step.extra_logs  # digested with the step's logs


def test_older_runs_read_only_the_runner_lines_outside_command_blocks():
    log = ("# lanes-config required_ops=ADD,MUL\n$ /l/bin/llama-eval-callback -m m\n" + FORGED
           + "# exit 0 after 1.00s\n# lanes-config roofline_tensor_bytes=10\n")
    assert log_blocks.legacy_config(log) == {"required_ops": "ADD,MUL", "roofline_tensor_bytes": "10"}
    assert op_oracle.evaluate_log.__defaults__ is not None
    assert op_oracle_log.parse_config(log_blocks.runner_lines(log))["required_ops"] == "ADD,MUL"


def test_a_lane_printing_required_ops_fails_fixture_parity_with_the_runners_ops(tmp_path):
    lane_dir = fake_lane.make_lane(tmp_path / "lane")
    _forging_tool(lane_dir / "bin" / "test-backend-ops")
    spec = json.loads(fake_lane.SPEC.read_text())
    spec["lanes"]["linux-x86_64-cpu"]["fixture_ops"] = ["ADD", "MUL"]
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    cfg = fake_lane.config(tmp_path, lane_dir, None, None, spec=tmp_path / "spec.json")
    logs = tmp_path / "logs"
    logs.mkdir()
    ctx = RunContext(config=cfg, lane=load_lane(cfg.spec, "cpu"), logs_dir=logs, scratch_dir=tmp_path)
    step = Step("fixture_parity", logs, ctx.tracker)
    try:
        status, message = fixture_parity.run_fixture_parity(ctx, step)
    finally:
        ctx.tracker.release()
    assert status == rpb.CheckResult.FAIL, message
    text = step.log_path.read_text()
    kept = fixture_parity.read_config(text, log_blocks.step_config(logs, "fixture_parity"))
    assert kept.required_ops == fixture_parity.required_ops(ctx) == ("ADD", "MUL")
    assert fixture_parity.problems(logs)  # the audit re-derives the FAIL from the same files


def test_a_key_given_twice_is_refused(tmp_path):
    step = Step("speed", tmp_path, ProcessTracker())
    step.config("backend", "cpu")
    with pytest.raises(log_blocks.StepConfigError, match="'backend' given twice"):
        step.config("backend", "cuda")
    step.finish(rpb.CheckResult.FAIL, "test")
    step.config_path.write_text('{"backend": "cpu", "backend": "cuda"}\n')
    with pytest.raises(log_blocks.StepConfigError, match="'backend' given twice"):
        log_blocks.step_config(tmp_path, "speed")
    step.config_path.write_text('{"backend": 3}\n')
    with pytest.raises(log_blocks.StepConfigError, match="not an object of strings"):
        log_blocks.step_config(tmp_path, "speed")


def test_command_and_exit_lines_round_trip():
    text = "\n".join([log_blocks.command_line(["/l/bin/x", "-p", "a b"], "log: x.server.log"), "out",
                      log_blocks.exit_line(3, 1.5, "timed out at 1s")]) + "\n"
    [cmd] = log_blocks.commands(text)
    assert (cmd.argv, cmd.output, cmd.exit_code, cmd.files) == (["/l/bin/x", "-p", "a b"], "out", 3, ["x.server.log"])


# What a certifier's shell could carry into a run: each would change what the lane runs.
HOSTILE_ENV = {"LD_PRELOAD": "/tmp/libevil.so", "LD_AUDIT": "/tmp/libaudit.so", "LD_LIBRARY_PATH": "/tmp/evil-libs",
               "GGML_BACKEND_PATH": "/tmp/libggml-evil.so", "LLAMA_ARG_MODEL": "/tmp/other.gguf",
               "LLAMA_CACHE": "/tmp/cache", "GGML_SCHED_MAX_COPIES": "9", "PYTHONPATH": "/tmp/py"}


def _env_printer(path):
    path.write_text("#!/bin/sh\nenv\n")
    path.chmod(0o755)
    return path


def _printed_env(output: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line)


def test_a_lane_process_gets_the_allowlisted_environment_and_the_step_records_it(tmp_path, monkeypatch):
    for k, v in HOSTILE_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv("GGML_VK_VISIBLE_DEVICES", "7")  # inherited: dropped when the run starts
    tracker = ProcessTracker()
    os.environ["GGML_VK_VISIBLE_DEVICES"] = "0"  # what preflight_devices sets: the runner's own
    step = Step("graph_smoke", tmp_path, tracker)
    res = step.run([_env_printer(tmp_path / "llama-simple")], 30)
    step.finish(rpb.CheckResult.PASS, "test")
    seen = _printed_env(res.output)
    assert not set(HOSTILE_ENV) & set(seen), seen
    assert seen["LANG"] == "C.UTF-8" and seen["CUDA_VISIBLE_DEVICES"] == "1" and seen["GGML_VK_VISIBLE_DEVICES"] == "0"
    assert seen["LANES_RUN_ID"] == tracker.run_id and seen["PATH"] == os.environ["PATH"]
    record = tracker.env_records["graph_smoke"]
    [entry] = record["environments"]
    assert entry["commands"] == [str(tmp_path / "llama-simple")]
    assert {k: v for k, v in entry["env"].items() if k not in ("PWD", "SHLVL", "_")} == {
        k: v for k, v in seen.items() if k not in ("PWD", "SHLVL", "_")}
    assert set(HOSTILE_ENV) <= set(record["dropped"])
    assert entry["explicit"] == [] and entry["runner_python"] is False
    assert steps.env_record_problems(record, "graph_smoke") == []
    # A record showing a hostile name fails (cleanup checks every record of the run with this).
    entry["env"]["LD_PRELOAD"] = "/tmp/libevil.so"
    entry["env"]["GGML_BACKEND_PATH"] = "/tmp/libggml-evil.so"
    assert steps.env_record_problems(record, "graph_smoke") == [
        f"graph_smoke: GGML_BACKEND_PATH is neither allowlisted nor passed by the runner ({tmp_path}/llama-simple)",
        f"graph_smoke: LD_PRELOAD reached {tmp_path}/llama-simple"]


def test_a_caller_built_environment_passes_only_what_it_adds(tmp_path, monkeypatch):
    """upstream_ctest's launcher hands over os.environ plus its own settings (ctest_run)."""
    monkeypatch.setenv("LD_PRELOAD", "/tmp/libevil.so")
    monkeypatch.setenv("GITHUB_TOKEN", "s3cret")
    tracker = ProcessTracker()
    step = Step("upstream_ctest", tmp_path, tracker)
    env = dict(os.environ, LLAMACPP_TEST_MODELFILE="/m.gguf", LANES_API_TOKEN="s3cret")
    proc = tracker.popen([_env_printer(tmp_path / "ctest")], env=env, stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=30)
    step.finish(rpb.CheckResult.PASS, "test")
    seen = _printed_env(out.decode())
    assert seen["LLAMACPP_TEST_MODELFILE"] == "/m.gguf" and "LD_PRELOAD" not in seen and "GITHUB_TOKEN" not in seen
    [entry] = tracker.env_records["upstream_ctest"]["environments"]
    assert entry["env"]["LANES_API_TOKEN"] == REDACTED and "s3cret" not in json.dumps(tracker.env_records)
    assert entry["explicit"] == ["LANES_API_TOKEN", "LLAMACPP_TEST_MODELFILE"]


def test_ld_preload_is_refused_even_when_passed_explicitly(tmp_path):
    tracker = ProcessTracker()
    step = Step("speed", tmp_path, tracker)
    proc = tracker.popen([_env_printer(tmp_path / "llama-bench")], extra_env={"LD_PRELOAD": "/tmp/x.so", "A": "1"},
                         stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=30)
    step.finish(rpb.CheckResult.PASS, "test")
    seen = _printed_env(out.decode())
    assert "LD_PRELOAD" not in seen and seen["A"] == "1"


def test_the_runners_python_probes_keep_their_module_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/runfiles/lanes")
    tracker = ProcessTracker()
    step = Step("preflight", tmp_path, tracker)
    res = step.run([sys.executable, "-c", "import os; print(os.environ.get('PYTHONPATH'))"], 30)
    step.finish(rpb.CheckResult.PASS, "test")
    assert res.output.strip() == "/runfiles/lanes"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
