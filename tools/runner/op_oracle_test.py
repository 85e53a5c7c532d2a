"""Tests for the per-op oracle (tools/runner/op_oracle.py).

testdata/op_oracle/op_oracle.log is a real step log: llama-eval-callback of the pinned llama.cpp
(CPU, libraries of the CPU lane) on the embedded tiny F32 model, flash attention off and on, made by
runner 0.3.0 (before the node dump): these tests judge it as that runner's run, on the printed
corners and sums (op_oracle_dump_test.py covers the whole-node comparison of current runs). The
float64 reference runs on that model: pass `--model=PATH` (Bazel does) or set LANES_TINY_F32_GGUF;
default bazel-bin/tools/model/tiny_llama_f32.gguf. No lane binary runs here.

Run: /opt/lanes-pytest tools/runner/op_oracle_test.py
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import re
import sys

import pytest

from proto import runner_report_pb2 as rpb
from tools.runner import log_blocks
from tools.runner.checks import op_oracle as oo
from tools.runner.checks import op_oracle_graph as oo_graph
from tools.runner.checks import op_oracle_log as oo_log
from tools.runner.steps import ProcessTracker, Step

CR = rpb.CheckResult
LOG = pathlib.Path(__file__).resolve().parent / "testdata" / "op_oracle" / "op_oracle.log"
MODEL_ENV = "LANES_TINY_F32_GGUF"
GRAPH_OPS = ("GET_ROWS", "RMS_NORM", "MUL", "ADD", "MUL_MAT", "ROPE", "SET_ROWS", "CPY", "CONT", "SCALE",
             "SOFT_MAX", "FLASH_ATTN_EXT", "SILU", "SWIGLU")
# The ops a llama-architecture graph runs (both flash-attention modes); SCALE and SILU never occur.
IN_GRAPH = set(GRAPH_OPS) - {"SCALE", "SILU"}


@pytest.fixture(autouse=True)
def judged_as_its_runner():
    with log_blocks.judging_run_of("lanes-runner 0.3.0"):
        yield


@pytest.fixture(scope="module")
def model() -> pathlib.Path:
    path = pathlib.Path(os.environ.get(MODEL_ENV, "bazel-bin/tools/model/tiny_llama_f32.gguf"))
    assert path.is_file(), f"tiny F32 model not found at {path}; pass --model= or set {MODEL_ENV}"
    return path


@pytest.fixture(scope="module")
def real() -> str:
    return LOG.read_text()


@pytest.fixture(scope="module")
def real_result(real, model):
    with log_blocks.judging_run_of("lanes-runner 0.3.0"):  # module-scoped: set up outside the autouse one
        return oo.evaluate_log(real, model)


def _node_block(text: str, name: str, op: str, occurrence: int = 0) -> tuple[int, int]:
    """(first, last) line index of the occurrence-th printed node `name` with `op` (header .. sum)."""
    lines = text.splitlines()
    hits = [i for i, l in enumerate(lines) if l.startswith("common_debug_cb_eval:")
            and re.search(rf"\s{re.escape(name)} = \(\w+\)\s+{op}\(", l)]
    start = hits[occurrence]
    end = next(i for i in range(start, len(lines)) if lines[i].strip().startswith("sum ="))
    return start, end


def _edit_row(text: str, name: str, op: str, new_value: str, row: int = 0, col: int = 0) -> str:
    lines = text.splitlines()
    start, end = _node_block(text, name, op)
    rows = [i for i in range(start, end) if oo_log._ROW.match(lines[i])]
    vals = lines[rows[row]].split(",")
    head = vals[col].rsplit("[", 1)
    vals[col] = (head[0] + "[" if len(head) == 2 else "") + f"{new_value:>12}"
    lines[rows[row]] = ",".join(vals)
    return "\n".join(lines) + "\n"


def _evaluate(text: str, model: pathlib.Path):
    counts, metrics, results, config = oo.evaluate_log(text, model)
    return counts, metrics, results, oo.judge(counts, metrics, config)


# ---- the real log ----

def test_real_cpu_log_passes_with_every_graph_op_evaluated(real_result) -> None:
    counts, metrics, results, config = real_result
    assert oo.judge(counts, metrics, config) == []
    assert counts["runs"] == 2 and counts["runs_failed"] == 0
    assert counts["tokens.fa_off"] == counts["tokens.fa_on"] > 5
    assert counts["nodes_unresolved"] == 0 and counts["nodes_fail"] == 0
    evaluated = {op for op in GRAPH_OPS if counts[f"op.{op}.evaluated"] > 0}
    assert evaluated == IN_GRAPH  # FLASH_ATTN_EXT and CPY come from the -fa on run
    for op in IN_GRAPH:
        assert counts[f"op.{op}.elements"] > 0
        assert 0.0 <= metrics[f"op.{op}.worst_tol_ratio"] <= 1.0
    # The required set comes from the log (the lane spec's op_coverage) and is all evaluated.
    assert set(config["required_ops"].split(",")) <= evaluated


def test_every_compute_node_is_compared_views_are_not(real_result) -> None:
    counts, _, results, _ = real_result
    views = [r for r in results if r.status == "view"]
    assert views and all(r.node.op in oo_graph.VIEW_OPS for r in views)
    assert all(r.status in ("pass", "view") for r in results)
    assert counts["nodes"] == counts["nodes_view"] + counts["nodes_pass"]


def test_float32_ops_are_held_to_print_resolution(real_result) -> None:
    # With flash attention off the lane matches float64 to the printed 4 decimals: a tight oracle.
    _, metrics, results, _ = real_result
    for op in IN_GRAPH - {"FLASH_ATTN_EXT", "CPY"}:
        assert metrics[f"op.{op}.max_abs_err"] < 1e-4, op
    fa = [r for r in results if r.node.op == "FLASH_ATTN_EXT"]
    assert len(fa) == 2 and [r.after_fa for r in fa] == [False, True]


def test_recompute_reads_only_the_log_and_the_model(tmp_path, real, model, real_result) -> None:
    (tmp_path / "op_oracle.log").write_text(real)
    counts, metrics = oo.recompute(tmp_path, model)
    assert counts == real_result[0]
    assert metrics == real_result[1]


def test_a_current_run_counts_every_compute_op_of_the_printed_graph(real, model) -> None:
    with log_blocks.judging_run_of("lanes-runner 0.5.0"):
        counts, _, _, _ = oo.evaluate_log(real, model)
        assert {k[3:-9] for k in counts if k.endswith(".in_graph")} == IN_GRAPH
        assert not any("never evaluated" in p for p in oo.judge(counts, {}, {}))
        counts["op.GELU.in_graph"] = 3  # an op of the graph the oracle never evaluated
        assert any("never evaluated: GELU (3 node(s))" in p for p in oo.judge(counts, {}, {}))


def test_recompute_rejects_another_model(tmp_path, real, model) -> None:
    other = tmp_path / "other.gguf"
    other.write_bytes(model.read_bytes()[:-1] + b"\0")
    (tmp_path / "op_oracle.log").write_text(real)
    with pytest.raises(ValueError, match="sha256"):
        oo.recompute(tmp_path, other)


# ---- it can fail ----

def test_a_run_on_another_prompt_than_this_runs_fails(real, model) -> None:
    """A replay of an earlier run's log: its tokens are not this run's fresh prompt's."""
    _, _, _, config = oo.evaluate_log(real, model)
    tokens = oo_log.parse_runs(real)[0].tokens
    counts, metrics, _, same = oo.evaluate_log(real, model, dict(config, expected_tokens=",".join(map(str, tokens))))
    assert oo.judge(counts, metrics, same) == []
    counts, metrics, _, other = oo.evaluate_log(real, model, dict(config, expected_tokens="1,2,3"))
    found = oo.judge(counts, metrics, other)
    assert any("input tokens are not this run's prompt" in p for p in found), found


def test_one_perturbed_value_fails_its_op(real, model) -> None:
    # Qcur-0 after RoPE, first printed value off by 0.01 (a wrong rotation would be far larger).
    start, _ = _node_block(real, "Qcur-0", "ROPE")
    row = next(l for l in real.splitlines()[start:] if oo_log._ROW.match(l))
    value = float(oo_log._ROW.match(row).group("vals").split(",")[0])
    counts, metrics, results, problems = _evaluate(_edit_row(real, "Qcur-0", "ROPE", f"{value + 0.01:.4f}"), model)
    assert counts["op.ROPE.failed"] == 1
    assert all(counts[f"op.{op}.failed"] == 0 for op in GRAPH_OPS if op != "ROPE")
    assert metrics["op.ROPE.worst_tol_ratio"] > 1.0
    assert any("ROPE (1 node" in p for p in problems)


def test_nan_in_the_lane_output_fails(real, model) -> None:
    counts, metrics, _, problems = _evaluate(_edit_row(real, "kq_soft_max-0", "SOFT_MAX", "nan", row=1, col=1), model)
    assert counts["op.SOFT_MAX.failed"] == 1
    assert math.isinf(metrics["op.SOFT_MAX.max_abs_err"])
    assert any("NaN/Inf" in p for p in problems) and any("SOFT_MAX" in p for p in problems)


def test_inf_in_a_sum_fails(real, model) -> None:
    lines = real.splitlines()
    _, end = _node_block(real, "ffn_swiglu-0", "SWIGLU")
    lines[end] = "    sum = inf"
    counts, _, _, problems = _evaluate("\n".join(lines) + "\n", model)
    assert counts["op.SWIGLU.failed"] == 1 and problems


def test_a_wrong_sum_fails_even_when_printed_values_match(real, model) -> None:
    # The sum covers the elements the log elides: shifting it by 0.5 must fail.
    lines = real.splitlines()
    _, end = _node_block(real, "attn_out-0", "MUL_MAT")
    old = float(lines[end].split("=")[1])
    lines[end] = f"    sum = {old + 0.5:f}"
    counts, _, results, problems = _evaluate("\n".join(lines) + "\n", model)
    assert counts["op.MUL_MAT.failed"] == 1
    assert any(r.status == "fail" and "sum" in r.why for r in results)


def test_without_the_flash_attention_run_fa_and_cpy_are_not_evaluated(real, model) -> None:
    cut = real.index("\n$ ", real.index("-fa off")) + 1  # the second run's command line
    counts, _, _, problems = _evaluate(real[:cut], model)
    assert counts["op.FLASH_ATTN_EXT.evaluated"] == 0 and counts["op.CPY.evaluated"] == 0
    assert any("FLASH_ATTN_EXT: no node evaluated" in p for p in problems)
    assert any("CPY: no node evaluated" in p for p in problems)
    assert any("flash-attention off and on" in p for p in problems)


def test_a_node_without_reference_is_not_evaluated_and_fails(real, model) -> None:
    text = real.replace(" ffn_swiglu-0 = (f32)", " mystery_op-0 = (f32)", 2)
    counts, _, results, problems = _evaluate(text, model)
    assert counts["nodes_unresolved"] == 2  # -fa off and on
    assert counts["op.SWIGLU.not_evaluated"] == 2 and counts["op.SWIGLU.evaluated"] == 2
    assert not any(r.status == "pass" and r.node.name == "mystery_op-0" for r in results)
    assert any("without a reference" in p for p in problems)


def test_a_truncated_node_fails(real, model) -> None:
    lines = real.splitlines()
    start, end = _node_block(real, "result_output", "MUL_MAT")
    row = next(i for i in range(start, end) if oo_log._ROW.match(lines[i]))
    del lines[row]
    counts, _, results, problems = _evaluate("\n".join(lines) + "\n", model)
    assert counts["op.MUL_MAT.failed"] == 1
    assert any("expected" in r.why for r in results if r.status == "fail")


def test_a_failed_run_fails(real, model) -> None:
    text = real.replace("# exit 0 after", "# exit 134 after", 1)
    counts, _, _, problems = _evaluate(text, model)
    assert counts["runs_failed"] == 1 and any("non-zero" in p for p in problems)


def _zeroed_model(model: pathlib.Path, out: pathlib.Path, suffixes: tuple[str, ...]) -> pathlib.Path:
    """A copy of the F32 model with the tensors named *<suffix> set to zero (a degenerate model)."""
    import gguf

    data = bytearray(model.read_bytes())
    for t in gguf.GGUFReader(model, "r").tensors:
        if t.name.endswith(suffixes):
            data[t.data_offset:t.data_offset + t.n_bytes] = bytes(int(t.n_bytes))
    out.write_bytes(bytes(data))
    return out


def _lane_log_from_reference(text: str, model: pathlib.Path) -> str:
    """The step log of a lane that computes exactly the float64 reference of `model` (the real log's
    runs, nodes and layout; every compared node's printed values and sum replaced by the reference's)."""
    from tools.core.digest import sha256_file
    from tools.model import reference_forward as rf

    lines = text.splitlines()
    loaded = rf.load_model(model)
    for run in oo_log.parse_runs(text):
        out_ids = [len(run.tokens) - 1]
        ref = rf.forward_nodes(loaded, run.tokens, out_ids=out_ids, cache=oo_graph._cache_geometry(run))
        for node in run.nodes:
            want = None if node.op in oo_graph.VIEW_OPS else oo_graph.reference_value(node, ref, out_ids)
            if want is None:
                continue
            idx = oo_graph.np.ix_(range(node.ne[3]), oo_log.printed_indices(node.ne[2]),
                                  oo_log.printed_indices(node.ne[1]), oo_log.printed_indices(node.ne[0]))
            values = iter(want[idx].reshape(-1).tolist())
            i = node.line  # the line after the header (node.line is 1-based)
            while not oo_log._SUM.match(lines[i]):
                m = oo_log._ROW.match(lines[i])
                if m:
                    vals = [v if v.strip() == "..." else f"{next(values):12.4f}" for v in m.group("vals").split(",")]
                    lines[i] = lines[i][:m.start("vals")] + ",".join(vals) + lines[i][m.end("vals"):]
                i += 1
            lines[i] = lines[i].split("sum =")[0] + f"sum = {float(want.sum()):f}"
    out = "\n".join(lines) + "\n"
    return re.sub(r"sha256=[0-9a-f]{64}", f"sha256={sha256_file(model)}", out)


def test_a_degenerate_model_whose_rope_is_all_zero_fails(real, model, tmp_path) -> None:
    # Issue 23 class 12: with attn_q/attn_k all zero every ROPE node is 0 in the lane and in the
    # reference alike, and ROPE "passed". A lane computing exactly the reference of that model fails.
    honest = _lane_log_from_reference(real, model)
    _, _, _, problems = _evaluate(honest, model)
    assert problems == [], problems  # the generated log of the real model is a clean run
    degenerate = _zeroed_model(model, tmp_path / "degenerate.gguf", ("attn_q.weight", "attn_k.weight"))
    counts, _, results, problems = _evaluate(_lane_log_from_reference(real, degenerate), degenerate)
    assert counts["op.ROPE.failed"] == counts["op.ROPE.evaluated"] > 0
    rope = [r for r in results if r.node.op == "ROPE"]
    assert all("the reference is constant (0 across" in r.why and "nothing is tested by ROPE" in r.why for r in rope)
    assert any(p.startswith("failed: ") and "ROPE (" in p for p in problems), problems
    # Qcur/Kcur's MUL_MAT are 0 too; the model's other matmuls still vary and pass.
    qk = [r for r in results if r.node.op == "MUL_MAT" and r.node.name.startswith(("Qcur-", "Kcur-"))]
    assert qk and all(r.status == "fail" for r in qk)
    assert any(r.status == "pass" for r in results if r.node.op == "MUL_MAT" and r not in qk)


def test_a_lane_killed_by_a_signal_is_reported_as_a_crash_not_as_what_its_output_lacks(real, model, tmp_path) -> None:
    # Both eval-callback runs died of SIGILL (the AMX host's fault before patch 0005) after their
    # first lines: the verdict names the crash and the signal, not the oracle's parse error.
    cut = []
    for block in real.split("\n$ ")[1:]:
        head = block.split("\n")[:40]
        cut.append("$ " + "\n".join(head) + "\n# exit -4 after 0.50s (SIGILL: illegal instruction)")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "op_oracle.log").write_text(real.split("\n$ ")[0] + "\n" + "\n".join(cut) + "\n")
    problems = oo.problems(logs, model)
    assert len(problems) == 1 and problems[0].startswith("the lane crashed: llama-eval-callback exited -4 (SIGILL: "), problems
    assert problems[0].count("SIGILL") == 2  # both runs


def test_tolerances_are_read_from_the_log(real, model) -> None:
    # The log states each op's tolerance and recompute uses it: with none left for float32 error
    # (print rounding only) SOFT_MAX fails, so the logged figure is the one that decided.
    text = real.replace("# lanes-config tol.SOFT_MAX=0.0001,0.0001", "# lanes-config tol.SOFT_MAX=0.0,0.0")
    counts, metrics, _, _ = _evaluate(text, model)
    assert metrics["op.SOFT_MAX.tol_rel"] == 0.0 and metrics["op.SOFT_MAX.tol_rms"] == 0.0
    assert counts["op.SOFT_MAX.failed"] >= 1
    assert all(counts[f"op.{op}.failed"] == 0 for op in GRAPH_OPS if op != "SOFT_MAX")
    # The required ops are the logged ones too: requiring SCALE (not in a llama graph) fails.
    text = real.replace("required_ops=RMS_NORM,", "required_ops=SCALE,RMS_NORM,")
    _, _, _, problems = _evaluate(text, model)
    assert problems == ["SCALE: no node evaluated"]


# ---- parsing ----

def test_printed_indices_follow_common_debug_print_tensor() -> None:
    assert oo_log.printed_indices(6) == [0, 1, 2, 3, 4, 5]
    assert oo_log.printed_indices(7) == [0, 1, 2, 4, 5, 6]
    assert oo_log.printed_indices(1) == [0]
    assert oo_log.n_printed((256, 6, 4, 1)) == 6 * 6 * 4


def test_header_parsing_handles_spaces_and_missing_src1() -> None:
    text = ("$ /x/llama-eval-callback -m m.gguf -fa on\n"
            "common_debug_cb_eval: cache_k_l0 (view) (permuted) (copy) = (f16)        CPY(cache_k_l0 (view) "
            "(permuted){64, 256, 2, 1}, cache_k_l0 (view) (permuted) (copy){64, 256, 2, 1}}) = {64, 256, 2, 1}\n"
            "common_debug_cb_eval:                   norm-0 = (f32)   RMS_NORM(embd{256, 6, 1, 1}, }) = {256, 6, 1, 1}\n")
    (run,) = oo_log.parse_runs(text)
    assert run.flash_attn == "on"
    cpy, norm = run.nodes
    assert (cpy.name, cpy.type, cpy.op, cpy.src0, cpy.ne) == (
        "cache_k_l0 (view) (permuted) (copy)", "f16", "CPY", "cache_k_l0 (view) (permuted)", (64, 256, 2, 1))
    assert (norm.name, norm.op, norm.src0, norm.src1, norm.ne) == ("norm-0", "RMS_NORM", "embd", "", (256, 6, 1, 1))
    assert oo_graph.reference_key(cpy) == ("cache_k_l0/f16", "plain")


def test_lines_of_other_commands_are_not_parsed() -> None:
    text = ("$ /x/llama-logits -m m.gguf\n"
            "common_debug_cb_eval:   embd = (f32)   GET_ROWS(token_embd.weight{4, 8, 1, 1}, t{1, 1, 1, 1}}) = {4, 1, 1, 1}\n")
    assert oo_log.parse_runs(text) == []


# ---- the runner step ----

def test_required_ops_come_from_the_lane_spec_op_coverage(tmp_path) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"schema_version": 1, "lanes": {
        "cpu-lane": {"op_coverage": {"MUL": "op_oracle", "ADD": "fixture_parity"}},
        "old-lane": {}}}))
    assert oo.required_ops(spec, "cpu-lane", GRAPH_OPS) == ["MUL"]
    assert oo.required_ops(spec, "old-lane", GRAPH_OPS) == list(GRAPH_OPS)  # no op_coverage: all


@dataclasses.dataclass
class _Lane:
    is_accelerator: bool
    lane_id: str = "linux-x86_64-cuda"
    fixture_ops: tuple[str, ...] = GRAPH_OPS


@dataclasses.dataclass
class _Ctx:
    lane: _Lane
    config: object = None


def test_accelerator_lanes_do_not_require_the_oracle(tmp_path) -> None:
    step = Step("op_oracle", tmp_path, ProcessTracker())
    status, message = oo.run_op_oracle(_Ctx(_Lane(is_accelerator=True)), step)
    result = step.finish(status, message)
    assert status == CR.SKIPPED and not result.required  # never a PASS for what did not run
    assert oo.recompute(tmp_path) == ({}, {})


def _take_model_arg(argv: list[str]) -> list[str]:
    rest = []
    for arg in argv:
        if arg.startswith("--model="):
            os.environ[MODEL_ENV] = os.path.abspath(arg[len("--model="):])
        else:
            rest.append(arg)
    return rest



def test_truncated_clean_exit_is_counted_and_superseded_by_its_rerun(real, real_result, model):
    """A run cut short at exit (llama.cpp's async logger) is kept and counted; its re-run decides."""
    lines = real.splitlines(keepends=True)
    first = next(i for i, l in enumerate(lines) if l.startswith("$ ") and oo_log.EVAL_BIN in l)
    exit_at = next(i for i in range(first, len(lines)) if lines[i].startswith("# exit"))
    cut = next(i for i in range(exit_at, first, -1) if "result_output = " in lines[i])
    truncated_run = "".join(lines[first:cut + 2]) + lines[exit_at]
    assert not oo.output_complete(truncated_run) and oo.output_complete("".join(lines[first:exit_at]))
    text = "".join(lines[:first]) + truncated_run + "# lanes: truncated; running -fa off again\n" + "".join(lines[first:])
    counts, metrics, _, _ = oo.evaluate_log(text, model)
    want_counts, want_metrics, _, _ = real_result
    assert counts == {**want_counts, "truncated_runs": 1} and metrics == want_metrics

if __name__ == "__main__":
    args = _take_model_arg(sys.argv[1:])
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--import-mode=importlib", *args]))
