"""Certification column of the matrix: signed records that verify under the policy, per lane.

A lane is certified only for the exact device classes its verified records name. Routable under
policy means admission (tools/admission) would admit a node that matches the record exactly; any
refusal leaves the lane dark and says why.
"""

from __future__ import annotations

import datetime as dt
import pathlib

from proto import admission_pb2, certification_pb2, runner_report_pb2
from tools.admission import admission
from tools.certify import records as records_lib
from tools.matrix.capability_matrix import DARK, Certifier
from tools.policy import dsse, timestamps
from tools.policy import policy as policy_lib
from tools.policy.errors import TrustError
from tools.publish import revocations as revocations_lib
from tools.runner import gpu_set

CERTIFIED = "certified"
# The lane is built here, but no record names this build's evidence: a record proves the artifacts
# it was run on, never a rebuild, so the lane is neither certified nor routable until re-certified.
OTHER_BUILD = "BUILT, record is for another build"


def describe_device_class(dc: runner_report_pb2.DeviceClass) -> str:
    parts = [dc.backend, dc.vendor, dc.device_name]
    if dc.compute_capability:
        parts.append(f"cc {dc.compute_capability}")
    if dc.driver_major:
        parts.append(f"driver {dc.driver_major}")
    if gpu_set.count(dc) >= 2:
        parts.append(gpu_set.label(dc))  # e.g. "2x NVIDIA H200 (9.0), NV18"
    parts.append(f"{dc.os}-{dc.arch}")
    return " / ".join(p for p in parts if p)


def _node_for(record) -> admission_pb2.NodeDescription:
    node = admission_pb2.NodeDescription(
        node_id="matrix-probe",
        lane_id=record.scope.lane_id,
        build_evidence_digest=record.build_evidence_digest,
    )
    node.device_class.CopyFrom(record.scope.device_class)
    node.artifacts.extend(record.artifacts)
    return node


def _revocation_screen(revocations_dir: pathlib.Path | None, store):
    """admission's screen refusing revoked records (signed revocations, verified under the policy's
    keys); an unreadable revocation refuses everything (it could be the one that matters)."""
    if revocations_dir is None:
        return None
    rev_set, problems = revocations_lib.load_dir(revocations_dir, store)
    if problems:
        return lambda digest, env, rec: ("revocation-unreadable", f"revocations unreadable ({problems[0]}); fix {revocations_dir}")

    def screen(digest, env, rec):
        if rec is None:
            return None
        # The keys whose signatures verified, never the envelope's unauthenticated keyid hints.
        try:
            verified = dsse.verify(env, store.public_keys)
        except TrustError as err:
            return err.code, str(err)
        why = rev_set.reason(digest, rec, verified)
        return (revocations_lib.REVOKED, why[len(revocations_lib.REVOKED) + 2:]) if why else None
    return screen


def policy_certifier(policy_path: pathlib.Path, records_dir: pathlib.Path,
                     revocations_dir: pathlib.Path | None = None) -> Certifier:
    """A Certifier reading every record in records_dir and judging it under the policy file (and the
    signed revocations in revocations_dir: a revoked record leaves its lane dark, "revoked: <reason>")."""
    if not policy_path.exists() or not records_dir.is_dir():
        why = f"no policy at {policy_path}" if not policy_path.exists() else "no certification record"
        return lambda lane_id, evidence_digest: (DARK, [], False, why)
    policy = policy_lib.load_policy(policy_path)
    store = policy_lib.validate(policy, str(policy_path))
    screen = _revocation_screen(revocations_dir, store)
    certs, compats, _unreadable = admission.load_records_dir(records_dir)
    now = timestamps.now()
    verified = []
    refusals: list[str] = []
    for item in certs:
        try:
            record = records_lib.verify_record(item.envelope, store, policy.supported_record_schema_versions or None)
        except (TrustError, ValueError) as err:  # every refusal means "dark"; the first is shown
            refusals.append(f"{item.source}: {err}")
            continue
        verified.append((item, record))

    def certify(lane_id: str, evidence_digest: str):
        mine = [(i, r) for i, r in verified if r.scope.lane_id == lane_id]
        if not mine:
            return DARK, [], False, refusals[0] if refusals else "no certification record"
        if evidence_digest:
            # Bind the record to the build on disk: a rebuilt lane is not the lane that was certified.
            bound = [(i, r) for i, r in mine if r.build_evidence_digest == evidence_digest]
            if not bound:
                others = sorted({r.build_evidence_digest for _, r in mine})
                return OTHER_BUILD, [], False, (
                    f"built evidence {evidence_digest}; record(s) certify {', '.join(others)}; "
                    "re-certify this build (bazel run //tools:certify)")
            mine = bound
        classes, routable, notes = [], False, []
        if not evidence_digest:
            notes.append("not built on this host; records name build "
                         + ", ".join(sorted({r.build_evidence_digest for _, r in mine})))
        for item, record in mine:
            # The probe route asks for exactly what the record proves: its recipe and model files.
            route = admission.route_from_nodes(
                [_node_for(record)], record.model.sha256, "matrix",
                recipe=record.recipe if record.HasField("recipe") else None,
                model_shard_sha256=[s.sha256 for s in record.model.shards])
            decision = admission.decide(policy, [item], compats, route, now, trust_store=store, screen=screen)
            if decision.routable:
                classes.append(describe_device_class(record.scope.device_class))
                routable = True
                notes.append(f"record {record.record_id[:12]} expires {record.expires_at}")
            else:
                notes.append("; ".join(decision.reasons)[:200])
        if not classes:
            return DARK, [], False, "; ".join(notes)
        return CERTIFIED, classes, routable, "; ".join(notes)

    return certify


def compatibility_probe_recipe(
    compat: certification_pb2.CompatibilityRecord, named: list[certification_pb2.CertificationRecord],
) -> runner_report_pb2.Recipe | None:
    """The recipe a probe of a mixed route asks for: the one the compatibility record was measured
    under (a lane record's larger recipe, e.g. more parallel sequences, was never run on the route).
    A record that states none is probed with the first lane's, so admission names the missing recipe
    (compat-recipe-missing) rather than a recipe mismatch."""
    if compat.HasField("recipe"):
        return compat.recipe
    return named[0].recipe if named and named[0].HasField("recipe") else None


def compatibility_pairs(policy_path: pathlib.Path, records_dir: pathlib.Path,
                        revocations_dir: pathlib.Path | None = None, now: dt.datetime | None = None) -> list[dict]:
    """One row per compatibility record: the lanes, model and device classes it was measured with,
    and whether admission routes that mixed pipeline under the policy (else the reason), at `now`
    (default: the current time), with the signed revocations in revocations_dir applied.

    The probe route has one node per lane, each exactly the certified record the compatibility
    record names, and the recipe it was measured under, so the verdict is admission's own for the
    route the record was measured on."""
    if not policy_path.exists() or not records_dir.is_dir():
        return []
    policy = policy_lib.load_policy(policy_path)
    store = policy_lib.validate(policy, str(policy_path))
    screen = _revocation_screen(revocations_dir if revocations_dir is not None and revocations_dir.is_dir() else None,
                                store)
    certs, compats, _unreadable = admission.load_records_dir(records_dir)
    by_id = {}
    for item in certs:
        try:
            record = records_lib.verify_record(item.envelope, store, policy.supported_record_schema_versions or None)
        except (TrustError, ValueError):
            continue
        by_id[record.record_id] = (item, record)
    now = now or timestamps.now()
    rows = []
    for item in compats:
        row = {"source": str(item.source), "lanes": [], "model_sha256": "", "device_classes": [], "routable": False,
               "detail": ""}
        try:
            rec = records_lib.verify_compatibility(item.envelope, store, policy.supported_record_schema_versions or None)
        except (TrustError, ValueError) as err:
            row["detail"] = f"does not verify: {err}"
            rows.append(row)
            continue
        row.update(lanes=sorted(rec.lane_ids), model_sha256=rec.model_sha256,
                   device_classes=[f"{e.lane_id}: {describe_device_class(e.device_class)}" for e in rec.lanes])
        named = [by_id[r] for r in rec.certification_record_ids if r in by_id]
        if (len(named) != len(rec.certification_record_ids) or not named
                or len(set(rec.certification_record_ids)) != len(rec.certification_record_ids)
                or sorted(r.scope.lane_id for _, r in named) != sorted(rec.lane_ids)):
            row["detail"] = ("names certification records that are not here, do not verify, repeat, or are not "
                             "exactly one per lane of the record")
            rows.append(row)
            continue
        nodes = [_node_for(r) for _, r in named]
        for node in nodes:
            node.node_id = f"matrix-probe-{node.lane_id}"
        route = admission.route_from_nodes(nodes, rec.model_sha256, "matrix-compat",
                                           recipe=compatibility_probe_recipe(rec, [r for _, r in named]),
                                           model_shard_sha256=[s.sha256 for s in named[0][1].model.shards])
        decision = admission.decide(policy, [i for i, _ in named], [item], route, now, trust_store=store, screen=screen)
        row["routable"] = decision.routable
        row["detail"] = (f"record expires {rec.expires_at}; max|dlogit| {rec.max_abs_delta_logit:.3g}, mean KL "
                         f"{rec.kl_divergence:.3g}, top-1 {rec.top1_agreement:.3f}, greedy {rec.greedy_agreement:.2f}"
                         if decision.routable else "; ".join(decision.reasons))
        rows.append(row)
    return rows
