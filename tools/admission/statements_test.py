"""The committed evidence in the field's formats: each certification record as an in-toto test
result, each lane build as SLSA Provenance v1, each record's admission decision (its own node, under
the committed policy) as a signed SLSA VSA v1, validated with in-toto-attestation; a test result
carries exactly its record, so it admits exactly what the record admits."""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import pathlib
import sys

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import json_format
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.predicates.test_result.v0 import test_result_pb2
from in_toto_attestation.predicates.vsa.v1 import vsa_pb2

from proto import build_evidence_pb2, certification_pb2
from tools.admission import admission, decision_summary
from tools.certify import intoto, records, sample_reports
from tools.evidence import slsa_provenance
from tools.policy import dsse, timestamps
from tools.policy import policy as policy_lib

EVIDENCE = pathlib.Path(os.environ.get("TEST_SRCDIR", ".")) / "lanes" / "evidence"
RECORDS = sorted((EVIDENCE / "records").glob("*.record.dsse.json"))
BUILDS = sorted((EVIDENCE / "runs").glob("*/build_evidence.pb"))


def _record(path: pathlib.Path) -> certification_pb2.CertificationRecord:
    rec = certification_pb2.CertificationRecord()
    rec.ParseFromString(base64.b64decode(json.loads(path.read_text())["payload"]))
    return rec


def test_there_is_committed_evidence_to_export():
    assert len(RECORDS) >= 4 and len(BUILDS) >= 4, (RECORDS, BUILDS)


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.name)
def test_each_committed_record_is_a_valid_test_result_carrying_it(path):
    rec = _record(path)
    st = intoto.test_result_statement(rec)
    result = json_format.ParseDict(st["predicate"], test_result_pb2.TestResult())  # the library's own schema
    names = [*result.passed_tests, *result.warned_tests, *result.failed_tests]
    assert sorted(names) == sorted(c.name for c in rec.checks) and len(set(names)) == len(names)
    assert result.result == ("FAILED" if result.failed_tests else "WARNED" if result.warned_tests else "PASSED")
    assert {s["digest"]["sha256"] for s in st["subject"]} >= {a.sha256.removeprefix("sha256:") for a in rec.artifacts}
    assert intoto.record_from_test_result(st) == rec
    print(f"{path.name}: {st['predicateType']} result={result.result} passed={len(result.passed_tests)} "
          f"warned={list(result.warned_tests)} failed={list(result.failed_tests)}")


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.name)
def test_each_committed_records_admission_decision_is_a_valid_signed_vsa(path):
    """The decision for a node exactly as the record certifies it, an hour after issue, under the
    committed policy: a VSA whose result, policy digest and input attestation are the decision's."""
    policy = policy_lib.load_policy(EVIDENCE / "policy.json")
    store = policy_lib.validate(policy)
    item = admission.load_signed(path)
    rec = records.verify_record(item.envelope, store, policy.supported_record_schema_versions)
    route = admission.route_for_record(rec, "statements-test", node_id="statements-test")
    when = timestamps.parse_utc(rec.issued_at) + dt.timedelta(hours=1)
    decision = admission.decide(policy, [item], [], route, when, trust_store=store)
    assert decision.routable, decision.reasons
    key = Ed25519PrivateKey.generate()
    st = decision_summary.verify(decision_summary.sign(decision_summary.statement(decision, route), key), key.public_key())
    # The library's own schema, with the one Lanes-specific field ("lanes": the whole decision) apart,
    # and verifiedLevels, an array in the SLSA VSA v1 spec that the library's proto declares a string.
    pred = st["predicate"]
    vsa = json_format.ParseDict({k: v for k, v in pred.items() if k not in ("lanes", "verifiedLevels")},
                                vsa_pb2.VerificationSummary())
    assert pred["verifiedLevels"] == [decision_summary.ROUTABLE_LEVEL]
    assert st["predicate"]["lanes"]["decision"] == json_format.MessageToDict(decision, preserving_proto_field_name=True)
    assert vsa.verification_result == "PASSED"
    assert vsa.policy.digest["sha256"] == decision.policy_digest.removeprefix("sha256:")
    assert [a.digest["sha256"] for a in vsa.input_attestations] == [
        d.removeprefix("sha256:") for d in decision.input_record_digests]
    refused = admission.decide(policy, [item], [], route, timestamps.parse_utc(rec.expires_at) + dt.timedelta(days=1),
                               trust_store=store)
    failed = decision_summary.verify(decision_summary.sign(decision_summary.statement(refused, route), key),
                                     key.public_key())
    assert failed["predicate"]["verificationResult"] == "FAILED"
    print(f"{path.name}: {st['predicateType']} result={vsa.verification_result} policy sha256:"
          f"{vsa.policy.digest['sha256'][:16]} inputs={len(vsa.input_attestations)}; after expiry "
          f"{failed['predicate']['verificationResult']}")


@pytest.mark.parametrize("path", BUILDS, ids=lambda p: p.parent.name)
def test_each_committed_build_is_valid_slsa_provenance(path):
    ev = build_evidence_pb2.BuildEvidence()
    ev.ParseFromString(path.read_bytes())
    st = slsa_provenance.statement(ev)
    prov = json_format.ParseDict(st["predicate"], provenance_pb2.Provenance())
    assert prov.build_definition.build_type == slsa_provenance.BUILD_TYPE
    assert [s["name"] for s in st["subject"]] == [a.path for a in ev.artifacts]
    upstream = prov.build_definition.resolved_dependencies[0]
    assert upstream.digest["gitCommit"] == ev.upstream.commit
    assert len(prov.build_definition.resolved_dependencies) >= 1 + len(ev.patches)
    print(f"{path.parent.name}: {st['predicateType']} {len(st['subject'])} subjects, "
          f"{len(prov.build_definition.resolved_dependencies)} resolved dependencies, builder "
          f"{prov.run_details.builder.id} bazel {prov.run_details.builder.version['bazel']}")


def test_a_build_without_artifacts_has_no_provenance():
    ev = build_evidence_pb2.BuildEvidence(lane_id="linux-x86_64-rocm", status=build_evidence_pb2.BuildEvidence.UNAVAILABLE)
    with pytest.raises(ValueError, match="only a build that produced artifacts"):
        slsa_provenance.statement(ev)


def test_a_test_result_admits_exactly_what_its_record_admits():
    key = Ed25519PrivateKey.generate()
    policy = sample_reports.make_policy(key)
    report = sample_reports.make_report()
    rec = records.record_from_report(report, report.SerializeToString(), dsse.keyid_for(key), sample_reports.NOW, 30,
                                     "test-policy")
    carried = intoto.record_from_test_result(intoto.test_result_statement(rec))
    recipe = sample_reports.make_recipe(kv_cache_types=["f16"], flash_attention=["off"], context_size=2048,
                                        parallel_sequences=1)
    decisions = []
    for r in (rec, carried):
        env = records.sign_record(r, key)
        for node in (sample_reports.node_for(report), sample_reports.node_for(sample_reports.make_report(vendor="Other"))):
            d = admission.decide(policy, [env], [], admission.route_from_nodes([node], sample_reports.MODEL_SHA256, "r",
                                                                               recipe), sample_reports.NOW)
            decisions.append((d.routable, list(d.reasons)))
    assert decisions[:2] == decisions[2:] and decisions[0][0] and not decisions[1][0]


def test_a_failed_check_makes_a_failed_test_result_and_a_changed_record_is_refused():
    report = sample_reports.make_report()
    rec = records.record_from_report(report, report.SerializeToString(), "k" * 64, sample_reports.NOW, 30, "p")
    rec.checks[0].status = 2  # FAIL
    st = intoto.test_result_statement(rec)
    assert st["predicate"]["result"] == "FAILED" and st["predicate"]["failedTests"] == [rec.checks[0].name]
    config = next(c for c in st["predicate"]["configuration"] if c.get("mediaType") == intoto.RECORD_MEDIA_TYPE)
    config["content"] = base64.b64encode(base64.b64decode(config["content"]).replace(b'"p"', b'"q"')).decode()
    with pytest.raises(ValueError, match="does not match its digest"):
        intoto.record_from_test_result(st)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-s", "-p", "no:cacheprovider"]))
