"""The runner fails closed, non-recordable, with a message naming the cause (no real binaries needed)."""

from __future__ import annotations

import json
import shutil

import pytest

from proto import runner_report_pb2 as rpb
from tools.runner import checks
from tools.runner.testing import fake_lane

CR = rpb.CheckResult


@pytest.fixture
def lane(tmp_path):
    return fake_lane.make_inputs(tmp_path)


def _check(report, name):
    return next(c for c in report.checks if c.name == name)


def _assert_failed_closed(report, code, cause):
    assert code != 0
    assert not report.pass_recordable
    pre = _check(report, "preflight")
    assert pre.status in (CR.FAIL, CR.UNAVAILABLE)
    assert cause in pre.message, pre.message
    # Later checks are recorded as not run, never as passed.
    for c in report.checks[1:]:
        assert c.status == CR.SKIPPED and c.message.startswith("not run"), c


def test_missing_model_file(tmp_path, lane):
    lane_dir, evidence, _ = lane
    missing = tmp_path / "nope.gguf"
    report, code = fake_lane.run(fake_lane.config(tmp_path, lane_dir, evidence, missing))
    _assert_failed_closed(report, code, f"model file not found: {missing}")
    # The report (and its JSON twin) is still written, saying why.
    saved = json.loads((tmp_path / "out" / "runner_report.json").read_text())
    assert saved.get("passRecordable", False) is False  # proto3 JSON omits false


def test_corrupt_gguf(tmp_path, lane):
    lane_dir, evidence, model = lane
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(model.read_bytes()[:40])  # GGUF magic, header cut short
    report, code = fake_lane.run(fake_lane.config(tmp_path, lane_dir, evidence, corrupt))
    _assert_failed_closed(report, code, f"model file {corrupt} is a corrupt GGUF")


def _gguf(path, arch, tensor):
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_tensor("token_embd.weight", tensor[0], raw_dtype=tensor[1])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_an_architecture_the_oracle_does_not_implement_is_refused_before_anything_runs(tmp_path, lane):
    import numpy as np

    lane_dir, evidence, _ = lane
    model = _gguf(tmp_path / "falcon.gguf", "falcon", (np.zeros((4, 8), dtype=np.float32), None))
    report, code = fake_lane.run(fake_lane.config(tmp_path, lane_dir, evidence, model))
    _assert_failed_closed(report, code, "float64 reference (reference_parity, op_oracle): architecture 'falcon' "
                                        "(implemented: gemma3, llama, qwen2)")


def test_a_tensor_type_the_oracle_does_not_read_is_refused_by_name(tmp_path, lane):
    import gguf
    import numpy as np

    lane_dir, evidence, _ = lane
    iq = np.zeros((4, 66), dtype=np.uint8)  # 4 rows of one IQ2_XXS block (256 weights in 66 bytes)
    model = _gguf(tmp_path / "iq2.gguf", "llama", (iq, gguf.GGMLQuantizationType.IQ2_XXS))
    report, code = fake_lane.run(fake_lane.config(tmp_path, lane_dir, evidence, model))
    _assert_failed_closed(report, code, "tensor types IQ2_XXS (1 tensors) (implemented: F32, F16, BF16, Q4_0")


def test_not_a_gguf(tmp_path, lane):
    lane_dir, evidence, _ = lane
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"\x00" * 64)
    report, code = fake_lane.run(fake_lane.config(tmp_path, lane_dir, evidence, bogus))
    _assert_failed_closed(report, code, f"model file {bogus} is not a GGUF")


def test_missing_artifact(tmp_path):
    lane_dir = fake_lane.make_lane(tmp_path / "lane", missing=("llama-server",))
    evidence = fake_lane.make_evidence(lane_dir, tmp_path / "ev.pb")
    model = fake_lane.make_gguf(tmp_path / "model.gguf")
    report, code = fake_lane.run(fake_lane.config(tmp_path, lane_dir, evidence, model))
    _assert_failed_closed(report, code, "missing artifact bin/llama-server")


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this host has an NVIDIA driver")
def test_cuda_lane_on_gpu_less_host(tmp_path, lane):
    lane_dir, _, model = lane
    evidence = fake_lane.make_evidence(lane_dir, tmp_path / "cuda.evidence.pb", lane_id="linux-x86_64-cuda")
    report, code = fake_lane.run(fake_lane.config(tmp_path, lane_dir, evidence, model, lane="cuda", cpu_lane_dir=lane_dir))
    _assert_failed_closed(report, code, "nvidia-smi not found")
    assert _check(report, "preflight").status == CR.UNAVAILABLE
    assert report.status == rpb.RunnerReport.UNAVAILABLE


def test_skip_switch_is_non_recordable(tmp_path, lane):
    lane_dir, evidence, model = lane
    skip = tuple(n for n in checks.names() if n != "preflight")
    report, code = fake_lane.run(fake_lane.config(tmp_path, lane_dir, evidence, model, skip=skip))
    assert code != 0
    assert not report.pass_recordable
    assert any("--skip=" in r for r in report.non_recordable_reasons)
    assert all(c.status == CR.SKIPPED for c in report.checks if c.name in skip)


def test_unwritable_report_path(tmp_path, lane):
    lane_dir, evidence, model = lane
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    report_path = blocker / "runner_report.pb"  # parent is a file: unwritable even as root
    report, code = fake_lane.run(fake_lane.config(tmp_path, lane_dir, evidence, model, report=report_path))
    assert code == fake_lane.runner.EXIT_REPORT_UNWRITABLE
    assert not report.pass_recordable
    assert any(f"cannot write the report at {report_path}" in r for r in report.non_recordable_reasons)


def test_unknown_lane(tmp_path, lane):
    lane_dir, evidence, model = lane
    report, code = fake_lane.run(fake_lane.config(tmp_path, lane_dir, evidence, model, lane="tpu"))
    assert code != 0 and not report.pass_recordable
    assert "neither a lane id nor an alias" in _check(report, "preflight").message


def test_main_exit_code_and_message(tmp_path, lane, capsys):
    """The command line: exit status != 0 and the cause on stdout."""
    from absl import flags

    from tools.runner import cli, runner

    lane_dir, evidence, _ = lane
    if "lane" not in flags.FLAGS:
        cli.define_flags()
    argv = ["runner", "--lane=cpu", f"--lane_dir={lane_dir}", f"--evidence={evidence}", f"--spec={fake_lane.SPEC}",
            f"--model={tmp_path / 'missing.gguf'}", f"--out_dir={tmp_path / 'out'}", f"--report={tmp_path / 'out' / 'r.pb'}"]
    flags.FLAGS.unparse_flags()
    flags.FLAGS(argv)
    assert cli.main(["runner"]) == runner.EXIT_FAIL
    assert "model file not found" in capsys.readouterr().out


if __name__ == "__main__":
    import sys

    import pytest
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
