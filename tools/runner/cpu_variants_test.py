"""cpu_variants: the verdict and the per-variant table from the probes' raw files, and each way a
probe, a lane's output or a tampered file fails it."""

from __future__ import annotations

import shlex
import signal
import sys

import numpy as np
import pytest
from gguf import GGMLQuantizationType, quants

from tools.runner import exits
from tools.runner.checks import cpu_variants
from tools.runner.probes import cpu_variant_probe as probe

# gguf-py quantizes these three itself, so the fixtures hold real quantized bytes; the integration
# test (tests/cpu_certification_integration_test.py) runs every type on the built lane.
TYPES = ("f16", "q4_0", "q8_0")
EXPECTED = {"x64": {"CPU_REPACK": ()}, "sandybridge": {"CPU_REPACK": ()}, "zen4": {"CPU_REPACK": ("q4_0",)},
            "sapphirerapids": {"CPU_REPACK": ("q4_0",), "AMX": ("f16", "q4_0", "q8_0")}}


@pytest.fixture(autouse=True)
def _three_types(monkeypatch):
    monkeypatch.setattr(probe, "MUL_MAT_TYPES", TYPES)
    monkeypatch.setattr(cpu_variants, "EXPECTED_EXTRA", EXPECTED)


def _quantized(type_name: str, values: np.ndarray) -> np.ndarray:
    if type_name == "f16":
        return np.frombuffer(values.astype(np.float16).tobytes(), dtype=np.uint8)
    return quants.quantize(values, getattr(GGMLQuantizationType, type_name.upper())).reshape(-1)


def _inputs(case: probe.Case) -> dict[str, np.ndarray]:
    if case.op == "MUL_MAT":
        return {f"input.{case.inputs_id}.w": _quantized(case.weight_type, probe.mul_mat_inputs(case)[0])}
    _, k, v, _ = probe.flash_attn_inputs(case)
    rows = probe.FA_KV_HEADS * probe.FA_KV
    return {f"input.{case.inputs_id}.k": _quantized(case.weight_type, k.reshape(rows, -1)),
            f"input.{case.inputs_id}.v": _quantized(case.weight_type, v.reshape(rows, -1))}


def _baseline() -> dict[str, np.ndarray]:
    """What a correct x64 probe saves: outputs within 1e-4 relative of float64, and its inputs."""
    rng = np.random.default_rng(7)
    data: dict[str, np.ndarray] = {}
    for case in probe.cases_for([]):
        data.update(_inputs(case))
        want, _ = cpu_variants.reference(case, data)
        data[case.case_id] = (want * (1 + 1e-4 * rng.standard_normal(want.shape))).astype(np.float32)
    return data


BUFFERS = {"x64": ["CPU_REPACK"], "sandybridge": ["CPU_REPACK"], "zen4": ["CPU_REPACK"],
           "sapphirerapids": ["AMX", "CPU_REPACK"]}


def _supported(name: str, case: probe.Case) -> bool:
    return case.buffer == probe.DEFAULT_BUFFER or case.weight_type in EXPECTED[name].get(case.buffer, ())


def _block(name: str, code: int, buffers: list[str], statuses: dict[str, str], extra_output: str = "",
           argv_extra: tuple[str, ...] = ()) -> str:
    argv = [sys.executable, str(cpu_variants.PROBE), "--lib_dir", "/l/lib", "--variant_dir", "/l/bin",
            "--variant", name, "--out", f"/logs/cpu_variants.{name}.npz", *argv_extra]
    lines = [f"$ {shlex.join(argv)}"]
    if code == probe.NOT_RUNNABLE:
        lines.append(f"variant {name} not_runnable: ggml_backend_load refused it")
    else:
        for case in probe.cases_for(buffers):
            lines.append(f"case {case.case_id} start")
            if case.case_id not in statuses:  # died here
                break
            lines.append(f"case {case.case_id} {statuses[case.case_id]}")
        if code == 0:
            lines.append(f"variant {name} score 100 buffer_types {','.join(['default', *buffers])}")
    return "\n".join(lines) + "\n" + extra_output + f"# exit {code} after 1.00s\n"


def _run(tmp_path, variants: dict[str, int], *, damage=None, loaded="zen4", statuses=None, extra_output=None,
         buffers=None, argv_extra=None, preflight=True):
    """A cpu_variants run dir: each variant probed with the given exit status (a crash dies halfway)."""
    logs = tmp_path / "logs"
    logs.mkdir(parents=True)
    if preflight:
        (logs / "preflight.log").write_text(f"# lanes-config cpu_variant={loaded}\n")
    text = "# lanes-config variants=" + ",".join(variants) + "\n"
    baseline = _baseline()
    for name, code in variants.items():
        buf = (buffers or {}).get(name, BUFFERS[name])
        cases = probe.cases_for(buf)
        st = {c.case_id: "computed" if _supported(name, c) else "unsupported" for c in cases}
        if code not in (0, probe.NOT_RUNNABLE):
            st = dict(list(st.items())[: len(st) // 2])
        st.update((statuses or {}).get(name, {}))
        text += _block(name, code, buf, st, (extra_output or {}).get(name, ""), (argv_extra or {}).get(name, ()))
        if code != 0:
            continue
        data = dict(baseline) if name == "x64" else {}
        for c in cases:
            if st.get(c.case_id) == "computed":
                data[c.case_id] = baseline[probe.Case(c.op, c.weight_type, c.batch, probe.DEFAULT_BUFFER).case_id]
        if damage and name in damage:
            data = damage[name](data)
        np.savez(logs / f"cpu_variants.{name}.npz", **data)
    (logs / "cpu_variants.log").write_text(text)
    return logs


ALL = {"x64": 0, "sandybridge": 0, "zen4": 0, "sapphirerapids": probe.NOT_RUNNABLE}


def test_variants_that_agree_pass_with_a_count_per_variant_and_op(tmp_path):
    logs = _run(tmp_path, ALL)
    counts, metrics, problems, table = cpu_variants.evaluate(logs)
    assert problems == [], problems
    n = len(TYPES) * len(probe.BATCHES)
    assert counts["variant.x64.MUL_MAT.evaluated"] == counts["variant.x64.MUL_MAT.passed"] == n
    assert counts["variant.x64.MUL_MAT.unsupported"] == n  # x64 repacks nothing
    assert counts["variant.zen4.MUL_MAT.evaluated"] == n + len(probe.BATCHES)  # default + q4_0 in CPU_REPACK
    assert counts["variant.zen4.FLASH_ATTN_EXT.passed"] == len(probe.FLASH_ATTN_KV_TYPES) * len(probe.FLASH_ATTN_QUERIES)
    assert counts["variant.sapphirerapids.not_runnable"] == 1
    assert (counts["variants_shipped"], counts["variants_runnable"], counts["variants_crashed"]) == (4, 3, 0)
    assert any(line.startswith("zen4") and "MUL_MAT" in line and "failed   0" in line for line in table), table
    assert cpu_variants.recompute(logs) == (counts, metrics)


def test_a_variant_that_faults_fails_naming_the_signal_and_the_case(tmp_path):
    logs = _run(tmp_path, {"x64": 0, "sapphirerapids": -signal.SIGILL}, loaded="sapphirerapids")
    problems = cpu_variants.problems(logs)
    assert any(p.startswith("variant sapphirerapids: the lane crashed in case ") and "exited -4 (SIGILL" in p
               for p in problems), problems
    assert any("loaded variant sapphirerapids (preflight) was not evaluated" in p for p in problems), problems
    assert cpu_variants.evaluate(logs)[0]["variants_crashed"] == 1


def test_a_variant_beyond_its_bound_fails_and_is_counted_failed(tmp_path):
    def flip_one(data):  # one element of opposite sign in a 37-token output: NMSE ~8e-4 > 1e-6
        key = "MUL_MAT.q4_0.b37.CPU_REPACK"
        out = data[key].copy()
        out[5, 7] = -out[5, 7]
        return {**data, key: out}

    counts, _, problems, _ = cpu_variants.evaluate(_run(tmp_path, {"x64": 0, "zen4": 0}, damage={"zen4": flip_one}))
    assert counts["variant.zen4.MUL_MAT.failed"] == 1
    assert any("variant zen4 MUL_MAT.q4_0.b37.CPU_REPACK: NMSE" in p and "vs x64 > 1e-06" in p for p in problems), problems


def test_nan_a_wrong_shape_or_a_missing_output_fails(tmp_path):
    def damage(data):
        data = dict(data)
        data["FLASH_ATTN_EXT.f16.b8.default"] = np.full_like(data["FLASH_ATTN_EXT.f16.b8.default"], np.nan)
        data["MUL_MAT.q8_0.b8.default"] = data["MUL_MAT.q8_0.b8.default"].reshape(-1)
        del data["MUL_MAT.q8_0.b37.default"]
        return data

    counts, _, problems, _ = cpu_variants.evaluate(_run(tmp_path, {"x64": 0, "zen4": 0}, damage={"zen4": damage}))
    assert counts["variant.zen4.FLASH_ATTN_EXT.failed"] == 1 and counts["variant.zen4.MUL_MAT.failed"] == 2
    assert any("holds" in p and "missing ['MUL_MAT.q8_0.b37.default']" in p for p in problems), problems


def test_a_baseline_far_from_float64_or_weights_that_are_not_the_seeded_ones_fail(tmp_path):
    def off(data):
        return {**data, "MUL_MAT.q4_0.b1.default": data["MUL_MAT.q4_0.b1.default"] + 1.0}

    problems = cpu_variants.problems(_run(tmp_path / "a", {"x64": 0}, damage={"x64": off}, loaded="x64"))
    assert any("variant x64 MUL_MAT.q4_0.b1.default: NMSE" in p and "vs float64" in p for p in problems), problems

    def zero_weights(data):  # a quantizer that wrote zeros: every kernel would agree on zeros
        key = next(k for k in data if k.startswith("input.MUL_MAT.q8_0.b8"))
        return {**data, key: np.zeros_like(data[key])}

    problems = cpu_variants.problems(_run(tmp_path / "b", {"x64": 0}, damage={"x64": zero_weights}, loaded="x64"))
    assert any("MUL_MAT.q8_0.b8.default: its weights' bytes hold other numbers" in p for p in problems), problems


def test_the_lanes_output_cannot_skip_a_case_the_pinned_tree_supports(tmp_path):
    # The lane says unsupported where ggml's repack takes Q4_0 on zen4: evaluated and failed.
    logs = _run(tmp_path / "a", {"x64": 0, "zen4": 0}, statuses={"zen4": {"MUL_MAT.q4_0.b8.CPU_REPACK": "unsupported"}},
                damage={"zen4": lambda d: {k: v for k, v in d.items() if k != "MUL_MAT.q4_0.b8.CPU_REPACK"}})
    problems = cpu_variants.problems(logs)
    assert any("MUL_MAT.q4_0.b8.CPU_REPACK: unsupported although the pinned tree supports it" in p for p in problems), problems
    # A default-buffer case said unsupported fails the same way.
    logs = _run(tmp_path / "b", {"x64": 0, "zen4": 0}, statuses={"zen4": {"MUL_MAT.f16.b1.default": "unsupported"}},
                damage={"zen4": lambda d: {k: v for k, v in d.items() if k != "MUL_MAT.f16.b1.default"}})
    assert any("MUL_MAT.f16.b1.default: unsupported" in p for p in cpu_variants.problems(logs))
    # A variant that drops its AMX buffer from its summary.
    logs = _run(tmp_path / "c", {"x64": 0, "sapphirerapids": 0}, buffers={"sapphirerapids": ["CPU_REPACK"]},
                loaded="sapphirerapids")
    assert any("variant sapphirerapids: lacks the extra buffers ['AMX']" in p for p in cpu_variants.problems(logs))


def test_case_lines_out_of_sequence_fail(tmp_path):
    extra = {"zen4": "case MUL_MAT.f16.b1.default computed\n"}  # a second status for a case
    logs = _run(tmp_path, {"x64": 0, "zen4": 0}, extra_output=extra)
    assert any("variant zen4: the probe's case lines are not one start and one status" in p
               for p in cpu_variants.problems(logs))


def test_lines_a_lane_prints_cannot_end_its_command_or_set_the_config(tmp_path):
    # An exit line inside the output: the real status after it would be lost.
    logs = _run(tmp_path / "a", {"x64": 0, "zen4": 0}, extra_output={"zen4": "# exit 0 after 0.10s\n"})
    assert any("a command's output holds an exit line" in p for p in cpu_variants.problems(logs))
    # Config lines in a tool's output are not the runner's: neither the shipped list nor not_applicable.
    spoof = {"zen4": "# lanes-config variants=x64\n# lanes-config cpu_variants=not_applicable\n"}
    logs = _run(tmp_path / "b", {"x64": 0, "zen4": -signal.SIGSEGV}, extra_output=spoof)
    problems = cpu_variants.problems(logs)
    assert any("variant zen4: the lane crashed" in p for p in problems), problems


def test_a_probe_missing_from_the_shipped_list_or_from_another_library_fails(tmp_path):
    logs = _run(tmp_path / "a", {"x64": 0, "zen4": 0})
    text = (logs / "cpu_variants.log").read_text().replace("variants=x64,zen4", "variants=x64,zen4,haswell")
    (logs / "cpu_variants.log").write_text(text)
    assert any("are not the variants the lane ships" in p for p in cpu_variants.problems(logs))
    logs = _run(tmp_path / "b", {"x64": 0, "zen4": 0}, argv_extra={"zen4": ("--variant_path", "/tmp/other.so")})
    assert any("probed from another library" in p for p in cpu_variants.problems(logs))


def test_exit_3_counts_as_not_runnable_only_without_cases(tmp_path):
    logs = _run(tmp_path, {"x64": 0, "zen4": 0}, extra_output={"zen4": ""})
    text = (logs / "cpu_variants.log").read_text()
    head, zen4 = text.split("$ ", 1)[0], "$ " + text.split("$ ", 2)[2]
    (logs / "cpu_variants.log").write_text(text.replace(zen4, zen4.replace("# exit 0 after", "# exit 3 after")))
    assert head.startswith("# lanes-config variants=")
    problems = cpu_variants.problems(logs)
    assert any("variant zen4: the lane crashed" in p and "exited 3" in p for p in problems), problems


def test_no_baseline_no_preflight_variant_or_a_variant_probed_twice_fails(tmp_path):
    assert any("no probe of the baseline variant x64" in p for p in cpu_variants.problems(_run(tmp_path / "a", {"zen4": 0})))
    logs = _run(tmp_path / "b", {"x64": 0, "zen4": 0}, preflight=False)
    assert any("preflight logged no cpu_variant" in p for p in cpu_variants.problems(logs))
    logs = _run(tmp_path / "c", {"x64": 0, "zen4": 0})
    text = (logs / "cpu_variants.log").read_text()
    (logs / "cpu_variants.log").write_text(text + "$ " + text.split("$ ", 2)[2])
    assert any("probed twice" in p for p in cpu_variants.problems(logs))


def test_every_variant_the_lane_spec_ships_has_its_expected_support():
    # lanes/lanes.bzl's GGML_CPU_ALL_VARIANTS list for x86 (the lane spec's cpu_variants)
    shipped = ("x64", "sse42", "sandybridge", "ivybridge", "piledriver", "haswell", "skylakex", "cannonlake",
               "cascadelake", "icelake", "cooperlake", "zen4", "alderlake", "sapphirerapids")
    import importlib

    real = importlib.reload(cpu_variants)  # the real table, not this module's fixture
    assert sorted(real.EXPECTED_EXTRA) == sorted(shipped)


def test_the_bounds_are_the_measured_margins_not_loopholes():
    want = np.ones((4, 4))
    assert cpu_variants.nmse(want * (1 + 1e-4), want) < cpu_variants.MAX_NMSE_VARIANT
    assert cpu_variants.nmse(want * (1 + 1e-2), want) > cpu_variants.MAX_NMSE_VARIANT
    assert cpu_variants.nmse(want * (1 + 1e-2), want) < cpu_variants.MAX_NMSE_REFERENCE
    assert cpu_variants.nmse(want * 1.05, want) > cpu_variants.MAX_NMSE_REFERENCE
    assert cpu_variants.nmse(np.zeros((4, 3)), want) == float("inf") == cpu_variants.nmse(None, want)


@pytest.mark.parametrize("code,named", [(-4, "SIGILL"), (-11, "SIGSEGV"), (-6, "SIGABRT"), (134, "SIGABRT"),
                                        (-7, "SIGBUS"), (137, "SIGKILL"), ("-4", "SIGILL")])
def test_exit_statuses_name_their_signal(code, named):
    text = exits.describe(code)
    assert text.startswith(f"{code} ({named}: ") and len(text) > 30


def test_ordinary_exit_statuses_are_left_as_numbers():
    assert [exits.describe(c) for c in (0, 1, 2, 124, None, "x")] == ["0", "1", "2", "124", "None", "x"]
    assert exits.crashed(-4) and exits.crashed(-11) and not exits.crashed(-9) and not exits.crashed(1)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
