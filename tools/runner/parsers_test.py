"""Parsers of the lane binaries' and host tools' output, on captured samples (testdata/)."""

from __future__ import annotations

import json
import pathlib

import pytest

from tools.runner import lane_spec
from tools.runner.checks import (
    artifact_integrity,
    fixture_parity,
    fixture_parity_log,
    graph_smoke,
    preflight_devices,
    speed_bench,
)

TESTDATA = pathlib.Path(__file__).resolve().parent / "testdata"


def _read(name: str) -> str:
    return (TESTDATA / name).read_text()


FP = fixture_parity
FP_LOG = fixture_parity_log
GRAPH_OPS = ("GET_ROWS", "RMS_NORM", "MUL", "ADD", "MUL_MAT", "ROPE", "SET_ROWS", "CPY", "CONT", "SCALE", "SOFT_MAX",
             "FLASH_ATTN_EXT", "SILU", "SWIGLU")
# What the committed CPU grad-mode log actually evaluated (headers and "not supported" lines excluded).
CPU_GRAD_EVALUATED = {"ACC": 1, "ADD": 6, "CONT": 21, "GET_ROWS": 3, "LOG": 2, "SILU": 2, "SQR": 2, "SQRT": 2, "SWIGLU": 2}


def _covering_check() -> str:
    """op_oracle once it is a runner check (helper E adds it); until then a check that exists."""
    from tools.runner import config as config_lib
    return "op_oracle" if "op_oracle" in config_lib.CHECKS else "reference_parity"


def _cpu_cfg(**kw) -> "FP.FixtureConfig":
    kw.setdefault("op_coverage", {op: _covering_check() for op in GRAPH_OPS if op not in CPU_GRAD_EVALUATED})
    return FP.FixtureConfig(mode="grad", backend="CPU", required_ops=GRAPH_OPS, **kw)


def _committed_log(lane_prefix: str) -> pathlib.Path | None:
    runs = pathlib.Path(__file__).resolve().parents[2] / "evidence" / "runs"
    found = sorted(runs.glob(f"{lane_prefix}*/logs/fixture_parity.log"))
    return found[0] if found else None


def test_grad_mode_counts_only_evaluated_tests_real_excerpt():
    """Real CPU grad-mode lines: a header `OP(p): OK` is not a pass; the result follows it."""
    s = FP_LOG.parse_test_backend_ops(_read("test_backend_ops_grad_cpu.txt"), "grad")
    ev = {op: c.evaluated for op, c in s.ops.items() if c.evaluated}
    # SILU f32 v=0 x2 and the first ADD evaluated (results printed as SUM); SWIGLU/GET_ROWS/SUB/
    # MUL/DIV headers were followed by "not supported", the large ADD/SILU by "skipping".
    assert ev == {"SILU": 2, "ADD": 1}
    assert "SUM" not in s.ops  # the SUM wrapper's result lines belong to the header's op
    assert s.ops["GET_ROWS"].evaluated == 0 and s.ops["GET_ROWS"].not_supported == 5
    assert s.ops["MUL"].not_supported == 2 and s.ops["SILU"].skipped == 2 and s.ops["ADD"].skipped == 1 and s.ops["ADD"].not_supported == 1
    assert s.total("failed") == 0 and s.incomplete == 0
    assert (s.summary_passed, s.summary_total) == (20766, 20766) and s.backend_status == {"CPU": "OK"}


def test_committed_cpu_log_gives_the_audited_figures():
    path = _committed_log("linux-x86_64-cpu")
    if path is None:
        pytest.skip("no committed CPU run in this tree")
    s = FP_LOG.parse_test_backend_ops(path.read_text())
    assert s.mode == "grad"
    assert {op: c.evaluated for op, c in s.ops.items() if c.evaluated} == CPU_GRAD_EVALUATED
    assert s.tests_run == 41 and s.total("failed") == 0
    for op in ("DIV", "MUL", "SUB", "NORM", "SET_ROWS"):
        assert s.ops[op].evaluated == 0
    assert "ADD1" not in s.ops and "SUM" not in s.ops


def test_committed_cuda_log_test_mode():
    path = _committed_log("linux-x86_64-cuda")
    if path is None:
        pytest.skip("no committed CUDA run in this tree")
    s = FP_LOG.parse_test_backend_ops(path.read_text())
    assert s.mode == "test" and s.tests_run == 7048 == s.summary_total == s.total("passed")
    assert set(GRAPH_OPS) <= {op for op, c in s.ops.items() if c.evaluated}
    cfg = FP.FixtureConfig(mode="test", backend="CUDA0", required_ops=GRAPH_OPS)
    assert FP.judge(s, cfg)[0] == FP.CR.PASS


def test_headers_followed_only_by_not_supported_fail():
    """The former loophole: every header's default OK counted as a pass. Zero were evaluated."""
    s = FP_LOG.parse_test_backend_ops(_read("test_backend_ops_grad_only_not_supported.txt"), "grad")
    assert s.tests_run == 0 and s.total("not_supported") == 12
    status, message = FP.judge(s, _cpu_cfg(op_coverage={}))
    assert status == FP.CR.FAIL and "zero tests evaluated" in message


def test_required_op_without_evaluation_or_coverage_fails():
    s = FP_LOG.parse_test_backend_ops(_read("test_backend_ops_grad_cpu.txt"), "grad")
    status, message = FP.judge(s, _cpu_cfg(op_coverage={}))
    assert status == FP.CR.FAIL and "MUL_MAT" in message and "no covering check" in message
    # Covered by a check the runner does not know: still uncovered.
    status, _ = FP.judge(s, _cpu_cfg(op_coverage={op: "no_such_check" for op in GRAPH_OPS}))
    assert status == FP.CR.FAIL


def test_committed_cpu_log_passes_only_with_op_oracle_coverage_and_says_so():
    path = _committed_log("linux-x86_64-cpu")
    if path is None:
        pytest.skip("no committed CPU run in this tree")
    s = FP_LOG.parse_test_backend_ops(path.read_text())
    cfg = _cpu_cfg()
    status, message = FP.judge(s, cfg)
    assert status == FP.CR.PASS, message
    assert f"covered by {_covering_check()}" in message and "MUL_MAT" in message and "FLASH_ATTN_EXT" in message
    counts, _ = FP.figures(s, cfg)
    assert counts["op.MUL_MAT.evaluated"] == 0 and counts["op.MUL_MAT.covered_elsewhere"] == 1
    assert counts["op.CONT.evaluated"] == 21 and "op.CONT.covered_elsewhere" not in counts
    assert counts["ops_required"] == 14 and counts["ops_required_evaluated"] == 5  # ADD CONT GET_ROWS SILU SWIGLU
    assert counts["ops_covered_elsewhere"] == 9 and counts["ops_uncovered"] == 0


def test_grad_failures_and_header_without_result():
    s = FP_LOG.parse_test_backend_ops(_read("test_backend_ops_grad_fail.txt"), "grad")
    assert (s.ops["ADD"].passed, s.ops["CONT"].failed, s.ops["LOG"].failed) == (1, 1, 1)
    assert s.ops["SQR"].failed == 1 and s.incomplete == 1  # its header had no result line
    assert s.ops["SQRT"].passed == 1
    assert s.max_maa == pytest.approx(0.001956947)
    assert s.summary_total - s.summary_passed == s.total("failed") == 3
    status, message = FP.judge(s, _cpu_cfg())
    assert status == FP.CR.FAIL and "3 test(s) failed" in message


def test_summary_lines_must_agree_and_be_present():
    # A real CUDA excerpt under the full run's summary line: 7048/7048 is not what these lines show.
    s = FP_LOG.parse_test_backend_ops(_read("test_backend_ops_test_cuda_excerpt.txt"), "test")
    assert s.tests_run == 8 and s.total("not_supported") == 5
    cfg = FP.FixtureConfig(mode="test", backend="CUDA0", required_ops=("SILU", "FLASH_ATTN_EXT"))
    status, message = FP.judge(s, cfg)
    assert status == FP.CR.FAIL and "disagrees with the per-test count 8/8" in message
    text = _read("test_backend_ops_test_cuda_excerpt.txt")
    ok = text.replace("7048/7048 tests passed", "8/8 tests passed")
    assert FP.judge(FP_LOG.parse_test_backend_ops(ok, "test"), cfg)[0] == FP.CR.PASS
    no_summary = "\n".join(ln for ln in ok.splitlines() if "tests passed" not in ln)
    status, message = FP.judge(FP_LOG.parse_test_backend_ops(no_summary, "test"), cfg)
    assert status == FP.CR.FAIL and "no 'N/M tests passed'" in message
    no_backend = "\n".join(ln for ln in ok.splitlines() if "Backend CUDA0:" not in ln)
    status, message = FP.judge(FP_LOG.parse_test_backend_ops(no_backend, "test"), cfg)
    assert status == FP.CR.FAIL and "no 'Backend CUDA0" in message
    # grad mode: a summary claiming no failure while a test failed.
    bad = _read("test_backend_ops_grad_fail.txt").replace("20763/20766", "20766/20766")
    assert "per-test count says 3" in "; ".join(FP.summary_problems(FP_LOG.parse_test_backend_ops(bad, "grad"), "CPU"))


def test_test_mode_with_err_prefix():
    s = FP_LOG.parse_test_backend_ops(_read("test_backend_ops_test_cuda_sample.txt"), "test")
    assert s.total("passed") == 4 and s.total("failed") == 1
    assert s.failed_tests[0].startswith("MUL_MAT(type_a=q8_0")
    assert s.ops["OPT_STEP_SGD"].not_supported == 1 and s.ops["MUL_MAT"].evaluated == 3
    assert s.max_err == pytest.approx(1.234e-6)
    assert (s.summary_passed, s.summary_total) == (3, 4)
    assert s.backend_status == {"CUDA0": "FAIL"}


def test_zero_tests_is_fail():
    s = FP_LOG.parse_test_backend_ops("Testing 1 devices\n\nBackend 1/1: CPU\n  0/0 tests passed\n  Backend CPU: OK\n", "grad")
    assert FP.judge(s, _cpu_cfg())[0] == FP.CR.FAIL


def test_crash_without_result_line_is_fail():
    s = FP_LOG.parse_test_backend_ops("  ADD(type=f32): OK\nggml.c:7227: GGML_ASSERT(...) failed\n", "grad")
    assert s.incomplete == 1  # header, then the abort
    status, _ = FP.judge(s, _cpu_cfg(exit_code=134))
    assert status == FP.CR.FAIL


def test_per_op_thresholds_from_test_backend_ops():
    assert FP.threshold("test", "MUL_MAT") == 5e-4 == FP.threshold("test", "FLASH_ATTN_EXT")
    assert FP.threshold("test", "SOFT_MAX") == 1e-6 and FP.threshold("test", "ADD") == 1e-7
    assert FP.threshold("grad", "ADD") == 1e-4 and FP.threshold("grad", "MUL") == 1e-3


def test_fixture_recompute_from_log_file(tmp_path):
    cfg = _cpu_cfg(thresholds={op: FP.threshold("grad", op) for op in GRAPH_OPS})
    log = "\n".join(FP.config_lines(cfg)) + "\n$ /x/test-backend-ops grad -b CPU -o ADD\n"
    log += _read("test_backend_ops_grad_cpu.txt") + "# exit 0 after 5.00s\n# PASS: whatever\n"
    (tmp_path / "fixture_parity.log").write_text(log)
    counts, metrics = FP.recompute(tmp_path)
    assert counts["tests_evaluated"] == 3 and counts["op.SILU.evaluated"] == 2 and counts["op.ADD.evaluated"] == 1
    assert counts["op.MUL_MAT.evaluated"] == 0 and counts["op.MUL_MAT.covered_elsewhere"] == 1
    assert metrics["op.MUL.maa_threshold"] == 1e-3 and "nmse_threshold" not in metrics
    assert FP.read_config(log).exit_code == 0


def test_llama_bench_json():
    m = speed_bench.parse_llama_bench_json(_read("llama_bench_cpu.json"))
    assert m["pp_tokens_per_s"] == pytest.approx(5935.349104)
    assert m["tg_tokens_per_s"] > 0
    assert m["model_bytes"] == 70259712


def test_llama_bench_json_after_log_noise():
    text = "some log line [not json\n" + json.dumps([{"n_prompt": 0, "n_gen": 8, "avg_ts": 12.5, "model_size": 10}])
    assert speed_bench.parse_llama_bench_json(text)["tg_tokens_per_s"] == 12.5


def test_log_evidence_cpu_and_cuda_patterns():
    log = _read("llama_completion_cpu_q8_0.log")
    cpu = lane_spec.load_lane(TESTDATA / "spec.json", "cpu")
    cuda = lane_spec.load_lane(TESTDATA / "spec.json", "linux-x86_64-cuda")
    assert graph_smoke.missing_log_evidence(cpu.log_evidence, log) == []
    assert graph_smoke.missing_log_evidence(cuda.log_evidence, log) == list(cuda.log_evidence)
    cuda_log = ("ggml_cuda_init: found 1 CUDA devices (Total VRAM: 143156 MiB):\n"
                "load_tensors: offloaded 3/3 layers to GPU\n"
                "load_tensors:        CUDA0 model buffer size =    67.00 MiB\n")
    assert graph_smoke.missing_log_evidence(cuda.log_evidence, cuda_log) == []
    partial = cuda_log.replace("3/3", "2/3")  # not every layer offloaded
    assert graph_smoke.missing_log_evidence(cuda.log_evidence, partial) == [cuda.log_evidence[1]]


def test_eval_and_kv_type_lines():
    log = _read("llama_completion_cpu_q8_0.log")
    ev = graph_smoke.parse_eval(log)
    assert ev["eval_runs"] == 15 and ev["prompt_tokens"] > 0
    assert graph_smoke.parse_kv_types(log) == ("q8_0", "q8_0")
    assert graph_smoke.flash_attn_for("q4_0") == "on" and graph_smoke.flash_attn_for("f16") == "auto"


def test_nvidia_smi_h200():
    rows = preflight_devices.parse_nvidia_smi_query(_read("nvidia_smi_query_h200.txt"))
    assert rows == [{"name": "NVIDIA H200", "compute_cap": "9.0", "driver_version": "580.159.04",
                     "memory_total": "143771 MiB", "memory_used": "0 MiB"}]
    assert preflight_devices.parse_mib(rows[0]["memory_total"]) == 143771
    assert preflight_devices.parse_cuda_version(_read("nvidia_smi_h200.txt")) == "13.0"


def test_vulkaninfo_summary_and_rocminfo():
    text = ("Devices:\n========\nGPU0:\n\tapiVersion         = 1.3.255\n\tdeviceType         = PHYSICAL_DEVICE_TYPE_CPU\n"
            "\tdeviceName         = llvmpipe (LLVM 15.0.6, 256 bits)\n\tdriverName         = llvmpipe\n"
            "GPU1:\n\tdeviceType         = PHYSICAL_DEVICE_TYPE_DISCRETE_GPU\n\tdeviceName         = AMD Radeon PRO W7900\n")
    devices = preflight_devices.parse_vulkaninfo_summary(text)
    assert [d["deviceType"] for d in devices] == ["PHYSICAL_DEVICE_TYPE_CPU", "PHYSICAL_DEVICE_TYPE_DISCRETE_GPU"]
    assert preflight_devices.parse_rocminfo_agents("  Name:                    gfx942\n  Name: AMD EPYC\n") == ["gfx942"]


def test_cpuinfo():
    info = preflight_devices.read_cpuinfo("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Xeon\nflags\t\t: fma avx2\n\nprocessor\t: 1\n")
    assert info["vendor_id"] == "GenuineIntel" and "avx2" in info["flags"].split()


def test_version_stamp():
    text = ("version: 0.5.0-dev (build 0, commit 0c1e570)\nbuilt with GNU 12.2.0 for Linux x86_64\n"
            "lanes: lane linux-x86_64-cpu, patch stack abc123\n")
    commit = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
    assert artifact_integrity.parse_version(text) == ("0c1e570", "linux-x86_64-cpu", "abc123")
    assert artifact_integrity.version_problems(text, "linux-x86_64-cpu", commit, "abc123") == []
    assert artifact_integrity.version_problems(text, "linux-x86_64-cpu", commit, "other") != []
    stock = text.split("lanes:")[0]
    assert any("stamp" in p for p in artifact_integrity.version_problems(stock, "linux-x86_64-cpu", commit, "abc123"))


def test_lane_spec_alias_and_unknown():
    assert lane_spec.load_lane(TESTDATA / "spec.json", "cuda").lane_id == "linux-x86_64-cuda"
    with pytest.raises(lane_spec.LaneSpecError, match="neither a lane id nor an alias"):
        lane_spec.load_lane(TESTDATA / "spec.json", "tpu")



def test_parse_ldd_marks_missing_libraries():
    from tools.runner.checks import preflight_devices
    text = ("\tlibcudart.so.13 => /usr/local/cuda/lib64/libcudart.so.13 (0x7f00)\n"
            "\tlibcublas.so.13 => not found\n\tlinux-vdso.so.1 (0x7ffd)\n")
    assert preflight_devices.parse_ldd(text) == {"libcudart.so.13": "/usr/local/cuda/lib64/libcudart.so.13",
                                         "libcublas.so.13": "not found"}


def test_fixture_ops_come_from_the_lane_spec_and_the_override_is_bring_up():
    import pathlib

    from tools.runner.checks import fixture_parity
    from tools.runner.config import RunnerConfig
    from tools.runner.context import RunContext
    from tools.runner.lane_spec import Lane
    lane = Lane("linux-x86_64-cuda", "cuda", "linux", "x86_64", "cuda", "cuda", (), (), (), ("MUL_MAT", "ROPE"))
    cfg = RunnerConfig(lane="cuda", lane_dir=pathlib.Path("/l"), evidence=None, spec=pathlib.Path("/s"), model=None,
                       out_dir=pathlib.Path("/o"), report=pathlib.Path("/o/r.pb"))
    ctx = RunContext(config=cfg, lane=lane, logs_dir=pathlib.Path("/o/logs"), scratch_dir=pathlib.Path("/o/s"))
    import dataclasses
    ctx.config = dataclasses.replace(cfg, fixture_jobs=3)
    assert fixture_parity.fixture_command(ctx)[1:] == ["test", "-b", "CUDA0", "-j", "3", "-o", "MUL_MAT,ROPE"]
    ctx.config = dataclasses.replace(cfg, fixture_ops="ADD")
    assert fixture_parity.fixture_command(ctx)[-2:] == ["-o", "ADD"]
    assert 1 <= int(fixture_parity.fixture_command(ctx)[5]) <= 8  # automatic: half the cores, at most 8
    ctx.config = dataclasses.replace(cfg, fixture_jobs=-1)
    with pytest.raises(ValueError, match="fixture_jobs"):
        fixture_parity.fixture_command(ctx)


def _probs(*pairs):
    return [{"id": t1, "top_logprobs": [{"id": t1, "logprob": l1}, {"id": t2, "logprob": l2}]} for t1, l1, t2, l2 in pairs]


def test_concurrency_divergence_only_at_near_ties():
    from tools.runner.checks.concurrency import judge_divergence
    seq = {"tokens": [5, 6, 7], "completion_probabilities": _probs((5, -0.1, 9, -3.0), (6, -0.50, 8, -0.52), (7, -0.1, 1, -4))}
    assert judge_divergence({"tokens": [5, 6, 7]}, seq, 0.1) == (None, None)
    problem, margin = judge_divergence({"tokens": [5, 8, 3]}, seq, 0.1)
    assert problem is None and abs(margin - 0.02) < 1e-9
    problem, _ = judge_divergence({"tokens": [9, 6, 7]}, seq, 0.1)
    assert "not a near-tie" in problem
    problem, _ = judge_divergence({"tokens": [5, 4, 7]}, seq, 0.1)
    assert "not among the sequential run's top 2" in problem
    problem, _ = judge_divergence({"tokens": [5, 8]}, {"tokens": [5, 6]}, 0.1)
    assert "no probabilities" in problem
    # Byte tokens (here 208) get no entry: entries are matched by id, not by index.
    skipped = {"tokens": [208, 6], "completion_probabilities": _probs((6, -0.50, 8, -0.52))}
    assert judge_divergence({"tokens": [208, 8]}, skipped, 0.1)[0] is None
    assert "no probabilities" in judge_divergence({"tokens": [209, 6]}, skipped, 0.1)[0]
    three_way = {"tokens": [6], "completion_probabilities": [{"id": 6, "top_logprobs": [
        {"id": 6, "logprob": -1.00}, {"id": 8, "logprob": -1.01}, {"id": 4, "logprob": -1.03}]}]}
    assert judge_divergence({"tokens": [4]}, three_way, 0.1)[0] is None

# ---- reference parity ---------------------------------------------------------------------------

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


# ---- concurrency ----------------------------------------------------------------------------------


def _concurrency_logs(tmp_path, server_log: str):
    from tools.runner.checks import concurrency as cc
    (tmp_path / "concurrency.log").write_text("# lanes-config n_parallel=4\n# lanes-config tie_tolerance_nats=0.1\n")
    same = {"tokens": [1, 2, 3], "tokens_predicted": 3, "completion_probabilities": []}
    (tmp_path / cc.RESPONSES_FILE).write_text(json.dumps({"prompts": list(cc.PROMPTS), "concurrent": [same] * 4,
                                                          "sequential": [same] * 4}))
    (tmp_path / cc.SERVER_LOG).write_text(_read(server_log))
    return cc.evaluate(tmp_path)


def test_concurrency_server_log_shows_overlapping_slots(tmp_path):
    c, m, problems = _concurrency_logs(tmp_path, "llama_server_concurrency_cpu.log")
    assert problems == []
    assert c["server_max_busy_slots"] == 4 and c["server_distinct_slots"] == 4 and c["exact_matches"] == 4
    assert 0 < m["server_concurrent_wall_s"] < m["server_sequential_wall_s"]


def test_concurrency_one_at_a_time_server_fails(tmp_path):
    """The former loophole: 4 requests in flight at the client passed even if the server decoded
    them one after another. Its own log shows each task released before the next launched."""
    c, _, problems = _concurrency_logs(tmp_path, "llama_server_one_at_a_time.log")
    assert c["server_max_busy_slots"] == 1 and c["server_distinct_slots"] == 4
    assert any("one at a time" in p for p in problems)


def test_server_log_parser_on_real_cancellation_log():
    from tools.runner.llama_server import parse_server_log
    s = parse_server_log(_read("llama_server_cancellation_cpu.log"))
    stream, nxt = s.tasks[0], s.tasks[1]
    assert stream.cancelled is not None and stream.released >= stream.cancelled
    assert stream.prompt_tokens > 0 and 0 < stream.decoded < 3000
    assert nxt.decoded > 0 and s.shutdown_logged


# ---- cancellation, against a fake llama-server --------------------------------------------------


def _cancellation_with_fake_server(tmp_path, mode):
    from tools.runner import fake_lane
    from tools.runner.checks import cancellation
    from tools.runner.config import RunnerConfig
    from tools.runner.context import RunContext
    from tools.runner.lane_spec import Lane
    from tools.runner.steps import Step
    lane_dir = fake_lane.make_lane(tmp_path / "lane")
    fake_lane.install_fake_server(lane_dir, mode)
    cfg = RunnerConfig(lane="cpu", lane_dir=lane_dir, evidence=None, spec=fake_lane.SPEC, model=tmp_path / "m.gguf",
                       out_dir=tmp_path, report=tmp_path / "r.pb", timeout_s=30)
    logs = tmp_path / "logs"
    logs.mkdir()
    lane = Lane("linux-x86_64-cpu", "cpu", "linux", "x86_64", "cpu", "host-cc", (), (), ())
    ctx = RunContext(config=cfg, lane=lane, logs_dir=logs, scratch_dir=tmp_path)
    step = Step("cancellation", logs, ctx.tracker)
    step.log(f"# lanes-config cancel_bound_s={cfg.cancel_bound_s!r}")
    step.log(f"# lanes-config stream_n_predict={cancellation.STREAM_PREDICT}")
    step.log(f"# lanes-config sigint_exit_bound_s={cfg.sigint_exit_bound_s!r}")
    try:
        client_problems = cancellation.abort_stream(ctx, step)
        # Stand-in for the llama-completion part (the fake lane has no llama-completion).
        step.log("# SIGINT: exit 130 after 0.010s, 96 bytes generated")
        step.log("# exit 0 after 0.10s")
    finally:
        ctx.tracker.stop_all()
    counts, metrics, problems = cancellation.evaluate(logs)
    assert cancellation.recompute(logs) == (counts, metrics)
    return client_problems, counts, metrics, problems


def test_cancellation_passes_when_the_server_cancels(tmp_path):
    client, counts, metrics, problems = _cancellation_with_fake_server(tmp_path, "cancel")
    assert client == [] and problems == [], problems
    assert counts["stream_cancel_logged"] == 1 and counts["stream_tokens_decoded"] < 3000
    assert counts["server_sigint_exit_code"] == 0 and counts["sigint_exit_code"] == 130
    assert metrics["stream_task_seconds"] <= metrics["cancel_bound_s"] == 5.0
    assert counts["stream_chunks_before_abort"] == 4


def test_cancellation_fails_when_the_server_ignores_the_dropped_stream(tmp_path):
    """The former loophole: a server that never cancels still finished inside the client's wait
    and passed. Its own log shows no cancel and all 3000 tokens decoded for nobody."""
    client, counts, _, problems = _cancellation_with_fake_server(tmp_path, "ignore_cancel")
    assert counts["stream_cancel_logged"] == 0 and counts["stream_tokens_decoded"] == 3000
    text = "; ".join(problems)
    assert "never logged 'cancel task" in text and "decoding did not stop" in text


def test_cancellation_wrong_sigint_exit_fails(tmp_path):
    from tools.runner.checks import cancellation
    logs = tmp_path
    (logs / "cancellation.server.log").write_text(_read("llama_server_cancellation_cpu.log"))
    (logs / "cancellation.stream.txt").write_bytes(b"data: {}\n\ndata: {}\n\n")
    base = ("# lanes-config cancel_bound_s=5.0\n# lanes-config stream_n_predict=3000\n"
            "# lanes-config sigint_exit_bound_s=10.0\n# llama-server SIGINT: exit 0 after 0.010s\n")
    (logs / "cancellation.log").write_text(base + "# SIGINT: exit 130 after 0.007s, 96 bytes\n# exit 0 after 0.1s\n")
    assert cancellation.evaluate(logs)[2] == []
    (logs / "cancellation.log").write_text(base + "# SIGINT: exit 0 after 0.007s, 96 bytes\n# exit 0 after 0.1s\n")
    assert any("expected 130" in p for p in cancellation.evaluate(logs)[2])
    (logs / "cancellation.log").write_text(base.replace("SIGINT: exit 0", "SIGINT: exit 1") +
                                           "# SIGINT: exit 130 after 0.007s, 96 bytes\n# exit 0 after 0.1s\n")
    assert any("llama-server exited 1" in p for p in cancellation.evaluate(logs)[2])


def test_exit_line_is_found_after_output_without_a_trailing_newline(tmp_path):
    # A tool whose output ends mid-line (llama.cpp's async logger can) must not hide its exit status.
    from tools.runner import log_blocks
    from tools.runner.steps import ProcessTracker, Step
    step = Step("demo", tmp_path, ProcessTracker())
    step.run(["printf", "no newline at the end"], 30)
    step.finish(0, "done")
    (cmd,) = log_blocks.commands((tmp_path / "demo.log").read_text())
    assert cmd.exit_code == 0 and cmd.output == "no newline at the end"


if __name__ == "__main__":
    import sys
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))


def test_cpu_variant_comes_from_ggmls_own_load_line():
    from tools.runner.checks import preflight_devices
    line = "load_backend: loaded CPU backend from /x/lanes/cpu/bin/libggml-cpu-zen4.so\n"
    assert preflight_devices.parse_cpu_variant("ggml_backend_load_best: search path /x\n" + line) == "zen4"
    assert preflight_devices.parse_cpu_variant("load_backend: loaded RPC backend from /x/libggml-rpc.so\n") is None
    with pytest.raises(ValueError, match="more than one CPU variant"):
        preflight_devices.parse_cpu_variant(line + line.replace("zen4", "haswell"))


def test_a_variant_the_spec_does_not_list_fails_preflight(tmp_path):
    from tools.runner.checks import preflight_devices
    from tools.runner.config import RunnerConfig
    from tools.runner.context import RunContext
    from tools.runner.lane_spec import Lane
    from tools.runner.steps import ProcessTracker, Step
    lane_dir = tmp_path / "lane"
    (lane_dir / "bin").mkdir(parents=True)
    exe = lane_dir / "bin" / "llama-bench"
    exe.write_text("#!/bin/sh\necho 'load_backend: loaded CPU backend from /l/bin/libggml-cpu-zen5.so' >&2\n")
    exe.chmod(0o755)
    lane = Lane("linux-x86_64-cpu", "cpu", "linux", "x86_64", "cpu", "host-cc", (), (), (), cpu_variants=("x64", "zen4"))
    cfg = RunnerConfig(lane="cpu", lane_dir=lane_dir, evidence=None, spec=tmp_path / "s", model=None,
                       out_dir=tmp_path, report=tmp_path / "r.pb")
    (tmp_path / "logs").mkdir()
    ctx = RunContext(config=cfg, lane=lane, logs_dir=tmp_path / "logs", scratch_dir=tmp_path / "s")
    step = Step("preflight", tmp_path / "logs", ProcessTracker())
    with pytest.raises(preflight_devices.Failed, match="'zen5', which the lane spec does not list"):
        preflight_devices.detect_cpu_variant(ctx, step)
    exe.write_text(exe.read_text().replace("zen5", "zen4"))
    assert preflight_devices.detect_cpu_variant(ctx, step) == "zen4"
