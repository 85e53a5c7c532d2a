"""probe() against fake nodes on loopback: an honest node passes; a replaying, perturbed, slow,
hanging, trickling, flooding, malformed, over-long or misnamed node gets its reason, within the
deadline, and never holds the Tracker."""

from __future__ import annotations

import contextlib
import json
import pathlib
import socket
import subprocess
import sys
import time

import pytest

from tools.probe import probe

FAKE = pathlib.Path(__file__).resolve().parent / "testdata" / "fake_node.py"
VOCAB = 32000
DEADLINE_S = 3.0


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _node(mode: str, per_token_s: float = 0.0):
    port = _port()
    proc = subprocess.Popen([sys.executable, str(FAKE), str(port), mode, str(per_token_s)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == b"listening"
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(10)


@pytest.fixture(scope="module")
def reference():
    with _node("honest") as url:
        yield url


def _probe(url: str, reference: str, certified: float = 100.0, **kw) -> probe.Result:
    return probe.probe(url, reference, VOCAB, certified, deadline_s=DEADLINE_S, expected_model="m.gguf", **kw)


def test_an_honest_node_passes(reference):
    with _node("honest") as url:
        r = _probe(url, reference, certified=1.0)
    assert r.verdict == probe.PASS, r.reasons
    assert r.figures.greedy_prefix == probe.N_PREDICT and r.figures.top1_agreement == 1.0
    assert r.figures.max_abs_delta_logprob == 0.0 and r.node_digest == r.reference_digest


def test_challenges_are_fresh():
    drawn = {probe.draw_challenge(VOCAB).digest() for _ in range(50)}
    assert len(drawn) == 50
    c = probe.draw_challenge(VOCAB)
    assert all(probe._FIRST_NONCE_ID <= t < VOCAB for t in c.nonce) and len(c.nonce) == probe.NONCE_TOKENS


def test_a_node_answering_from_a_cache_of_earlier_challenges_fails(reference):
    with _node("replay") as url:
        first = _probe(url, reference)
        second = _probe(url, reference)
    assert first.verdict == probe.PASS or first.verdict == probe.SPEED
    assert second.verdict == probe.FAILED
    assert any("greedy continuation identical for" in r for r in second.reasons), second.reasons


def test_a_node_with_other_weights_fails_on_log_probabilities(reference):
    with _node("perturbed") as url:
        r = _probe(url, reference)
    assert r.verdict == probe.FAILED and r.figures.greedy_prefix == probe.N_PREDICT
    assert any("max |delta log-prob| 0.3 > 0.05" in x for x in r.reasons), r.reasons


def test_a_node_far_below_its_certified_speed_is_flagged(reference):
    with _node("slow", per_token_s=0.05) as url:
        r = _probe(url, reference, certified=1000.0)
    assert r.verdict == probe.SPEED, r.reasons
    assert r.figures.tokens_per_s < 25 and "of the certified 1000.0 tok/s" in r.reasons[0]


@pytest.mark.parametrize("mode, reason", [
    ("hang", "no complete answer within the deadline"),
    ("trickle", "no complete answer within the deadline"),
    ("huge", "answer larger than"),
    ("malformed", "not JSON"),
    ("too_many", "17 tokens generated; the challenge asked for exactly 16"),
    ("wrong_model", "answers as model 'other.gguf', not 'm.gguf'"),
    # A node listing log-probabilities only where it is sure makes the comparison vacuous.
    ("withhold", "listed fewer log-probabilities than the reference at 16 position(s)"),
    ("negative_chunk", "malformed chunked body"),
    ("deep_json", "not JSON (RecursionError)"),
    ("huge_logprob", "log-prob in [-1e4, 0]"),
    ("unicode_length", "Content-Length says"),
])
def test_a_misbehaving_node_fails_with_its_reason_within_the_deadline(reference, mode, reason):
    with _node(mode) as url:
        started = time.monotonic()
        r = _probe(url, reference)
        took = time.monotonic() - started
    print(f"| {mode} | {r.verdict} | {'; '.join(r.reasons)[:120]} | {took:.2f} s |")
    assert r.verdict == probe.FAILED and any(reason in x for x in r.reasons), r.reasons
    assert took < 2 * DEADLINE_S + 1.0


def test_an_unreachable_reference_is_the_trackers_error_not_the_nodes_verdict():
    with pytest.raises(probe.ProbeError, match="cannot connect"):
        _probe(f"http://127.0.0.1:{_port()}", f"http://127.0.0.1:{_port()}")


def _cli(argv: list[str], capsys) -> tuple[int, str, str]:
    from absl import flags

    from tools.probe import probe_cli
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["probe_cli", *argv])
    code = probe_cli.main(["probe_cli"])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_cli_takes_the_certified_speed_from_the_verified_record_and_logs_the_signed_probe(reference, tmp_path,
                                                                                             capsys):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from tools.certify import records, sample_reports
    from tools.policy import dsse, keys
    from tools.policy import policy as policy_lib
    from tools.probe import probe_log

    issuer = Ed25519PrivateKey.generate()
    report = sample_reports.make_report(tg_tokens_per_s=1.0)
    rec = records.record_from_report(report, report.SerializeToString(), dsse.keyid_for(issuer), sample_reports.NOW, 30,
                                     "test-policy")
    (tmp_path / "r.dsse.json").write_text(dsse.envelope_to_json(records.sign_record(rec, issuer)))
    (tmp_path / "policy.json").write_text(policy_lib.policy_to_json(sample_reports.make_policy(issuer)))
    tracker = keys.generate("tracker", tmp_path / "keys")
    common = [f"--reference={reference}", f"--vocab_size={VOCAB}", f"--record={tmp_path / 'r.dsse.json'}",
              f"--policy={tmp_path / 'policy.json'}", "--model=m.gguf"]
    log = tmp_path / "probes.jsonl"
    with _node("honest") as url:
        code, out, _ = _cli([f"--node={url}", *common, f"--log={log}", f"--tracker_key={tracker.private_key}",
                             "--node_id=n1"], capsys)
        assert code == 0, out
        assert json.loads(out)["figures"]["certified_tokens_per_s"] == 1.0
        logged = probe_log.read(log, {tracker.keyid: keys.load_public_key(tracker.public_pem)})
        assert [(v.record.lane_id, v.record.certification_record_id, v.record.model_sha256) for v in logged] == [
            (rec.scope.lane_id, rec.record_id, rec.model.sha256)]
        code, _, err = _cli([f"--node={url}", *common, "--certified_tokens_per_s=999"], capsys)
        assert code == 2 and "--certified_tokens_per_s=999.0 contradicts the record's 1.0" in err
    with _node("perturbed") as url:
        code, out, _ = _cli([f"--node={url}", *common], capsys)
        assert code == 1 and json.loads(out)["verdict"] == probe.FAILED


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-s", "-p", "no:cacheprovider"]))
