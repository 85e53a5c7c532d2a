"""Signed admission decisions: an in-toto Statement with a SLSA Verification Summary (VSA v1)
predicate, in a DSSE envelope, built with in-toto-attestation and signed with securesystemslib.

The subject is the route (sha256 of its canonical JSON). The predicate's inputAttestations name
everything the decision relied on, by digest: every record offered, every revocation in force, the
log checkpoint; `policy` names the policy by digest. The Lanes-specific part ("lanes") keeps the
whole AdmissionDecision, the repository's metadata versions, the checkpoint, and an RFC 9162
inclusion proof of each admitting record against that checkpoint, so an auditor holding only the
summary and the checkpoint can re-check, later, why a route was admitted.
"""

from __future__ import annotations

import hashlib
import json

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from google.protobuf import json_format
from in_toto_attestation.predicates.vsa.v1 import vsa_pb2
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
from in_toto_attestation.v1.statement import Statement
from securesystemslib import dsse as ssl_dsse
from securesystemslib.signer import CryptoSigner, SSlibKey

from proto import admission_pb2, certification_pb2
from tools.admission import admission
from tools.policy import dsse, timestamps
from tools.policy.errors import BadSignatureError, MalformedEnvelopeError

VSA_PREDICATE_TYPE = "https://slsa.dev/verification_summary/v1"
INTOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
ROUTABLE_LEVEL = "LANES_ROUTABLE_V1"


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _hex(digest: str) -> str:
    return digest.split(":", 1)[1] if ":" in digest else digest


def route_digest(route: admission_pb2.RouteRequest) -> str:
    return hashlib.sha256(_canonical(json_format.MessageToDict(route, preserving_proto_field_name=True))).hexdigest()


def statement(decision: admission_pb2.AdmissionDecision, route: admission_pb2.RouteRequest, view=None) -> Statement:
    """The VSA statement for one decision; `view` (a TrackerView) adds revocations, checkpoint, proofs."""
    subject = ResourceDescriptor(name=f"route:{route.route_id or 'unnamed'}", digest={"sha256": route_digest(route)}).pb
    vsa = vsa_pb2.VerificationSummary()
    vsa.verifier.id = decision.verifier or admission.VERIFIER
    vsa.time_verified.FromJsonString(decision.decided_at or timestamps.format_utc(timestamps.now()))
    vsa.resource_uri = f"lanes:route:{route.route_id or 'unnamed'}"
    vsa.policy.uri = f"lanes:policy:{decision.policy_id}"
    vsa.policy.digest["sha256"] = _hex(decision.policy_digest)
    paths = {r.digest: r.target_path for r in view.records} if view is not None else {}
    for d in decision.input_record_digests:
        vsa.input_attestations.add(uri=paths.get(d, "lanes:record"), digest={"sha256": _hex(d)})
    lanes_part: dict = {"decision": json_format.MessageToDict(decision, preserving_proto_field_name=True)}
    if view is not None:
        for d, _ in view.revocations.items:
            vsa.input_attestations.add(uri="lanes:revocation", digest={"sha256": _hex(d)})
        vsa.input_attestations.add(uri="log/checkpoint.dsse.json", digest={"sha256": _hex(view.checkpoint_digest)})
        admitting = sorted({lane.record_id for lane in decision.lanes if lane.routable})
        proofs = {}
        for r in view.records:
            rec_id = _record_id(r.envelope)
            if rec_id in admitting and r.digest in view.log_index_by_digest:
                # A JSON string: the Struct predicate would turn the proof's integers into floats.
                    proofs[r.digest] = {"log_index": str(view.log_index_by_digest[r.digest]),
                                        "proof": json.dumps(view.inclusion_proof(r.digest), sort_keys=True)}
        lanes_part.update({
            "repository_versions": view.versions,
            "revocations": view.revocations.digests,
            "checkpoint": json_format.MessageToDict(view.checkpoint, preserving_proto_field_name=True),
            "inclusion_proofs": proofs,
        })
    vsa.verification_result = "PASSED" if decision.routable else "FAILED"
    predicate = json_format.MessageToDict(vsa)
    # The VSA v1 spec makes verifiedLevels an array of strings; in-toto-attestation 0.9.3's proto
    # has a single string there, so the (spec) array is set on the JSON.
    predicate["verifiedLevels"] = [ROUTABLE_LEVEL] if decision.routable else []
    predicate["lanes"] = lanes_part
    st = Statement([subject], VSA_PREDICATE_TYPE, predicate)
    st.validate()
    return st


def _record_id(env) -> str:
    try:
        return certification_pb2.CertificationRecord.FromString(env.payload).record_id
    except Exception:  # noqa: BLE001 - a compatibility record or garbage: no admitting record id
        return ""


def _key(public: Ed25519PublicKey) -> SSlibKey:
    # Lanes key ids (sha256 of the raw key) so the summary names the same key as records do.
    return SSlibKey.from_crypto(public, keyid=dsse.keyid_for(public))


def sign(st: Statement, key: Ed25519PrivateKey) -> dict:
    """The DSSE envelope (JSON-ready dict) over the statement."""
    payload = _canonical(json_format.MessageToDict(st.pb))
    env = ssl_dsse.Envelope(payload=payload, payload_type=INTOTO_PAYLOAD_TYPE, signatures={})
    env.sign(CryptoSigner(key, _key(key.public_key())))
    return env.to_dict()


def verify(envelope: dict, public: Ed25519PublicKey) -> dict:
    """The statement (dict) if `envelope` is a summary signed by `public`; raises otherwise."""
    try:
        env = ssl_dsse.Envelope.from_dict(json.loads(json.dumps(envelope)))
    except Exception as err:  # noqa: BLE001 - any malformed envelope
        raise MalformedEnvelopeError(f"not a DSSE envelope ({err})") from err
    if env.payload_type != INTOTO_PAYLOAD_TYPE:
        raise MalformedEnvelopeError(f"payloadType {env.payload_type!r}, expected {INTOTO_PAYLOAD_TYPE}")
    try:
        env.verify([_key(public)], 1)
    except Exception as err:  # noqa: BLE001 - securesystemslib raises VerificationError
        raise BadSignatureError(f"decision summary signature does not verify ({err})") from err
    st = json.loads(env.payload)
    if st.get("predicateType") != VSA_PREDICATE_TYPE:
        raise MalformedEnvelopeError(f"predicateType {st.get('predicateType')!r}, expected {VSA_PREDICATE_TYPE}")
    return st
