"""A TUF repository of signed records, made and updated with python-tuf's Metadata API.

Plain files that any static web server, object store or directory can serve:

  metadata/<v>.root.json, root.json       root: keys and thresholds of every role
  metadata/<v>.targets.json               targets: every record, revocation and the log, by hash
  metadata/<v>.snapshot.json              snapshot: the targets version (and its hash)
  metadata/timestamp.json                 timestamp: short-lived, names the snapshot (and its hash)
  targets/records/<sha256>.<sha256>.dsse.json, targets/revocations/..., targets/log/...

Roles: root (threshold of offline keys), targets = the issuer key(s) that sign the records
themselves (so rotating the issuer is a threshold-signed root update), snapshot, timestamp.
Delegations are not used: there is one issuer role today, and a per-issuer delegation would move
the issuer keys out of root, where rotation by threshold-signed root update is what we want.

consistent_snapshot is on: every version's files have their own names, so a Tracker downloading
during a publish always gets one coherent version. Each publish writes new files first and the
timestamp last, each atomically (temp file + rename).

Records and revocations are named by records.record_digest (sha256 over the DSSE PAE of what was
signed) in the dedup, the log and revocations; each is stored in its canonical encoding
(dsse.envelope_to_json), whatever encoding it was submitted in, under a target path named by that
file's sha256 (content-addressed, as TUF pins it). A record that a revocation in the
repository covers is refused: Trackers would refuse it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import pathlib
from collections.abc import Iterable, Sequence

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import json_format
from securesystemslib.signer import CryptoSigner, SSlibKey
from tuf.api import exceptions as tuf_exceptions
from tuf.api.metadata import (
    Metadata,
    MetaFile,
    Role,
    Root,
    Snapshot,
    TargetFile,
    Targets,
    Timestamp,
)
from tuf.api.serialization.json import JSONSerializer

from proto import distribution_pb2
from tools.certify import records
from tools.core import atomic_files
from tools.policy import dsse, safe_io, timestamps, trust
from tools.policy import keys as keys_lib
from tools.policy.errors import TrustError
from tools.publish import revocations, translog
from tools.publish.distribution_errors import PublishError

ROLES = ("root", "targets", "snapshot", "timestamp")
# Lifetimes: timestamp short (a frozen mirror is noticed within a day), the rest longer.
DEFAULT_EXPIRY = {"root": dt.timedelta(days=365), "targets": dt.timedelta(days=90),
                  "snapshot": dt.timedelta(days=90), "timestamp": dt.timedelta(days=1)}

RECORDS_DIR, REVOCATIONS_DIR = "records", "revocations"
LOG_ENTRIES, LOG_CHECKPOINT = "log/entries.json", "log/checkpoint.dsse.json"

_SERIALIZER = JSONSerializer(compact=False)

# The publisher reads its own metadata through the bounded reader too (a repository directory is
# often a shared mount): 10,000 records are ~3 MB of targets metadata.
MAX_METADATA_BYTES = 64 << 20


def tuf_key(key: Ed25519PrivateKey) -> SSlibKey:
    return SSlibKey.from_crypto(key.public_key())


def signer(key: Ed25519PrivateKey) -> CryptoSigner:
    return CryptoSigner(key, tuf_key(key))


def raw_public_key_of(tuf_key_obj) -> bytes:
    """The raw 32 Ed25519 bytes of a TUF key (keyval.public is their hex)."""
    if tuf_key_obj.keytype != "ed25519":
        raise PublishError(f"key {tuf_key_obj.keyid[:16]}.. is {tuf_key_obj.keytype}; records are signed with ed25519")
    return bytes.fromhex(tuf_key_obj.keyval["public"])


def role_trust_store(root: Root, role: str = "targets") -> trust.TrustStore:
    """The Lanes trust store of a role's keys (records and checkpoints are signed by targets keys)."""
    return trust.as_trust_store({dsse.keyid_for(raw_public_key_of(root.keys[k])): trust_key(root.keys[k])
                                 for k in root.roles[role].keyids})


def trust_key(tuf_key_obj):
    return keys_lib.public_key_from_bytes(raw_public_key_of(tuf_key_obj))


@dataclasses.dataclass
class Signers:
    """Private keys per role; only the roles an operation re-signs are needed."""

    root: list[Ed25519PrivateKey] = dataclasses.field(default_factory=list)
    targets: list[Ed25519PrivateKey] = dataclasses.field(default_factory=list)
    snapshot: list[Ed25519PrivateKey] = dataclasses.field(default_factory=list)
    timestamp: list[Ed25519PrivateKey] = dataclasses.field(default_factory=list)

    def of(self, role: str) -> list[Ed25519PrivateKey]:
        keys = getattr(self, role)
        if not keys:
            raise PublishError(f"this operation re-signs {role} metadata: give its key (--{role}_key)")
        return keys


class RecordRepository:
    """One repository directory; every method that changes it writes a complete new version."""

    def __init__(self, directory: pathlib.Path | str):
        self.dir = pathlib.Path(directory)
        self.metadata_dir = self.dir / "metadata"
        self.targets_dir = self.dir / "targets"

    # ---- reading -----------------------------------------------------------------------------------

    def _load(self, name: str) -> Metadata:
        path = self.metadata_dir / name
        try:
            return Metadata.from_bytes(safe_io.read_regular_file(path, limit=MAX_METADATA_BYTES))
        except Exception as err:  # noqa: BLE001 - any unreadable metadata is one clear error
            raise PublishError(f"{path}: cannot read TUF metadata ({err}); is {self.dir} a record repository "
                               "made by `publish --mode=init`?") from err

    def root(self) -> Metadata[Root]:
        return self._load("root.json")

    def timestamp(self) -> Metadata[Timestamp]:
        return self._load("timestamp.json")

    def snapshot(self) -> Metadata[Snapshot]:
        return self._load(f"{self.timestamp().signed.snapshot_meta.version}.snapshot.json")

    def targets(self) -> Metadata[Targets]:
        return self._load(f"{self.snapshot().signed.meta['targets.json'].version}.targets.json")

    def read_target(self, info: TargetFile) -> bytes:
        path = self.targets_dir / self._target_file_name(info.path, info.hashes["sha256"])
        try:
            data = safe_io.read_regular_file(path, limit=info.length)
            info.verify_length_and_hashes(data)
        except (TrustError, tuf_exceptions.LengthOrHashMismatchError) as err:
            raise PublishError(f"{path}: not the target its signed metadata lists ({err})") from err
        return data

    def known_targets_keyids(self) -> set[str]:
        """Lanes key ids of the targets keys of every root version this repository holds."""
        found: set[str] = set()
        for path in sorted(self.metadata_dir.glob("*.root.json")):
            found |= set(role_trust_store(self._load(path.name).signed).signers)
        return found

    def revocation_set(self, targets: Targets, store: trust.TrustStore,
                       extra: Sequence = ()) -> revocations.RevocationSet:
        """Every revocation the repository serves (and `extra` ones about to be published), verified
        as Trackers verify them."""
        pending = [(path, dsse.envelope_from_json(self.read_target(info))) for path, info in sorted(targets.targets.items())
                   if path.startswith(REVOCATIONS_DIR + "/")]
        pending += [(f"new revocation {i}", env) for i, env in enumerate(extra)]
        items, _ = revocations.verify_all(pending, store, self.known_targets_keyids())
        return revocations.RevocationSet(tuple(items))

    def log_entries(self, targets: Targets) -> distribution_pb2.LogEntries:
        entries = distribution_pb2.LogEntries()
        info = targets.targets.get(LOG_ENTRIES)
        if info is not None:
            json_format.Parse(self.read_target(info), entries)
        return entries

    @staticmethod
    def _target_file_name(path: str, sha256: str) -> str:
        directory, _, base = path.rpartition("/")
        return f"{directory}/{sha256}.{base}" if directory else f"{sha256}.{base}"

    # ---- writing -----------------------------------------------------------------------------------

    def _write_metadata(self, md: Metadata, keys: Sequence[Ed25519PrivateKey], names: Iterable[str]) -> bytes:
        md.signatures.clear()
        for k in keys:
            md.sign(signer(k), append=True)
        data = md.to_bytes(_SERIALIZER)
        for name in names:
            atomic_files.write_bytes_atomic(self.metadata_dir / name, data)
        return data

    def _write_target(self, path: str, data: bytes, custom: dict | None = None) -> TargetFile:
        info = TargetFile.from_data(path, data, ["sha256"])
        if custom:
            info.unrecognized_fields["custom"] = custom
        atomic_files.write_bytes_atomic(self.targets_dir / self._target_file_name(path, info.hashes["sha256"]), data)
        return info

    def init(self, root_keys: Sequence[Ed25519PrivateKey], root_threshold: int, targets_keys: Sequence[Ed25519PrivateKey],
             snapshot_key: Ed25519PrivateKey, timestamp_key: Ed25519PrivateKey, now: dt.datetime | None = None,
             targets_threshold: int = 1) -> None:
        """A new repository: root v1, empty targets with an empty log, snapshot, timestamp."""
        if (self.metadata_dir / "root.json").exists():
            raise PublishError(f"{self.dir} already holds a repository; add records with --mode=add")
        if not 1 <= root_threshold <= len(root_keys):
            raise PublishError(f"root threshold {root_threshold} needs 1..{len(root_keys)} root keys")
        if not 1 <= targets_threshold <= len(targets_keys):
            raise PublishError(f"targets threshold {targets_threshold} needs 1..{len(targets_keys)} targets keys")
        now = now or timestamps.now()
        root = Root(version=1, expires=now + DEFAULT_EXPIRY["root"],
                    consistent_snapshot=True)
        root.roles = {r: Role([], 1) for r in ROLES}
        root.roles["root"].threshold = root_threshold
        root.roles["targets"].threshold = targets_threshold
        for role, keys in (("root", root_keys), ("targets", targets_keys), ("snapshot", [snapshot_key]),
                           ("timestamp", [timestamp_key])):
            for k in keys:
                root.add_key(tuf_key(k), role)
        root_md = Metadata(root)
        self._write_metadata(root_md, root_keys, ["1.root.json", "root.json"])
        signers = Signers(root=list(root_keys), targets=list(targets_keys), snapshot=[snapshot_key],
                          timestamp=[timestamp_key])
        targets = Targets(version=1, expires=now)
        self._publish_version(targets, distribution_pb2.LogEntries(), signers, now, snapshot_version=0,
                              timestamp_version=0, bump=False)

    def _publish_version(self, targets: Targets, log: distribution_pb2.LogEntries, signers: Signers,
                         now: dt.datetime, snapshot_version: int, timestamp_version: int, bump: bool = True) -> int:
        """Writes log, checkpoint, targets v+1, snapshot v+1 and finally the timestamp."""
        tree = translog.build_tree(log)
        checkpoint = translog.make_checkpoint(tree, now)
        key = signers.of("targets")[0]
        targets.targets[LOG_ENTRIES] = self._write_target(
            LOG_ENTRIES, (json_format.MessageToJson(log, preserving_proto_field_name=True, sort_keys=True) + "\n").encode())
        targets.targets[LOG_CHECKPOINT] = self._write_target(
            LOG_CHECKPOINT, dsse.envelope_to_json(translog.sign_checkpoint(checkpoint, key)).encode())
        targets.version += 1 if bump else 0
        targets.expires = now + DEFAULT_EXPIRY["targets"]
        targets_bytes = self._write_metadata(Metadata(targets), signers.of("targets"), [f"{targets.version}.targets.json"])
        self._write_snapshot_and_timestamp(targets.version, targets_bytes, signers, now, snapshot_version, timestamp_version)
        return targets.version

    def _write_snapshot_and_timestamp(self, targets_version: int, targets_bytes: bytes, signers: Signers,
                                      now: dt.datetime, snapshot_version: int, timestamp_version: int) -> int:
        snapshot = Snapshot(version=snapshot_version + 1,
                            expires=now + DEFAULT_EXPIRY["snapshot"],
                            meta={"targets.json": MetaFile.from_data(targets_version, targets_bytes, ["sha256"])})
        snapshot_bytes = self._write_metadata(Metadata(snapshot), signers.of("snapshot"), [f"{snapshot.version}.snapshot.json"])
        timestamp = Timestamp(version=timestamp_version + 1,
                              expires=now + DEFAULT_EXPIRY["timestamp"],
                              snapshot_meta=MetaFile.from_data(snapshot.version, snapshot_bytes, ["sha256"]))
        self._write_metadata(Metadata(timestamp), signers.of("timestamp"), ["timestamp.json"])
        return timestamp.version

    def _current(self):
        root = self.root().signed
        timestamp = self.timestamp().signed
        snapshot = self.snapshot().signed
        targets = self.targets().signed
        return root, timestamp, snapshot, targets

    def publish(self, signers: Signers, record_files: Sequence[tuple[str, bytes]] = (),
                revocation_envelopes: Sequence = (), now: dt.datetime | None = None) -> int:
        """Adds records (file name, envelope bytes) and revocations as one new version; returns the
        targets version. A record already published (same record digest: what was signed, however
        it is encoded) is not added twice; a record a revocation covers is refused."""
        now = now or timestamps.now()
        root, timestamp, snapshot, targets = self._current()
        store = role_trust_store(root)
        for env in revocation_envelopes:
            revocations.verify(env, store)  # only what Trackers will accept
        revoked = self.revocation_set(targets, store, revocation_envelopes) if record_files else None
        log = self.log_entries(targets)
        published = {e.digest for e in log.entries}
        added = 0
        for name, submitted in record_files:
            try:
                env = dsse.envelope_from_json(submitted)
                if env.payload_type.startswith(records.COMPATIBILITY_FAMILY + "."):
                    rec = records.verify_compatibility(env, store)
                    kind = "compatibility"
                else:
                    rec = records.verify_record(env, store)
                    kind = "certification"
                verified = dsse.verify(env, store.public_keys)
            except TrustError as err:
                raise PublishError(
                    f"{name}: not a record signed by a current targets key of this repository ({err.code}: {err}); "
                    "Trackers would refuse it. Sign it with the issuer key the root lists") from err
            digest = records.record_digest(env)
            why = revoked.reason(digest, rec, verified) if revoked is not None else ""
            if why:
                raise PublishError(f"{name}: record {digest[:23]} is {why}; Trackers would refuse it. Publish a "
                                   "new record instead")
            if digest in published:
                continue
            data = dsse.envelope_to_json(env).encode()
            path = f"{RECORDS_DIR}/{records.sha256_digest(data).split(':', 1)[1]}.dsse.json"  # content-addressed
            targets.targets[path] = self._write_target(path, data, {"kind": kind, "source_name": name})
            log.entries.add(kind="record", target_path=path, digest=digest, published_at=timestamps.format_utc(now))
            published.add(digest)
            added += 1
        for env in revocation_envelopes:
            data = dsse.envelope_to_json(env).encode()
            digest = records.record_digest(env)
            if digest in published:
                continue
            path = f"{REVOCATIONS_DIR}/{records.sha256_digest(data).split(':', 1)[1]}.dsse.json"
            targets.targets[path] = self._write_target(path, data, {"kind": "revocation"})
            log.entries.add(kind="revocation", target_path=path, digest=digest, published_at=timestamps.format_utc(now))
            published.add(digest)
            added += 1
        return self._publish_version(targets, log, signers, now, snapshot.version, timestamp.version)

    def refresh_timestamp(self, timestamp_key: Ed25519PrivateKey, now: dt.datetime | None = None) -> int:
        """Re-signs the timestamp with a new expiry (run it more often than the timestamp lifetime)."""
        now = now or timestamps.now()
        md = self.timestamp()
        md.signed.version += 1
        md.signed.expires = now + DEFAULT_EXPIRY["timestamp"]
        self._write_metadata(md, [timestamp_key], ["timestamp.json"])
        return md.signed.version

    def rotate_targets_key(self, signers: Signers, new_targets_keys: Sequence[Ed25519PrivateKey],
                           retire: str = "honour-issued-before", now: dt.datetime | None = None,
                           reason: str = "key rotated") -> int:
        """Replaces the targets (issuer) keys by a root update signed by the root threshold, then
        publishes a revocation of each retired key signed by the new key.

        retire="honour-issued-before": records the old key signed before now stay admissible until
        they expire (the key was good when it signed them); anything it signs from now on is refused.
        retire="refuse-all": every record of the old key is refused (a compromised key); re-sign and
        republish what should stay.
        """
        if retire not in ("honour-issued-before", "refuse-all"):
            raise PublishError(f"retire={retire!r}: use honour-issued-before or refuse-all")
        now = now or timestamps.now()
        root_md = self.root()
        root = root_md.signed
        old = [root.keys[k] for k in root.roles["targets"].keyids]
        for k in list(root.roles["targets"].keyids):
            root.revoke_key(k, "targets")
        for k in new_targets_keys:
            root.add_key(tuf_key(k), "targets")
        root.version += 1
        root.expires = now + DEFAULT_EXPIRY["root"]
        self._write_metadata(root_md, signers.of("root"), [f"{root.version}.root.json", "root.json"])
        new_ids = {tuf_key(k).keyid for k in new_targets_keys}
        revs = []
        for key in old:
            if key.keyid in new_ids:
                continue
            rev = revocations.make(reason=reason, now=now, issuer_public_key=raw_public_key_of(key),
                                   effective_from=now if retire == "honour-issued-before" else None)
            revs.append(revocations.sign(rev, new_targets_keys[0]))
        rotated = dataclasses.replace(signers, targets=list(new_targets_keys))
        return self.publish(rotated, (), revs, now)

    def rotate_online_keys(self, signers: Signers, new_snapshot_key: Ed25519PrivateKey,
                           new_timestamp_key: Ed25519PrivateKey, now: dt.datetime | None = None) -> int:
        """Replaces the snapshot and timestamp keys by a root update signed by the root threshold,
        then re-signs the current targets version's snapshot and a timestamp with the new keys;
        returns the new root version.

        This is the recovery from a fast-forward attack (a stolen online key signed a timestamp or
        snapshot with a huge version, and Trackers now refuse every honest version as a rollback):
        under the new root the Trackers' cached timestamp and snapshot no longer verify, so
        ngclient discards them (TUF client workflow 5.3.11) and accepts the repository's versions.
        Run it also whenever an online key may have leaked.
        """
        now = now or timestamps.now()
        root_md = self.root()
        root = root_md.signed
        for role, key in (("snapshot", new_snapshot_key), ("timestamp", new_timestamp_key)):
            for k in list(root.roles[role].keyids):
                root.revoke_key(k, role)
            root.add_key(tuf_key(key), role)
        root.version += 1
        root.expires = now + DEFAULT_EXPIRY["root"]
        self._write_metadata(root_md, signers.of("root"), [f"{root.version}.root.json", "root.json"])
        timestamp, snapshot = self.timestamp().signed, self.snapshot().signed
        targets_version = snapshot.meta["targets.json"].version
        name = f"{targets_version}.targets.json"
        targets_bytes = safe_io.read_regular_file(self.metadata_dir / name, limit=MAX_METADATA_BYTES)
        online = dataclasses.replace(signers, snapshot=[new_snapshot_key], timestamp=[new_timestamp_key])
        self._write_snapshot_and_timestamp(targets_version, targets_bytes, online, now, snapshot.version, timestamp.version)
        return root.version
