"""Loopback run (issue 13 acceptance): publish a record, a Tracker admits it through a real HTTP
server on 127.0.0.1; revoke it, the Tracker refuses after its next refresh. Times are printed.
The decision is also emitted as a signed verification summary and verified.
"""

import functools
import http.server
import threading
import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from proto import distribution_pb2
from tools.admission import decision_summary, tracker_admission
from tools.admission.testing import routes
from tools.certify import records
from tools.policy import timestamps
from tools.publish import revocations, translog
from tools.publish.testing import repo as testing_repo


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def served(tmp_path):
    fx = testing_repo.make_repo(tmp_path)
    handler = functools.partial(_Quiet, directory=str(fx.repo.dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield fx, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _stamp(what: str, t0: float) -> None:
    print(f"{timestamps.format_utc(timestamps.now())} (+{time.monotonic() - t0:6.3f}s) {what}")


def test_publish_admit_revoke_refuse_over_loopback_http(served):
    fx, url = served
    t0 = time.monotonic()
    name, data, report = testing_repo.record_file(fx.issuer)
    version = fx.repo.publish(fx.signers, [(name, data)])
    _stamp(f"published {name} as targets v{version} at {url}", t0)
    tracker = fx.tracker(url=url)
    route = routes.route_for(report)
    decision, view = tracker_admission.refresh_and_decide(tracker, testing_repo.policy(), route)
    _stamp(f"Tracker refreshed (root v{view.versions['root']}, targets v{view.versions['targets']}, log size "
           f"{view.checkpoint.tree_size}): {'ROUTABLE' if decision.routable else 'REFUSED'} {list(decision.reasons)}", t0)
    assert decision.routable, decision.reasons

    # The admitting decision, signed and verified; its inclusion proof checks against the checkpoint.
    auditor_key = Ed25519PrivateKey.generate()
    envelope = decision_summary.sign(decision_summary.statement(decision, route, view), auditor_key)
    st = decision_summary.verify(envelope, auditor_key.public_key())
    lanes_part = st["predicate"]["lanes"]
    assert st["predicate"]["verificationResult"] == "PASSED"
    (digest, proof), = lanes_part["inclusion_proofs"].items()
    assert digest == records.record_digest_of_json(data)
    entry = view.log_entries.entries[int(proof["log_index"])]
    translog.verify_inclusion_json(entry, proof["proof"], view.checkpoint)
    _stamp("signed decision summary verified; inclusion proof of the record checks against checkpoint "
           f"size {view.checkpoint.tree_size} root {view.checkpoint.root_hash[:16]}..", t0)
    tampered = dict(envelope, payload=envelope["payload"][:-4] + "AAA=")
    with pytest.raises(Exception, match="does not verify|not a DSSE"):
        decision_summary.verify(tampered, auditor_key.public_key())
    with pytest.raises(Exception, match="does not verify"):
        decision_summary.verify(envelope, Ed25519PrivateKey.generate().public_key())

    rev = revocations.make(record_digest=records.record_digest_of_json(data), reason="driver regression found after certification",
                           now=timestamps.now())
    version = fx.repo.publish(fx.signers, (), [revocations.sign(rev, fx.issuer)])
    _stamp(f"revoked {records.record_digest_of_json(data)[:23]} in targets v{version}", t0)
    decision, view = tracker_admission.refresh_and_decide(tracker, testing_repo.policy(), route)
    _stamp(f"Tracker refreshed (targets v{view.versions['targets']}, log size {view.checkpoint.tree_size}): "
           f"{'ROUTABLE' if decision.routable else 'REFUSED'} {list(decision.reasons)}", t0)
    assert not decision.routable
    assert decision.reasons[0].startswith("revoked: ") and "driver regression" in decision.reasons[0]
    st = decision_summary.verify(decision_summary.sign(decision_summary.statement(decision, route, view), auditor_key),
                                 auditor_key.public_key())
    assert st["predicate"]["verificationResult"] == "FAILED"
    assert st["predicate"]["lanes"]["revocations"] == view.revocations.digests
    assert isinstance(view.log_entries, distribution_pb2.LogEntries)


if __name__ == "__main__":
    import sys
    sys.exit(pytest.main([__file__, "-q", "-s", "-p", "no:cacheprovider"]))
