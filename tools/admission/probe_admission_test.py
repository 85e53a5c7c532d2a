"""Admission consults serving-time probes as the policy says: a node without a recent passing probe
is refused (unprobed), one whose latest probe failed is refused with its reasons (probe-failed,
probe-speed) until it passes again, and the decision cites the probe records it used."""

from __future__ import annotations

import datetime as dt
import sys

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tools.admission import admission
from tools.certify import records, sample_reports
from tools.policy import dsse, timestamps
from tools.policy import policy as policy_lib
from tools.policy.errors import PolicyError
from tools.probe import probe, probe_log

NOW = sample_reports.NOW + dt.timedelta(days=1)
MODEL = sample_reports.MODEL_SHA256
RECIPE = sample_reports.make_recipe(kv_cache_types=["f16"], flash_attention=["off"], context_size=2048,
                                    parallel_sequences=1)


@pytest.fixture(scope="module")
def issuer():
    return Ed25519PrivateKey.generate()


@pytest.fixture(scope="module")
def tracker():
    return Ed25519PrivateKey.generate()


@pytest.fixture(scope="module")
def policy(issuer, tracker):
    p = sample_reports.make_policy(issuer)
    p.trusted_keys.add(keyid=dsse.keyid_for(tracker), public_key=dsse.raw_public_key(tracker),
                       not_before="2026-01-01T00:00:00Z", not_after="2027-12-31T00:00:00Z", owner="tracker")
    p.probes.min_passing_probes, p.probes.max_age_s = 1, 3600
    p.probes.tracker_keyids.append(dsse.keyid_for(tracker))
    policy_lib.validate(p)
    return p


@pytest.fixture(scope="module")
def lane(issuer):
    report = sample_reports.make_report()
    rec = records.record_from_report(report, report.SerializeToString(), dsse.keyid_for(issuer), sample_reports.NOW,
                                     30, "test-policy")
    return records.sign_record(rec, issuer), sample_reports.node_for(report), rec.record_id


CERTIFIED = 50.0  # sample_reports' speed.tg_tokens_per_s


def _result(verdict: str, reasons: tuple[str, ...] = (), n: int = 0, tol: probe.Tolerances = probe.Tolerances(),
            certified: float = CERTIFIED) -> probe.Result:
    c = probe.Challenge(prompt_set_sha256="a" * 64, line=3, text="Once upon a time", nonce=(301 + n, 402, 503, 604))
    f = probe.Figures(16 if verdict != probe.FAILED else 0, 16, 0, 1.0, 0.0, 500.0 if verdict != probe.SPEED else 2.0,
                      certified)
    return probe.Result(tol, c, verdict, reasons, f, "sha256:" + "1" * 64, "sha256:" + "2" * 64, 0.05)


def _log(tmp_path, tracker, node, record_id, *probes, **result_kw):
    """(verdict, reasons, seconds before NOW) -> the verified log; each probe its own challenge."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    log = tmp_path / "probes.jsonl"
    trusted = {dsse.keyid_for(tracker): tracker.public_key()}
    for n, (verdict, reasons, ago) in enumerate(probes):
        rec = probe_log.make_record(_result(verdict, reasons, n, **result_kw), node.node_id, node.lane_id, record_id,
                                    MODEL, timestamps.format_utc(NOW - dt.timedelta(seconds=ago)))
        probe_log.append(log, rec, tracker, trusted)
    return probe_log.read(log, trusted)


def _decide(policy, lane, probes):
    env, node, _ = lane
    route = admission.route_from_nodes([node], MODEL, "r1", RECIPE)
    return admission.decide(policy, [env], [], route, NOW, probes=probes)


def test_a_node_with_a_recent_passing_probe_is_admitted_and_the_probe_cited(tmp_path, policy, lane, tracker):
    probes = _log(tmp_path, tracker, lane[1], lane[2], (probe.PASS, (), 60))
    d = _decide(policy, lane, probes)
    assert d.routable, d.reasons
    assert list(d.probe_record_digests) == [probes[0].digest]


def test_an_unprobed_node_is_refused(tmp_path, policy, lane, tracker):
    d = _decide(policy, lane, [])
    assert not d.routable and d.reasons[0].startswith("unprobed: node ")
    old = _log(tmp_path, tracker, lane[1], lane[2], (probe.PASS, (), 7200))  # older than max_age_s
    assert _decide(policy, lane, old).reasons[0].startswith("unprobed: ")


def test_a_failed_probe_refuses_the_node_until_it_passes_again(tmp_path, policy, lane, tracker):
    reason = ("greedy continuation identical for 0 of 16 tokens (need 16)",)
    failed = _log(tmp_path / "a", tracker, lane[1], lane[2], (probe.PASS, (), 600), (probe.FAILED, reason, 60))
    d = _decide(policy, lane, failed)
    assert not d.routable and d.reasons[0].startswith("probe-failed: the latest probe of node ") and reason[0] in d.reasons[0]
    assert sorted(d.probe_record_digests) == sorted(v.digest for v in failed)
    again = _log(tmp_path / "b", tracker, lane[1], lane[2], (probe.FAILED, reason, 600), (probe.PASS, (), 60))
    assert _decide(policy, lane, again).routable


def test_a_node_far_below_its_certified_speed_is_refused(tmp_path, policy, lane, tracker):
    slow = _log(tmp_path, tracker, lane[1], lane[2], (probe.SPEED, ("2.0 tok/s is 0.020 of the certified 100.0",), 60))
    d = _decide(policy, lane, slow)
    assert not d.routable and d.reasons[0].startswith("probe-speed: ")


def test_probes_of_another_node_record_or_tracker_do_not_count(tmp_path, policy, lane, tracker):
    env, node, record_id = lane
    other_record = _log(tmp_path / "a", tracker, node, "rec-other", (probe.PASS, (), 60))
    assert _decide(policy, lane, other_record).reasons[0].startswith("unprobed: ")
    stranger = Ed25519PrivateKey.generate()
    by_stranger = _log(tmp_path / "b", stranger, node, record_id, (probe.PASS, (), 60))
    assert _decide(policy, lane, by_stranger).reasons[0].startswith("unprobed: ")


def test_one_probe_counts_once(tmp_path, policy, lane, tracker):
    two = type(policy)()
    two.CopyFrom(policy)
    two.probes.min_passing_probes = 2
    once = _log(tmp_path, tracker, lane[1], lane[2], (probe.PASS, (), 60))
    d = _decide(two, lane, [once[0], once[0]])
    assert d.reasons[0].startswith("unprobed: ") and "passed 1 probe(s)" in d.reasons[0]


def test_a_failure_in_the_latest_second_wins_over_a_pass(tmp_path, policy, lane, tracker):
    fail = _log(tmp_path / "a", tracker, lane[1], lane[2], (probe.FAILED, ("wrong",), 60))
    passed = _log(tmp_path / "b", tracker, lane[1], lane[2], (probe.PASS, (), 60), (probe.PASS, (), 60))
    assert _decide(policy, lane, [*passed, *fail]).reasons[0].startswith("probe-failed: ")


def test_a_probe_from_the_future_refuses(tmp_path, policy, lane, tracker):
    ahead = _log(tmp_path, tracker, lane[1], lane[2], (probe.PASS, (), 60), (probe.FAILED, ("wrong",), -3600))
    d = _decide(policy, lane, ahead)
    assert d.reasons[0].startswith("unprobed: ") and "dated more than 300 s after" in d.reasons[0]
    skewed = _log(tmp_path / "s", tracker, lane[1], lane[2], (probe.PASS, (), -60))  # within the clock skew
    assert _decide(policy, lane, skewed).routable


@pytest.mark.parametrize("kw", [
    {"tol": probe.Tolerances(max_abs_delta_logprob=1.0)},
    {"tol": probe.Tolerances(min_speed_fraction=0.0)},
    {"tol": probe.Tolerances(min_greedy_prefix=0.5)},
    {"certified": 5.0},  # judged against a tenth of the record's certified speed
])
def test_a_pass_under_looser_tolerances_does_not_count(tmp_path, policy, lane, tracker, kw):
    loose = _log(tmp_path, tracker, lane[1], lane[2], (probe.PASS, (), 60), **kw)
    d = _decide(policy, lane, loose)
    assert d.reasons[0].startswith("unprobed: ") and "1 more passed under looser tolerances" in d.reasons[0]


def test_a_policy_without_probes_does_not_consult_them(lane, issuer):
    d = _decide(sample_reports.make_policy(issuer), lane, [])
    assert d.routable and not d.probe_record_digests


def test_a_probe_policy_must_name_trusted_tracker_keys(issuer):
    p = sample_reports.make_policy(issuer)
    p.probes.min_passing_probes, p.probes.max_age_s = 1, 60
    with pytest.raises(PolicyError, match="tracker_keyids must name trusted keys"):
        policy_lib.validate(p)
    p.probes.tracker_keyids.append("f" * 64)
    with pytest.raises(PolicyError, match="not trusted"):
        policy_lib.validate(p)
    p.probes.max_age_s = 0
    with pytest.raises(PolicyError, match="max_age_s is 0"):
        policy_lib.validate(p)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
