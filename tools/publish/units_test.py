"""Unit checks under the attack corpus: revocations are unambiguous, the log's checks each fail on
the input that should fail them, the file:// fetcher reports a missing file as ngclient expects."""

import datetime as dt

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from tuf.api import exceptions as tuf_errors

from proto import distribution_pb2, runner_report_pb2
from tools.policy import dsse, timestamps, trust
from tools.publish import fetchers, revocations, translog
from tools.publish.distribution_errors import LogForkError, LogMismatchError, MalformedRevocationError

NOW = timestamps.now()
KEY = Ed25519PrivateKey.generate()
STORE = trust.as_trust_store({dsse.keyid_for(KEY): KEY.public_key()})


@pytest.mark.parametrize("kw, match", [
    (dict(), "names nothing"),
    (dict(record_digest="sha256:" + "a" * 64, lane_id="x"), "exactly one"),
    (dict(record_digest="a" * 64), "sha256:"),
    (dict(device_class=runner_report_pb2.DeviceClass()), "empty scope"),
    (dict(record_digest="sha256:" + "a" * 64, reason=""), "give a reason"),
])
def test_ambiguous_or_empty_revocations_are_refused(kw, match):
    kw.setdefault("reason", "r")
    with pytest.raises(MalformedRevocationError, match=match):
        revocations.make(now=NOW, **kw)


def test_a_device_scope_revokes_one_and_multi_gpu_records_and_a_gpu_set_only_its_own():
    """An unset message field of the revocation's device class (gpu_set) names nothing: a scope naming
    the GPU model covers one-GPU and two-GPU records; one naming a GPU set covers only that set."""
    from proto import certification_pb2
    one = certification_pb2.CertificationRecord()
    one.scope.lane_id, one.scope.device_class.device_name = "linux-x86_64-cuda", "NVIDIA H200"
    two = certification_pb2.CertificationRecord()
    two.CopyFrom(one)
    two.scope.device_class.gpu_set.count, two.scope.device_class.gpu_set.interconnect = 2, "NV18"
    by_name = revocations.make(device_class=runner_report_pb2.DeviceClass(device_name="NVIDIA H200"), reason="r", now=NOW)
    assert revocations._covers(by_name, "", one, frozenset()) and revocations._covers(by_name, "", two, frozenset())
    by_set = revocations.make(device_class=two.scope.device_class, reason="r", now=NOW)
    assert revocations._covers(by_set, "", two, frozenset()) and not revocations._covers(by_set, "", one, frozenset())


def test_revocation_signature_and_issuer_are_checked():
    rev = revocations.make(record_digest="sha256:" + "a" * 64, reason="r", now=NOW)
    env = revocations.sign(rev, KEY)
    assert revocations.verify(env, STORE).reason == "r"
    env.payload = env.payload.replace(b'"r"', b'"s"')
    with pytest.raises(Exception, match="bad-signature|altered|does not verify"):
        revocations.verify(env, STORE)


def test_scope_matching_uses_every_named_field_and_only_those():
    rev = revocations.make(lane_id="cuda", device_class=runner_report_pb2.DeviceClass(driver_major="580"), reason="r", now=NOW)
    rs = revocations.RevocationSet((("sha256:x", rev),))

    class Rec:
        def __init__(self, lane, major):
            self.scope = distribution_pb2.RevocationScope(lane_id=lane)
            self.scope.device_class.driver_major = major
            self.issued_at = timestamps.format_utc(NOW)

    assert rs.reason("d", Rec("cuda", "580"), [])
    assert not rs.reason("d", Rec("cuda", "590"), [])
    assert not rs.reason("d", Rec("vulkan", "580"), [])


def test_issuer_key_revocation_from_a_time_on():
    raw = dsse.raw_public_key(KEY)
    rev = revocations.make(issuer_public_key=raw, effective_from=NOW, reason="rotated", now=NOW)
    rs = revocations.RevocationSet((("sha256:x", rev),))

    class Rec:
        def __init__(self, t):
            self.issued_at = timestamps.format_utc(t)
            self.scope = distribution_pb2.RevocationScope()

    kid = dsse.keyid_for(raw)
    assert not rs.reason("d", Rec(NOW - dt.timedelta(seconds=1)), [kid])
    assert rs.reason("d", Rec(NOW), [kid])
    assert not rs.reason("d", Rec(NOW), ["another-key"])


def _log(n):
    log = distribution_pb2.LogEntries()
    for i in range(n):
        log.entries.add(kind="record", target_path=f"records/{i}", digest=f"sha256:{i:064x}")
    return log


def test_log_checks_fail_on_what_they_should():
    tree = translog.build_tree(_log(5))
    cp = translog.make_checkpoint(tree, NOW)
    translog.check_against_checkpoint(tree, cp)
    other = translog.build_tree(_log(4))
    with pytest.raises(LogMismatchError):
        translog.check_against_checkpoint(other, cp)
    env = translog.sign_checkpoint(cp, KEY)
    assert translog.verify_checkpoint(env, STORE) == cp
    with pytest.raises(LogMismatchError):
        translog.verify_checkpoint(env, trust.as_trust_store({"k": Ed25519PrivateKey.generate().public_key()}))
    old = translog.make_checkpoint(translog.build_tree(_log(3)), NOW)
    translog.check_consistent(tree, old, cp)  # 3 -> 5 extends
    with pytest.raises(LogForkError, match="shrank"):
        translog.check_consistent(other, cp, translog.make_checkpoint(other, NOW))
    forked = _log(5)
    forked.entries[1].digest = "sha256:" + "f" * 64
    ftree = translog.build_tree(forked)
    with pytest.raises(LogForkError, match="rewritten"):
        translog.check_consistent(ftree, old, translog.make_checkpoint(ftree, NOW))


def test_file_fetcher_reports_missing_as_404(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 100_000)
    assert b"".join(fetchers.BoundedFetcher().fetch((tmp_path / "a").as_uri())) == b"x" * 100_000
    with pytest.raises(tuf_errors.DownloadHTTPError) as err:
        list(fetchers.BoundedFetcher().fetch((tmp_path / "missing").as_uri()))
    assert err.value.status_code == 404


if __name__ == "__main__":
    import sys
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
