"""A Tracker's view of a record repository: refreshed through python-tuf's ngclient, checked against
the transparency log, and nothing else.

refresh() runs the TUF client workflow (root rotations, timestamp, snapshot, targets: signatures,
thresholds, versions, expiry, hashes), downloads every record and revocation target (cached files
are re-verified by hash), then checks the log: its entries hash to the signed checkpoint, the
checkpoint extends every checkpoint this Tracker saw before (consistency proof), every record and
revocation served is in the log, and every revocation in the log is served. Any failure raises a
DistributionError naming the attack; the persisted state only advances when all of it passed.

Records are named by records.record_digest (what was signed), and screened by the keys whose
signatures verified, never by keyid hints: a record whose signature verifies only with a key that
was a targets key in an earlier root but is not now, and that no signed revocation covers, is
refused as retired-key (the key's records need a re-signed copy); a revocation by issuer key
covers every record that key's signature verifies, keyid or none.

Downloads go through fetchers.BoundedFetcher (regular files only, deadlines, a minimum rate), and
everything ngclient would open in the state directory is read first through the bounded reader:
a FIFO, a device or a link to one, or metadata that is not JSON there is refused as tracker-state.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import stat
import urllib.parse

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from google.protobuf import json_format
from tuf.api import exceptions as tuf_errors
from tuf.api.metadata import Metadata, Root, TargetFile
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
    EndlessDataError,
    FreezeError,
    LogMismatchError,
    MalformedMetadataError,
    MalformedRevocationError,
    MixAndMatchError,
    RepositoryUnreachableError,
    RevocationDroppedError,
    RollbackError,
    SlowRetrievalError,
    TargetHashMismatchError,
    TrackerStateError,
)
from tools.publish.fetchers import BoundedFetcher, FetchLimits, MalformedMetadataJsonError

RETIRED_KEY = "retired-key"
NOT_IN_LOG = "not-in-log"
STATE_FILE = "tracker_state.json"
# 10,000 records are ~3 MB of targets metadata; ngclient's default cap is 5 MB.
TARGETS_MAX_LENGTH = 64 << 20
_CONFIG = UpdaterConfig(targets_max_length=TARGETS_MAX_LENGTH)
# The metadata files ngclient reads from the state directory, with the cap it applies to each.
_LOCAL_METADATA = (("root.json", _CONFIG.root_max_length), ("timestamp.json", _CONFIG.timestamp_max_length),
                   ("snapshot.json", _CONFIG.snapshot_max_length), ("targets.json", _CONFIG.targets_max_length))
_ROOT_HISTORY_NAME = re.compile(r"^[0-9]+\.root\.json$")


@dataclasses.dataclass(frozen=True)
class PublishedRecord:
    """A record target: its envelope, digest (records.record_digest), target path and place in the log."""

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
    # keyid -> public key of each retired targets key an earlier root listed (root_history/).
    retired_keys: dict[str, Ed25519PublicKey] = dataclasses.field(default_factory=dict)

    def screen(self, digest: str, envelope: certification_pb2.Envelope, record) -> tuple[str, str] | None:
        """(code, reason) refusing an input the repository does not vouch for now; None when it does.

        Called before signature verification (record None: not in the log, retired key) and after
        it (revocations). A record served from a cache or a copy gets the same screening. Keys are
        those whose signatures verified, never the keyid hints in the envelope (DSSE's keyid is
        unauthenticated, and may be empty)."""
        if record is None:
            if digest not in self.log_index_by_digest:
                return NOT_IN_LOG, (f"digest {digest[:23]} is not in the transparency log (checkpoint size "
                                    f"{self.checkpoint.tree_size}); only published records are admitted")
            retired = self._signed_only_by_retired_keys(envelope)
            if retired:
                return RETIRED_KEY, (f"signed by {retired[0][:16]}.., a targets key an earlier root listed and root "
                                     f"v{self.versions['root']} no longer does; republish it signed by a current key")
            return None
        try:
            verified = dsse.verify(envelope, self.trust_store.public_keys)
        except TrustError as err:  # admission verified it with this store; a failure here refuses it
            return err.code, str(err)
        why = self.revocations.reason(digest, record, verified)
        return ("revoked", why[len("revoked: "):]) if why else None

    def _signed_only_by_retired_keys(self, envelope: certification_pb2.Envelope) -> list[str]:
        """The retired keys whose signatures verify, when no key of the trust store's does."""
        if not self.retired_keys:
            return []
        try:
            retired = dsse.verify(envelope, self.retired_keys)
        except TrustError:
            return []
        try:
            dsse.verify(envelope, self.trust_store.public_keys)
        except TrustError:
            return retired
        return []

    def inclusion_proof(self, digest: str) -> dict:
        """The verified audit path of the log entry publishing `digest`; raises if there is none."""
        index = self.log_index_by_digest[digest]
        entry = self.log_entries.entries[index]
        if entry.digest != digest:
            raise LogMismatchError(f"log entry {index} publishes {entry.digest[:23]}, not {digest[:23]}")
        return translog.prove_inclusion(self.tree, index, self.checkpoint, entry)


_VERSION_PAIR = (
    # ngclient's messages, each with (expected, got): a lower version than expected is a rollback.
    re.compile(r"^Expected root version (?P<expected>[0-9]+) instead got version (?P<got>[0-9]+)"),
    re.compile(r"^Expected snapshot version (?P<expected>[0-9]+), got (?P<got>[0-9]+)"),
    re.compile(r"^Expected \S+ v(?P<expected>[0-9]+), got v(?P<got>[0-9]+)"),
)
# A newer timestamp or snapshot naming a lower version than the one trusted.
_ROLLED_BACK = (re.compile(r"must be >="), re.compile(r"^Expected \S+\.json version [0-9]+, got [0-9]+"))


def _version_error(msg: str) -> DistributionError:
    rollback = RollbackError(f"{msg}: the repository serves older metadata than this Tracker already trusts")
    if any(p.search(msg) for p in _ROLLED_BACK):
        return rollback
    for pattern in _VERSION_PAIR:
        m = pattern.search(msg)
        if m and int(m["got"]) < int(m["expected"]):
            return rollback
    return MixAndMatchError(f"{msg}: metadata from another repository version than the snapshot names")


def _classify(err: Exception, metadata: bool = False) -> DistributionError:
    """ngclient's exception -> the attack it stopped, with ngclient's own message kept. `metadata`:
    raised while refreshing metadata (a hash mismatch there is metadata mixed from two versions)."""
    msg = str(err) or type(err).__name__
    if isinstance(err, tuf_errors.ExpiredMetadataError):
        return FreezeError(f"{msg}: the repository serves expired metadata (a freeze attack, or its timestamp was "
                           "not re-signed in time: run publish --mode=timestamp)")
    if isinstance(err, tuf_errors.BadVersionNumberError):
        return _version_error(msg)
    if isinstance(err, tuf_errors.UnsignedMetadataError):
        return BelowThresholdError(f"{msg}: not signed by the threshold of trusted keys for its role")
    if isinstance(err, MalformedMetadataJsonError):
        return MalformedMetadataError(f"{msg}: TUF metadata must be unambiguous JSON")
    if isinstance(err, tuf_errors.DownloadLengthMismatchError) and metadata:
        return EndlessDataError(f"{msg}: metadata longer than its signed length or size cap (endless data)")
    if isinstance(err, tuf_errors.LengthOrHashMismatchError | tuf_errors.DownloadLengthMismatchError):
        if metadata:
            return MixAndMatchError(f"{msg}: a metadata file is not the one the timestamp/snapshot names (metadata "
                                    "mixed from different repository versions)")
        return TargetHashMismatchError(f"{msg}: a file differs from the hashes its signed metadata gives")
    if isinstance(err, tuf_errors.SlowRetrievalError):
        return SlowRetrievalError(f"{msg}: the mirror is too slow; nothing was decided from it")
    if isinstance(err, tuf_errors.DownloadError | OSError):
        return RepositoryUnreachableError(f"{msg}: nothing was decided from this repository")
    return DistributionError(f"{type(err).__name__}: {msg}")


def _kind_of(path: pathlib.Path) -> str:
    try:
        mode = os.lstat(path).st_mode
    except OSError as err:
        return f"unreadable ({err.strerror})"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"


class Tracker:
    """One Tracker's local state directory (metadata cache, target cache, log state) and its repository.

    Everything read from the state directory goes through the bounded reader first (a regular file,
    under ngclient's cap for its kind, strict JSON): a FIFO, a device or a link to one, or a file
    that is not JSON there is refused as tracker-state, never read by ngclient and never reset.
    """

    def __init__(self, state_dir: pathlib.Path | str, repository_url: str, bootstrap_root: bytes | None = None,
                 fetch_limits: FetchLimits | None = None):
        self.state_dir = pathlib.Path(state_dir)
        base = repository_url.rstrip("/")
        self.metadata_url, self.targets_url = base + "/metadata/", base + "/targets/"
        self.metadata_dir = self.state_dir / "metadata"
        self.target_dir = self.state_dir / "targets"
        self.fetch_limits = fetch_limits or FetchLimits()
        for d in (self.state_dir, self.metadata_dir, self.metadata_dir / "root_history", self.target_dir):
            self._directory(d)
        if not os.path.lexists(self.metadata_dir / "root.json") and bootstrap_root is None:
            raise DistributionError(f"{self.state_dir}: no trusted root yet; give the repository's first root "
                                    "(1.root.json, obtained out of band) with --bootstrap_root")
        self.bootstrap_root = bootstrap_root

    @staticmethod
    def _directory(d: pathlib.Path) -> None:
        try:
            st = os.stat(d)
        except FileNotFoundError:
            try:
                d.mkdir(parents=True, mode=0o700)
            except OSError as err:
                raise TrackerStateError(f"{d}: cannot create the Tracker state directory ({err.strerror})") from err
            return
        except OSError as err:
            raise TrackerStateError(f"{d}: cannot stat ({err.strerror})") from err
        if not stat.S_ISDIR(st.st_mode):
            raise TrackerStateError(f"{d} is {_kind_of(d)}, where the Tracker keeps a directory; remove it "
                                    "deliberately (the Tracker state is never reset silently)")

    def _state_json(self, path: pathlib.Path, limit: int) -> bytes:
        try:
            data = safe_io.read_regular_file(path, limit=limit)
            dsse.loads_strict(data)
        except TrustError as err:
            raise TrackerStateError(f"Tracker state file {path}: {err.code}: {err}; not read. It is this Tracker's "
                                    "trusted state, never reset silently: remove it deliberately (the next refresh "
                                    "downloads it again; root.json needs --bootstrap_root) or restore it") from err
        return data

    def _screen_state(self) -> None:
        """Every metadata file ngclient will open from the state directory, checked first."""
        for d in (self.state_dir, self.metadata_dir, self.metadata_dir / "root_history", self.target_dir):
            self._directory(d)
        for name, limit in _LOCAL_METADATA:
            path = self.metadata_dir / name
            if os.path.lexists(path):
                self._state_json(path, limit)
        for entry in sorted(os.listdir(self.metadata_dir / "root_history")):
            if _ROOT_HISTORY_NAME.match(entry):
                self._state_json(self.metadata_dir / "root_history" / entry, _CONFIG.root_max_length)

    def _state(self) -> distribution_pb2.TrackerState:
        path = self.state_dir / STATE_FILE
        state = distribution_pb2.TrackerState()
        if os.path.lexists(path):
            try:
                json_format.ParseDict(dsse.loads_strict(safe_io.read_regular_file(path)), state)
            except (TrustError, json_format.ParseError) as err:
                raise DistributionError(f"{path}: Tracker state unreadable ({err}); it holds the checkpoints "
                                        "seen so far, so it is never reset silently: restore it or remove it deliberately") from err
        return state

    def _targets_keys_of_earlier_roots(self) -> dict[str, Ed25519PublicKey]:
        """Lanes key id -> public key of every targets key in the roots ngclient walked and kept
        (root_history/, screened by _screen_state): a Tracker that skipped a rotation still knows the
        retired key."""
        found: dict[str, Ed25519PublicKey] = {}
        directory = self.metadata_dir / "root_history"
        for entry in sorted(os.listdir(directory)):
            if not _ROOT_HISTORY_NAME.match(entry):
                continue
            try:
                data = safe_io.read_regular_file(directory / entry, limit=_CONFIG.root_max_length)
                store = repository.role_trust_store(Metadata[Root].from_bytes(data).signed)
            except (TrustError, tuf_errors.RepositoryError, ValueError, KeyError):
                continue  # history is a hint for naming; the current root decides
            found.update(store.public_keys)
        return found

    def _cached_target(self, updater: Updater, info: TargetFile) -> bytes:
        """The target's verified bytes: the cached copy when it is one, else downloaded. A cache
        entry that is not a regular file (a FIFO, a link) is refused: ngclient would open it."""
        path = self.target_dir / urllib.parse.quote(info.path, "")
        if os.path.lexists(path):
            if not stat.S_ISREG(os.lstat(path).st_mode):
                raise TrackerStateError(f"Tracker target cache {path} is {_kind_of(path)}; not read. Remove it "
                                        "deliberately (the next refresh downloads the target again)")
            try:
                data = safe_io.read_regular_file(path, follow_symlinks=False, limit=info.length)
                info.verify_length_and_hashes(data)
                return data
            except (TrustError, tuf_errors.LengthOrHashMismatchError):
                pass  # stale or damaged: download it again
        updater.download_target(info, filepath=str(path))
        try:
            data = safe_io.read_regular_file(path, follow_symlinks=False, limit=info.length)
        except TrustError as err:
            raise TrackerStateError(f"Tracker target cache {path}: {err}") from err
        info.verify_length_and_hashes(data)
        return data

    def refresh(self) -> TrackerView:
        try:
            self._screen_state()
            updater = Updater(
                metadata_dir=str(self.metadata_dir), metadata_base_url=self.metadata_url,
                target_dir=str(self.target_dir), target_base_url=self.targets_url,
                fetcher=BoundedFetcher(self.fetch_limits), config=_CONFIG,
                bootstrap=None if os.path.lexists(self.metadata_dir / "root.json") else self.bootstrap_root,
            )
            updater.refresh()
        except DistributionError:
            raise
        except (tuf_errors.RepositoryError, tuf_errors.DownloadError, OSError, ValueError) as err:
            raise _classify(err, metadata=True) from err
        try:
            # ngclient persists metadata only once verified, so these files are the verified ones.
            metadata = {name: Metadata.from_bytes(self._state_json(self.metadata_dir / name, limit))
                        for name, limit in _LOCAL_METADATA}
            root = metadata["root.json"].signed
            targets = metadata["targets.json"].signed
            files: dict[str, bytes] = {}
            for path, info in targets.targets.items():
                verified = updater.get_targetinfo(path)
                if verified is None or verified != info:
                    raise TargetHashMismatchError(f"target {path}: not what the verified targets metadata lists")
                files[path] = self._cached_target(updater, verified)
        except DistributionError:
            raise
        except (tuf_errors.RepositoryError, tuf_errors.DownloadError, OSError, ValueError) as err:
            raise _classify(err) from err
        versions = {"root": root.version, "timestamp": metadata["timestamp.json"].signed.version,
                    "snapshot": metadata["snapshot.json"].signed.version, "targets": targets.version}
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
            if e.kind == "revocation" and _served_digest(files.get(e.target_path)) != e.digest:
                raise RevocationDroppedError(
                    f"the log lists revocation {e.target_path} ({e.digest[:23]}) published {e.published_at}, the "
                    "repository does not serve it: a revocation was dropped; nothing is admitted from this view")
        # Revocations served: each must be in the log and verify (revocations.verify_all: by current
        # keys, then by keys they revoke or retire, which were published before a rotation).
        pending: list[tuple[str, certification_pb2.Envelope]] = []
        for path, data in sorted(files.items()):
            if not path.startswith(repository.REVOCATIONS_DIR + "/"):
                continue
            try:
                env = dsse.envelope_from_json(data)
            except TrustError as err:
                raise MalformedRevocationError(f"revocation {path}: {err}") from err
            if records.record_digest(env) not in index_by_digest:
                raise LogMismatchError(f"revocation {path} is served but not in the log; the repository is inconsistent")
            pending.append((path, env))
        earlier = self._targets_keys_of_earlier_roots()
        seen = set(state.seen_targets_keyids) | set(current_ids) | set(earlier)
        revs, signer_keys = revocations.verify_all(pending, current, seen)
        rev_set = revocations.RevocationSet(tuple(revs))
        retired = frozenset(seen - set(signer_keys))
        published: list[PublishedRecord] = []
        for path, data in sorted(files.items()):
            if not path.startswith(repository.RECORDS_DIR + "/"):
                continue
            try:
                env = dsse.envelope_from_json(data)
            except TrustError as err:
                raise LogMismatchError(f"record target {path} is not a DSSE envelope ({err})") from err
            digest = records.record_digest(env)
            kind = "compatibility" if env.payload_type.startswith(records.COMPATIBILITY_FAMILY + ".") else "certification"
            published.append(PublishedRecord(env, digest, path, index_by_digest.get(digest, -1), kind))
        new_state = distribution_pb2.TrackerState(seen_targets_keyids=sorted(seen))
        new_state.last_checkpoint.CopyFrom(checkpoint)
        try:
            atomic_files.write_bytes_atomic(
                self.state_dir / STATE_FILE,
                (json_format.MessageToJson(new_state, preserving_proto_field_name=True, sort_keys=True) + "\n").encode())
        except OSError as err:
            raise TrackerStateError(f"{self.state_dir / STATE_FILE}: cannot write the Tracker state ({err})") from err
        return TrackerView(
            records=published, revocations=rev_set, checkpoint=checkpoint,
            checkpoint_digest=records.sha256_digest(checkpoint_bytes), tree=tree, log_index_by_digest=index_by_digest,
            log_entries=entries, trust_store=trust.as_trust_store(signer_keys), current_keyids=current_ids,
            retired_keyids=retired, versions=versions, refreshed_at=checkpoint.timestamp,
            retired_keys={k: v for k, v in earlier.items() if k in retired},
        )


def _served_digest(data: bytes | None) -> str:
    """records.record_digest of a served envelope; empty when there is none or it is not one."""
    if data is None:
        return ""
    try:
        return records.record_digest(dsse.envelope_from_json(data))
    except TrustError:
        return ""
