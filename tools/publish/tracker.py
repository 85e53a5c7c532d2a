"""A Tracker's view of a record repository: refreshed through python-tuf's ngclient, checked against
the transparency log, and nothing else.

refresh() runs the TUF client workflow (root rotations, timestamp, snapshot, targets: signatures,
thresholds, versions, expiry, hashes), downloads every record and revocation target (cached files
are re-verified by hash), then checks the log: its entries hash to the signed checkpoint, the
checkpoint extends every checkpoint this Tracker saw before (consistency proof), every record and
revocation served is in the log, and every revocation in the log is served. Any failure raises a
DistributionError naming the attack; the persisted state only advances when all of it passed.

Records signed by a key that was a targets key in an earlier root but is not now, and that no
signed revocation covers, are refused as retired-key (the key's records need a re-signed copy).
"""

from __future__ import annotations

import dataclasses
import pathlib

from google.protobuf import json_format
from tuf.api import exceptions as tuf_errors
from tuf.api.metadata import Metadata, Root, Targets
from tuf.ngclient import Updater, UpdaterConfig

from proto import certification_pb2, distribution_pb2
from tools.certify import records
from tools.core import atomic_files
from tools.policy import dsse, safe_io, trust
from tools.policy.errors import TrustError
from tools.publish import repository, revocations, translog
from tools.publish.distribution_errors import (
    BelowThresholdError,
    DistributionError,
    FreezeError,
    LogMismatchError,
    MalformedRevocationError,
    MixAndMatchError,
    RepositoryUnreachableError,
    RevocationDroppedError,
    RollbackError,
    TargetHashMismatchError,
)
from tools.publish.fetchers import AnyFetcher

RETIRED_KEY = "retired-key"
NOT_IN_LOG = "not-in-log"
STATE_FILE = "tracker_state.json"
# 10,000 records are ~3 MB of targets metadata; ngclient's default cap is 5 MB.
TARGETS_MAX_LENGTH = 64 << 20


@dataclasses.dataclass(frozen=True)
class PublishedRecord:
    """A record target: its envelope, digest, target path and place in the log."""

    envelope: certification_pb2.Envelope
    digest: str
    target_path: str
    log_index: int
    kind: str


@dataclasses.dataclass
class TrackerView:
    """What one refresh verified; admission decides from this and nothing else."""

    records: list[PublishedRecord]
    revocations: revocations.RevocationSet
    checkpoint: distribution_pb2.Checkpoint
    checkpoint_digest: str
    tree: object  # pymerkle InmemoryTree of the verified log
    log_index_by_digest: dict[str, int]
    log_entries: distribution_pb2.LogEntries
    trust_store: trust.TrustStore
    current_keyids: frozenset[str]
    retired_keyids: frozenset[str]
    versions: dict[str, int]
    refreshed_at: str

    def screen(self, digest: str, envelope: certification_pb2.Envelope, record) -> tuple[str, str] | None:
        """(code, reason) refusing an input the repository does not vouch for now; None when it does.

        Called before signature verification (record None: not in the log, retired key) and after
        it (revocations). A record served from a cache or a copy gets the same screening."""
        signer_ids = [s.keyid for s in envelope.signatures]
        if record is None:
            if digest not in self.log_index_by_digest:
                return NOT_IN_LOG, (f"digest {digest[:23]} is not in the transparency log (checkpoint size "
                                    f"{self.checkpoint.tree_size}); only published records are admitted")
            if signer_ids and all(k in self.retired_keyids for k in signer_ids):
                return RETIRED_KEY, (f"signed by {signer_ids[0][:16]}.., a targets key an earlier root listed and root "
                                     f"v{self.versions['root']} no longer does; republish it signed by a current key")
            return None
        why = self.revocations.reason(digest, record, signer_ids)
        return ("revoked", why[len("revoked: "):]) if why else None

    def inclusion_proof(self, digest: str) -> dict:
        """The verified audit path of the log entry publishing `digest`; raises if there is none."""
        index = self.log_index_by_digest[digest]
        entry = self.log_entries.entries[index]
        if entry.digest != digest:
            raise LogMismatchError(f"log entry {index} publishes {entry.digest[:23]}, not {digest[:23]}")
        return translog.prove_inclusion(self.tree, index, self.checkpoint, entry)


def _classify(err: Exception) -> DistributionError:
    """ngclient's exception -> the attack it stopped, with ngclient's own message kept."""
    msg = str(err) or type(err).__name__
    if isinstance(err, tuf_errors.ExpiredMetadataError):
        return FreezeError(f"{msg}: the repository serves expired metadata (a freeze attack, or its timestamp was "
                           "not re-signed in time: run publish --mode=timestamp)")
    if isinstance(err, tuf_errors.BadVersionNumberError):
        if msg.startswith("Expected"):
            return MixAndMatchError(f"{msg}: metadata from another repository version than the snapshot names")
        return RollbackError(f"{msg}: the repository serves older metadata than this Tracker already trusts")
    if isinstance(err, tuf_errors.UnsignedMetadataError):
        return BelowThresholdError(f"{msg}: not signed by the threshold of trusted keys for its role")
    if isinstance(err, tuf_errors.LengthOrHashMismatchError | tuf_errors.DownloadLengthMismatchError):
        return TargetHashMismatchError(f"{msg}: a file differs from the hashes its signed metadata gives")
    if isinstance(err, tuf_errors.DownloadError | OSError):
        return RepositoryUnreachableError(f"{msg}: nothing was decided from this repository")
    return DistributionError(f"{type(err).__name__}: {msg}")


class Tracker:
    """One Tracker's local state directory (metadata cache, target cache, log state) and its repository."""

    def __init__(self, state_dir: pathlib.Path | str, repository_url: str, bootstrap_root: bytes | None = None):
        self.state_dir = pathlib.Path(state_dir)
        base = repository_url.rstrip("/")
        self.metadata_url, self.targets_url = base + "/metadata/", base + "/targets/"
        self.metadata_dir = self.state_dir / "metadata"
        self.target_dir = self.state_dir / "targets"
        for d in (self.metadata_dir, self.target_dir):
            d.mkdir(parents=True, exist_ok=True)
        if not (self.metadata_dir / "root.json").exists() and bootstrap_root is None:
            raise DistributionError(f"{self.state_dir}: no trusted root yet; give the repository's first root "
                                    "(1.root.json, obtained out of band) with --bootstrap_root")
        self.bootstrap_root = bootstrap_root

    def _state(self) -> distribution_pb2.TrackerState:
        path = self.state_dir / STATE_FILE
        state = distribution_pb2.TrackerState()
        if path.exists():
            try:
                json_format.ParseDict(dsse.loads_strict(safe_io.read_regular_file(path)), state)
            except (TrustError, json_format.ParseError) as err:
                raise DistributionError(f"{path}: Tracker state unreadable ({err}); it holds the checkpoints "
                                        "seen so far, so it is never reset silently: restore it or remove it deliberately") from err
        return state

    def _targets_keys_of_earlier_roots(self) -> set[str]:
        """Lanes key ids of every targets key in the roots ngclient walked and kept (root_history/):
        a Tracker that skipped a rotation still knows the retired key."""
        found: set[str] = set()
        for path in sorted((self.metadata_dir / "root_history").glob("*.root.json")):
            try:
                root = Metadata[Root].from_file(str(path)).signed
                found |= set(repository.role_trust_store(root).signers)
            except Exception:  # noqa: BLE001 - history is a hint for naming; the current root decides
                continue
        return found

    def refresh(self) -> TrackerView:
        updater = Updater(
            metadata_dir=str(self.metadata_dir), metadata_base_url=self.metadata_url,
            target_dir=str(self.target_dir), target_base_url=self.targets_url, fetcher=AnyFetcher(),
            config=UpdaterConfig(targets_max_length=TARGETS_MAX_LENGTH),
            bootstrap=None if (self.metadata_dir / "root.json").exists() else self.bootstrap_root,
        )
        try:
            updater.refresh()
        except (tuf_errors.LengthOrHashMismatchError, tuf_errors.DownloadLengthMismatchError) as err:
            # Metadata pinned by hash in the timestamp/snapshot, served from another version.
            raise MixAndMatchError(f"{err}: a metadata file is not the one the timestamp/snapshot names (metadata "
                                   "mixed from different repository versions)") from err
        except (tuf_errors.RepositoryError, tuf_errors.DownloadError, OSError) as err:
            raise _classify(err) from err
        try:
            # ngclient persists metadata only once verified, so these files are the verified ones.
            root = Metadata[Root].from_file(str(self.metadata_dir / "root.json")).signed
            targets_md = Metadata[Targets].from_file(str(self.metadata_dir / "targets.json"))
            targets = targets_md.signed
            files: dict[str, bytes] = {}
            for path, info in targets.targets.items():
                verified = updater.get_targetinfo(path)
                if verified is None or verified != info:
                    raise TargetHashMismatchError(f"target {path}: not what the verified targets metadata lists")
                local = updater.find_cached_target(verified) or updater.download_target(verified)
                files[path] = pathlib.Path(local).read_bytes()
        except DistributionError:
            raise
        except (tuf_errors.RepositoryError, tuf_errors.DownloadError, OSError) as err:
            raise _classify(err) from err
        timestamp = Metadata.from_file(str(self.metadata_dir / "timestamp.json")).signed
        snapshot = Metadata.from_file(str(self.metadata_dir / "snapshot.json")).signed
        versions = {"root": root.version, "timestamp": timestamp.version, "snapshot": snapshot.version,
                    "targets": targets.version}
        try:
            return self._check_log_and_build(root, files, versions)
        except DistributionError:
            raise
        except TrustError as err:  # e.g. a checkpoint that is not an envelope: the log is unusable
            raise LogMismatchError(f"transparency log unusable ({err.code}: {err})") from err

    def _check_log_and_build(self, root: Root, files: dict[str, bytes], versions: dict[str, int]) -> TrackerView:
        state = self._state()
        current = repository.role_trust_store(root)
        current_ids = frozenset(current.signers)
        if repository.LOG_CHECKPOINT not in files or repository.LOG_ENTRIES not in files:
            raise LogMismatchError("the repository serves no transparency log (log/entries.json, log/checkpoint.dsse.json)")
        checkpoint_bytes = files[repository.LOG_CHECKPOINT]
        checkpoint = translog.verify_checkpoint(dsse.envelope_from_json(checkpoint_bytes), current)
        entries = distribution_pb2.LogEntries()
        try:
            json_format.ParseDict(dsse.loads_strict(files[repository.LOG_ENTRIES]), entries)
        except (TrustError, json_format.ParseError) as err:
            raise LogMismatchError(f"log/entries.json is not a LogEntries ({err})") from err
        tree = translog.build_tree(entries)
        translog.check_against_checkpoint(tree, checkpoint)
        if state.HasField("last_checkpoint"):
            translog.check_consistent(tree, state.last_checkpoint, checkpoint)
        index_by_digest: dict[str, int] = {}
        for i, e in enumerate(entries.entries):
            index_by_digest.setdefault(e.digest, i)
        # Every revocation ever logged must still be served: dropping one would un-revoke records.
        for e in entries.entries:
            if e.kind == "revocation" and records.sha256_digest(files.get(e.target_path, b"")) != e.digest:
                raise RevocationDroppedError(
                    f"the log lists revocation {e.target_path} ({e.digest[:23]}) published {e.published_at}, the "
                    "repository does not serve it: a revocation was dropped; nothing is admitted from this view")
        # Revocations served: each must be in the log and verify. Those by current keys first; a
        # revocation signed by a key they revoke or retire (published before a rotation) still
        # counts: revocations only withdraw, and TUF already pins each one by hash.
        pending: list[tuple[str, str, certification_pb2.Envelope]] = []
        for path, data in sorted(files.items()):
            if not path.startswith(repository.REVOCATIONS_DIR + "/"):
                continue
            digest = records.sha256_digest(data)
            if digest not in index_by_digest:
                raise LogMismatchError(f"revocation {path} is served but not in the log; the repository is inconsistent")
            try:
                pending.append((path, digest, dsse.envelope_from_json(data)))
            except TrustError as err:
                raise MalformedRevocationError(f"revocation {path}: {err}") from err
        revs: list[tuple[str, distribution_pb2.Revocation]] = []
        signer_keys = dict(current.public_keys)
        for store_round in ("current", "revoked-keys"):
            store = trust.as_trust_store(signer_keys)
            left = []
            for path, digest, env in pending:
                try:
                    revs.append((digest, revocations.verify(env, store, path)))
                except TrustError as err:
                    if store_round == "revoked-keys":
                        raise MalformedRevocationError(f"revocation {path} does not verify ({err.code}: {err}); "
                                                       "nothing is admitted while a revocation cannot be read") from err
                    left.append((path, digest, env))
            pending = left
            # Records of a revoked key must still verify (to be refused as revoked, or to stand when
            # signed before a retirement): its public key comes from the verified revocation.
            for _, r in revs:
                if r.issuer_keyid:
                    signer_keys.setdefault(r.issuer_keyid,
                                           repository.keys_lib.public_key_from_bytes(bytes(r.issuer_public_key)))
        rev_set = revocations.RevocationSet(tuple(sorted(revs, key=lambda x: x[0])))
        seen = set(state.seen_targets_keyids) | set(current_ids) | self._targets_keys_of_earlier_roots()
        retired = frozenset(seen - set(signer_keys))
        published: list[PublishedRecord] = []
        for path, data in sorted(files.items()):
            if not path.startswith(repository.RECORDS_DIR + "/"):
                continue
            digest = records.sha256_digest(data)
            try:
                env = dsse.envelope_from_json(data)
            except TrustError as err:
                raise LogMismatchError(f"record target {path} is not a DSSE envelope ({err})") from err
            kind = "compatibility" if env.payload_type.startswith(records.COMPATIBILITY_FAMILY + ".") else "certification"
            published.append(PublishedRecord(env, digest, path, index_by_digest.get(digest, -1), kind))
        new_state = distribution_pb2.TrackerState(seen_targets_keyids=sorted(seen))
        new_state.last_checkpoint.CopyFrom(checkpoint)
        atomic_files.write_bytes_atomic(self.state_dir / STATE_FILE,
                      (json_format.MessageToJson(new_state, preserving_proto_field_name=True, sort_keys=True) + "\n").encode())
        return TrackerView(
            records=published, revocations=rev_set, checkpoint=checkpoint,
            checkpoint_digest=records.sha256_digest(checkpoint_bytes), tree=tree, log_index_by_digest=index_by_digest,
            log_entries=entries, trust_store=trust.as_trust_store(signer_keys), current_keyids=current_ids,
            retired_keyids=retired, versions=versions, refreshed_at=checkpoint.timestamp,
        )
