"""Certification column of the matrix: signed records that verify under the policy, per lane.

A lane is certified only for the exact device classes its verified records name. Routable under
policy means admission (tools/admission) would admit a node that matches the record exactly; any
refusal leaves the lane dark and says why.
"""

from __future__ import annotations

import pathlib

from proto import admission_pb2, runner_report_pb2
from tools.admission import admission, policy as policy_lib
from tools.certify import records as records_lib
from tools.certify import timestamps
from tools.certify.errors import CertifyError
from tools.matrix.capability_matrix import DARK, Certifier

CERTIFIED = "certified"


def describe_device_class(dc: runner_report_pb2.DeviceClass) -> str:
    parts = [dc.backend, dc.vendor, dc.device_name]
    if dc.compute_capability:
        parts.append(f"cc {dc.compute_capability}")
    if dc.driver_major:
        parts.append(f"driver {dc.driver_major}")
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


def policy_certifier(policy_path: pathlib.Path, records_dir: pathlib.Path) -> Certifier:
    """A Certifier reading every record in records_dir and judging it under the policy file."""
    if not policy_path.exists() or not records_dir.is_dir():
        why = f"no policy at {policy_path}" if not policy_path.exists() else "no certification record"
        return lambda lane_id, evidence_digest: (DARK, [], False, why)
    policy = policy_lib.load_policy(policy_path)
    store = policy_lib.validate(policy, str(policy_path))
    certs, compats, _unreadable = admission.load_records_dir(records_dir)
    now = timestamps.now()
    verified = []
    refusals: list[str] = []
    for item in certs:
        try:
            record = records_lib.verify_record(item.envelope, store, policy.supported_record_schema_versions or None)
        except (CertifyError, ValueError) as err:  # every refusal means "dark"; the first is shown
            refusals.append(f"{item.source}: {err}")
            continue
        verified.append((item, record))

    def certify(lane_id: str, evidence_digest: str):
        del evidence_digest  # a record names its own build; the matrix does not re-bind it here
        mine = [(i, r) for i, r in verified if r.scope.lane_id == lane_id]
        if not mine:
            return DARK, [], False, refusals[0] if refusals else "no certification record"
        classes, routable, notes = [], False, []
        for item, record in mine:
            route = admission.route_from_nodes([_node_for(record)], record.model.sha256, "matrix")
            decision = admission.decide(policy, [item], compats, route, now, trust_store=store)
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
