"""The attack corpus (issue 13): each attack on a record repository is refused with its named reason.

Every test first shows the honest path admitting, then the attack refusing, so each check is seen
failing on exactly the input that should fail it. Keys are throwaway; the repository is served as
file:// (tools/admission/publish_loopback_test.py serves it over a loopback HTTP server).
"""

import dataclasses
import datetime as dt
import shutil

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from tuf.api.metadata import Metadata, Root, Targets

from proto import distribution_pb2
from tools.admission import admission, tracker_admission
from tools.admission.testing import routes
from tools.certify import records
from tools.policy import dsse, timestamps
from tools.publish import repository, revocations, translog
from tools.publish.distribution_errors import (
    BelowThresholdError,
    FreezeError,
    LogForkError,
    MixAndMatchError,
    RevocationDroppedError,
    RollbackError,
    TargetHashMismatchError,
)
from tools.publish.testing import repo as testing_repo

POLICY = testing_repo.policy()


@pytest.fixture
def fx(tmp_path):
    return testing_repo.make_repo(tmp_path)


def published(fx, **device):
    name, data, report = testing_repo.record_file(fx.issuer, **device)
    fx.repo.publish(fx.signers, [(name, data)])
    return data, report


def decide(tracker, report, extra=()):
    decision, view = tracker_admission.refresh_and_decide(tracker, POLICY, routes.route_for(report),
                                                          extra_records=extra)
    return decision, view


# ---- TUF: rollback, freeze, mix-and-match, hash mismatch, below threshold ------------------------

def test_rollback_to_older_metadata_is_refused(fx):
    _, report = published(fx)
    old_timestamp = (fx.repo.metadata_dir / "timestamp.json").read_bytes()
    published(fx, lane_id="linux-x86_64-other")
    tracker = fx.tracker()
    routes.admitted(decide(tracker, report)[0])
    (fx.repo.metadata_dir / "timestamp.json").write_bytes(old_timestamp)  # replay the older record set
    with pytest.raises(RollbackError, match="timestamp version"):
        tracker.refresh()
    routes.refused_with(decide(tracker, report)[0], "rollback", shown=200)


def test_expired_timestamp_freeze_is_refused(fx):
    _, report = published(fx)
    routes.admitted(decide(fx.tracker("t0"), report)[0])
    # The mirror keeps serving a timestamp whose lifetime ran out (re-signed long ago).
    fx.repo.refresh_timestamp(fx.timestamp, now=timestamps.now() - dt.timedelta(days=2))
    with pytest.raises(FreezeError, match="expired"):
        fx.tracker("t1").refresh()
    routes.refused_with(decide(fx.tracker("t2"), report)[0], "freeze", shown=200)


def test_snapshot_targets_mix_and_match_is_refused(fx):
    _, report = published(fx)
    published(fx, lane_id="linux-x86_64-other")
    md = fx.repo.metadata_dir
    current = fx.repo.snapshot().signed.meta["targets.json"].version
    # Serve the previous (validly signed) targets under the name the current snapshot points at.
    (md / f"{current}.targets.json").write_bytes((md / f"{current - 1}.targets.json").read_bytes())
    with pytest.raises(MixAndMatchError):
        fx.tracker().refresh()
    routes.refused_with(decide(fx.tracker("t2"), report)[0], "mix-and-match", shown=200)


def test_target_whose_hash_does_not_match_is_refused(fx):
    data, report = published(fx)
    digest = records.sha256_digest(data).split(":", 1)[1]
    stored = fx.repo.targets_dir / "records" / f"{digest}.{digest}.dsse.json"
    stored.write_bytes(data.replace(b'"payloadType"', b'"payloadType" '))  # same meaning, other bytes
    with pytest.raises(TargetHashMismatchError):
        fx.tracker().refresh()
    routes.refused_with(decide(fx.tracker("t2"), report)[0], "target-hash-mismatch", shown=200)


def test_root_signed_below_threshold_is_refused(fx):
    _, report = published(fx)
    routes.admitted(decide(fx.tracker("t0"), report)[0])
    root_md = fx.repo.root()
    root_md.signed.version += 1
    root_md.signed.roles["targets"].keyids = []  # an attacker holding one root key swaps the issuer
    attacker = Ed25519PrivateKey.generate()
    root_md.signed.add_key(repository.tuf_key(attacker), "targets")
    root_md.signatures.clear()
    root_md.sign(repository.signer(fx.root_keys[0]))  # 1 of the 2 required root signatures
    (fx.repo.metadata_dir / "2.root.json").write_bytes(root_md.to_bytes())
    with pytest.raises(BelowThresholdError, match="root"):
        fx.tracker("t1").refresh()
    routes.refused_with(decide(fx.tracker("t2"), report)[0], "below-threshold", shown=200)


# ---- revocation ------------------------------------------------------------------------------------

def revoke(fx, **kw):
    rev = revocations.make(now=timestamps.now(), **kw)
    fx.repo.publish(fx.signers, (), [revocations.sign(rev, fx.issuer)])


def test_revocation_by_digest_refuses_the_record_even_from_a_cache_or_copy(fx):
    data, report = published(fx)
    tracker = fx.tracker()
    copy = admission.SignedInput(dsse.envelope_from_json(data), records.record_digest_of_json(data), "cached-copy.dsse.json")
    routes.admitted(decide(tracker, report, [copy])[0])
    revoke(fx, record_digest=records.record_digest_of_json(data), reason="kernel bug found after certification")
    decision, _ = decide(tracker, report, [copy])
    routes.refused_with(decision, "revoked", shown=200)
    assert any("revoked: node" in r and "kernel bug" in r and "cached-copy" in r for r in decision.reasons)


def test_a_record_never_published_is_refused_even_if_correctly_signed(fx):
    _, report = published(fx)
    # Signed by the issuer, never published (another issue time: another record).
    _, other, _ = testing_repo.record_file(fx.issuer, issued_at=timestamps.now() - dt.timedelta(seconds=10))
    copy = admission.SignedInput(dsse.envelope_from_json(other), records.record_digest_of_json(other), "side-loaded.dsse.json")
    view = fx.tracker().refresh()
    decision = tracker_admission.decide_from_view(view, POLICY, routes.route_for(report), extra_records=[copy])
    routes.admitted(decision)  # the published record admits; the side-loaded one is screened out
    alone = dataclasses.replace(view, records=[])
    routes.refused_with(tracker_admission.decide_from_view(alone, POLICY, routes.route_for(report), extra_records=[copy]),
                        "not-in-log", shown=200)


def test_revocation_by_scope_lane_and_driver_major(fx):
    _, gpu = published(fx, lane_id="linux-x86_64-cuda", **testing_repo.GPU_DEVICE)
    _, cpu = published(fx)
    tracker = fx.tracker()
    routes.admitted(decide(tracker, gpu)[0])
    from proto import runner_report_pb2
    revoke(fx, lane_id="linux-x86_64-cuda", device_class=runner_report_pb2.DeviceClass(driver_major="580"),
           reason="driver 580 regression")
    routes.refused_with(decide(tracker, gpu)[0], "revoked", shown=200)
    routes.admitted(decide(tracker, cpu)[0])  # another scope is untouched


def test_revocation_by_issuer_key(fx):
    _, report = published(fx)
    tracker = fx.tracker()
    routes.admitted(decide(tracker, report)[0])
    revoke(fx, issuer_public_key=dsse.raw_public_key(fx.issuer), reason="issuer key leaked")
    routes.refused_with(decide(tracker, report)[0], "revoked", shown=200)


def test_dropped_revocation_is_refused(fx):
    data, report = published(fx)
    revoke(fx, record_digest=records.record_digest_of_json(data), reason="withdrawn")
    tracker = fx.tracker()
    routes.refused_with(decide(tracker, report)[0], "revoked", shown=200)
    # A later version leaves the revocation out of the targets but the log still lists it.
    _, ts, snap, targets = fx.repo._current()
    for path in [p for p in targets.targets if p.startswith("revocations/")]:
        del targets.targets[path]
    fx.repo._publish_version(targets, fx.repo.log_entries(targets), fx.signers, timestamps.now(), snap.version, ts.version)
    with pytest.raises(RevocationDroppedError):
        tracker.refresh()
    routes.refused_with(decide(tracker, report)[0], "revocation-dropped", shown=200)


# ---- transparency log ----------------------------------------------------------------------------

def test_forked_log_is_refused(fx):
    data, report = published(fx)
    revoke(fx, record_digest=records.record_digest_of_json(data), reason="withdrawn")
    tracker = fx.tracker()
    routes.refused_with(decide(tracker, report)[0], "revoked", shown=200)
    # Rewrite history: drop the revocation from the targets AND the log, re-sign everything.
    _, ts, snap, targets = fx.repo._current()
    for path in [p for p in targets.targets if p.startswith("revocations/")]:
        del targets.targets[path]
    log = fx.repo.log_entries(targets)
    kept = [e for e in log.entries if e.kind != "revocation"]
    del log.entries[:]
    log.entries.extend(kept)
    _, other, _ = testing_repo.record_file(fx.issuer, lane_id="linux-x86_64-other")
    fx.repo._publish_version(targets, log, fx.signers, timestamps.now(), snap.version, ts.version)
    fx.repo.publish(fx.signers, [("other.dsse.json", other)])  # same size, other history: a fork
    with pytest.raises(LogForkError, match="rewritten"):
        tracker.refresh()
    routes.refused_with(decide(tracker, report)[0], "log-fork", shown=200)
    # A Tracker that never saw the old log cannot know; it does see the record as admissible:
    # this is why Trackers keep their state (and why auditors gossip checkpoints).
    routes.admitted(decide(fx.tracker("newcomer"), report)[0])


def test_a_checkpoint_that_is_not_an_envelope_refuses_the_view(fx):
    _, report = published(fx)
    _, ts, snap, targets = fx.repo._current()
    targets.targets[repository.LOG_CHECKPOINT] = fx.repo._write_target(repository.LOG_CHECKPOINT, b"{}")
    md = repository.Metadata(targets)
    targets.version += 1
    data = fx.repo._write_metadata(md, [fx.issuer], [f"{targets.version}.targets.json"])
    snapshot = repository.Snapshot(version=snap.version + 1, expires=snap.expires,
                                   meta={"targets.json": repository.MetaFile.from_data(targets.version, data, ["sha256"])})
    sdata = fx.repo._write_metadata(repository.Metadata(snapshot), [fx.snapshot], [f"{snapshot.version}.snapshot.json"])
    timestamp = repository.Timestamp(version=ts.version + 1, expires=ts.expires,
                                     snapshot_meta=repository.MetaFile.from_data(snapshot.version, sdata, ["sha256"]))
    fx.repo._write_metadata(repository.Metadata(timestamp), [fx.timestamp], ["timestamp.json"])
    routes.refused_with(decide(fx.tracker(), report)[0], "log-mismatch", shown=200)


def test_an_admitting_record_must_prove_inclusion(fx):
    data, report = published(fx)
    view = fx.tracker().refresh()
    routes.admitted(tracker_admission.decide_from_view(view, POLICY, routes.route_for(report)))
    # A view whose log index points the record at another leaf: the screen passes, the proof fails.
    published(fx, lane_id="linux-x86_64-other")
    view = fx.tracker("t2").refresh()
    digest = records.record_digest_of_json(data)
    view.log_index_by_digest[digest] = 1 - view.log_index_by_digest[digest]
    routes.refused_with(tracker_admission.decide_from_view(view, POLICY, routes.route_for(report)), "not-in-log", shown=200)


def test_unreadable_tracker_state_is_never_reset_silently(fx):
    _, report = published(fx)
    tracker = fx.tracker()
    routes.admitted(decide(tracker, report)[0])
    (tracker.state_dir / "tracker_state.json").write_text("{not json")
    routes.refused_with(decide(tracker, report)[0], "distribution", shown=200)


def test_inclusion_proof_verifies_against_the_checkpoint_and_fails_for_another_entry(fx):
    data, _ = published(fx)
    published(fx, lane_id="linux-x86_64-other")
    view = fx.tracker().refresh()
    digest = records.record_digest_of_json(data)
    proof = view.inclusion_proof(digest)
    entry = view.log_entries.entries[view.log_index_by_digest[digest]]
    translog.verify_inclusion_json(entry, proof, view.checkpoint)
    forged = distribution_pb2.LogEntry()
    forged.CopyFrom(entry)
    forged.digest = "sha256:" + "0" * 64
    with pytest.raises(Exception, match="(?i)does not match|invalid"):
        translog.verify_inclusion_json(forged, proof, view.checkpoint)


# ---- key rotation --------------------------------------------------------------------------------

def test_rotation_honours_records_issued_before_and_refuses_later_ones_by_the_retired_key(fx):
    # Issued a little before the rotation (a record issued in the rotation's second is refused:
    # "before" must be provable at the records' one-second resolution).
    name, data, report = testing_repo.record_file(fx.issuer, issued_at=timestamps.now() - dt.timedelta(seconds=5))
    fx.repo.publish(fx.signers, [(name, data)])
    tracker = fx.tracker()
    routes.admitted(decide(tracker, report)[0])
    new_issuer = Ed25519PrivateKey.generate()
    fx.repo.rotate_targets_key(fx.signers, [new_issuer], retire="honour-issued-before")
    assert fx.repo.root().signed.version == 2
    routes.admitted(decide(tracker, report)[0])  # issued before the rotation: stands until it expires
    # The retired key, stolen, signs a fresh record and someone side-loads it.
    name, stolen, _ = testing_repo.record_file(fx.issuer, issued_at=timestamps.now() + dt.timedelta(seconds=1))
    view = tracker.refresh()
    view.log_index_by_digest[records.record_digest_of_json(stolen)] = 0  # even if it were in the log
    copy = admission.SignedInput(dsse.envelope_from_json(stolen), records.record_digest_of_json(stolen), name)
    routes.refused_with(tracker_admission.decide_from_view(dataclasses.replace(view, records=[]), POLICY,
                                                           routes.route_for(report), extra_records=[copy]),
                        "revoked", shown=200)
    # The publisher refuses to publish what the retired key signs.
    with pytest.raises(Exception, match="current targets key"):
        fx.repo.publish(dataclasses.replace(fx.signers, targets=[new_issuer]), [(name, stolen)])


def test_rotation_refuse_all_refuses_every_record_of_the_retired_key(fx):
    _, report = published(fx)
    tracker = fx.tracker()
    routes.admitted(decide(tracker, report)[0])
    fx.repo.rotate_targets_key(fx.signers, [Ed25519PrivateKey.generate()], retire="refuse-all", reason="key compromised")
    decision, _ = decide(tracker, report)
    routes.refused_with(decision, "revoked", shown=200)
    assert "key compromised" in decision.reasons[0]


def test_key_dropped_from_root_without_a_retirement_statement_is_refused_as_retired(fx):
    _, report = published(fx)
    tracker = fx.tracker()
    routes.admitted(decide(tracker, report)[0])
    new_issuer = Ed25519PrivateKey.generate()
    root_md = fx.repo.root()
    root = root_md.signed
    for k in list(root.roles["targets"].keyids):
        root.revoke_key(k, "targets")
    root.add_key(repository.tuf_key(new_issuer), "targets")
    root.version += 1
    fx.repo._write_metadata(root_md, fx.root_keys[:2], ["2.root.json", "root.json"])
    fx.repo.publish(dataclasses.replace(fx.signers, targets=[new_issuer]))
    routes.refused_with(decide(tracker, report)[0], "retired-key", shown=200)
    # A Tracker that first refreshes after the rotation walks root v1 -> v2 and knows it too.
    routes.refused_with(decide(fx.tracker("late"), report)[0], "retired-key", shown=200)


def test_rotation_needs_the_root_threshold(fx):
    published(fx)
    one = dataclasses.replace(fx.signers, root=fx.root_keys[:1])
    fx.repo.rotate_targets_key(one, [Ed25519PrivateKey.generate()])
    with pytest.raises(BelowThresholdError):
        fx.tracker().refresh()


def test_committed_metadata_helpers_roundtrip(fx):
    """Sanity: what the publisher wrote is plain TUF metadata any python-tuf reader loads."""
    published(fx)
    assert Metadata[Root].from_file(str(fx.repo.metadata_dir / "root.json")).signed.roles["root"].threshold == 2
    assert Metadata[Targets].from_bytes(
        (fx.repo.metadata_dir / f"{fx.repo.targets().signed.version}.targets.json").read_bytes()).signed.targets
    shutil.rmtree(fx.dir / "nothing", ignore_errors=True)


if __name__ == "__main__":
    import sys
    sys.exit(pytest.main([__file__, "-q", "-s", "-p", "no:cacheprovider"]))
