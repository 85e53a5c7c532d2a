"""Signed revocations: withdraw records by digest, by scope or by issuer key, and match them.

A revocation is a Revocation (proto/distribution.proto) as canonical JSON in a DSSE envelope signed
by a current targets key of the repository. Exactly one of record_digest / scope / issuer_keyid is
set: a revocation that could be read two ways is refused, never resolved.

A record digest is records.record_digest: sha256 over the DSSE PAE of what was signed, so a
re-serialised copy of a revoked record (re-indented, other base64, no keyid) is still revoked. A
revocation by issuer key covers the records whose signature verified with that key, whatever keyid
hint (or none) the envelope carries: DSSE's keyid is unauthenticated and decides nothing here.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import pathlib
from collections.abc import Collection, Iterable, Sequence

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from google.protobuf import json_format

from proto import certification_pb2, distribution_pb2, runner_report_pb2
from tools.certify import records
from tools.policy import dsse, safe_io, timestamps, trust
from tools.policy.errors import TrustError
from tools.publish.distribution_errors import MalformedRevocationError

SCHEMA_VERSION = 1
PAYLOAD_TYPE = "application/vnd.lanes.revocation.v1+json"
REVOKED = "revoked"

_DC_FIELDS = tuple(f.name for f in runner_report_pb2.DeviceClass.DESCRIPTOR.fields if f.name != "isa_features")
# Message fields (gpu_set): an unset one reads as an empty, truthy message; presence is HasField.
_DC_MESSAGE_FIELDS = frozenset(f.name for f in runner_report_pb2.DeviceClass.DESCRIPTOR.fields
                               if f.message_type is not None and not f.is_repeated)


def _names(dc: runner_report_pb2.DeviceClass, field: str) -> bool:
    """Whether a revocation's device class states `field` (an unstated field matches any value)."""
    return dc.HasField(field) if field in _DC_MESSAGE_FIELDS else bool(getattr(dc, field))


def canonical_json(msg) -> bytes:
    """Sorted keys, no whitespace: one byte string per message, so a digest names one revocation."""
    obj = json_format.MessageToDict(msg, preserving_proto_field_name=True)
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def validate(rev: distribution_pb2.Revocation, source: str = "revocation") -> None:
    if rev.schema_version != SCHEMA_VERSION:
        raise MalformedRevocationError(f"{source}: schema_version {rev.schema_version}, this tool reads {SCHEMA_VERSION}")
    kinds = [k for k, present in (("record_digest", rev.record_digest), ("scope", rev.HasField("scope")),
                                  ("issuer_keyid", rev.issuer_keyid)) if present]
    if len(kinds) != 1:
        raise MalformedRevocationError(
            f"{source}: names {kinds or 'nothing'}; a revocation names exactly one of record_digest, scope, issuer_keyid")
    if rev.HasField("scope") and not rev.scope.lane_id and not any(
            _names(rev.scope.device_class, f) for f in _DC_FIELDS):
        raise MalformedRevocationError(f"{source}: an empty scope would revoke everything; name a lane or device class")
    if rev.record_digest and not rev.record_digest.startswith("sha256:"):
        raise MalformedRevocationError(f"{source}: record_digest must be 'sha256:<hex>' over the record's DSSE PAE "
                                       "(publish --mode=revoke --record=<file> computes it)")
    if rev.issuer_keyid:
        if len(rev.issuer_public_key) != 32 or dsse.keyid_for(bytes(rev.issuer_public_key)) != rev.issuer_keyid:
            raise MalformedRevocationError(f"{source}: issuer_public_key must be the raw key whose sha256 is issuer_keyid")
        if rev.effective_from:
            timestamps.parse_utc(rev.effective_from, f"{source} effective_from")
    elif rev.effective_from or rev.issuer_public_key:
        raise MalformedRevocationError(f"{source}: effective_from/issuer_public_key belong to a revocation by issuer key")
    if not rev.reason:
        raise MalformedRevocationError(f"{source}: give a reason; Trackers show it as 'revoked: <reason>'")
    timestamps.parse_utc(rev.issued_at, f"{source} issued_at")


def make(*, reason: str, now: dt.datetime, record_digest: str = "", lane_id: str = "",
         device_class: runner_report_pb2.DeviceClass | None = None, issuer_public_key: bytes = b"",
         effective_from: dt.datetime | None = None) -> distribution_pb2.Revocation:
    rev = distribution_pb2.Revocation(schema_version=SCHEMA_VERSION, record_digest=record_digest, reason=reason,
                                      issued_at=timestamps.format_utc(now))
    if lane_id or device_class is not None:
        rev.scope.lane_id = lane_id
        if device_class is not None:
            rev.scope.device_class.CopyFrom(device_class)
    if issuer_public_key:
        rev.issuer_public_key = issuer_public_key
        rev.issuer_keyid = dsse.keyid_for(issuer_public_key)
        if effective_from is not None:
            rev.effective_from = timestamps.format_utc(effective_from)
    validate(rev)
    return rev


def sign(rev: distribution_pb2.Revocation, key: Ed25519PrivateKey) -> certification_pb2.Envelope:
    rev.issuer = dsse.keyid_for(key)
    validate(rev)
    return dsse.sign(PAYLOAD_TYPE, canonical_json(rev), key)


def verify(env: certification_pb2.Envelope, store: trust.TrustStore, source: str = "revocation") -> distribution_pb2.Revocation:
    """The revocation if signed by a key of `store` and well formed; raises a TrustError otherwise."""
    if env.payload_type != PAYLOAD_TYPE:
        raise MalformedRevocationError(f"{source}: payload type {env.payload_type!r}, expected {PAYLOAD_TYPE}")
    keyids = dsse.verify(env, store.public_keys)
    rev = distribution_pb2.Revocation()
    try:
        json_format.ParseDict(dsse.loads_strict(env.payload), rev)
    except (TrustError, json_format.ParseError) as err:
        raise MalformedRevocationError(f"{source}: payload is not a Revocation ({err})") from err
    if rev.issuer not in keyids:
        raise MalformedRevocationError(f"{source}: names issuer {rev.issuer[:16]}.. but is signed by {keyids[0][:16]}..")
    validate(rev, source)
    return rev


@dataclasses.dataclass(frozen=True)
class RevocationSet:
    """Every verified revocation a decision relies on, with the digest naming each one."""

    items: tuple[tuple[str, distribution_pb2.Revocation], ...] = ()

    @property
    def digests(self) -> list[str]:
        return sorted(d for d, _ in self.items)

    def reason(self, record_digest: str, record, verified_keyids: Iterable[str]) -> str:
        """'revoked: <reason> (revocation <digest>)' for the first revocation that covers the record
        (every match is refusal, so order does not change the outcome); empty when none does.
        `verified_keyids`: the keys whose signatures over the record verified (dsse.verify's result),
        never the keyids written in the envelope."""
        verified = frozenset(verified_keyids)
        for digest, r in self.items:
            if _covers(r, record_digest, record, verified):
                return f"{REVOKED}: {r.reason} (revocation {digest[:23]})"
        return ""


def _covers(r: distribution_pb2.Revocation, record_digest: str, record, verified_keyids: frozenset[str]) -> bool:
    if r.record_digest:
        return r.record_digest == record_digest
    if r.issuer_keyid:
        if r.issuer_keyid not in verified_keyids:
            return False
        if not r.effective_from:
            return True
        issued = getattr(record, "issued_at", "")
        try:
            return timestamps.parse_utc(issued) >= timestamps.parse_utc(r.effective_from)
        except TrustError:
            return True  # no readable issue time: cannot prove it predates the revocation
    scope = getattr(record, "scope", None)
    if scope is None:  # a compatibility record: revoked by scope when any of its lanes matches
        lanes = [(entry.lane_id, entry.device_class) for entry in getattr(record, "lanes", [])]
    else:
        lanes = [(scope.lane_id, scope.device_class)]
    for lane_id, dc in lanes:
        if r.scope.lane_id and r.scope.lane_id != lane_id:
            continue
        if all(not _names(r.scope.device_class, f) or getattr(r.scope.device_class, f) == getattr(dc, f)
               for f in _DC_FIELDS):
            return True
    return False


def record_digest_of_file(data: bytes) -> str:
    """The digest a revocation names a record file by (records.record_digest of its envelope)."""
    return records.record_digest_of_json(data)


def verify_all(pending: Sequence[tuple[str, certification_pb2.Envelope]], current: trust.TrustStore,
               known_keyids: Collection[str]) -> tuple[list[tuple[str, distribution_pb2.Revocation]],
                                                       dict[str, Ed25519PublicKey]]:
    """(verified revocations with their digests, the keys records may verify with) for every
    (source, envelope) served, or MalformedRevocationError naming the first that does not verify.

    Revocations signed by current targets keys first; then those signed by a key a verified
    revocation names (a revocation published before a rotation, signed by the key it now retires):
    revocations only withdraw. A key a revocation names joins the record keys (so that what it
    signed before its retirement can stand, and what it signed later is refused as revoked) only
    if it is in `known_keyids`, the targets keys some root listed: revoking a key that was never
    trusted must not make its signatures verify.
    """
    revs: list[tuple[str, distribution_pb2.Revocation]] = []
    signer_keys: dict[str, Ed25519PublicKey] = dict(current.public_keys)
    known = frozenset(known_keyids) | frozenset(current.public_keys)
    left = list(pending)
    for last_round in (False, True):
        store = trust.as_trust_store(signer_keys)
        retry = []
        for source, env in left:
            try:
                revs.append((records.record_digest(env), verify(env, store, source)))
            except TrustError as err:
                if last_round:
                    raise MalformedRevocationError(f"revocation {source} does not verify ({err.code}: {err}); "
                                                   "nothing is admitted while a revocation cannot be read") from err
                retry.append((source, env))
        left = retry
        for _, r in revs:
            if r.issuer_keyid and r.issuer_keyid in known and r.issuer_keyid not in signer_keys:
                signer_keys[r.issuer_keyid] = Ed25519PublicKey.from_public_bytes(bytes(r.issuer_public_key))
    return sorted(revs, key=lambda x: x[0]), signer_keys


def load_dir(directory: pathlib.Path | str, store: trust.TrustStore) -> tuple[RevocationSet, list[str]]:
    """(verified revocations, problems) from every *.dsse.json in a directory (a copy of a
    repository's revocations/, e.g. evidence/revocations). An unusable file is one problem, and
    any problem must make the caller fail closed (a revocation that cannot be read could be the one
    that matters). A missing directory is no revocations."""
    directory = pathlib.Path(directory)
    if not directory.is_dir():
        return RevocationSet(), []
    items, problems = [], []
    for path in sorted(directory.glob("*.dsse.json")):
        try:
            env = dsse.envelope_from_json(safe_io.read_regular_file(path, follow_symlinks=False))
            items.append((records.record_digest(env), verify(env, store, str(path))))
        except TrustError as err:
            problems.append(f"{path.name}: {err.code}: {err}")
    return RevocationSet(tuple(items)), problems
