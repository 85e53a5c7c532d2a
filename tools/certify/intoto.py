"""A CertificationRecord as an in-toto Statement v1, so in-toto/SLSA tooling can consume it.

Subjects are what the record vouches for: every artifact of the lane and the model, by sha256.
The Statement is built and validated with in-toto-attestation (its Statement/ResourceDescriptor
protos); the predicate is the record's own JSON, kept as is (the library's Struct would turn its
integers into floats), and the envelope is DSSE through tools/policy/dsse (securesystemslib).
"""

from __future__ import annotations

import json
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import json_format
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
from in_toto_attestation.v1.statement import STATEMENT_TYPE_URI, Statement

from proto import certification_pb2
from tools.policy import dsse

STATEMENT_TYPE = STATEMENT_TYPE_URI
PREDICATE_TYPE = "https://lanes.dev/certification/v1"
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


def statement_json(record: certification_pb2.CertificationRecord) -> str:
    return json.dumps(statement(record), sort_keys=True, indent=2) + "\n"


def sign_statement(record: certification_pb2.CertificationRecord, private_key: Ed25519PrivateKey) -> dsse.Envelope:
    """The statement in a DSSE envelope (payloadType application/vnd.in-toto+json), as in-toto expects."""
    payload = json.dumps(statement(record), sort_keys=True, separators=(",", ":")).encode()
    return dsse.sign(INTOTO_PAYLOAD_TYPE, payload, private_key)
