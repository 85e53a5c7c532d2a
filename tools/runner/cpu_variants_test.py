"""cpu_variants: the verdict and the per-variant table from the probes' raw files, and each way they fail."""

from __future__ import annotations

import shlex
import signal
import sys

import numpy as np
import pytest

from tools.runner import cpu_variant_probe as probe
from tools.runner import cpu_variants, exits


def _outputs(cases: list[probe.Case], reference: bool, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for case in cases:
        base = np.random.default_rng(abs(hash(case.inputs_id)) % 2**32).standard_normal((case.batch, 16))
        out[case.case_id] = (base * (1 + 1e-4 * rng.standard_normal(base.shape))).astype(np.float32)
        if reference and case.buffer == probe.DEFAULT_BUFFER:
            out[f"reference.{case.case_id}"] = base
    return out


def _probe_block(name: str, code: int, cases: list[probe.Case], buffers: str, score: int, unsupported=()) -> str:
    argv = [sys.executable, str(cpu_variants.PROBE), "--lib_dir", "/l/lib", "--variant_dir", "/l/bin",
            "--variant", name, "--out", f"/logs/cpu_variants.{name}.npz"]
    lines = [f"$ {shlex.join(argv)}"]
    for case in cases:
        lines.append(f"case {case.case_id} start")
        if code != 0 and case is cases[len(cases) // 2]:
            break
        lines.append(f"case {case.case_id} {'unsupported' if case.case_id in unsupported else 'computed'}")
    if code == 0:
        lines.append(f"variant {name} score {score} buffer_types {buffers}")
    elif code == probe.NOT_RUNNABLE:
        lines = lines[:1] + [f"variant {name} not_runnable: refused"]
    lines.append(f"# exit {code} after 1.00s")
    return "\n".join(lines) + "\n"


def _run(tmp_path, variants: dict[str, int], damage=None, loaded="zen4", unsupported=()):
    """A cpu_variants run dir: each variant probed with the given exit status."""
    logs = tmp_path / "logs"
    logs.mkdir(parents=True)
    (logs / "preflight.log").write_text(f"# lanes-config cpu_variant={loaded}\n")
    text = "# lanes-config variants=" + ",".join(variants) + f"\n# lanes-config max_nmse={cpu_variants.MAX_NMSE!r}\n"
    baseline_cases = probe.cases_for([])
    baseline = _outputs(baseline_cases, reference=True)
    for name, code in variants.items():
        extra = ["CPU_REPACK"] if name != "x64" else []
        cases = probe.cases_for(extra)
        text += _probe_block(name, code, cases, ",".join(["default", *extra]), 1 if name == "x64" else 100, unsupported)
        if code != 0:
            continue
        if name == "x64":
            data = baseline
        else:
            data = {c.case_id: baseline[probe.Case(c.op, c.weight_type, c.batch, probe.DEFAULT_BUFFER).case_id]
                    for c in cases if c.case_id not in unsupported}
            if damage:
                data = damage(data)
        np.savez(logs / f"cpu_variants.{name}.npz", **data)
    (logs / "cpu_variants.log").write_text(text)
    return logs


def test_variants_that_agree_pass_with_a_count_per_variant_and_op(tmp_path):
    logs = _run(tmp_path, {"x64": 0, "sandybridge": 0, "zen4": 0, "sapphirerapids": probe.NOT_RUNNABLE},
                unsupported={"MUL_MAT.f16.b1.CPU_REPACK"})
    counts, metrics, problems, table = cpu_variants.evaluate(logs)
    assert problems == [], problems
    n_mul_mat = len(probe.MUL_MAT_TYPES) * len(probe.BATCHES)
    assert counts["variant.x64.MUL_MAT.evaluated"] == counts["variant.x64.MUL_MAT.passed"] == n_mul_mat
    assert counts["variant.zen4.MUL_MAT.evaluated"] == 2 * n_mul_mat - 1  # default + CPU_REPACK, one unsupported
    assert counts["variant.zen4.MUL_MAT.unsupported"] == 1
    assert counts["variant.zen4.FLASH_ATTN_EXT.passed"] == len(probe.FLASH_ATTN_KV_TYPES) * len(probe.FLASH_ATTN_QUERIES)
    assert counts["variant.sapphirerapids.not_runnable"] == 1
    assert (counts["variants_shipped"], counts["variants_runnable"], counts["variants_crashed"]) == (4, 3, 0)
    assert any(line.startswith("zen4") and "MUL_MAT" in line and "failed   0" in line for line in table), table
    assert cpu_variants.recompute(logs) == (counts, metrics)


def test_a_variant_that_faults_fails_naming_the_signal_and_the_case(tmp_path):
    logs = _run(tmp_path, {"x64": 0, "sapphirerapids": -signal.SIGILL}, loaded="sapphirerapids")
    problems = cpu_variants.problems(logs)
    assert any("variant sapphirerapids: the lane crashed in case FLASH_ATTN_EXT.q8_0.b1.default: probe exited -4 (SIGILL" in p and "SIGILL" in p for p in problems), problems
    assert any("loaded variant sapphirerapids (preflight) was not evaluated" in p for p in problems), problems
    assert cpu_variants.evaluate(logs)[0]["variants_crashed"] == 1


def test_a_variant_beyond_the_tolerance_fails_and_is_counted_failed(tmp_path):
    def skew(data):
        key = "MUL_MAT.q4_k.b8.CPU_REPACK"
        return {**data, key: data[key] * 1.2}

    counts, _, problems, _ = cpu_variants.evaluate(_run(tmp_path, {"x64": 0, "zen4": 0}, damage=skew))
    assert counts["variant.zen4.MUL_MAT.failed"] == 1
    assert any("variant zen4 MUL_MAT.q4_k.b8.CPU_REPACK: NMSE" in p and "vs x64" in p for p in problems), problems


def test_nan_or_a_missing_output_fails(tmp_path):
    def nan_and_drop(data):
        data = dict(data)
        data["FLASH_ATTN_EXT.f16.b8.default"] = np.full_like(data["FLASH_ATTN_EXT.f16.b8.default"], np.nan)
        del data["MUL_MAT.q8_0.b37.default"]
        return data

    counts, _, problems, _ = cpu_variants.evaluate(_run(tmp_path, {"x64": 0, "zen4": 0}, damage=nan_and_drop))
    assert counts["variant.zen4.FLASH_ATTN_EXT.failed"] == 1 and counts["variant.zen4.MUL_MAT.failed"] == 1
    assert len([p for p in problems if p.startswith("variant zen4")]) == 2, problems


def test_a_baseline_far_from_float64_fails(tmp_path):
    logs = _run(tmp_path, {"x64": 0, "zen4": 0})
    data = dict(np.load(logs / "cpu_variants.x64.npz"))
    data["MUL_MAT.q4_0.b1.default"] = data["MUL_MAT.q4_0.b1.default"] + 1.0
    np.savez(logs / "cpu_variants.x64.npz", **data)
    problems = cpu_variants.problems(logs)
    assert any("variant x64 MUL_MAT.q4_0.b1.default: NMSE" in p and "vs float64" in p for p in problems), problems


def test_no_baseline_or_a_variant_probed_twice_fails(tmp_path):
    logs = _run(tmp_path / "a", {"zen4": 0})
    assert any("no probe of the baseline variant x64" in p for p in cpu_variants.problems(logs))
    logs = _run(tmp_path / "b", {"x64": 0, "zen4": 0})
    text = (logs / "cpu_variants.log").read_text()
    (logs / "cpu_variants.log").write_text(text + text.split("\n", 2)[2])
    assert any("probed twice" in p for p in cpu_variants.problems(logs))


def test_the_nmse_bound_is_the_measured_margin_not_a_loophole():
    want = np.ones((4, 4))
    assert cpu_variants.nmse(want * (1 + 1e-3), want) < cpu_variants.MAX_NMSE
    assert cpu_variants.nmse(want * 1.05, want) > cpu_variants.MAX_NMSE
    assert cpu_variants.nmse(np.zeros((4, 3)), want) == float("inf")


@pytest.mark.parametrize("code,named", [(-4, "SIGILL"), (-11, "SIGSEGV"), (-6, "SIGABRT"), (134, "SIGABRT"),
                                        (-7, "SIGBUS"), (137, "SIGKILL")])
def test_exit_statuses_name_their_signal(code, named):
    text = exits.describe(code)
    assert text.startswith(f"{code} ({named}: ") and len(text) > 30


def test_ordinary_exit_statuses_are_left_as_numbers():
    assert [exits.describe(c) for c in (0, 1, 2, 124)] == ["0", "1", "2", "124"]
    assert exits.crashed(-4) and exits.crashed(-11) and not exits.crashed(-9) and not exits.crashed(1)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
