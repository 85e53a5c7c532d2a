"""A CertificationRecord as in-toto Statements v1, so in-toto/SLSA tooling can consume it: with the
project's own predicate (statement) and as a standard test result (test_result_statement).

Subjects are what the record vouches for: every artifact of the lane and the model, by sha256.
The Statement is built and validated with in-toto-attestation (its Statement/ResourceDescriptor
protos); the predicate is the record's own JSON, kept as is (the library's Struct would turn its
integers into floats), and the envelope is DSSE through tools/policy/dsse (securesystemslib).
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import json_format
from in_toto_attestation.predicates.test_result.v0 import test_result_pb2
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
from in_toto_attestation.v1.statement import STATEMENT_TYPE_URI, Statement

from proto import certification_pb2, runner_report_pb2
from tools.policy import dsse

STATEMENT_TYPE = STATEMENT_TYPE_URI
PREDICATE_TYPE = "https://lanes.dev/certification/v1"
TEST_RESULT_PREDICATE_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
RECORD_MEDIA_TYPE = "application/vnd.lanes.certification-record+json"
INTOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"


def _hex(digest: str) -> str:
    return digest.split(":", 1)[1] if digest.startswith("sha256:") else digest


def statement(record: certification_pb2.CertificationRecord) -> dict[str, Any]:
    subjects = [ResourceDescriptor(name=a.path, digest={"sha256": _hex(a.sha256)}).pb for a in record.artifacts]
    if record.model.sha256:
        name = record.model.name or record.model.source or "model"
        subjects.append(ResourceDescriptor(name=f"model:{name}", digest={"sha256": _hex(record.model.sha256)}).pb)
    if not subjects:
        raise ValueError("the record lists no artifacts and no model: an in-toto statement needs a subject")
    predicate = json_format.MessageToDict(record, preserving_proto_field_name=True)
    st = Statement(subjects, PREDICATE_TYPE, predicate)
    st.validate()  # subjects with digests, a predicate type, a predicate
    out = json_format.MessageToDict(st.pb)
    out["predicate"] = predicate
    return out


def _subjects(record: certification_pb2.CertificationRecord) -> list:
    subjects = [ResourceDescriptor(name=a.path, digest={"sha256": _hex(a.sha256)}).pb for a in record.artifacts]
    if record.model.sha256:
        name = record.model.name or record.model.source or "model"
        subjects.append(ResourceDescriptor(name=f"model:{name}", digest={"sha256": _hex(record.model.sha256)}).pb)
    return subjects


def record_payload(record: certification_pb2.CertificationRecord) -> bytes:
    return json.dumps(json_format.MessageToDict(record, preserving_proto_field_name=True), sort_keys=True,
                      separators=(",", ":")).encode()


def test_result_statement(record: certification_pb2.CertificationRecord) -> dict[str, Any]:
    """The record as an in-toto test result: one test per check (PASS passed, FAIL failed, anything
    else warned), configured by the build evidence, the model, the runner report and the record
    itself (its canonical JSON as the descriptor's content), so a consumer of the standard predicate
    recovers exactly the record admission decides from (record_from_test_result)."""
    status = runner_report_pb2.CheckResult.Status
    passed = sorted(c.name for c in record.checks if c.status == status.Value("PASS"))
    failed = sorted(c.name for c in record.checks if c.status == status.Value("FAIL"))
    warned = sorted(c.name for c in record.checks if c.name not in passed and c.name not in failed)
    payload = record_payload(record)
    configuration = [
        ResourceDescriptor(name="build-evidence", digest={"sha256": _hex(record.build_evidence_digest)}).pb,
        ResourceDescriptor(name="runner-report", digest={"sha256": _hex(record.report_digest)}).pb,
        ResourceDescriptor(name=f"policy:{record.policy_id}", content=record.policy_id.encode(),
                           media_type="text/plain").pb,
        ResourceDescriptor(name=f"certification-record:{record.record_id}", media_type=RECORD_MEDIA_TYPE,
                           content=payload, digest={"sha256": hashlib.sha256(payload).hexdigest()}).pb,
    ]
    if record.model.sha256:
        configuration.append(ResourceDescriptor(name="model", digest={"sha256": _hex(record.model.sha256)}).pb)
    result = test_result_pb2.TestResult(result="FAILED" if failed else "WARNED" if warned else "PASSED",
                                        configuration=configuration, passed_tests=passed, warned_tests=warned,
                                        failed_tests=failed)
    subjects = _subjects(record)
    if not subjects:
        raise ValueError("the record lists no artifacts and no model: an in-toto statement needs a subject")
    st = Statement(subjects, TEST_RESULT_PREDICATE_TYPE, json_format.MessageToDict(result))
    st.validate()
    return json_format.MessageToDict(st.pb)


def record_from_test_result(statement_dict: dict[str, Any]) -> certification_pb2.CertificationRecord:
    """The certification record a test-result statement carries, checked against its digest."""
    if statement_dict.get("predicateType") != TEST_RESULT_PREDICATE_TYPE:
        raise ValueError(f"predicate type {statement_dict.get('predicateType')!r} is not a test result")
    found = [c for c in statement_dict.get("predicate", {}).get("configuration", [])
             if c.get("mediaType") == RECORD_MEDIA_TYPE]
    if len(found) != 1:
        raise ValueError(f"{len(found)} certification records in the statement's configuration; need exactly one")
    payload = base64.b64decode(found[0].get("content", ""))
    if hashlib.sha256(payload).hexdigest() != found[0].get("digest", {}).get("sha256"):
        raise ValueError("the configured record's content does not match its digest")
    rec = certification_pb2.CertificationRecord()
    json_format.Parse(payload, rec)
    return rec


def statement_json(record: certification_pb2.CertificationRecord) -> str:
    return json.dumps(statement(record), sort_keys=True, indent=2) + "\n"


def sign_statement(record: certification_pb2.CertificationRecord, private_key: Ed25519PrivateKey) -> dsse.Envelope:
    """The statement in a DSSE envelope (payloadType application/vnd.in-toto+json), as in-toto expects."""
    payload = json.dumps(statement(record), sort_keys=True, separators=(",", ":")).encode()
    return dsse.sign(INTOTO_PAYLOAD_TYPE, payload, private_key)
