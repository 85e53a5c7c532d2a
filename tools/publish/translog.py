"""The append-only transparency log of everything published, with signed checkpoints.

RFC 9162 Merkle tree hashing (leaf = sha256(0x00 || entry), node = sha256(0x01 || left || right))
through pymerkle 7.0.0: a maintained, dependency-light (cachetools) implementation of exactly the
Certificate Transparency tree, with inclusion and consistency proofs and stateless verifiers. We
use its in-memory tree (the log is one small leaf per record) and its verify_* functions; the leaf
encoding (a LogEntry proto, deterministic bytes) and the signed checkpoint are ours.
"""

from __future__ import annotations

import datetime as dt
import json

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import json_format
from pymerkle import InmemoryTree, InvalidProof, verify_consistency, verify_inclusion
from pymerkle.proof import InclusionProof

from proto import certification_pb2, distribution_pb2
from tools.policy import dsse, timestamps, trust
from tools.policy.errors import TrustError
from tools.publish import revocations
from tools.publish.distribution_errors import LogForkError, LogMismatchError

CHECKPOINT_PAYLOAD_TYPE = "application/vnd.lanes.log-checkpoint.v1+json"
ORIGIN = "lanes-records"


def leaf_bytes(entry: distribution_pb2.LogEntry) -> bytes:
    return entry.SerializeToString(deterministic=True)


def build_tree(entries: distribution_pb2.LogEntries) -> InmemoryTree:
    tree = InmemoryTree(algorithm="sha256")
    for e in entries.entries:
        tree.append_entry(leaf_bytes(e))
    return tree


def root_hex(tree: InmemoryTree, size: int | None = None) -> str:
    size = tree.get_size() if size is None else size
    # pymerkle returns the empty-string hash for size 0, as RFC 9162 defines.
    return tree.get_root(size).hex()


def make_checkpoint(tree: InmemoryTree, now: dt.datetime) -> distribution_pb2.Checkpoint:
    return distribution_pb2.Checkpoint(origin=ORIGIN, tree_size=tree.get_size(), root_hash=root_hex(tree),
                                       timestamp=timestamps.format_utc(now))


def sign_checkpoint(cp: distribution_pb2.Checkpoint, key: Ed25519PrivateKey) -> certification_pb2.Envelope:
    return dsse.sign(CHECKPOINT_PAYLOAD_TYPE, revocations.canonical_json(cp), key)


def verify_checkpoint(env: certification_pb2.Envelope, store: trust.TrustStore) -> distribution_pb2.Checkpoint:
    if env.payload_type != CHECKPOINT_PAYLOAD_TYPE:
        raise LogMismatchError(f"checkpoint payload type {env.payload_type!r}, expected {CHECKPOINT_PAYLOAD_TYPE}")
    try:
        dsse.verify(env, store.public_keys)
        cp = distribution_pb2.Checkpoint()
        json_format.ParseDict(dsse.loads_strict(env.payload), cp)
    except (TrustError, json_format.ParseError) as err:
        raise LogMismatchError(f"checkpoint not signed by a current targets key or not a Checkpoint ({err})") from err
    if cp.origin != ORIGIN:
        raise LogMismatchError(f"checkpoint of log {cp.origin!r}, this Tracker follows {ORIGIN!r}")
    return cp


def check_against_checkpoint(tree: InmemoryTree, cp: distribution_pb2.Checkpoint) -> None:
    if tree.get_size() != cp.tree_size or root_hex(tree) != cp.root_hash:
        raise LogMismatchError(
            f"log entries hash to size {tree.get_size()} root {root_hex(tree)[:16]}.., the signed checkpoint says size "
            f"{cp.tree_size} root {cp.root_hash[:16]}..: the served log is not the signed one")


def check_consistent(tree: InmemoryTree, old: distribution_pb2.Checkpoint, new: distribution_pb2.Checkpoint) -> None:
    """Raises LogForkError unless the log of `new` extends the log of `old` (RFC 9162 consistency proof)."""
    if not old.tree_size:
        return
    if new.tree_size < old.tree_size:
        raise LogForkError(f"log shrank from {old.tree_size} to {new.tree_size} entries since checkpoint "
                           f"{old.timestamp}: published history was removed")
    try:
        proof = tree.prove_consistency(old.tree_size, new.tree_size)
        verify_consistency(bytes.fromhex(old.root_hash), bytes.fromhex(new.root_hash), proof)
    except (InvalidProof, ValueError) as err:
        raise LogForkError(
            f"log of {new.tree_size} entries does not extend the log of {old.tree_size} entries (root "
            f"{old.root_hash[:16]}..) seen at {old.timestamp}: its history was rewritten (an entry removed or changed)"
        ) from err


def prove_inclusion(tree: InmemoryTree, index: int, cp: distribution_pb2.Checkpoint,
                    entry: distribution_pb2.LogEntry) -> dict:
    """The audit path of `entry` as leaf `index` (0-based) against the checkpoint, verified from the
    entry's own bytes (not the tree's copy of the leaf), as JSON for decisions."""
    proof = tree.prove_inclusion(index + 1, cp.tree_size)
    verify_inclusion(tree.hash_buff(leaf_bytes(entry)), bytes.fromhex(cp.root_hash), proof, size=cp.tree_size)
    return proof.serialize()


def verify_inclusion_json(entry: distribution_pb2.LogEntry, proof_json: dict | str, cp: distribution_pb2.Checkpoint) -> None:
    """For auditors: the entry is in the log the checkpoint signs (raises InvalidProof otherwise)."""
    proof = InclusionProof.deserialize(json.loads(proof_json) if isinstance(proof_json, str) else proof_json)
    leaf = InmemoryTree(algorithm="sha256").hash_buff(leaf_bytes(entry))
    verify_inclusion(leaf, bytes.fromhex(cp.root_hash), proof, size=cp.tree_size)
