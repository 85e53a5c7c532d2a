"""The one lane spec: every lane the design names, pinned build choices, honest availability."""

import json
import os
import pathlib
import sys

import pytest

from tools.runner import lane_spec

LANES = pathlib.Path(os.environ.get("TEST_SRCDIR", "."), "lanes", "lanes")


@pytest.fixture(scope="module")
def full_spec():
    return json.loads((LANES / "spec.json").read_text())


@pytest.fixture(scope="module")
def spec(full_spec):
    return full_spec["lanes"]


@pytest.fixture(scope="module")
def availability():
    return json.loads((LANES / "availability.json").read_text())


def test_every_designed_lane_is_registered(spec):
    assert set(spec) >= {"linux-x86_64-cpu", "linux-x86_64-cuda", "linux-aarch64-cuda", "linux-x86_64-rocm",
                         "linux-x86_64-vulkan", "darwin-arm64-metal", "windows-x86_64-cuda",
                         "windows-x86_64-vulkan", "android-arm64-vulkan"}
    for lane_id, lane in spec.items():
        assert lane_id == f"{lane['os']}-{lane['arch']}-{lane['backend']}"


def test_cpu_lane_is_deterministic_and_relocatable(spec):
    cpu = spec["linux-x86_64-cpu"]
    assert cpu["ggml_cache_entries"]["GGML_NATIVE"] == "OFF"
    assert cpu["ggml_cache_entries"]["CMAKE_INSTALL_RPATH"] == "\\$ORIGIN"
    assert cpu["llama_cache_entries"]["CMAKE_INSTALL_RPATH"].startswith("\\$ORIGIN/../lib")
    assert {"llama-completion", "llama-simple", "llama-bench", "llama-server", "test-backend-ops"} <= set(cpu["targets"])


def test_gpu_lanes_pin_their_device_targets(spec):
    assert spec["linux-x86_64-cuda"]["ggml_cache_entries"]["CMAKE_CUDA_ARCHITECTURES"] == "90a"
    assert spec["linux-x86_64-rocm"]["ggml_cache_entries"]["GPU_TARGETS"]
    for lane in spec.values():
        if lane["backend"] != "cpu" and lane["alias"]:
            assert lane["log_evidence"], "accelerator lanes name the backend log lines the runner requires"


def test_unavailable_always_says_why(spec, availability):
    assert set(availability["lanes"]) == set(spec)
    for lane_id, avail in availability["lanes"].items():
        assert avail["status"] in {"AVAILABLE", "UNAVAILABLE"}
        if avail["status"] == "UNAVAILABLE":
            assert len(avail["reason"]) > 10, lane_id
    # Lanes for another OS or CPU are never available on this host.
    host = availability["host"]
    for lane_id, lane in spec.items():
        if lane["os"] != host["os"].split(" ")[0]:
            assert availability["lanes"][lane_id]["status"] == "UNAVAILABLE"


def test_spec_matches_its_lane_schema(full_spec):
    schema = full_spec["lane_schema"]
    assert lane_spec.schema_problems(full_spec["lanes"], schema) == []
    # What the runner reads of a lane is all in the schema (one field list for both sides).
    read = {"alias", "os", "arch", "backend", "sdk", "targets", "log_evidence", "ggml_libs", "fixture_ops",
            "op_coverage", "cpu_variants", "ctest"}
    assert read <= set(schema), sorted(read - set(schema))
    assert lane_spec.load_lane(LANES / "spec.json", "cpu").lane_id == "linux-x86_64-cpu"


def _altered_spec(tmp_path, full_spec, change):
    altered = json.loads(json.dumps(full_spec))
    change(altered["lanes"]["linux-x86_64-cuda"])
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(altered))
    return path


@pytest.mark.parametrize("change, named", [
    (lambda lane: lane.update(log_evidence_v2=[]), "field log_evidence_v2 is not in the LaneSpec schema"),
    (lambda lane: lane.pop("targets"), "required field targets is missing"),
    (lambda lane: lane.update(rpc="yes"), "field rpc is a str, the schema says bool"),
    (lambda lane: lane.update(ggml_libs=["ggml", 1]), "field ggml_libs is a list of other than strings"),
])
def test_a_lane_off_the_schema_is_refused(tmp_path, full_spec, change, named):
    path = _altered_spec(tmp_path, full_spec, change)
    with pytest.raises(lane_spec.LaneSpecError, match="linux-x86_64-cuda: " + named):
        lane_spec.load_lane(path, "cpu")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
