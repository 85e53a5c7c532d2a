"""CertificationRecord and CompatibilityRecord: made from a runner report, signed into DSSE, verified.

The payload type names the schema version ("...certification-record.v1+protobuf"); a verifier decodes
each known version with its own message and fields (tools/certify/schema_versions.py) and refuses
versions it does not know instead of guessing at their meaning.

A signed payload must be unambiguous (MalformedRecordError otherwise):
- No field is ignorable in a signed payload: a field this schema does not define (protobuf keeps it
  as an unknown field) is refused, since a newer signer may have meant it to restrict the record;
  so is a field the payload's own version does not define.
- The payload must be the canonical (deterministic) encoding of the record it decodes to; protobuf
  silently keeps the last of two encodings of one field, so a non-canonical payload could mean two
  things to two parsers.
- Artifact paths, check names, model shard names, lane ids and record ids are each listed once: with
  two entries one reader would take the first, another the last, and order would decide trust.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Collection
from typing import TypeVar

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import message as pb_message
from google.protobuf import unknown_fields as pb_unknown_fields

from proto import certification_pb2, runner_report_pb2
from tools.certify import schema_versions
from tools.core import digest as core_digest
from tools.policy import dsse, timestamps, trust
from tools.policy import policy as policy_lib
from tools.policy.errors import (
    ExpiredRecordError,
    IncompleteReportError,
    IssuerMismatchError,
    MalformedEnvelopeError,
    MalformedRecordError,
    NotRecordableError,
    NotYetValidError,
    ReportDigestError,
    UnsupportedSchemaError,
)
from tools.runner import gpu_set

# The versions this signer writes; verification accepts every version in schema_versions.
CERTIFICATION_SCHEMA_VERSION = 1
COMPATIBILITY_SCHEMA_VERSION = 2  # v2 carries the recipe the route was measured under
SUPPORTED_REPORT_SCHEMA_VERSIONS = frozenset({1})

CERTIFICATION_FAMILY = schema_versions.CERTIFICATION_FAMILY
COMPATIBILITY_FAMILY = schema_versions.COMPATIBILITY_FAMILY

# Clocks differ a little between the signer and the verifier; more than this is a problem.
CLOCK_SKEW = dt.timedelta(minutes=5)

Record = TypeVar("Record", certification_pb2.CertificationRecord, certification_pb2.CompatibilityRecord)

_PASS = runner_report_pb2.CheckResult.PASS


def payload_type(family: str, version: int) -> str:
    return f"{family}.v{version}+protobuf"


CERTIFICATION_PAYLOAD_TYPE = payload_type(CERTIFICATION_FAMILY, CERTIFICATION_SCHEMA_VERSION)

_PAYLOAD_TYPE_RE = re.compile(r"^(?P<family>.+)\.v(?P<version>[0-9]+)\+protobuf$")


def sha256_digest(data: bytes) -> str:
    return "sha256:" + core_digest.sha256_bytes(data)


def record_digest(env: dsse.Envelope) -> str:
    """The digest naming a record (or revocation) for revocation, dedup, the transparency log and
    decisions: sha256 over the DSSE PAE of its payload type and payload, i.e. what was signed, never
    the envelope file's bytes (a re-indented or re-encoded copy is the same record)."""
    return dsse.envelope_digest(env)


def record_digest_of_json(data: bytes | str) -> str:
    """record_digest of an envelope file's bytes (parsed strictly; MalformedEnvelopeError otherwise)."""
    return record_digest(dsse.envelope_from_json(data))


def device_class_slug(dc: runner_report_pb2.DeviceClass) -> str:
    """File-name-safe summary of the scope key, e.g. "cuda-nvidia-h200-9.0-580"."""
    parts = gpu_set.slug_parts(dc)  # a multi-GPU class: e.g. "cuda-2x-nvidia-h200-9.0-580-nv18"
    if parts is None:
        parts = [dc.backend]
        if dc.vendor and dc.vendor.lower() not in dc.device_name.lower():
            parts.append(dc.vendor)
        parts += [dc.device_name, dc.compute_capability, dc.driver_major]
    text = "-".join(p for p in parts if p).lower()
    text = re.sub(r"[^a-z0-9.]+", "-", text).strip("-.")
    return re.sub(r"-{2,}", "-", text) or "unknown-device"


def run_name(lane_id: str, device_class: runner_report_pb2.DeviceClass, model) -> str:
    """<lane>.<device class> for the embedded model; other models add the first 12 hex digits of
    their sha256, so one lane and device class holds a record per model it was certified with."""
    base = f"{lane_id}.{device_class_slug(device_class)}"
    if model.source.startswith("embedded://") or not model.sha256:
        return base
    return f"{base}.{model.sha256.lower().removeprefix('sha256:')[:12]}"


def record_file_name(record: certification_pb2.CertificationRecord) -> str:
    return f"{run_name(record.scope.lane_id, record.scope.device_class, record.model)}.record.dsse.json"


def _check_recordable(report: runner_report_pb2.RunnerReport) -> None:
    where = f"report for lane {report.lane_id or '?'}"
    if report.schema_version not in SUPPORTED_REPORT_SCHEMA_VERSIONS:
        raise UnsupportedSchemaError(
            f"{where}: RunnerReport schema_version {report.schema_version}; this signer reads "
            f"{sorted(SUPPORTED_REPORT_SCHEMA_VERSIONS)}. Update tools/certify or rerun with a matching runner"
        )
    if not report.pass_recordable:
        why = "; ".join(report.non_recordable_reasons) or "no reason given"
        raise NotRecordableError(
            f"{where} is not pass_recordable ({why}); rerun the runner without skip/diagnostic switches"
        )
    if report.status != runner_report_pb2.RunnerReport.PASS:
        status = runner_report_pb2.RunnerReport.Status.Name(report.status)
        raise NotRecordableError(f"{where} has status {status}; only a PASS run can be certified")
    required = [c for c in report.checks if c.required]
    if not required:
        raise NotRecordableError(f"{where} lists no required checks; a record must rest on checks that ran")
    failed = [f"{c.name}={runner_report_pb2.CheckResult.Status.Name(c.status)}" for c in required if c.status != _PASS]
    if failed:
        raise NotRecordableError(
            f"{where}: required checks not PASS ({', '.join(failed)}) although the report claims "
            "pass_recordable; the runner is inconsistent, fix it and rerun"
        )
    missing = [
        name
        for name, present in (
            ("lane_id", report.lane_id),
            ("device_class.backend", report.device_class.backend),
            ("device_class.os", report.device_class.os),
            ("device_class.arch", report.device_class.arch),
            ("build_evidence_digest", report.build_evidence_digest),
            ("artifacts", len(report.artifacts)),
            ("model.sha256", report.model.sha256),
            # A record proves a recipe (KV types, flash attention, offload, sizes); without one it
            # would prove nothing admission can compare a route against.
            ("recipe", report.HasField("recipe") and report.recipe.kv_cache_types and report.recipe.flash_attention),
        )
        if not present
    ]
    if missing:
        raise IncompleteReportError(f"{where} lacks {', '.join(missing)}; the runner must fill them before signing")


def record_from_report(
    report: runner_report_pb2.RunnerReport,
    report_bytes: bytes,
    issuer_keyid: str,
    issued_at: dt.datetime,
    validity_days: int,
    policy_id: str,
) -> certification_pb2.CertificationRecord:
    """The record attesting `report`; raises unless the report is a recordable PASS (checked again here)."""
    _check_recordable(report)
    if runner_report_pb2.RunnerReport.FromString(report_bytes) != report:
        raise ReportDigestError("report_bytes do not decode to the report given; pass the bytes read from disk")
    if validity_days <= 0:
        raise ValueError(f"validity_days must be positive, got {validity_days}")
    issued = timestamps.format_utc(issued_at)
    digest = sha256_digest(report_bytes)
    record = certification_pb2.CertificationRecord(
        schema_version=CERTIFICATION_SCHEMA_VERSION,
        record_id=core_digest.sha256_bytes(f"{digest}\n{issued}".encode()),
        report_digest=digest,
        build_evidence_digest=report.build_evidence_digest,
        upstream_commit=report.upstream_commit,
        patch_stack_digest=report.patch_stack_digest,
        issuer=issuer_keyid,
        issued_at=issued,
        expires_at=timestamps.format_utc(issued_at + dt.timedelta(days=validity_days)),
        policy_id=policy_id,
        build_provenance=report.build_provenance,
    )
    record.scope.lane_id = report.lane_id
    record.scope.device_class.CopyFrom(report.device_class)
    record.artifacts.extend(report.artifacts)
    record.model.CopyFrom(report.model)  # incl. every GGUF split's sha256/size
    record.recipe.CopyFrom(report.recipe)
    for c in report.checks:
        summary = record.checks.add(name=c.name, status=c.status, required=c.required)
        summary.counts.update(c.counts)
        summary.metrics.update(c.metrics)
        for key, value in c.metrics.items():
            record.metrics[f"{c.name}.{key}"] = value
    return record


def _sign(record: Record, family: str, private_key: Ed25519PrivateKey) -> dsse.Envelope:
    keyid = dsse.keyid_for(private_key)
    if record.issuer and record.issuer != keyid:
        raise IssuerMismatchError(
            f"record names issuer {record.issuer[:16]}.. but the signing key is {keyid[:16]}..; "
            "sign with the issuer's key or rebuild the record"
        )
    record.issuer = keyid
    return dsse.sign(payload_type(family, record.schema_version), record.SerializeToString(deterministic=True), private_key)


def sign_record(record: certification_pb2.CertificationRecord, private_key: Ed25519PrivateKey) -> dsse.Envelope:
    return _sign(record, CERTIFICATION_FAMILY, private_key)


def sign_compatibility(record: certification_pb2.CompatibilityRecord, private_key: Ed25519PrivateKey) -> dsse.Envelope:
    return _sign(record, COMPATIBILITY_FAMILY, private_key)


def _unknown_fields(msg: pb_message.Message, where: str) -> list[str]:
    """Paths of (sub)messages that carry fields this schema does not define."""
    out = [where or "(record)"] if len(pb_unknown_fields.UnknownFieldSet(msg)) else []
    for fd, value in msg.ListFields():
        name = f"{where}.{fd.name}" if where else fd.name
        if fd.enum_type is not None:  # proto3 keeps undefined enum numbers: unknown values, same rule
            for v in (value if fd.is_repeated else [value]):
                if v not in fd.enum_type.values_by_number:
                    out.append(f"{name}={v}")
            continue
        if fd.message_type is None:
            continue
        if fd.message_type.GetOptions().map_entry:
            value_fd = fd.message_type.fields_by_name["value"]
            if value_fd.message_type is not None:
                for k, v in value.items():
                    out += _unknown_fields(v, f"{name}[{k!r}]")
        elif fd.is_repeated:
            for i, v in enumerate(value):
                out += _unknown_fields(v, f"{name}[{i}]")
        else:
            out += _unknown_fields(value, name)
    return out


def _first_duplicate(values) -> str | None:
    seen = set()
    for v in values:
        if v in seen:
            return v
        seen.add(v)
    return None


def check_well_formed(record: Record, payload: bytes) -> None:
    """Raises MalformedRecordError unless `record`, decoded from `payload`, is unambiguous (see module doc)."""
    unknown = _unknown_fields(record, "")
    if unknown:
        raise MalformedRecordError(
            f"unknown field(s) in signed payload at {', '.join(unknown[:5])}; no field is ignorable in a "
            "signed payload: update tools/certify or re-issue the record"
        )
    if record.SerializeToString(deterministic=True) != payload:
        raise MalformedRecordError("signed payload is not the canonical encoding of its record; re-issue the record")
    # By message name: every schema version of a certification record decodes to its own class.
    if record.DESCRIPTOR.full_name == certification_pb2.CertificationRecord.DESCRIPTOR.full_name:
        lists = (("artifact path", [a.path for a in record.artifacts]),
                 ("check", [c.name for c in record.checks]),
                 ("model shard", [m.name for m in record.model.shards]))
    else:
        lists = (("lane", list(record.lane_ids)), ("certification record id", list(record.certification_record_ids)))
    for label, values in lists:
        dup = _first_duplicate(values)
        if dup is not None:
            raise MalformedRecordError(f"duplicate {label} {dup}; every entry must be listed once")


def _undefined_fields(record: pb_message.Message, schema: schema_versions.SchemaVersion) -> list[str]:
    return sorted(fd.name for fd, _ in record.ListFields() if fd.name not in schema.fields)


def _verify(env: dsse.Envelope, trusted, schemas: schema_versions.SchemaFamily,
            supported_versions: Collection[int] | None):
    store = trust.as_trust_store(trusted)
    verified = dsse.verify(env, store.public_keys)  # signature first: nothing below reads unsigned bytes
    m = _PAYLOAD_TYPE_RE.match(env.payload_type)
    if not m or m["family"] != schemas.family:
        raise UnsupportedSchemaError(f"payload type {env.payload_type!r} is not {schemas.family}.v<N>+protobuf")
    version = int(m["version"])
    accepted = policy_lib.accepted_record_schema_versions(supported_versions, schemas.known())
    schema = schemas.get(version)
    if schema is None or version not in accepted:
        raise UnsupportedSchemaError(
            f"payload type {env.payload_type!r}: schema v{version}, accepted {sorted(accepted)}; "
            "update tools/certify and the policy's supported_record_schema_versions, or re-issue the record"
        )
    try:
        record = schema.message.FromString(env.payload)
    except pb_message.DecodeError as err:
        raise MalformedEnvelopeError(f"signed payload is not a {schema.message.__name__} ({err})") from err
    check_well_formed(record, env.payload)
    undefined = _undefined_fields(record, schema)
    if undefined:
        raise MalformedRecordError(
            f"signed payload sets {', '.join(undefined)}, not defined in schema v{version}; re-issue the record"
        )
    if record.schema_version != version:
        raise UnsupportedSchemaError(
            f"payload schema_version {record.schema_version} disagrees with payload type v{version}; re-issue the record"
        )
    if record.issuer not in verified:
        raise IssuerMismatchError(
            f"record names issuer {record.issuer[:16] or '(none)'}.. but was signed by {verified[0][:16]}..; "
            "re-issue the record"
        )
    return record


def verify_record(
    env: dsse.Envelope, trusted, supported_versions: Collection[int] | None = None
) -> certification_pb2.CertificationRecord:
    """Checks signature by a trusted key, payload type, schema version (known, accepted by
    `supported_versions`: empty or None for every known one) and that the payload is unambiguous
    (no unknown fields, none its version lacks, canonical, no duplicates: see the module doc);
    returns the record, decoded with its version's message.

    `trusted`: a trust.TrustStore, the policy's TrustedKey list, or keyid -> Ed25519PublicKey.
    Time checks (expiry, key window) are separate: check_times(), since they need `now`.
    """
    return _verify(env, trusted, schema_versions.CERTIFICATION, supported_versions)


def verify_compatibility(
    env: dsse.Envelope, trusted, supported_versions: Collection[int] | None = None
) -> certification_pb2.CompatibilityRecord:
    return _verify(env, trusted, schema_versions.COMPATIBILITY, supported_versions)


@dataclasses.dataclass(frozen=True)
class Times:
    issued_at: dt.datetime
    expires_at: dt.datetime


def check_times(record: Record, trusted, now: dt.datetime, max_age_days: int = 0) -> Times:
    """Raises unless the record is current: issued not in the future, unexpired, young enough, and
    signed by a key valid both at issue time and now."""
    store = trust.as_trust_store(trusted)
    issued = timestamps.parse_utc(record.issued_at, "issued_at")
    expires = timestamps.parse_utc(record.expires_at, "expires_at")
    if issued > now + CLOCK_SKEW:
        raise NotYetValidError(
            f"issued_at {record.issued_at} is after now ({timestamps.format_utc(now)}); check the signer's clock"
        )
    store.check_window(record.issuer, issued, now)
    if expires <= now:
        raise ExpiredRecordError(f"expired at {record.expires_at}; re-certify the lane")
    # A policy may say any uint32 number of days; timedelta stops at 999,999,999 days, far past any age.
    if max_age_days and now - issued > dt.timedelta(days=min(max_age_days, dt.timedelta.max.days)):
        raise ExpiredRecordError(
            f"issued {record.issued_at}, older than the policy's {max_age_days} days; re-certify the lane"
        )
    return Times(issued, expires)
