"""Red-team cases of issue 23 classes 9, 10 and 12: what speed benched, which CTest suite ran, the
grad-mode summary, and a degenerate model's constant reference."""

from __future__ import annotations

import json
import pathlib

from tests.red_team.case import RedTeamCase, Refusal

TESTDATA = pathlib.Path(__file__).resolve().parents[2] / "tools" / "runner" / "testdata"
PIN = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"


def _bench_of_another_model_and_build(tmp: pathlib.Path) -> Refusal:
    """The CPU lane's llama-bench prints the JSON of another model (model_size 123) and another build
    (build_commit deadbee); the runner runs it, binds it to the run's model and pin, and refuses."""
    from proto import build_evidence_pb2 as epb
    from tools.runner.checks import speed
    from tools.runner.context import RunContext
    from tools.runner.lane_spec import load_lane
    from tools.runner.steps import Step
    from tools.runner.testing import fake_lane

    lane_dir, _, model = fake_lane.make_inputs(tmp)
    lie = json.loads((TESTDATA / "llama_bench_cpu.json").read_text())
    for t in lie:
        t.update(model_size=123, build_commit="deadbee", model_filename="/tmp/other.gguf")
    (tmp / "lie.json").write_text(json.dumps(lie))
    bench = lane_dir / "bin" / "llama-bench"
    bench.write_text(f"#!/bin/sh\ncat {tmp / 'lie.json'}\n")
    bench.chmod(0o755)
    logs = tmp / "logs"
    logs.mkdir()
    cfg = fake_lane.config(tmp, lane_dir, None, model)
    ctx = RunContext(config=cfg, lane=load_lane(fake_lane.SPEC, "cpu"), logs_dir=logs, scratch_dir=tmp,
                     evidence=epb.BuildEvidence(upstream=epb.Upstream(commit=PIN)))
    step = Step("speed", logs, ctx.tracker)
    status, message = speed.run_speed(ctx, step)
    step.finish(status, message)
    assert status != speed.CR.PASS, message
    for fragment in ("model_size 123 is not the", "build_commit 'deadbee' is not the pinned", "/tmp/other.gguf"):
        assert fragment in message, message
    # The audit re-derives the same refusal from the digested raw files.
    assert any("build_commit 'deadbee'" in p for p in speed.problems(logs))
    return Refusal("speed", message)


def _ctest_bundle_of_one_echo_test(tmp: pathlib.Path) -> Refusal:
    """A CTest bundle whose only test is `/bin/echo ok`, beside the spec's exclusions: ctest passes it."""
    from proto import runner_report_pb2 as rpb
    from tools.ctest import fake_bundle
    from tools.runner.checks import upstream_ctest
    from tools.runner.config import RunnerConfig
    from tools.runner.context import RunContext
    from tools.runner.lane_spec import Lane
    from tools.runner.steps import Step

    bundle = fake_bundle.make_bundle(tmp / "b", scripts={}, ctest_file=fake_bundle.ECHO_CTEST_FILE)
    lane = Lane(lane_id=fake_bundle.LANE_ID, alias="fake", os="linux", arch="x86_64", backend="cuda", sdk="",
                targets=(), log_evidence=(), ggml_libs=(), ctest_in_certification=True,
                ctest_excluded=dict(fake_bundle.SPEC["excluded"]))
    model = tmp / "tiny.gguf"
    model.write_text("GGUF")
    cfg = RunnerConfig(lane=lane.lane_id, lane_dir=fake_bundle.lane_dir(tmp), evidence=None,
                       spec=fake_bundle.write_spec(tmp / "spec.json", lane.lane_id), model=model, out_dir=tmp / "out",
                       report=tmp / "out" / "runner_report.pb", ctest_bundle=bundle)
    logs = tmp / "out" / "logs"
    logs.mkdir(parents=True)
    ctx = RunContext(config=cfg, lane=lane, logs_dir=logs, scratch_dir=tmp / "scratch")
    step = Step(upstream_ctest.STEP, logs, ctx.tracker)
    status, message = upstream_ctest.run_upstream_ctest(ctx, step)
    step.finish(status, message)
    assert status != rpb.CheckResult.PASS, message
    assert "1 passed" in message and "runs '/bin/echo', not a test executable the lane spec names" in message, message
    assert any("ran in no passed test" in p for p in upstream_ctest.problems(logs))
    return Refusal("upstream_ctest", message)


def _grad_summary_99999(tmp: pathlib.Path) -> Refusal:
    """test-backend-ops grad's real lines under `99999/99999 tests passed`."""
    from tools.runner import log_blocks
    from tools.runner.checks import fixture_parity as fp

    ops = ("GET_ROWS", "RMS_NORM", "MUL", "ADD", "MUL_MAT", "ROPE", "SET_ROWS", "CPY", "CONT", "SOFT_MAX",
           "FLASH_ATTN_EXT", "SILU", "SWIGLU")
    # The excerpt evaluates SILU and ADD; the other required ops are another check's.
    cfg = fp.FixtureConfig(mode="grad", backend="CPU", required_ops=ops, grad_test_cases=str(fp.GRAD_TEST_CASES[PIN]),
                           op_coverage={op: "op_oracle" for op in ops if op not in ("SILU", "ADD")})
    log_blocks.write_config(log_blocks.config_path(tmp, fp.STEP), fp.config_values(cfg))
    output = (TESTDATA / "test_backend_ops_grad_cpu.txt").read_text()
    honest = f"$ /x/test-backend-ops grad -b CPU -o ADD,SILU\n{output}# exit 0 after 5.00s\n"
    (tmp / f"{fp.STEP}.log").write_text(honest)
    assert fp.problems(tmp) == [], fp.problems(tmp)
    (tmp / f"{fp.STEP}.log").write_text(honest.replace("20766/20766 tests passed", "99999/99999 tests passed"))
    problems = fp.problems(tmp)
    assert problems and "counts 99999 test cases; the pinned test-backend-ops has 20766" in problems[0], problems
    return Refusal("fixture_parity", problems[0])


def _all_zero_rope_reference(tmp: pathlib.Path) -> Refusal:
    """A degenerate model (attn_q/attn_k zero): the ROPE node is 0 in the lane and in the float64
    reference alike, which matched within every tolerance."""
    import numpy as np

    from tools.runner.checks import op_oracle_graph as graph
    from tools.runner.checks import op_oracle_log as oracle_log

    ne = (64, 4, 7, 1)  # head dim, heads, tokens
    node = oracle_log.Node(name="Qcur-0", type="f32", op="ROPE", src0="Qcur-0 (reshaped)", src1="inp_pos", ne=ne,
                           line=1, values=[0.0] * oracle_log.n_printed(ne), sums=[0.0])
    atol, rtol = graph.TOLERANCES["ROPE"]
    result = graph.compare_node(node, np.zeros(tuple(reversed(ne))), atol, rtol)
    assert result.status == "fail" and "the reference is constant" in result.why, result
    # A varying reference, matched, still passes.
    varying = np.linspace(-1.0, 1.0, int(np.prod(ne))).reshape(tuple(reversed(ne)))
    idx = np.ix_(range(ne[3]), oracle_log.printed_indices(ne[2]), oracle_log.printed_indices(ne[1]),
                 oracle_log.printed_indices(ne[0]))
    honest = oracle_log.Node(**{**node.__dict__, "values": [round(v, 4) for v in varying[idx].reshape(-1).tolist()],
                                "sums": [float(varying.sum())]})
    assert graph.compare_node(honest, varying, atol, rtol).status == "pass"
    return Refusal("op_oracle", f"{node.name} {node.op}: {result.why}")


CASES = [
    RedTeamCase(9, "bench JSON of another model and build", _bench_of_another_model_and_build),
    RedTeamCase(10, "CTest bundle of one echo test", _ctest_bundle_of_one_echo_test),
    RedTeamCase(12, "grad summary 99999/99999", _grad_summary_99999),
    RedTeamCase(12, "all-zero ROPE reference", _all_zero_rope_reference),
]
