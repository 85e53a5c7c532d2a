"""A CertificationRecord as an in-toto Statement v1, so in-toto/SLSA tooling can consume it.

Subjects are what the record vouches for: every artifact of the lane and the model, by sha256.
"""

from __future__ import annotations

import json
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import json_format

from proto import certification_pb2
from tools.policy import dsse

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://lanes.dev/certification/v1"
INTOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"


def _hex(digest: str) -> str:
    return digest.split(":", 1)[1] if digest.startswith("sha256:") else digest


def statement(record: certification_pb2.CertificationRecord) -> dict[str, Any]:
    subjects = [{"name": a.path, "digest": {"sha256": _hex(a.sha256)}} for a in record.artifacts]
    if record.model.sha256:
        name = record.model.name or record.model.source or "model"
        subjects.append({"name": f"model:{name}", "digest": {"sha256": _hex(record.model.sha256)}})
    if not subjects:
        raise ValueError("the record lists no artifacts and no model: an in-toto statement needs a subject")
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects,
        "predicateType": PREDICATE_TYPE,
        "predicate": json_format.MessageToDict(record, preserving_proto_field_name=True),
    }


def statement_json(record: certification_pb2.CertificationRecord) -> str:
    return json.dumps(statement(record), sort_keys=True, indent=2) + "\n"


def sign_statement(record: certification_pb2.CertificationRecord, private_key: Ed25519PrivateKey) -> dsse.Envelope:
    """The statement in a DSSE envelope (payloadType application/vnd.in-toto+json), as in-toto expects."""
    payload = json.dumps(statement(record), sort_keys=True, separators=(",", ":")).encode()
    return dsse.sign(INTOTO_PAYLOAD_TYPE, payload, private_key)
