"""The probe log: records signed by the Tracker, chained; every way of rewriting history is refused."""

from __future__ import annotations

import json
import sys

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tools.policy import dsse
from tools.probe import probe, probe_log

KEY = Ed25519PrivateKey.generate()
TRUSTED = {dsse.keyid_for(KEY): KEY.public_key()}


def _result(verdict: str = probe.PASS) -> probe.Result:
    c = probe.Challenge(prompt_set_sha256="a" * 64, line=3, text="Once upon a time", nonce=(301, 402, 503, 604))
    f = probe.Figures(greedy_prefix=16, compared=16, withheld=0, top1_agreement=1.0, max_abs_delta_logprob=0.0,
                      tokens_per_s=500.0, certified_tokens_per_s=100.0)
    return probe.Result(probe.Tolerances(), c, verdict, () if verdict == probe.PASS else ("greedy continuation identical for 0 of 16",),
                        f, "sha256:" + "1" * 64, "sha256:" + "2" * 64, 0.05)


def _append(log, n: int = 3):
    out = []
    for i in range(n):
        rec = probe_log.make_record(_result(), "node-a", "linux-x86_64-cpu", "rec-1", "c" * 64,
                                    f"2026-12-03T12:00:0{i}Z")
        out.append(probe_log.append(log, rec, KEY, TRUSTED))
    return out


def test_records_chain_and_verify(tmp_path):
    log = tmp_path / "probes.jsonl"
    written = _append(log)
    read = probe_log.read(log, TRUSTED)
    assert [v.digest for v in read] == [v.digest for v in written]
    assert [v.record.sequence for v in read] == [0, 1, 2]
    assert read[0].record.previous_envelope_digest == "" and read[2].record.previous_envelope_digest == read[1].digest
    assert read[0].record.challenge_digest == _result().challenge.digest()
    assert read[0].keyids == (dsse.keyid_for(KEY),)


def _lines(log):
    return log.read_text().splitlines()


@pytest.mark.parametrize("rewrite, match", [
    (lambda lines: [lines[0], lines[2]], "breaks the chain"),  # a line removed
    (lambda lines: [lines[1], lines[0], lines[2]], "breaks the chain"),  # reordered
    (lambda lines: lines + [lines[2]], "breaks the chain"),  # a line replayed
    (lambda lines: [lines[0][:-1] + " ", *lines[1:]], "breaks the chain|verif|envelope"),
])
def test_a_rewritten_history_is_refused(tmp_path, rewrite, match):
    log = tmp_path / "probes.jsonl"
    _append(log)
    log.write_text("\n".join(rewrite(_lines(log))) + "\n")
    with pytest.raises(probe_log.ProbeLogError, match=match):
        probe_log.read(log, TRUSTED)


def test_an_edited_verdict_fails_its_signature(tmp_path):
    import base64
    log = tmp_path / "probes.jsonl"
    _append(log, 1)
    env = json.loads(_lines(log)[0])
    payload = json.loads(base64.b64decode(env["payload"]))
    payload["verdict"] = probe.PASS if payload["verdict"] != probe.PASS else probe.FAILED
    env["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    log.write_text(json.dumps(env) + "\n")
    with pytest.raises(probe_log.ProbeLogError, match="does not verify"):
        probe_log.read(log, TRUSTED)


def test_a_log_cut_short_is_refused(tmp_path):
    log = tmp_path / "probes.jsonl"
    _append(log)
    log.write_text("\n".join(_lines(log)[:2]) + "\n")
    with pytest.raises(probe_log.ProbeLogError, match="ends at sequence 1, its signed head says 2"):
        probe_log.read(log, TRUSTED)
    probe_log.head_path(log).unlink()
    with pytest.raises(probe_log.ProbeLogError, match="signed head is missing"):
        probe_log.read(log, TRUSTED)


def test_the_head_states_the_transparency_logs_merkle_root(tmp_path):
    from pymerkle import InmemoryTree, verify_consistency

    log = tmp_path / "probes.jsonl"
    _append(log, 2)
    old_lines = _lines(log)
    _append(log, 1)
    lines = _lines(log)
    assert probe_log.merkle_root(lines) != probe_log.merkle_root(old_lines)
    # The earlier state is a prefix of the later one: RFC 9162 consistency holds between the roots.
    tree = InmemoryTree(algorithm="sha256")
    for line in lines:
        tree.append_entry(line.encode())
    proof = tree.prove_consistency(len(old_lines), len(lines))
    verify_consistency(bytes.fromhex(probe_log.merkle_root(old_lines)), bytes.fromhex(probe_log.merkle_root(lines)),
                       proof)


def test_concurrent_appends_keep_every_record(tmp_path):
    import threading
    log = tmp_path / "probes.jsonl"
    _append(log, 1)
    threads = [threading.Thread(target=_append, args=(log, 2)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [v.record.sequence for v in probe_log.read(log, TRUSTED)] == list(range(9))


def test_a_record_by_another_key_is_refused(tmp_path):
    log = tmp_path / "probes.jsonl"
    other = Ed25519PrivateKey.generate()
    rec = probe_log.make_record(_result(), "node-a", "linux-x86_64-cpu", "rec-1", "c" * 64, "2026-12-03T12:00:00Z")
    probe_log.append(log, rec, other, {dsse.keyid_for(other): other.public_key()})
    with pytest.raises(probe_log.ProbeLogError, match="does not trust"):
        probe_log.read(log, TRUSTED)


def test_a_half_written_line_is_refused(tmp_path):
    log = tmp_path / "probes.jsonl"
    _append(log, 2)
    log.write_text(log.read_text()[:-10])
    with pytest.raises(probe_log.ProbeLogError, match="incomplete"):
        probe_log.read(log, TRUSTED)


def test_a_failed_probe_keeps_its_reasons_and_no_nan(tmp_path):
    r = _result(probe.FAILED)
    unjudged = probe.Result(r.tolerances, r.challenge, probe.FAILED, ("no complete answer within the deadline",), None, "",
                            r.reference_digest, 3.0)
    log = tmp_path / "probes.jsonl"
    v = probe_log.append(log, probe_log.make_record(unjudged, "n", "l", "r", "c" * 64, "2026-12-03T12:00:00Z"),
                         KEY, TRUSTED)
    assert v.record.verdict == probe.FAILED and list(v.record.reasons) == ["no complete answer within the deadline"]
    assert v.record.compared_positions == 0 and v.record.node_response_digest == ""


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
