"""Multi-GPU device classes in admission (issue 29): a record for N GPUs admits only nodes with the same
count, GPUs and interconnect, and only routes that split the model as it was proven; a one-GPU record
never admits a two-GPU node and the other way round; each refusal names the mismatch."""

import datetime as dt
import sys

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from proto import runner_report_pb2
from tools.admission import admission, admission_files
from tools.certify import records, sample_reports
from tools.policy import dsse
from tools.runner import gpu_set

NOW = sample_reports.NOW
LATER = NOW + dt.timedelta(days=1)
GPU = "linux-x86_64-cuda"
MODEL = sample_reports.MODEL_SHA256
MISMATCH = "scope-device-class-mismatch"


@pytest.fixture(scope="module")
def key():
    return Ed25519PrivateKey.generate()


@pytest.fixture(scope="module")
def policy(key):
    return sample_reports.make_policy(key)


def two_gpus(dc: runner_report_pb2.DeviceClass, link: str = "NV18", names=("NVIDIA H200", "NVIDIA H200"),
             first: int = 0) -> runner_report_pb2.DeviceClass:
    rows = [dict(name=n, compute_cap="9.0", driver_version="580.65.06") for n in names]
    rows = [rows[0]] * first + rows
    indices = list(range(first, first + len(names)))
    dc.gpu_set.CopyFrom(gpu_set.make_gpu_set(rows, indices, {(first, first + 1): link, (first + 1, first): link}))
    return dc


def split_recipe(mode: str = "layer", split: str = "", gpus: int = 2) -> runner_report_pb2.Recipe:
    return sample_reports.make_recipe(n_gpu_layers=-1, gpu_count=gpus, split_mode=mode, tensor_split=split)


def report(multi: bool, mode: str = "layer", **kw):
    r = sample_reports.make_report(GPU)
    if multi:
        two_gpus(r.device_class, **kw)
        r.recipe.CopyFrom(split_recipe(mode))
    else:
        r.recipe.CopyFrom(sample_reports.make_recipe(n_gpu_layers=-1))
    return r


def signed(rep, key):
    rec = records.record_from_report(rep, rep.SerializeToString(), dsse.keyid_for(key), NOW, 30, "test-policy")
    return records.sign_record(rec, key)


def decide(policy, env, node, recipe):
    route_recipe = runner_report_pb2.Recipe()
    route_recipe.CopyFrom(recipe)
    route_recipe.context_size, route_recipe.parallel_sequences = 2048, 1
    route_recipe.ClearField("kv_cache_types")
    route_recipe.kv_cache_types.append("f16")
    route_recipe.ClearField("flash_attention")
    route_recipe.flash_attention.append("off")
    route = admission.route_from_nodes([node], MODEL, "r1", route_recipe, ())
    return admission.decide(policy, [env], [], route, LATER)


def test_two_gpu_record_admits_the_same_two_gpu_node(policy, key):
    rep = report(True)
    d = decide(policy, signed(rep, key), sample_reports.node_for(rep), split_recipe())
    assert d.routable, d.reasons


def test_two_gpu_record_admits_a_node_on_other_gpu_indices(policy, key):
    rep = report(True)
    node = sample_reports.node_for(rep)
    two_gpus(node.device_class, first=2)  # GPUs 2 and 3 of a larger host, linked the same way
    assert decide(policy, signed(rep, key), node, split_recipe()).routable


def test_one_gpu_record_never_admits_a_two_gpu_node(policy, key):
    rep = report(False)
    node = sample_reports.node_for(rep)
    two_gpus(node.device_class)
    d = decide(policy, signed(rep, key), node, split_recipe())
    assert not d.routable
    reason = next(r for r in d.reasons if r.startswith(MISMATCH))
    assert "GPU count 1 != node 2 (a record for 1 GPU admits only nodes with 1)" in reason, reason


def test_two_gpu_record_never_admits_a_one_gpu_node(policy, key):
    rep = report(True)
    node = sample_reports.node_for(rep)
    node.device_class.ClearField("gpu_set")
    d = decide(policy, signed(rep, key), node, sample_reports.make_recipe(n_gpu_layers=-1))
    assert not d.routable
    reason = next(r for r in d.reasons if r.startswith(MISMATCH))
    assert "GPU count 2 != node 1 (a record for 2 GPUs admits only nodes with 2)" in reason, reason


@pytest.mark.parametrize("node_kw,named", [
    ({"link": "SYS"}, "interconnect 'NV18' != node 'SYS'"),
    ({"link": "NV12"}, "interconnect 'NV18' != node 'NV12'"),
    ({"names": ("NVIDIA H200", "NVIDIA H100 80GB HBM3")}, "GPU 1 name 'NVIDIA H200' != node 'NVIDIA H100 80GB HBM3'"),
])
def test_other_gpus_or_interconnect_refused_by_name(policy, key, node_kw, named):
    rep = report(True)
    node = sample_reports.node_for(rep)
    two_gpus(node.device_class, **node_kw)
    d = decide(policy, signed(rep, key), node, split_recipe())
    assert not d.routable
    assert admission.SCOPE_DEVICE_CLASS_MISMATCH == MISMATCH
    assert any(r.startswith(MISMATCH) and named in r for r in d.reasons), d.reasons


@pytest.mark.parametrize("asked,named", [
    (split_recipe("row"), "split mode row != proven layer"),
    (split_recipe("layer", "3,1"), "tensor split 3,1 != proven (none)"),
])
def test_route_split_outside_the_proven_one_refused(policy, key, asked, named):
    rep = report(True)
    d = decide(policy, signed(rep, key), sample_reports.node_for(rep), asked)
    assert not d.routable
    assert any(r.startswith("scope-recipe-mismatch") and named in r for r in d.reasons), d.reasons


def test_route_recipe_from_cli_flags():
    r = admission_files.recipe_from_flags(["f16"], "off", -1, 2048, 2048, 512, 1, 0, 2, "", "1,1")
    assert (r.gpu_count, r.split_mode, r.tensor_split) == (2, "layer", "1,1")
    one = admission_files.recipe_from_flags(["f16"], "off", -1, 2048, 2048, 512, 1)
    assert (one.gpu_count, one.split_mode, one.tensor_split) == (0, "", "")


def test_record_file_names():
    assert records.device_class_slug(report(True).device_class) == "cuda-2x-nvidia-h200-9.0-580-nv18"
    assert records.device_class_slug(report(False).device_class) == "cuda-nvidia-h200-9.0-580"


# --- node.json on a (fake) two-GPU host ---------------------------------------------------------

def _fake_host(tmp_path, monkeypatch, query_file: str, topo_file: str):
    import os

    from tools.runner.testing import fake_lane
    monkeypatch.setenv("LANES_RUNNER_LOCK_DIR", str(tmp_path / "locks"))
    bin_dir = fake_lane.install_fake_nvidia_smi(tmp_path / "fakebin", (fake_lane.TESTDATA / query_file).read_text(),
                                                (fake_lane.TESTDATA / topo_file).read_text() if topo_file else "")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    lane_dir = fake_lane.make_cuda_lane(tmp_path / "cudalane")
    evidence = fake_lane.make_evidence(lane_dir, tmp_path / "cuda.evidence.pb", lane_id=GPU)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    return lane_dir, evidence, fake_lane.SPEC, scratch


def _node_json(tmp_path, lane_dir, evidence, spec, gpus: int):
    """node_json_cli in its own process (its absl flags are process-global), on the fake host's PATH."""
    import subprocess

    from google.protobuf import json_format

    from proto import admission_pb2
    out = tmp_path / "node.json"
    proc = subprocess.run([sys.executable, "-m", "tools.admission.node_json_cli", "--lane=cuda", f"--lane_dir={lane_dir}",
                           f"--evidence={evidence}", f"--spec={spec}", "--node_id=node-x", f"--out={out}", f"--gpus={gpus}"],
                          capture_output=True, text=True, timeout=120)
    node = json_format.Parse(out.read_text(), admission_pb2.NodeDescription()) if proc.returncode == 0 else None
    return proc.returncode, proc.stderr, node


def test_node_json_of_a_two_gpu_node_is_admitted_by_the_two_gpu_record_only(tmp_path, monkeypatch, policy, key):
    lane_dir, evidence, spec, _ = _fake_host(tmp_path, monkeypatch, "nvidia_smi_query_h200x2.txt",
                                             "nvidia_smi_topo_h200x2.txt")
    code, err, node = _node_json(tmp_path, lane_dir, evidence, spec, 2)
    assert code == 0, err
    assert node.device_class.gpu_set.count == 2 and node.device_class.gpu_set.interconnect == "NV18"
    rep = report(True)
    # The record is bound to its own build: give the node the record's, to judge the device class alone.
    node.build_evidence_digest = rep.build_evidence_digest
    node.ClearField("artifacts")
    node.artifacts.extend(rep.artifacts)
    assert decide(policy, signed(rep, key), node, split_recipe()).routable
    one = report(False)
    d = decide(policy, signed(one, key), node, split_recipe())
    assert any("GPU count 1 != node 2" in r for r in d.reasons), d.reasons


def test_node_json_for_two_gpus_on_a_one_gpu_host_is_refused(tmp_path, monkeypatch):
    lane_dir, evidence, spec, _ = _fake_host(tmp_path, monkeypatch, "nvidia_smi_query_h200.txt", "")
    code, err, node = _node_json(tmp_path, lane_dir, evidence, spec, 2)
    assert code == 1 and node is None
    assert "this host cannot run lane cuda: this host has 1 GPU; the certification asks for 2" in err, err


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
