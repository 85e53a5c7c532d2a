"""Runner reports, policies and nodes for tests and benchmarks (testonly). Lane ids here are data."""

from __future__ import annotations

import datetime as dt
import hashlib

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from proto import admission_pb2, runner_report_pb2
from tools.certify import schema_versions
from tools.policy import dsse, timestamps
from tools.runner.runner import RUNNER_VERSION

NOW = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=timestamps.UTC)
REQUIRED_CHECKS = ("preflight", "fixture_parity", "graph_dispatch", "speed")
MODEL_SHA256 = hashlib.sha256(b"tiny-model").hexdigest()

DEVICE_CLASSES = {
    "linux-x86_64-cpu": dict(backend="cpu", os="linux", arch="x86_64", vendor="GenuineIntel",
                             device_name="Intel(R) Xeon(R) Processor", compute_capability="x86-64-v3"),
    "linux-x86_64-cuda": dict(backend="cuda", os="linux", arch="x86_64", vendor="NVIDIA",
                              device_name="NVIDIA H200", compute_capability="9.0", driver_major="580",
                              driver_version="580.65.06", runtime_version="12.8"),
}


def make_report(lane_id: str = "linux-x86_64-cpu", tg_tokens_per_s: float = 50.0, **device) -> runner_report_pb2.RunnerReport:
    dc = dict(DEVICE_CLASSES.get(lane_id, DEVICE_CLASSES["linux-x86_64-cpu"]))
    dc.update(device)
    report = runner_report_pb2.RunnerReport(
        schema_version=1,
        lane_id=lane_id,
        device_class=runner_report_pb2.DeviceClass(**dc),
        build_evidence_digest="sha256:" + hashlib.sha256(f"evidence {lane_id}".encode()).hexdigest(),
        status=runner_report_pb2.RunnerReport.PASS,
        pass_recordable=True,
        runner_version=RUNNER_VERSION,
        upstream_commit="0c1e57098bba43ac29e6e3b677cdceebdd22334f",
        patch_stack_digest="sha256:" + hashlib.sha256(b"patches").hexdigest(),
        build_provenance="bazel",
    )
    for path in ("bin/llama-cli", "lib/libggml.so"):
        report.artifacts.add(path=path, sha256=hashlib.sha256(f"{lane_id} {path}".encode()).hexdigest())
    report.model.name = "tiny-llama-f16"
    report.model.sha256 = MODEL_SHA256
    report.model.source = "embedded://tiny"
    report.model.size = 1234
    report.model.shards.add(name="tiny-llama-f16.gguf", sha256=MODEL_SHA256, size=1234)
    report.recipe.CopyFrom(make_recipe())
    for name in REQUIRED_CHECKS:
        check = report.checks.add(name=name, status=runner_report_pb2.CheckResult.PASS, required=True)
        if name == "speed":
            check.metrics["tg_tokens_per_s"] = tg_tokens_per_s
            check.metrics["pp_tokens_per_s"] = tg_tokens_per_s * 10
        if name == "fixture_parity":
            check.counts["passed"] = 120
            check.counts["failed"] = 0
    report.checks.add(name="cancellation", status=runner_report_pb2.CheckResult.SKIPPED, required=False)
    return report


def make_recipe(**overrides) -> runner_report_pb2.Recipe:
    """The recipe the sample runs prove; a route asking for this (or less) is inside it."""
    fields = dict(kv_cache_types=["f16", "q8_0"], flash_attention=["on", "off"], n_gpu_layers=0,
                  context_size=4096, batch_size=2048, ubatch_size=512, parallel_sequences=4)
    fields.update(overrides)
    return runner_report_pb2.Recipe(**fields)


def trusted_key(key: Ed25519PrivateKey, not_before: dt.datetime, not_after: dt.datetime, owner: str = "test") -> admission_pb2.TrustedKey:
    raw = dsse.raw_public_key(key)
    return admission_pb2.TrustedKey(
        keyid=dsse.keyid_for(raw), public_key=raw, owner=owner,
        not_before=timestamps.format_utc(not_before), not_after=timestamps.format_utc(not_after),
    )


def make_policy(*signing_keys: Ed25519PrivateKey, floor: float = 10.0) -> admission_pb2.AdmissionPolicy:
    policy = admission_pb2.AdmissionPolicy(
        schema_version=1, policy_id="test-policy", max_record_age_days=90,
        required_checks=list(REQUIRED_CHECKS), supported_record_schema_versions=schema_versions.known_versions(),
    )
    for key in signing_keys:
        policy.trusted_keys.append(trusted_key(key, NOW - dt.timedelta(days=365), NOW + dt.timedelta(days=365)))
    policy.speed_floors.add(lane_id="*", metric="speed.tg_tokens_per_s", min_value=floor)
    # Mixed routes need bounds the policy states (admission refuses them otherwise).
    policy.compatibility.max_mean_kl, policy.compatibility.min_top1_agreement = 0.01, 0.95
    policy.compatibility.max_abs_delta_logit, policy.compatibility.min_greedy_agreement = 0.5, 1.0
    return policy


def node_for(report: runner_report_pb2.RunnerReport, node_id: str = "") -> admission_pb2.NodeDescription:
    node = admission_pb2.NodeDescription(
        node_id=node_id or f"node-{report.lane_id}", lane_id=report.lane_id,
        build_evidence_digest=report.build_evidence_digest,
    )
    node.device_class.CopyFrom(report.device_class)
    node.artifacts.extend(report.artifacts)
    return node
