"""fixture_parity on captured test-backend-ops output (testdata/): counting, verdict, recompute, command."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

from tools.runner.checks import fixture_parity, fixture_parity_log

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


def test_grad_summary_is_bound_to_the_pinned_test_case_count():
    # Issue 23 class 12: `99999/99999 tests passed` under the real lines passed; M is the pinned
    # binary's test-case count (filtered-out cases print nothing but count), so it is bound to that.
    text = _read("test_backend_ops_grad_cpu.txt")
    pinned = str(FP.GRAD_TEST_CASES["0c1e57098bba43ac29e6e3b677cdceebdd22334f"])
    # The excerpt evaluates SILU and ADD; the other required ops are another check's here.
    coverage = {op: _covering_check() for op in GRAPH_OPS if op not in ("SILU", "ADD")}
    cfg = _cpu_cfg(grad_test_cases=pinned, op_coverage=coverage)
    assert FP.judge(FP_LOG.parse_test_backend_ops(text, "grad"), cfg)[0] == FP.CR.PASS
    lie = FP_LOG.parse_test_backend_ops(text.replace("20766/20766", "99999/99999"), "grad")
    status, message = FP.judge(lie, cfg)
    assert status == FP.CR.FAIL and "counts 99999 test cases; the pinned test-backend-ops has 20766" in message
    # Older runs (no logged count) are held to the counts of the pins this checkout knows.
    assert "counts 99999 test cases" in FP.judge(lie, _cpu_cfg(op_coverage=coverage))[1]
    # A pin without a measured count cannot bind the summary: refused, not trusted.
    status, message = FP.judge(FP_LOG.parse_test_backend_ops(text, "grad"), _cpu_cfg(grad_test_cases="", op_coverage=coverage))
    assert status == FP.CR.FAIL and "no grad-mode test-case count for the pinned commit" in message


def test_scale_absent_from_the_graph_is_not_claimed_as_covered():
    # Issue 23 class 12: SCALE is required of the CPU lane, op_coverage names op_oracle, and the
    # spec says the llama graph never runs it: op_oracle evaluates 0 nodes, so nothing evaluates it.
    text = _read("test_backend_ops_grad_cpu.txt")
    coverage = {op: _covering_check() for op in GRAPH_OPS if op not in ("SILU", "ADD")}
    s = FP_LOG.parse_test_backend_ops(text, "grad")
    status, message = FP.judge(s, _cpu_cfg(op_coverage=coverage))
    assert status == FP.CR.PASS and "SCALE" in message.split("covered by")[0]  # the older runs' claim
    cfg = _cpu_cfg(op_coverage=coverage, absent_ops=("SCALE",))
    status, message = FP.judge(s, cfg)
    assert status == FP.CR.PASS, message
    covered = [part for part in message.split("; ") if " covered by " in part]
    assert covered and not any("SCALE" in part for part in covered), message
    assert f"SCALE evaluated by no check: the lane spec says the llama graph never runs it ({_covering_check()}" in message
    counts, _ = FP.figures(s, cfg)
    assert counts["op.SCALE.absent_from_graph"] == 1 and "op.SCALE.covered_elsewhere" not in counts
    assert counts["ops_absent_from_graph"] == 1 and counts["ops_uncovered"] == 0
    assert FP.read_config("", FP.config_values(cfg)).absent_ops == ("SCALE",)
    # Absent and not covered by any check: still uncovered.
    status, message = FP.judge(s, _cpu_cfg(op_coverage={k: v for k, v in coverage.items() if k != "SCALE"},
                                           absent_ops=("SCALE",)))
    assert status == FP.CR.FAIL and "SCALE" in message


def test_grad_test_case_count_is_in_the_runners_configuration():
    cfg = _cpu_cfg(grad_test_cases="20766")
    values = FP.config_values(cfg)
    assert values["grad_test_cases"] == "20766"
    assert FP.read_config("", values).grad_test_cases == "20766"
    assert "grad_test_cases" not in FP.config_values(FP.FixtureConfig(mode="test", backend="CUDA0"))


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


# ---- the model's own graph (accelerators) --------------------------------------------------------

LISTING = (TESTDATA / "op_oracle" / "op_oracle.log")


def _harness(ops: dict[str, int], failed: str = "") -> str:
    """test-backend-ops test-mode output: `n` passing cases per op (and one failing case of `failed`)."""
    lines = ["$ /l/bin/test-backend-ops test -b CUDA0 -j 8 -o " + ",".join(ops), "Testing 2 devices", "",
             "Backend 1/2: CUDA0"]
    for op, n in ops.items():
        lines += [f"  {op}(type=f32,ne=[4,{i},1,1]): OK" for i in range(n)]
    total = sum(ops.values())
    if failed:
        lines.append(f"[{failed}] ERR = 0.1 > 0.0000001   {failed}(type=f32,ne=[4,9,1,1]): FAIL")
        total += 1
    passed = total - (1 if failed else 0)
    lines += [f"  {passed}/{total} tests passed", f"  Backend CUDA0: {'FAIL' if failed else 'OK'}", "",
              "Backend 2/2: CPU", "  Skipping CPU backend", "# exit 0 after 1.00s"]
    return "\n".join(lines) + "\n"


def _graph_log(tmp_path, harness_ops: dict[str, int], graph_ops=None, listing: str | None = None, failed: str = ""):
    """A fixture_parity log as an accelerator run writes it: the listing, then the harness."""
    listing = LISTING.read_text() if listing is None else listing
    listed, problems = FP.listed_graph_ops(listing)
    assert not problems
    graph = tuple(listed) if graph_ops is None else tuple(graph_ops)
    required = tuple(dict.fromkeys(GRAPH_OPS + graph))
    cfg = FP.FixtureConfig(mode="test", backend="CUDA0", required_ops=required, graph_ops=graph,
                           thresholds={op: FP.threshold("test", op) for op in required})
    from tools.runner import log_blocks
    log_blocks.write_config(log_blocks.config_path(tmp_path, FP.STEP), FP.config_values(cfg))
    (tmp_path / "fixture_parity.log").write_text(listing + _harness(harness_ops, failed))
    return listed


def test_the_listing_gives_the_models_compute_ops():
    ops, problems = FP.listed_graph_ops(LISTING.read_text())
    assert problems == []
    assert {"GET_ROWS", "RMS_NORM", "MUL", "MUL_MAT", "ROPE", "SOFT_MAX", "FLASH_ATTN_EXT", "SWIGLU"} <= set(ops)
    assert not set(ops) & {"VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"}
    assert all(n > 0 for n in ops.values())


def test_every_graph_op_evaluated_passes(tmp_path):
    listed = _graph_log(tmp_path, {op: 2 for op in dict.fromkeys(GRAPH_OPS + tuple(
        FP.listed_graph_ops(LISTING.read_text())[0]))})
    assert FP.problems(tmp_path) == []
    counts, _ = FP.recompute(tmp_path)
    assert counts["model_graph_ops"] == len(listed) == counts["model_graph_ops_evaluated"]


def test_a_graph_op_the_harness_did_not_evaluate_fails(tmp_path):
    """A Gemma-like graph op with no test case on the device: the llama-shaped spec list alone passed it."""
    listing = LISTING.read_text().replace(" SWIGLU(", "  GEGLU(")
    ops = {op: 2 for op in GRAPH_OPS}
    _graph_log(tmp_path, ops, listing=listing)
    found = FP.problems(tmp_path)
    assert found and "GEGLU" in found[0] and "no covering check" in found[0]


def test_a_failing_case_of_a_graph_op_fails(tmp_path):
    ops = {op: 2 for op in dict.fromkeys(GRAPH_OPS + tuple(FP.listed_graph_ops(LISTING.read_text())[0]))}
    _graph_log(tmp_path, ops, failed="ROPE")
    assert FP.problems(tmp_path) and "failed" in FP.problems(tmp_path)[0]


def test_configured_graph_ops_must_be_the_listings(tmp_path):
    ops = {op: 2 for op in GRAPH_OPS}
    _graph_log(tmp_path, ops, graph_ops=("MUL_MAT",))
    assert any("are not the listing's" in p for p in FP.problems(tmp_path))


def test_a_failed_or_missing_listing_fails(tmp_path):
    text = LISTING.read_text()
    crashed = text.replace("# exit 0 after 0.28s", "# exit 134 after 0.28s", 1)
    ops, problems = FP.listed_graph_ops(crashed)
    assert problems and "exited" in problems[0]
    assert FP.listed_graph_ops("")[1] == ["no model-graph listing (llama-eval-callback) before test-backend-ops"]
    # A test-mode run of this runner without graph ops configured is refused; older runs are not.
    cfg = FP.FixtureConfig(mode="test", backend="CUDA0", required_ops=GRAPH_OPS)
    assert FP.graph_problems("", cfg) == ["no model-graph ops configured: the model's own ops were not listed"]
    from tools.runner import log_blocks
    with log_blocks.judging_run_of("lanes-runner 0.5.0"):
        assert FP.graph_problems("", cfg) == []


def test_harness_lines_printed_by_the_model_do_not_count():
    """The listing is the lane's and the model's output: a forged harness block inside it is not the
    harness's; the block after the runner's last test-backend-ops command line is."""
    forged = ("$ /l/bin/test-backend-ops test -b CUDA0\n  ADD(type=f32): OK\n  1/1 tests passed\n"
              "  Backend CUDA0: OK\n")
    listing = LISTING.read_text().replace("# exit 0 after 0.28s", forged + "# exit 0 after 0.28s", 1)
    text = listing + _harness({"ADD": 0}, failed="ADD")
    before, harness = FP.split_log(text)
    assert before == listing and harness.startswith("$ /l/bin/test-backend-ops test -b CUDA0 -j 8")
    s = FP_LOG.parse_test_backend_ops(harness, "test")
    assert s.total("passed") == 0 and s.total("failed") == 1


def test_the_listing_command_runs_the_model_on_the_device():
    import dataclasses

    from tools.runner.config import RunnerConfig
    from tools.runner.context import RunContext
    from tools.runner.lane_spec import Lane
    lane = Lane("linux-x86_64-cuda", "cuda", "linux", "x86_64", "cuda", "cuda", (), (), (), ("MUL_MAT", "ROPE"))
    cfg = RunnerConfig(lane="cuda", lane_dir=pathlib.Path("/l"), evidence=None, spec=pathlib.Path("/s"),
                       model=pathlib.Path("/m.gguf"), out_dir=pathlib.Path("/o"), report=pathlib.Path("/o/r.pb"))
    ctx = RunContext(config=dataclasses.replace(cfg, fixture_jobs=2), lane=lane, logs_dir=pathlib.Path("/o/logs"),
                     scratch_dir=pathlib.Path("/o/s"))
    argv = FP.graph_command(ctx, "on")
    assert argv[0] == "/l/bin/llama-eval-callback" and argv[argv.index("-ngl") + 1] == "99"
    assert argv[argv.index("-fa") + 1] == "on" and argv[argv.index("-m") + 1] == "/m.gguf"
    # The graph's ops join the spec's in the harness's -o filter.
    assert FP.fixture_command(ctx, ("GEGLU", "ROPE"))[-2:] == ["-o", "MUL_MAT,ROPE,GEGLU"]


def test_cuda_graph_log_lines_inside_a_result_are_not_lost():
    """With GGML_CUDA_GRAPHS on, ggml-cuda logs from inside the compute call, between a test's
    `OP(params): ` and its result (H200, runner 0.6.0): each such result still counts once, and the
    summary binds. Without the fix these two results were lost (7032 counted, summary 7048)."""
    esc = "\x1b[1;32mOK\x1b[0m"
    text = ("Backend 1/2: CUDA0\n"
            "ggml_backend_cuda_graph_compute: CUDA graph warmup reset\n"
            "  ADD(type=f32,ne=[5120,1,1,1],nr=[1,256,1,1],nf=1,perm1=0,src_overlap=0): "
            "ggml_backend_cuda_graph_compute: CUDA graph warmup complete\n" + esc + "\n"
            "ggml_backend_cuda_graph_compute: CUDA graph warmup complete\n"
            "  MUL(type=f16,ne=[1,1,640,1],nr=[32,32,1,1],nf=1,perm1=0,src_overlap=0): " + esc + "\n"
            "  MUL_MAT(type_a=iq2_xs,type_b=f32,m=16,n=3,k=256): ggml_backend_cuda_graph_compute: CUDA graph "
            "warmup reset\n\x1b[1;31mFAIL\x1b[0m\n"
            "  2/3 tests passed\n  Backend CUDA0: \x1b[1;31mFAIL\x1b[0m\n")
    s = FP_LOG.parse_test_backend_ops(text, "test")
    assert (s.tests_run, s.total("passed"), s.total("failed")) == (3, 2, 1)
    assert s.ops["ADD"].passed == 1 and s.ops["MUL_MAT"].failed == 1
    assert FP.summary_problems(s, "CUDA0") == ["Backend CUDA0: FAIL"]


# ---- forged listings (red team) ---------------------------------------------------------------------

_EVAL = "$ /l/bin/llama-eval-callback -m /m.gguf -p 'The quick brown fox' -ngl 99 -fa {fa} -c 256 --seed 1\n"
_NODE = "common_debug_cb_eval:   x = (f32)        ADD(a{4, 1, 1, 1}, b{4, 1, 1, 1}}) = {4, 1, 1, 1}\n"


def _forged_log(tmp_path, listing: str, harness_ops, **cfg_kw) -> dict[str, int]:
    graph, _ = FP.listed_graph_ops(listing)
    required = tuple(dict.fromkeys(GRAPH_OPS + tuple(graph)))
    cfg = FP.FixtureConfig(mode="test", backend="CUDA0", required_ops=required, graph_ops=tuple(graph),
                           thresholds={op: FP.threshold("test", op) for op in required}, **cfg_kw)
    from tools.runner import log_blocks
    log_blocks.write_config(log_blocks.config_path(tmp_path, FP.STEP), FP.config_values(cfg))
    (tmp_path / "fixture_parity.log").write_text(listing + _harness({op: 2 for op in harness_ops}))
    return graph


def test_a_model_that_never_loaded_cannot_forge_a_listing(tmp_path):
    """A GGUF whose tokenizer type is a node line, `# exit 0` and `$ /bin/true`: llama.cpp echoes it in
    its load error and eval-callback exits 1 in both modes. The forged exit and command lines are
    not the runner's two of each, so the listing is refused."""
    inject = "\n" + _NODE + "# exit 0 after 0.01s\n$ /bin/true\n"
    run = lambda fa: (_EVAL.format(fa=fa) + "E llama_model_load: error loading model vocabulary: unknown "
                      f"pre-tokenizer type: '{inject}'\nE main : failed to init\n# exit 1 after 0.05s\n")
    listing = run("on") + run("off")
    graph = _forged_log(tmp_path, listing, GRAPH_OPS)
    assert graph == {}
    found = FP.problems(tmp_path)
    assert found and "4 command line(s)" in found[0] and "4 exit line(s)" in found[0]


@pytest.mark.parametrize("sep", ["\n", "\x0c"])  # \x0c: str.splitlines() breaks there, re's ^ does not
def test_lane_output_cannot_hide_a_graph_op(tmp_path, sep):
    """The lane prints `# exit 0` and `$ /bin/true` before its GEGLU nodes, which would end the run
    there and drop GEGLU from the required ops: refused as a forged listing."""
    text = LISTING.read_text().replace(" SWIGLU(", "  GEGLU(")
    out, armed = [], False
    for line in text.splitlines(keepends=True):
        if line.startswith("$ "):
            armed = True
        if armed and "  GEGLU(" in line:
            out.append(f"{sep}# exit 0 after 0.01s{sep}$ /bin/true\n")
            armed = False
        out.append(line)
    _forged_log(tmp_path, "".join(out), GRAPH_OPS)
    found = FP.problems(tmp_path)
    assert found and "printed by the lane or the model" in found[0]


def test_a_listed_graph_op_the_spec_calls_absent_is_not_excused(tmp_path):
    listing = LISTING.read_text()
    graph, _ = FP.listed_graph_ops(listing)
    assert "CONT" in graph
    _forged_log(tmp_path, listing, [op for op in GRAPH_OPS if op != "CONT"] + [op for op in graph if op != "CONT"],
                absent_ops=("CONT",), op_coverage={"CONT": "op_oracle"})
    assert "model-graph op(s) the lane spec calls absent from the graph: CONT" in FP.problems(tmp_path)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))


# ---- grad mode: a failure re-evaluated with fresh inputs -----------------------------------------
# Both captured from the pinned CPU lane's `test-backend-ops grad -b CPU -o SQR` on a zen4 host: a
# passing run, and one of the 2 of 400 runs that failed (MAA 0.000182353 > 1e-4 on a correct backend).
# Other failures are built from the passing run as upstream prints them (_failing_run; a test shows the
# construction gives the captured failure byte for byte).
SQR_RUN = _read("test_backend_ops_grad_sqr.txt")
SQR_MAA_FAIL = _read("test_backend_ops_grad_sqr_maa_fail.txt")
MAA_FAIL = ("  SUM(type=f32,ne=[7,1,5,3]): [SUM] MAA = 0.000182353 > 0.000100000 \x1b[1;31mFAIL\x1b[0m\n"
            "  SUM(type=f32,ne=[7,1,5,3]): compare failed \x1b[1;31mFAIL\x1b[0m\n")
NONFINITE_FAIL = ("  SUM(type=f32,ne=[7,1,5,3]): [SUM] nonfinite gradient at index 3 (CPU=nan) \x1b[1;31mFAIL\x1b[0m\n"
                  "  SUM(type=f32,ne=[7,1,5,3]): compare failed \x1b[1;31mFAIL\x1b[0m\n")
HARNESS = "/l/bin/test-backend-ops"


def _failing_run(fail_lines: str | None = None, cases: int = 1) -> str:
    """The captured MAA failure; or the passing run with `cases` cases failing by `fail_lines`."""
    return SQR_MAA_FAIL if fail_lines is None and cases == 1 else _built_failing_run(fail_lines or MAA_FAIL, cases)


def _built_failing_run(fail_lines: str, cases: int) -> str:
    text = SQR_RUN
    for ne in ("[7,1,5,3]", "[10,5,4,3]")[:cases]:
        text = text.replace(f"  SUM(type=f32,ne={ne}): \x1b[1;32mOK\x1b[0m\n", fail_lines.replace("[7,1,5,3]", ne))
    return (text.replace("20766/20766", f"{20766 - cases}/20766")
            .replace("Backend CPU: \x1b[1;32mOK\x1b[0m", "Backend CPU: \x1b[1;31mFAIL\x1b[0m")
            .replace("1/1 backends passed\n\x1b[1;32mOK\x1b[0m", "0/1 backends passed\n\x1b[1;31mFAIL\x1b[0m"))


def _block(argv_tail: str, output: str, code: int) -> str:
    return f"$ {HARNESS} grad -b CPU {argv_tail}\n{output}# exit {code} after 0.30s\n"


def _grad_log(tmp_path, run: str, reruns: list[str], confirm_ops: str = "SQR", confirm_runs: int = 5,
              run_code: int = 1) -> pathlib.Path:
    from tools.runner import log_blocks
    cfg = FP.FixtureConfig(mode="grad", backend="CPU", required_ops=("SQR",), thresholds={"SQR": 1e-4},
                           grad_test_cases="20766", confirm_runs=confirm_runs,
                           confirm_ops=tuple(o for o in confirm_ops.split(",") if o))
    log_blocks.write_config(log_blocks.config_path(tmp_path, FP.STEP), FP.config_values(cfg))
    text = _block("-o SQR", run, run_code) + "".join(_block("-o SQR", r, 1 if "FAIL" in r else 0) for r in reruns)
    (tmp_path / "fixture_parity.log").write_text(text)
    return tmp_path


def test_failing_runs_are_built_as_upstream_prints_them():
    assert SQR_MAA_FAIL.count("FAIL") == 4 and "MAA = 0.000182353 > 0.000100000" in SQR_MAA_FAIL
    assert _built_failing_run(MAA_FAIL, 1) == SQR_MAA_FAIL


def test_an_maa_failure_that_does_not_reproduce_passes_and_stays_counted(tmp_path):
    logs = _grad_log(tmp_path, _failing_run(), [SQR_RUN] * 5)
    assert FP.problems(logs) == []
    log = FP._read(logs)
    status, message = FP.verdict(log)
    assert status == FP.CR.PASS
    assert "1 test failed by MAA only (SQR(type=f32,ne=[7,1,5,3]): MAA 0.000182353 > 0.0001)" in message
    assert "SQR passed 5 of 5 re-evaluations with fresh random inputs (10 tests)" in message
    counts, metrics = FP.recompute(logs)
    assert (counts["tests_failed"], counts["tests_failed_not_reproduced"], counts["reevaluation_runs"],
            counts["reevaluation_tests_evaluated"], counts["reevaluation_tests_failed"]) == (1, 1, 5, 10, 0)
    assert metrics["max_maa_printed"] == pytest.approx(0.000182353)


def test_an_maa_failure_that_reproduces_fails(tmp_path):
    for where in range(5):
        reruns = [SQR_RUN] * 5
        reruns[where] = _failing_run()
        logs = _grad_log(tmp_path, _failing_run(), reruns)
        [problem] = FP.problems(logs)
        assert f"re-evaluation {where + 1}/5 of SQR failed 1 test(s)" in problem and "reproduced" in problem
        assert FP.recompute(logs)[0]["tests_failed_not_reproduced"] == 0


def test_failures_the_input_draw_cannot_explain_are_never_excused(tmp_path):
    # A nonfinite gradient, two failures, or a run before the protocol: the failures stand.
    for run, runs, why in ((_failing_run(NONFINITE_FAIL), 5, "other than an MAA exceedance"),
                           (_failing_run(cases=2), 5, "2 failed tests: more than 1"),
                           (_failing_run(), 1, "grad_confirm_runs=1: the protocol re-evaluates 5 times")):
        [problem] = FP.problems(_grad_log(tmp_path, run, [SQR_RUN] * runs, confirm_runs=runs))
        assert "test(s) failed" in problem and why in problem, problem
    # A gross MAA (a gradient of the wrong sign or scale) or a threshold the runner did not configure.
    gross = _failing_run().replace("MAA = 0.000182353", "MAA = 0.012000000")
    [problem] = FP.problems(_grad_log(tmp_path, gross, [SQR_RUN] * 5))
    assert "MAA 0.012000000 is over 100x its threshold 0.0001: a wrong gradient" in problem, problem
    loose = _failing_run().replace("> 0.000100000", "> 0.100000000")
    [problem] = FP.problems(_grad_log(tmp_path, loose, [SQR_RUN] * 5))
    assert "printed MAA threshold(s) 0.1, the runner's for SQR is 0.0001" in problem, problem
    # More re-evaluations than the protocol's, or a count that is not a number.
    [problem] = FP.problems(_grad_log(tmp_path, _failing_run(), [SQR_RUN] * 6, confirm_runs=6))
    assert "grad_confirm_runs=6: the protocol re-evaluates 5 times" in problem, problem
    # A run that crashed after printing its failure and summary.
    [problem] = FP.problems(_grad_log(tmp_path, _failing_run(), [SQR_RUN] * 5, run_code=139))
    assert "a grad run that failed tests and finished exits 1" in problem, problem
    # An older run (no grad_confirm_runs in its configuration) with a failure fails as it always did.
    logs = _grad_log(tmp_path, _failing_run(), [])
    (tmp_path / "fixture_parity.config.json").write_text(
        (tmp_path / "fixture_parity.config.json").read_text().replace('"grad_confirm_runs"', '"x_unused"'))
    assert "the run predates re-evaluation" in FP.problems(logs)[0]
    # ... and recomputes the figures it always had (none of the re-evaluation counts).
    assert not {k for k in FP.recompute(logs)[0] if "reevaluation" in k or "not_reproduced" in k}


def test_the_re_evaluations_must_be_the_runners(tmp_path):
    cases = {
        "the log holds 5 test-backend-ops run(s); the runner made 6": dict(reruns=[SQR_RUN] * 4),
        "the runner re-evaluated ADD; the failing op(s): SQR": dict(reruns=[SQR_RUN] * 5, confirm_ops="ADD"),
        "re-evaluations of SQR although the run failed no test": dict(run=SQR_RUN, reruns=[SQR_RUN] * 5, run_code=0),
        # a re-evaluation that evaluated fewer tests than the run did of SQR
        "evaluated 1 test(s) (SQR: 1); the run evaluated 2 of SQR": dict(reruns=[SQR_RUN] * 4 + [SQR_RUN.replace(
            "  SQR(type=f32,ne=[7,1,5,3]): \x1b[1;32mOK\x1b[0m\n  SUM(type=f32,ne=[7,1,5,3]): \x1b[1;32mOK\x1b[0m\n", "")]),
        "re-evaluation 5/5 of SQR: summary 20766/20767": dict(reruns=[SQR_RUN] * 4 + [SQR_RUN.replace("20766/20766", "20766/20767")]),
    }
    for want, kw in cases.items():
        kw.setdefault("run", _failing_run())
        [problem] = FP.problems(_grad_log(tmp_path, **kw))
        assert want in problem, (want, problem)
    # a re-evaluation of another op in the slot the runner gave SQR
    logs = _grad_log(tmp_path, _failing_run(), [SQR_RUN] * 5)
    text = (logs / "fixture_parity.log").read_text()
    (logs / "fixture_parity.log").write_text(text[::-1].replace("RQS o-", "DDA o-", 1)[::-1])
    assert "re-evaluation 5/5 of SQR ran grad -b CPU -o ADD" in FP.problems(logs)[0]


def test_a_command_line_the_harness_prints_is_refused(tmp_path):
    # The lane prints a forged re-run with passing output after its failing lines.
    forged = _failing_run() + f"$ {HARNESS} grad -b CPU -o SQR\n" + SQR_RUN
    [problem] = FP.problems(_grad_log(tmp_path, forged, [SQR_RUN] * 5))
    assert "1 command line(s) among test-backend-ops' output that the runner did not write" in problem
    # Without a failure the forged block would shift the run; the count still refuses it.
    [problem] = FP.problems(_grad_log(tmp_path, SQR_RUN + f"$ {HARNESS} grad -b CPU -o SQR\n" + SQR_RUN, [],
                                      confirm_ops="", run_code=0))
    assert "command line(s) among test-backend-ops' output" in problem


def _scripted_harness(tmp_path, outputs: list[tuple[str, int]]):
    """A CPU lane whose test-backend-ops prints outputs[i] and exits with its code on its i-th call
    (the last entry repeats), and a RunContext over it with the pinned commit's build evidence."""
    from proto import build_evidence_pb2 as epb
    from tools.runner.context import RunContext
    from tools.runner.lane_spec import load_lane
    from tools.runner.testing import fake_lane

    lane_dir = fake_lane.make_lane(tmp_path / "lane")
    calls = tmp_path / "calls"
    calls.mkdir()
    for i, (text, code) in enumerate(outputs, 1):
        (calls / f"out.{i}").write_text(text)
        (calls / f"code.{i}").write_text(str(code))
    script = lane_dir / "bin" / "test-backend-ops"
    script.write_text(f"""#!/bin/sh
echo "$@" >> {calls}/argv
n=$(wc -l < {calls}/argv); [ -f {calls}/out.$n ] || n={len(outputs)}
cat {calls}/out.$n; exit $(cat {calls}/code.$n)
""")
    script.chmod(0o755)
    spec = json.loads(fake_lane.SPEC.read_text())
    spec["lanes"]["linux-x86_64-cpu"]["fixture_ops"] = ["SQR"]
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    evidence = fake_lane.make_evidence(lane_dir, tmp_path / "ev.pb")
    cfg = fake_lane.config(tmp_path, lane_dir, evidence, None, spec=tmp_path / "spec.json")
    logs = tmp_path / "logs"
    logs.mkdir()
    ev = epb.BuildEvidence()
    ev.ParseFromString(evidence.read_bytes())
    ctx = RunContext(config=cfg, lane=load_lane(cfg.spec, "cpu"), logs_dir=logs, scratch_dir=tmp_path, evidence=ev)
    return ctx, calls / "argv"


def _run_step(ctx):
    from tools.runner.steps import Step
    step = Step(FP.STEP, ctx.logs_dir, ctx.tracker)
    try:
        status, message = FP.run_fixture_parity(ctx, step)
    finally:
        ctx.tracker.release()
    step.finish(status, message)
    return status, message


@pytest.mark.parametrize("reproduces_on", [None, 3])
def test_the_runner_re_evaluates_a_failing_op_five_times(tmp_path, reproduces_on):
    outputs = [(_failing_run(), 1)] + [(SQR_RUN, 0)] * 5
    if reproduces_on:
        outputs[reproduces_on] = (_failing_run(), 1)
    ctx, argv_log = _scripted_harness(tmp_path, outputs)
    status, message = _run_step(ctx)
    calls = argv_log.read_text().splitlines()
    assert calls[0].startswith("grad -b CPU -o ADD,SUB,MUL") and calls[1:] == ["grad -b CPU -o SQR"] * 5
    assert FP.problems(ctx.logs_dir) == ([] if status == FP.CR.PASS else [message])  # as the audit derives it
    if reproduces_on is None:
        assert status == FP.CR.PASS and "SQR passed 5 of 5 re-evaluations" in message, message
    else:
        assert status == FP.CR.FAIL and f"re-evaluation {reproduces_on}/5 of SQR failed 1 test(s)" in message


def test_the_runner_does_not_re_evaluate_a_nonfinite_gradient(tmp_path):
    ctx, argv_log = _scripted_harness(tmp_path, [(_failing_run(NONFINITE_FAIL), 1), (SQR_RUN, 0)])
    status, message = _run_step(ctx)
    assert len(argv_log.read_text().splitlines()) == 1
    assert status == FP.CR.FAIL and "other than an MAA exceedance" in message, message


def test_an_unreadable_re_evaluation_count_is_refused_not_raised(tmp_path):
    logs = _grad_log(tmp_path, _failing_run(), [SQR_RUN] * 5)
    config = logs / "fixture_parity.config.json"
    config.write_text(config.read_text().replace('"grad_confirm_runs": "5"', '"grad_confirm_runs": "\u00b2"'))
    # -1 runs: the log's six harness runs are more than the runner can have made.
    [problem] = FP.problems(logs)
    assert "the runner did not write (it wrote 1)" in problem, problem
    assert FP.read_log((logs / "fixture_parity.log").read_text(), {"grad_confirm_runs": "\u00b2"}).cfg.confirm_runs == -1
    FP.recompute(logs)


def test_runs_before_the_harness_block_rule_are_judged_as_they_were(tmp_path):
    from tools.runner import log_blocks
    # A passing run whose output holds a `$ ` line: refused from runner 0.7.1 on, judged as before by older runs.
    text = SQR_RUN.replace("Testing 1 devices\n", "Testing 1 devices\n$ note\n")
    logs = _grad_log(tmp_path, text, [], confirm_ops="", run_code=0)
    assert "command line(s) among test-backend-ops' output" in FP.problems(logs)[0]
    with log_blocks.judging_run_of("lanes-runner 0.7.0"):
        assert FP.problems(logs) == []
