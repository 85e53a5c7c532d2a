"""The distribution corpus against its own revocations and a hostile mirror or state directory.

Each test shows the honest path first where there is one, then the attack refused with its code.
The hostile-mirror and hostile-state cases run admission_cli in a child process with a 10 s limit:
each must end within it, with exit status 1 (refused) or 2 (unusable input), never 3 (a crash).
"""

import base64
import dataclasses
import datetime as dt
import http.server
import json
import math
import os
import pathlib
import shutil
import socketserver
import subprocess
import sys
import threading
import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import json_format
from tuf.api import exceptions as tuf_errors
from tuf.api.metadata import Metadata, MetaFile, Snapshot, Timestamp

from tools.admission import admission, admission_cli, tracker_admission
from tools.admission.testing import routes
from tools.certify import records, sample_reports
from tools.policy import dsse, keys, timestamps, trust
from tools.policy import policy as policy_lib
from tools.policy.errors import KeyFileError, MalformedEnvelopeError
from tools.publish import distribution_errors, fetchers, repository, revocations
from tools.publish.distribution_errors import PublishError, RollbackError
from tools.publish.testing import repo as testing_repo

POLICY = testing_repo.policy()
BOUND_S = 10.0


@pytest.fixture
def fx(tmp_path):
    return testing_repo.make_repo(tmp_path)


def published(fx, **kw):
    name, data, report = testing_repo.record_file(fx.issuer, **kw)
    fx.repo.publish(fx.signers, [(name, data)])
    return name, data, report


def decide(tracker, report, extra=()):
    return tracker_admission.refresh_and_decide(tracker, POLICY, routes.route_for(report), extra_records=extra)


def reencodings(data: bytes) -> dict[str, bytes]:
    """Re-encodings of one envelope that DSSE reads as the same signed statement."""
    obj = json.loads(data)
    out = {}

    def variant(name, mutate):
        o = json.loads(data)
        mutate(o)
        out[name] = json.dumps(o).encode()

    variant("empty-keyid", lambda o: o["signatures"][0].update(keyid=""))
    variant("absent-keyid", lambda o: o["signatures"][0].pop("keyid"))
    variant("unknown-field", lambda o: o.update(note="mirror"))
    variant("unpadded-base64", lambda o: o.update(payload=o["payload"].rstrip("=")))
    raw = base64.b64decode(obj["payload"])
    variant("url-safe-base64", lambda o: o.update(payload=base64.urlsafe_b64encode(raw).decode()))
    out["re-indented"] = json.dumps(obj, indent=7, sort_keys=False).encode()
    return out


def signed_input(data: bytes, source: str) -> admission.SignedInput:
    """A cached copy as admission names it (admission.SignedInput.from_envelope)."""
    return admission.SignedInput.from_envelope(dsse.envelope_from_json(data), source)


# ---- 1. revocation and retirement follow the key that verified, not the keyid hint ---------------

@pytest.mark.parametrize("variant", ["empty-keyid", "absent-keyid"])
def test_refuse_all_rotation_covers_keyid_less_signatures(fx, variant):
    name, data, report = testing_repo.record_file(fx.issuer)
    fx.repo.publish(fx.signers, [(name, reencodings(data)[variant])])  # served without a keyid
    tracker = fx.tracker()
    routes.admitted(decide(tracker, report)[0])
    fx.repo.rotate_targets_key(fx.signers, [Ed25519PrivateKey.generate()], retire="refuse-all", reason="key stolen")
    routes.refused_with(decide(tracker, report)[0], "revoked")


def test_issuer_revocation_covers_every_reencoding_from_a_cache(fx):
    name, data, report = published(fx)
    tracker = fx.tracker()
    copies = [signed_input(d, f"{v}.dsse.json") for v, d in reencodings(data).items()]
    rev = revocations.make(issuer_public_key=dsse.raw_public_key(fx.issuer), reason="key leaked", now=timestamps.now())
    fx.repo.publish(fx.signers, (), [revocations.sign(rev, fx.issuer)])
    view = tracker.refresh()
    for copy in copies:
        decision = tracker_admission.decide_from_view(dataclasses.replace(view, records=[]), POLICY,
                                                      routes.route_for(report), extra_records=[copy])
        routes.refused_with(decision, "revoked")


def test_retired_key_is_named_from_the_signature_that_verified(fx):
    name, data, report = published(fx, issued_at=timestamps.now() - dt.timedelta(seconds=5))
    tracker = fx.tracker()
    routes.admitted(decide(tracker, report)[0])
    new_issuer = Ed25519PrivateKey.generate()
    root_md = fx.repo.root()
    for k in list(root_md.signed.roles["targets"].keyids):
        root_md.signed.revoke_key(k, "targets")
    root_md.signed.add_key(repository.tuf_key(new_issuer), "targets")
    root_md.signed.version += 1
    fx.repo._write_metadata(root_md, fx.root_keys[:2], ["2.root.json", "root.json"])
    fx.repo.publish(dataclasses.replace(fx.signers, targets=[new_issuer]))
    view = tracker.refresh()
    copy = signed_input(reencodings(data)["empty-keyid"], "keyid-less.dsse.json")
    routes.refused_with(tracker_admission.decide_from_view(dataclasses.replace(view, records=[]), POLICY,
                                                    routes.route_for(report), extra_records=[copy]), "retired-key")


def test_cli_add_keyid_less_then_rotate_refuse_all_is_refused(tmp_path):
    k = {n: keys.generate(n, tmp_path / "keys") for n in ("root1", "issuer", "issuer2", "snapshot", "timestamp")}
    repo = str(tmp_path / "repo")
    roles = [f"--snapshot_key={k['snapshot'].private_key}", f"--timestamp_key={k['timestamp'].private_key}"]
    assert publish_cli("--mode=init", f"--repository={repo}", f"--root_key={k['root1'].private_key}",
                       f"--targets_key={k['issuer'].private_key}", *roles).returncode == 0
    name, data, report = testing_repo.record_file(keys.load_private_key(k["issuer"].private_key))
    (tmp_path / name).write_bytes(reencodings(data)["empty-keyid"])
    assert publish_cli("--mode=add", f"--repository={repo}", f"--record={tmp_path / name}",
                       f"--targets_key={k['issuer'].private_key}", *roles).returncode == 0
    write_policy_and_route(tmp_path, report)
    assert admit_cli(tmp_path, tmp_path / "tracker")[0] == admission_cli.EXIT_ROUTABLE
    assert publish_cli("--mode=rotate", f"--repository={repo}", f"--root_key={k['root1'].private_key}",
                       f"--new_targets_key={k['issuer2'].private_key}", "--retire=refuse-all", *roles).returncode == 0
    rc, elapsed, text = admit_cli(tmp_path, tmp_path / "tracker")
    assert rc == admission_cli.EXIT_REFUSED and "revoked: " in text, text


# ---- 2. records are named by what was signed -----------------------------------------------------

def test_reindented_copy_of_a_revoked_record_is_refused_by_the_publisher_and_by_trackers(fx):
    name, data, report = published(fx)
    tracker = fx.tracker()
    revoke = revocations.make(record_digest=revocations.record_digest_of_file(data), reason="bad kernel",
                              now=timestamps.now())
    fx.repo.publish(fx.signers, (), [revocations.sign(revoke, fx.issuer)])
    routes.refused_with(decide(tracker, report)[0], "revoked")
    for variant, copy in reencodings(data).items():
        with pytest.raises(PublishError, match="revoked: bad kernel"):
            fx.repo.publish(fx.signers, [(f"{variant}.dsse.json", copy)])
        routes.refused_with(decide(tracker, report, [signed_input(copy, f"{variant}.dsse.json")])[0], "revoked")


def test_a_reencoded_copy_is_the_same_record_for_dedup_and_the_log(fx):
    name, data, report = published(fx)
    size = fx.tracker("t0").refresh().checkpoint.tree_size
    fx.repo.publish(fx.signers, [(f"{v}.dsse.json", d) for v, d in reencodings(data).items()])
    view = fx.tracker("t1").refresh()
    assert view.checkpoint.tree_size == size == 1
    assert [r.digest for r in view.records] == [records.record_digest(dsse.envelope_from_json(data))]


# ---- 3. a slow, endless or hostile mirror ---------------------------------------------------------

def publish_cli(*args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run([sys.executable, "-m", "tools.publish.publish_cli", *args], env=env, capture_output=True,
                          text=True, check=False, timeout=120)
    print(proc.stdout, proc.stderr)
    return proc


def write_policy_and_route(tmp_path, report):
    (tmp_path / "policy.json").write_text(policy_lib.policy_to_json(POLICY))
    (tmp_path / "route.json").write_text(json_format.MessageToJson(routes.route_for(report)))


def admit_cli(tmp_path, state_dir, url=None, bootstrap=True):
    """(exit status, seconds, output) of admission_cli in a child process, killed at BOUND_S."""
    url = url or (tmp_path / "repo").resolve().as_uri()
    argv = [sys.executable, "-m", "tools.admission.admission_cli", f"--policy={tmp_path / 'policy.json'}",
            f"--route={tmp_path / 'route.json'}", f"--repository_url={url}", f"--tracker_state_dir={state_dir}"]
    if bootstrap:
        argv.append(f"--bootstrap_root={tmp_path / 'repo' / 'metadata' / '1.root.json'}")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    t0 = time.monotonic()
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=BOUND_S, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"admission_cli still running after {BOUND_S:g} s (hung)")
    elapsed = time.monotonic() - t0
    text = proc.stdout + proc.stderr
    print(f"exit {proc.returncode} after {elapsed:.2f} s: {text.strip().splitlines()[-2:]}")
    return proc.returncode, elapsed, text


def hostile(path: pathlib.Path, kind: str) -> None:
    if path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        os.symlink("/dev/zero", path)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
@pytest.mark.parametrize("where", ["metadata/timestamp.json", "metadata/2.root.json", "target"])
def test_hostile_file_on_a_file_mirror_is_refused_in_bounded_time(tmp_path, fx, where, kind):
    name, data, report = published(fx)
    write_policy_and_route(tmp_path, report)
    if where == "target":
        path = next((fx.repo.targets_dir / "records").iterdir())
    else:
        path = fx.repo.dir / where
    hostile(path, kind)
    rc, elapsed, text = admit_cli(tmp_path, tmp_path / "tracker")
    assert rc in (1, 2) and elapsed < BOUND_S, text
    assert "repository-unreachable" in text or "target-hash-mismatch" in text, text


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the repository; the path in `server.drip` drips one byte every 2 s (in its headers when
    server.drip_headers), and the path in `server.endless` never ends."""

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802 - http.server's name
        try:
            if self.path == self.server.drip:
                self._drip()
            elif self.path == self.server.endless:
                self.send_response(200)
                self.end_headers()
                while True:
                    self.wfile.write(b" " * 65536)
            else:
                super().do_GET()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _drip(self):
        head = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"
        if not self.server.drip_headers:
            self.wfile.write(head)
            head = b"{" * 100000
        for i in range(len(head)):
            self.wfile.write(head[i:i + 1])
            self.wfile.flush()
            time.sleep(2)


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


@pytest.fixture
def served(tmp_path, fx):
    handler = lambda *a, **kw: _Handler(*a, directory=str(fx.repo.dir), **kw)  # noqa: E731
    server = _Server(("127.0.0.1", 0), handler)
    server.drip, server.drip_headers, server.endless = "", False, ""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("case", ["body-drip", "header-drip", "endless-timestamp"])
def test_slow_or_endless_http_mirror_is_refused_in_bounded_time(tmp_path, fx, served, case):
    server, url = served
    name, data, report = published(fx)
    write_policy_and_route(tmp_path, report)
    assert admit_cli(tmp_path, tmp_path / "honest", url)[0] == admission_cli.EXIT_ROUTABLE
    if case == "endless-timestamp":
        server.endless = "/metadata/timestamp.json"
    else:
        server.drip, server.drip_headers = "/metadata/timestamp.json", case == "header-drip"
    rc, elapsed, text = admit_cli(tmp_path, tmp_path / "tracker", url)
    assert rc == admission_cli.EXIT_REFUSED and elapsed < BOUND_S, text
    assert ("endless-data" if case == "endless-timestamp" else "slow-retrieval") in text, text


def test_fetch_limits_refuse_a_slow_file_stream(tmp_path):
    (tmp_path / "f").write_bytes(b"x" * 100)
    assert b"".join(fetchers.BoundedFetcher().fetch((tmp_path / "f").as_uri())) == b"x" * 100
    with pytest.raises(tuf_errors.SlowRetrievalError, match="deadline"):
        b"".join(fetchers.BoundedFetcher(fetchers.FetchLimits(file_deadline_s=0.0)).fetch((tmp_path / "f").as_uri()))


# ---- 4. a hostile Tracker state directory ---------------------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
@pytest.mark.parametrize("where", ["metadata/root.json", "metadata/timestamp.json", "metadata/snapshot.json",
                                   "metadata/root_history/2.root.json", "target"])
def test_hostile_tracker_state_is_refused_in_bounded_time(tmp_path, fx, where, kind):
    name, data, report = published(fx)
    write_policy_and_route(tmp_path, report)
    state = tmp_path / "tracker"
    assert admit_cli(tmp_path, state)[0] == admission_cli.EXIT_ROUTABLE
    path = state / where
    if where == "target":
        path = next(p for p in (state / "targets").iterdir() if "records" in p.name)
    hostile(path, kind)
    rc, elapsed, text = admit_cli(tmp_path, state)
    assert rc in (1, 2) and elapsed < BOUND_S, text
    assert "tracker-state" in text, text


def test_non_json_local_root_is_refused_not_a_crash(tmp_path, fx):
    name, data, report = published(fx)
    write_policy_and_route(tmp_path, report)
    state = tmp_path / "tracker"
    assert admit_cli(tmp_path, state)[0] == admission_cli.EXIT_ROUTABLE
    (state / "metadata" / "root.json").unlink()
    (state / "metadata" / "root.json").write_text("not json")
    rc, elapsed, text = admit_cli(tmp_path, state, bootstrap=False)
    assert rc in (1, 2) and "tracker-state" in text, text


def test_fifo_where_the_metadata_directory_belongs_is_refused(tmp_path, fx):
    name, data, report = published(fx)
    write_policy_and_route(tmp_path, report)
    state = tmp_path / "tracker"
    state.mkdir()
    os.mkfifo(state / "metadata")
    rc, elapsed, text = admit_cli(tmp_path, state)
    assert rc in (1, 2) and elapsed < BOUND_S and "tracker-state" in text, text


# ---- 5. the low items -----------------------------------------------------------------------------

def _fast_forward(fx, stolen_timestamp_key, version):
    """What a thief of the timestamp key serves: the current snapshot under a huge timestamp version."""
    snap_version = fx.repo.timestamp().signed.snapshot_meta.version
    data = (fx.repo.metadata_dir / f"{snap_version}.snapshot.json").read_bytes()
    ts = Timestamp(version=version, expires=timestamps.now() + dt.timedelta(days=1),
                   snapshot_meta=MetaFile.from_data(snap_version, data, ["sha256"]))
    fx.repo._write_metadata(Metadata(ts), [stolen_timestamp_key], ["timestamp.json"])


def test_rotating_the_online_keys_recovers_trackers_from_a_fast_forward_attack(fx):
    name, data, report = published(fx)
    tracker = fx.tracker()
    routes.admitted(decide(tracker, report)[0])
    honest = (fx.repo.metadata_dir / "timestamp.json").read_bytes()
    _fast_forward(fx, fx.timestamp, 10**9)
    routes.admitted(decide(tracker, report)[0])  # the Tracker now trusts timestamp v1000000000
    (fx.repo.metadata_dir / "timestamp.json").write_bytes(honest)  # the mirror serves the honest one again
    routes.refused_with(decide(tracker, report)[0], "rollback")  # ... and is refused: the Tracker is stuck
    new_snapshot, new_timestamp = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    assert fx.repo.rotate_online_keys(fx.signers, new_snapshot, new_timestamp) == 2
    routes.admitted(decide(tracker, report)[0])
    # and the rotated repository keeps publishing with the new online keys
    signers = dataclasses.replace(fx.signers, snapshot=[new_snapshot], timestamp=[new_timestamp])
    _, other, other_report = testing_repo.record_file(fx.issuer, lane_id="linux-x86_64-other")
    fx.repo.publish(signers, [("other.dsse.json", other)])
    routes.admitted(decide(tracker, report)[0])


def test_publish_cli_rotates_the_online_keys(tmp_path):
    k = {n: keys.generate(n, tmp_path / "keys") for n in ("root1", "issuer", "snapshot", "timestamp", "s2", "t2")}
    repo = str(tmp_path / "repo")
    assert publish_cli("--mode=init", f"--repository={repo}", f"--root_key={k['root1'].private_key}",
                       f"--targets_key={k['issuer'].private_key}", f"--snapshot_key={k['snapshot'].private_key}",
                       f"--timestamp_key={k['timestamp'].private_key}").returncode == 0
    proc = publish_cli("--mode=rotate_online", f"--repository={repo}", f"--root_key={k['root1'].private_key}",
                       f"--new_snapshot_key={k['s2'].private_key}", f"--new_timestamp_key={k['t2'].private_key}")
    assert proc.returncode == 0, proc.stderr
    root = repository.RecordRepository(repo).root().signed
    assert root.version == 2 and root.roles["timestamp"].keyids == [
        repository.tuf_key(keys.load_private_key(k["t2"].private_key)).keyid]


def test_revoking_a_key_never_trusted_does_not_make_it_a_signer(fx):
    published(fx)
    stranger = Ed25519PrivateKey.generate()
    rev = revocations.make(issuer_public_key=dsse.raw_public_key(stranger), reason="never ours", now=timestamps.now(),
                           effective_from=timestamps.now())
    fx.repo.publish(fx.signers, (), [revocations.sign(rev, fx.issuer)])
    view = fx.tracker().refresh()
    assert dsse.keyid_for(stranger) not in view.trust_store.signers
    assert dsse.keyid_for(fx.issuer) in view.trust_store.signers


def test_root_rollback_is_named_rollback(fx):
    name, data, report = published(fx)
    (fx.repo.metadata_dir / "2.root.json").write_bytes((fx.repo.metadata_dir / "1.root.json").read_bytes())
    routes.refused_with(decide(fx.tracker(), report)[0], "rollback")


def test_targets_rollback_is_named_rollback(fx):
    name, data, report = published(fx)
    tracker = fx.tracker()
    routes.admitted(decide(tracker, report)[0])
    _, ts, snap, targets = fx.repo._current()
    older = targets.version - 1  # a snapshot, signed with the snapshot key, naming the older targets
    older_bytes = (fx.repo.metadata_dir / f"{older}.targets.json").read_bytes()
    expires = timestamps.now() + dt.timedelta(days=1)
    snapshot = Snapshot(version=snap.version + 1, expires=expires,
                        meta={"targets.json": MetaFile.from_data(older, older_bytes, ["sha256"])})
    sdata = fx.repo._write_metadata(Metadata(snapshot), [fx.snapshot], [f"{snapshot.version}.snapshot.json"])
    timestamp = Timestamp(version=ts.version + 1, expires=expires,
                          snapshot_meta=MetaFile.from_data(snapshot.version, sdata, ["sha256"]))
    fx.repo._write_metadata(Metadata(timestamp), [fx.timestamp], ["timestamp.json"])
    with pytest.raises(RollbackError):
        tracker.refresh()
    routes.refused_with(decide(tracker, report)[0], "rollback")


def test_oversized_metadata_is_named_endless_data(fx):
    name, data, report = published(fx)
    (fx.repo.metadata_dir / "timestamp.json").write_bytes(b" " * (1 << 20))
    with pytest.raises(distribution_errors.EndlessDataError):
        fx.tracker().refresh()
    routes.refused_with(decide(fx.tracker("t2"), report)[0], "endless-data")


def test_duplicate_json_keys_in_tuf_metadata_are_refused(fx):
    name, data, report = published(fx)
    path = fx.repo.metadata_dir / "timestamp.json"
    text = path.read_text()
    assert '"_type": "timestamp"' in text
    path.write_text(text.replace('"_type": "timestamp"', '"_type": "root", "_type": "timestamp"', 1))
    with pytest.raises(distribution_errors.MalformedMetadataError, match="duplicate"):
        fx.tracker().refresh()
    routes.refused_with(decide(fx.tracker("t2"), report)[0], "malformed-metadata")


def test_max_record_age_at_the_top_of_its_range_is_no_limit_not_a_crash():
    key = Ed25519PrivateKey.generate()
    policy = sample_reports.make_policy(key)
    policy.max_record_age_days = 2147483647
    report = sample_reports.make_report()
    rec = records.record_from_report(report, report.SerializeToString(), dsse.keyid_for(key), timestamps.now(), 30, "p")
    env = records.sign_record(rec, key)
    decision = admission.decide(policy, [admission.SignedInput.from_envelope(env)], [], routes.route_for(report))
    routes.admitted(decision)
    policy.max_record_age_days = 4294967295
    routes.admitted(admission.decide(policy, [admission.SignedInput.from_envelope(env)], [], routes.route_for(report)))


@pytest.mark.parametrize("field", ["keyid", "payloadType"])
def test_lone_surrogate_in_an_envelope_is_a_malformed_envelope(fx, field):
    name, data, report = testing_repo.record_file(fx.issuer)
    obj = json.loads(data)
    if field == "keyid":
        obj["signatures"][0]["keyid"] = "\ud800"
    else:
        obj["payloadType"] = "\udfff"
    bad = json.dumps(obj).encode()  # ensure_ascii: the JSON text holds "\\ud800"
    with pytest.raises(MalformedEnvelopeError, match="surrogate"):
        dsse.envelope_from_json(bad)
    with pytest.raises(PublishError, match="malformed-envelope"):
        fx.repo.publish(fx.signers, [(name, bad)])


def test_keygen_never_writes_through_a_planted_symlink_and_makes_private_dirs(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    elsewhere = tmp_path / "elsewhere.pub"
    os.symlink(elsewhere, shared / "k.pub")  # dangling: exists() is False for it
    with pytest.raises(KeyFileError, match="already exists"):
        keys.generate("k", shared)
    assert not elsewhere.exists() and not (shared / "k.key").exists()
    old = os.umask(0o022)
    try:
        files = keys.generate("k2", tmp_path / "a" / "b" / "c")
    finally:
        os.umask(old)
    for d in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "c"):
        assert (d.stat().st_mode & 0o777) == 0o700, d
    assert keys.load_private_key(files.private_key)


def test_loading_a_key_from_a_fifo_is_refused_at_once(tmp_path):
    os.mkfifo(tmp_path / "k.key")
    done: list = []

    def load():
        try:
            keys.load_private_key(tmp_path / "k.key")
        except KeyFileError as err:
            done.append(err)

    worker = threading.Thread(target=load, daemon=True)
    t0 = time.monotonic()
    worker.start()
    worker.join(BOUND_S)
    assert done and "FIFO" in str(done[0]), "load_private_key blocked on a FIFO"
    print(f"refused after {time.monotonic() - t0:.3f} s: {done[0]}")


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_a_non_finite_signed_metric_meets_no_floor_or_ceiling(value):
    key = Ed25519PrivateKey.generate()
    policy = sample_reports.make_policy(key)
    policy.metric_ceilings.add(lane_id="*", metric="speed.pp_tokens_per_s", max_value=1e12)
    report = sample_reports.make_report(tg_tokens_per_s=value)
    rec = records.record_from_report(report, report.SerializeToString(), dsse.keyid_for(key), timestamps.now(), 30, "p")
    decision = admission.decide(policy, [admission.SignedInput.from_envelope(records.sign_record(rec, key))], [],
                                routes.route_for(report))
    assert not decision.routable and "speed-floor" in routes.codes(decision), decision.reasons
    assert "metric-ceiling" in routes.codes(decision), decision.reasons


def test_thousands_of_keyid_less_signatures_are_refused_before_verification():
    keys_ = [Ed25519PrivateKey.generate() for _ in range(20)]
    store = trust.as_trust_store({dsse.keyid_for(k): k.public_key() for k in keys_})
    report = sample_reports.make_report()
    rec = records.record_from_report(report, report.SerializeToString(), dsse.keyid_for(keys_[0]), timestamps.now(),
                                     30, "p")
    obj = json.loads(dsse.envelope_to_json(records.sign_record(rec, keys_[0])))
    obj["signatures"] = [{"keyid": "", "sig": base64.b64encode(os.urandom(64)).decode()} for _ in range(8623)]
    data = json.dumps(obj).encode()
    t0 = time.monotonic()
    with pytest.raises(MalformedEnvelopeError, match="signatures"):
        records.verify_record(dsse.envelope_from_json(data), store)
    elapsed = time.monotonic() - t0
    print(f"{len(data)} bytes, 8623 signatures: refused in {elapsed:.3f} s")
    assert elapsed < 1.0


def test_state_and_mirror_reads_leave_nothing_behind(fx):
    """Sanity for the bounded fetcher: a normal refresh over file:// still reads every file."""
    published(fx)
    view = fx.tracker().refresh()
    assert view.records and view.checkpoint.tree_size == 1
    shutil.rmtree(fx.dir / "tracker" / "targets")
    assert fx.tracker().refresh().records


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-s", "-p", "no:cacheprovider"]))
