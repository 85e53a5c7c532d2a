"""Certification: signing runner reports into records, verifying records, in-toto export.

Signing refuses a run the audit (tools/audit/audit.py) does not pass over its run directory (the
report plus its logs and build evidence), a report that is not recordable, and a key the policy does
not trust (now and at the record's issue time): a record admission would refuse is useless, so it is
refused here first. A report is never signed on its own word.
`certify_cli.py` is the command line over these functions; the main job (tools/job) calls them too.
"""

from __future__ import annotations

import datetime as dt
import json
import pathlib
from collections.abc import Callable

from google.protobuf import json_format

from proto import certification_pb2, runner_report_pb2
from tools.audit import audit
from tools.certify import intoto, records
from tools.core import atomic_files
from tools.policy import dsse, keys, safe_io, timestamps
from tools.policy import policy as policy_lib
from tools.policy.errors import (
    IncompleteReportError,
    NotRecordableError,
    TrustError,
    UnknownKeyError,
    UnreadableInputError,
)
from tools.runner.runner import RUNNER_VERSION


class AuditFailedError(NotRecordableError):
    """The run directory of the report does not audit: nothing is signed."""

    code = "audit-failed"


# Findings quoted in the refusal (the audit CLI prints them all), those that say why a claim is false first.
QUOTED_FINDINGS = 5
_FIRST = ("required", "verdict", "raw-file", "recompute")


def require_audited(run_dir: pathlib.Path, policy_path: pathlib.Path | str,
                    spec_path: pathlib.Path | str | None = None) -> audit.AuditResult:
    """The audit of run_dir (every digest, figure and verdict re-derived; `required` from the lane
    spec and the policy); AuditFailedError naming the run dir and its first findings unless it passes."""
    try:
        lane_id = runner_report_pb2.RunnerReport.FromString((pathlib.Path(run_dir) / audit.REPORT_PB).read_bytes()).lane_id
    except Exception:  # OSError, DecodeError: the audit names it
        lane_id = ""
    policy_required = policy_lib.required_checks_for(policy_lib.load_policy(policy_path), lane_id)
    result = audit.audit_run(run_dir, require_readme=False, spec=pathlib.Path(spec_path) if spec_path else None,
                             policy_required=policy_required)
    if not result.ok:
        ordered = sorted(result.findings, key=lambda f: _FIRST.index(f.kind) if f.kind in _FIRST else len(_FIRST))
        first = "; ".join(str(f) for f in ordered[:QUOTED_FINDINGS])
        more = len(result.findings) - QUOTED_FINDINGS
        raise AuditFailedError(f"{run_dir} does not audit ({len(result.findings)} finding(s): {first}"
                               + (f"; +{more} more" if more > 0 else "")
                               + f"); nothing signed. All findings: bazel run //tools:audit -- {run_dir}")
    return result


def _write_atomically(path: pathlib.Path, text: str) -> None:
    # Temp sibling + fsync + rename + dir fsync; AtomicWriteError (an OSError) names the file.
    atomic_files.write_text_atomic(path, text)


def _require_trusted(env: dsse.Envelope, store, policy_id: str, verify_fn, now: dt.datetime, max_age: int):
    """A record the policy would refuse is useless; say so at signing time, not at admission."""
    keyid = env.signatures[0].keyid
    if keyid not in store:
        raise UnknownKeyError(
            f"signing key {keyid[:16]}.. is not trusted by policy {policy_id}; add it with "
            "tools/admission/policy_tool.py --public_key=<name>.pub, or sign with a trusted key"
        )
    rec = verify_fn(env, store)
    records.check_times(rec, store, now, max_age)
    return rec


def _sign_trusted(sign: Callable[[object, str, dt.datetime], tuple[str, dsse.Envelope]], verify_fn,
                  key_path: pathlib.Path | str, policy_path: pathlib.Path | str, out_dir: pathlib.Path | str,
                  now: dt.datetime | None) -> pathlib.Path:
    """Signs with the key at key_path (`sign(key, policy_id, now)` -> file name and envelope), refuses a
    key the policy does not trust, and writes the envelope to <out_dir>/<file name>; returns that path."""
    policy = policy_lib.load_policy(policy_path)
    store = policy_lib.validate(policy, str(policy_path))
    now = now or timestamps.now()
    name, env = sign(keys.load_private_key(key_path), policy.policy_id, now)
    _require_trusted(env, store, policy.policy_id, verify_fn, now, policy.max_record_age_days)
    path = pathlib.Path(out_dir) / name
    _write_atomically(path, dsse.envelope_to_json(env))
    return path


def sign_report(
    report_bytes: bytes, private_key, policy_id: str, validity_days: int, now: dt.datetime | None = None
) -> tuple[certification_pb2.CertificationRecord, dsse.Envelope]:
    """Record + envelope for a binary RunnerReport; raises NotRecordableError for a non-recordable one."""
    report = runner_report_pb2.RunnerReport()
    try:
        report.ParseFromString(report_bytes)
    except Exception as err:  # protobuf's DecodeError
        raise UnreadableInputError(f"not a binary RunnerReport ({err}); pass the runner's .pb output") from err
    record = records.record_from_report(
        report, report_bytes, dsse.keyid_for(private_key), now or timestamps.now(), validity_days, policy_id
    )
    return record, records.sign_record(record, private_key)


def require_current_runner(report_path: pathlib.Path, report_bytes: bytes) -> None:
    """Only runs of this runner are signed: the audit judges an older runner's run by that runner's
    (weaker) rules, which keeps committed history auditable but must never mint a new record."""
    try:
        version = runner_report_pb2.RunnerReport.FromString(report_bytes).runner_version
    except Exception as err:  # DecodeError
        raise UnreadableInputError(f"{report_path}: not a runner report ({err})") from err
    if version != RUNNER_VERSION:
        raise AuditFailedError(f"{report_path} was made by {version or 'an unnamed runner'}; only runs of "
                               f"{RUNNER_VERSION} are signed (re-run the certification); nothing signed")


def certify_report(
    report_path: pathlib.Path | str,
    key_path: pathlib.Path | str,
    policy_path: pathlib.Path | str,
    out_dir: pathlib.Path | str,
    validity_days: int,
    now: dt.datetime | None = None,
    spec_path: pathlib.Path | str | None = None,
) -> pathlib.Path:
    """Signs the report into <out_dir>/<lane>.<device-class>.record.dsse.json and returns that path.

    The report must be <run dir>/runner_report.pb of a run directory that audits (require_audited;
    spec_path: the lane spec, default the audit's). Refuses a non-recordable report, and a key the
    policy does not trust (now and at issue time). Nothing is written when it refuses.
    """
    report_path = pathlib.Path(report_path)
    if report_path.suffix == ".json":
        raise UnreadableInputError(f"{report_path}: pass the binary report (.pb); its digest is what the record names")
    if report_path.name != audit.REPORT_PB:
        raise UnreadableInputError(f"{report_path}: pass a run directory's {audit.REPORT_PB} (the audit re-derives it "
                                   "from the logs and build evidence beside it)")
    try:
        report_bytes = report_path.read_bytes()
    except OSError as err:
        raise UnreadableInputError(f"{report_path}: cannot read runner report ({err.strerror})") from err
    require_current_runner(report_path, report_bytes)
    require_audited(report_path.parent, policy_path, spec_path)
    if report_path.read_bytes() != report_bytes:  # what was audited is what is signed
        raise AuditFailedError(f"{report_path} changed while it was audited; nothing signed")

    def sign(key, policy_id: str, now: dt.datetime) -> tuple[str, dsse.Envelope]:
        record, env = sign_report(report_bytes, key, policy_id, validity_days, now)
        return records.record_file_name(record), env

    return _sign_trusted(sign, records.verify_record, key_path, policy_path, out_dir, now)


def sign_compatibility_file(
    compat_path: pathlib.Path | str,
    key_path: pathlib.Path | str,
    policy_path: pathlib.Path | str,
    out_dir: pathlib.Path | str,
    validity_days: int,
    now: dt.datetime | None = None,
) -> pathlib.Path:
    """Signs a CompatibilityRecord JSON into <out_dir>/<lanes>.<model12>.compat.dsse.json."""
    rec = certification_pb2.CompatibilityRecord()
    try:
        json_format.Parse(pathlib.Path(compat_path).read_text(), rec)
    except (OSError, json_format.ParseError) as err:
        raise UnreadableInputError(f"{compat_path}: not a readable CompatibilityRecord JSON ({err})") from err
    if len(set(rec.lane_ids)) < 2 or not rec.model_sha256:
        raise IncompleteReportError(f"{compat_path}: a compatibility record needs two or more lane_ids and model_sha256")

    def sign(key, policy_id: str, now: dt.datetime) -> tuple[str, dsse.Envelope]:
        rec.schema_version = rec.schema_version or records.COMPATIBILITY_SCHEMA_VERSION
        rec.issuer = dsse.keyid_for(key)
        rec.issued_at = timestamps.format_utc(now)
        rec.expires_at = timestamps.format_utc(now + dt.timedelta(days=validity_days))
        model = rec.model_sha256.removeprefix("sha256:")[:12]
        return f"{'+'.join(sorted(rec.lane_ids))}.{model}.compat.dsse.json", records.sign_compatibility(rec, key)

    return _sign_trusted(sign, records.verify_compatibility, key_path, policy_path, out_dir, now)


def verify(
    record_path: pathlib.Path | str, policy_path: pathlib.Path | str, now: dt.datetime | None = None
) -> certification_pb2.CertificationRecord:
    """The record, after checking signature, schema, key window and expiry against the policy."""
    policy = policy_lib.load_policy(policy_path)
    store = policy_lib.validate(policy, str(policy_path))
    try:  # a regular file under the size limit, strict JSON of bounded depth (as admission reads it)
        env = dsse.envelope_from_json(safe_io.read_regular_file(record_path))
    except TrustError as err:
        raise type(err)(f"{record_path}: {err}") from err
    rec = records.verify_record(env, store, policy.supported_record_schema_versions)
    records.check_times(rec, store, now or timestamps.now(), policy.max_record_age_days)
    return rec


def export_intoto(
    record_path: pathlib.Path | str,
    policy_path: pathlib.Path | str,
    out_path: pathlib.Path | str | None = None,
    key_path: pathlib.Path | str | None = None,
    now: dt.datetime | None = None,
    predicate: str = "lanes",
) -> str:
    """In-toto Statement v1 JSON of a verified record, with the project's predicate ("lanes") or as
    an in-toto test result ("test_result"); with key_path, a signed DSSE envelope of it."""
    rec = verify(record_path, policy_path, now)
    build = {"lanes": intoto.statement, "test_result": intoto.test_result_statement}[predicate]
    if key_path:
        payload = json.dumps(build(rec), sort_keys=True, separators=(",", ":")).encode()
        text = dsse.envelope_to_json(dsse.sign(intoto.INTOTO_PAYLOAD_TYPE, payload, keys.load_private_key(key_path)))
    else:
        text = json.dumps(build(rec), sort_keys=True, indent=2) + "\n"
    if out_path:
        _write_atomically(pathlib.Path(out_path), text)
    return text
