"""Signed probe records in an append-only, hash-chained log.

Each probe result becomes a ProbeRecord (proto/probe.proto) signed by the Tracker's key in a DSSE
envelope (tools/policy/dsse.py, as certification records are). The log is one file of JSON lines,
one envelope a line: record n has sequence n and names the sha256 of line n-1's envelope
(dsse.envelope_digest), so a removed, reordered, edited or inserted line breaks the chain from there
on. Beside it, <log>.head.dsse.json is the Tracker's signed statement of the log's last sequence and
envelope digest and of the RFC 9162 Merkle root over its lines (the transparency log's tree,
tools/publish/translog.py, on pymerkle): a log cut short (its last lines dropped) no longer reaches
its head, and a reader holding an earlier head can ask for a consistency proof. append() holds
an exclusive lock (<log>.lock) from reading the log to writing it, and rewrites the log and then its
head atomically (temp file, fsync, rename): a crash leaves the old log or the new one, never half a
line. read() verifies every line (signature by a key it is given, schema, sequence, chain) and the
head, and refuses the whole log on the first break: which suffix would be trustworthy?

What the head cannot show is a rollback of both files to an earlier state of the log; that needs
the head published where the Tracker's readers see it (its record repository), not only beside the log.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import pathlib
import tempfile
from collections.abc import Mapping

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from google.protobuf import json_format
from pymerkle import InmemoryTree

from proto import certification_pb2, probe_pb2
from tools.policy import dsse, safe_io, timestamps
from tools.policy.errors import TrustError
from tools.probe import probe
from tools.publish import translog

PAYLOAD_TYPE = "application/vnd.lanes.probe-record.v1+json"
HEAD_PAYLOAD_TYPE = "application/vnd.lanes.probe-log-head.v1+json"
SCHEMA_VERSION = 1
MAX_LOG_BYTES = 64 << 20


class ProbeLogError(Exception):
    """A probe log that cannot be trusted as a whole; the message names the file, the line and why."""


@dataclasses.dataclass(frozen=True)
class VerifiedProbe:
    record: probe_pb2.ProbeRecord
    digest: str  # sha256 of its envelope: what a decision cites
    keyids: tuple[str, ...]  # the keys whose signatures verified


def make_record(result: probe.Result, node_id: str, lane_id: str, certification_record_id: str,
                model_sha256: str, probed_at: str) -> probe_pb2.ProbeRecord:
    f = result.figures
    rec = probe_pb2.ProbeRecord(
        schema_version=SCHEMA_VERSION, node_id=node_id, lane_id=lane_id,
        certification_record_id=certification_record_id, model_sha256=model_sha256,
        challenge_json=json.dumps(dataclasses.asdict(result.challenge), sort_keys=True, separators=(",", ":")),
        challenge_digest=result.challenge.digest(), node_response_digest=result.node_digest,
        reference_response_digest=result.reference_digest, n_predict=result.challenge.n_predict,
        verdict=result.verdict, reasons=list(result.reasons), probed_at=probed_at,
        seconds_to_verdict=result.seconds, tol_max_abs_delta_logprob=result.tolerances.max_abs_delta_logprob,
        tol_min_top1_agreement=result.tolerances.min_top1_agreement,
        tol_min_greedy_prefix=result.tolerances.min_greedy_prefix,
        tol_min_speed_fraction=result.tolerances.min_speed_fraction)
    if f is not None:
        rec.greedy_prefix, rec.compared_positions = f.greedy_prefix, f.compared
        # NaN (nothing compared) is kept out of the record: compared_positions 0 says it.
        rec.top1_agreement = f.top1_agreement if f.compared else 0.0
        rec.max_abs_delta_logprob = f.max_abs_delta_logprob if f.compared else 0.0
        rec.tokens_per_s, rec.certified_tokens_per_s = f.tokens_per_s, f.certified_tokens_per_s
    return rec


def _payload(rec: probe_pb2.ProbeRecord) -> bytes:
    obj = json_format.MessageToDict(rec, preserving_proto_field_name=True)
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def merkle_root(lines: list[str]) -> str:
    """RFC 9162 root (hex) over the log's lines as leaves, as the transparency log computes its own."""
    tree = InmemoryTree(algorithm="sha256")
    for line in lines:
        tree.append_entry(line.encode("utf-8"))
    return translog.root_hex(tree)


def head_path(log: pathlib.Path) -> pathlib.Path:
    return pathlib.Path(log).with_name(pathlib.Path(log).name + ".head.dsse.json")


@contextlib.contextmanager
def _locked(log: pathlib.Path):
    with open(pathlib.Path(log).with_name(pathlib.Path(log).name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _replace(path: pathlib.Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def append(log: pathlib.Path, rec: probe_pb2.ProbeRecord, key: Ed25519PrivateKey,
           trusted: Mapping[str, Ed25519PublicKey]) -> VerifiedProbe:
    """Chains `rec` after the log's last record (the log verified with `trusted` first), signs it and a
    new head with `key`, and writes both; returns the record as read() gives it. One writer at a time."""
    log = pathlib.Path(log)
    with _locked(log):
        existing = read(log, trusted) if log.exists() else []
        lines = safe_io.read_regular_file(log, limit=MAX_LOG_BYTES).decode().splitlines() if existing else []
        chained = probe_pb2.ProbeRecord()
        chained.CopyFrom(rec)
        chained.sequence = len(existing)
        chained.previous_envelope_digest = existing[-1].digest if existing else ""
        env = dsse.sign(PAYLOAD_TYPE, _payload(chained), key)
        line = json.dumps(dsse.envelope_to_dict(env), sort_keys=True, separators=(",", ":"))
        digest = dsse.envelope_digest(env)
        _replace(log, "".join(x + "\n" for x in [*lines, line]))
        head = {"log": log.name, "sequence": chained.sequence, "envelope_digest": digest,
                "tree_size": len(lines) + 1, "root_hash": merkle_root([*lines, line]),
                "written_at": timestamps.format_utc(timestamps.now())}
        head_env = dsse.sign(HEAD_PAYLOAD_TYPE, json.dumps(head, sort_keys=True, separators=(",", ":")).encode(), key)
        _replace(head_path(log), dsse.envelope_to_json(head_env))
    return VerifiedProbe(chained, digest, (dsse.keyid_for(key),))


def _verified_head(log: pathlib.Path, trusted: Mapping[str, Ed25519PublicKey]) -> dict:
    path = head_path(log)
    try:
        env = dsse.envelope_from_json(safe_io.read_regular_file(path))
        dsse.verify(env, trusted)
    except (OSError, TrustError) as err:
        raise ProbeLogError(f"{path}: the log's signed head is missing or does not verify ({err})") from err
    if env.payload_type != HEAD_PAYLOAD_TYPE:
        raise ProbeLogError(f"{path}: payload type {env.payload_type!r}, not a probe log head")
    try:
        head = json.loads(env.payload)
        return {"sequence": int(head["sequence"]), "envelope_digest": str(head["envelope_digest"]),
                "tree_size": int(head["tree_size"]), "root_hash": str(head["root_hash"])}
    except (ValueError, KeyError, TypeError) as err:
        raise ProbeLogError(f"{path}: not a probe log head ({err})") from err


def read(log: pathlib.Path, trusted: Mapping[str, Ed25519PublicKey]) -> list[VerifiedProbe]:
    """Every record of the log, each signed by a key of `trusted`, in one unbroken chain."""
    try:
        data = safe_io.read_regular_file(log, limit=MAX_LOG_BYTES)
    except (OSError, TrustError) as err:
        raise ProbeLogError(f"{log}: cannot read the probe log ({err})") from err
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ProbeLogError(f"{log}: not UTF-8") from err
    if text and not text.endswith("\n"):
        raise ProbeLogError(f"{log}: the last line is incomplete (a log is only ever replaced whole)")
    out: list[VerifiedProbe] = []
    for n, line in enumerate(text.splitlines(), start=1):
        where = f"{log}:{n}"
        try:
            env = dsse.envelope_from_json(line)
            keyids = dsse.verify(env, trusted)
        except (TrustError, ValueError) as err:
            raise ProbeLogError(f"{where}: {err}") from err
        if env.payload_type != PAYLOAD_TYPE:
            raise ProbeLogError(f"{where}: payload type {env.payload_type!r}, not a probe record")
        rec = probe_pb2.ProbeRecord()
        try:
            json_format.Parse(env.payload, rec)
        except json_format.ParseError as err:
            raise ProbeLogError(f"{where}: not a probe record ({err})") from err
        if rec.schema_version != SCHEMA_VERSION:
            raise ProbeLogError(f"{where}: schema_version {rec.schema_version}, this tool reads {SCHEMA_VERSION}")
        previous = out[-1].digest if out else ""
        if rec.sequence != len(out) or rec.previous_envelope_digest != previous:
            raise ProbeLogError(f"{where}: sequence {rec.sequence} after {previous or 'nothing'} breaks the chain "
                                f"(expected sequence {len(out)} after {previous or 'nothing'}): lines were removed, "
                                "reordered, inserted or edited")
        if rec.verdict not in (probe.PASS, probe.FAILED, probe.SPEED):
            raise ProbeLogError(f"{where}: verdict {rec.verdict!r} is none of {probe.PASS}, {probe.FAILED}, {probe.SPEED}")
        try:
            timestamps.parse_utc(rec.probed_at, "probed_at")
        except TrustError as err:
            raise ProbeLogError(f"{where}: {err}") from err
        out.append(VerifiedProbe(rec, dsse.envelope_digest(env), tuple(keyids)))
    if out or head_path(log).exists():
        head = _verified_head(log, trusted)
        last = (out[-1].record.sequence, out[-1].digest) if out else (-1, "")
        if last != (head["sequence"], head["envelope_digest"]):
            raise ProbeLogError(f"{log}: ends at sequence {last[0]}, its signed head says {head['sequence']} "
                                f"({head['envelope_digest'][:23]}): the log was cut short or replaced")
        lines = text.splitlines()
        if (head["tree_size"], head["root_hash"]) != (len(lines), merkle_root(lines)):
            raise ProbeLogError(f"{log}: its Merkle root over {len(lines)} lines is not the signed head's "
                                f"({head['tree_size']} lines, root {head['root_hash'][:16]})")
    return out


_ = certification_pb2  # the Envelope message dsse reads and writes
