"""The committed evidence in the field's formats: each certification record as an in-toto test
result, each lane build as SLSA Provenance v1, validated with in-toto-attestation; a test result
carries exactly its record, so it admits exactly what the record admits."""

from __future__ import annotations

import base64
import json
import os
import pathlib
import sys

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import json_format
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.predicates.test_result.v0 import test_result_pb2

from proto import build_evidence_pb2, certification_pb2
from tools.admission import admission
from tools.certify import intoto, records, sample_reports
from tools.evidence import slsa_provenance
from tools.policy import dsse

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
