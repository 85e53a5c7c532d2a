"""Admission from a record repository: a Tracker refreshes (tools/publish/tracker.py) and decides
only from what that refresh verified.

The signers are the repository's current targets keys (and the keys its signed revocations name,
so that what a retired key signed before retirement can stand and what it signed later is refused
as revoked); the local policy still gives required checks, floors, ceilings and compatibility
bounds. Records from elsewhere (a cache, a copy, a records directory) may be added, and are
screened exactly like served ones: not in the log, retired key or revoked is refused.

A refresh that fails (rollback, freeze, mix-and-match, hash mismatch, below threshold, forked log,
dropped revocation, unreachable) admits nothing: the route is refused with that reason.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from proto import admission_pb2
from tools.admission import admission
from tools.policy import policy as policy_lib
from tools.policy import timestamps
from tools.publish import tracker as tracker_lib
from tools.publish.distribution_errors import DistributionError


def inputs_from_view(view: tracker_lib.TrackerView) -> tuple[list[admission.SignedInput], list[admission.SignedInput]]:
    certs, compats = [], []
    for r in view.records:
        item = admission.SignedInput(r.envelope, r.digest, r.target_path)
        (compats if r.kind == "compatibility" else certs).append(item)
    return certs, compats


def decide_from_view(
    view: tracker_lib.TrackerView,
    policy: admission_pb2.AdmissionPolicy,
    route: admission_pb2.RouteRequest,
    now: dt.datetime | None = None,
    extra_records: Sequence[admission.SignedInput] = (),
    extra_compat: Sequence[admission.SignedInput] = (),
    cache: admission.VerificationCache | None = None,
) -> admission_pb2.AdmissionDecision:
    policy_lib.validate(policy)
    certs, compats = inputs_from_view(view)
    digest_of: dict[str, str] = {}

    def screen(digest, envelope, record):
        if record is not None and getattr(record, "record_id", ""):
            digest_of.setdefault(record.record_id, digest)
        return view.screen(digest, envelope, record)

    decision = admission.decide(policy, [*certs, *extra_records], [*compats, *extra_compat], route, now,
                                trust_store=view.trust_store, cache=cache, screen=screen)
    # Every admitting record must prove its inclusion (RFC 9162 audit path) against the signed
    # checkpoint; the screen already refused what is not in the log, this is the proof itself.
    for lane in decision.lanes:
        if not lane.routable:
            continue
        digest = digest_of.get(lane.record_id, "")
        try:
            view.inclusion_proof(digest)
        except Exception as err:  # noqa: BLE001 - any failure to prove inclusion refuses the node
            lane.routable = False
            reason = (f"{tracker_lib.NOT_IN_LOG}: node {lane.node_id}: record {lane.record_id[:16]} has no valid "
                      f"inclusion proof against checkpoint size {view.checkpoint.tree_size} ({type(err).__name__})")
            lane.reasons.append(reason)
            decision.reasons.append(reason)
            decision.routable = False
    return decision


def refused_by_refresh(err: DistributionError, policy: admission_pb2.AdmissionPolicy,
                       route: admission_pb2.RouteRequest, now: dt.datetime | None = None) -> admission_pb2.AdmissionDecision:
    """The decision when the repository could not be trusted: nothing admitted, the attack named."""
    now = now or timestamps.now()
    decision = admission_pb2.AdmissionDecision(
        route_id=route.route_id, routable=False, policy_id=policy.policy_id,
        policy_digest=policy_lib.policy_digest(policy), decided_at=timestamps.format_utc(now),
        verifier=admission.VERIFIER)
    decision.reasons.append(f"{err.code}: record repository refused: {err}")
    for node in route.nodes:
        decision.lanes.add(node_id=node.node_id, lane_id=node.lane_id, routable=False,
                           reasons=[f"{err.code}: no verified repository view"])
    return decision


def refresh_and_decide(tracker: tracker_lib.Tracker, policy: admission_pb2.AdmissionPolicy,
                       route: admission_pb2.RouteRequest, now: dt.datetime | None = None,
                       extra_records: Sequence[admission.SignedInput] = ()):
    """(decision, view or None): refresh, then decide; a failed refresh is a refusal naming why."""
    try:
        view = tracker.refresh()
    except DistributionError as err:
        return refused_by_refresh(err, policy, route, now), None
    return decide_from_view(view, policy, route, now, extra_records), view
