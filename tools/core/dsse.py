"""DSSE v1 envelopes, decoded without cryptography or I/O: the envelope's JSON shape and PAE.

Signing and verification (keys, signatures) belong to tools/policy/dsse.py, which builds on this;
here is only what every reader of an envelope must agree on byte for byte:
  {"payloadType": ..., "payload": <base64>, "signatures": [{"keyid": ..., "sig": <base64>}]}
and the Pre-Authentication Encoding a signature covers (https://github.com/secure-systems-lab/dsse).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses

from tools.core.errors import LanesError


class MalformedEnvelopeError(LanesError):
    """The object is not a DSSE envelope in the standard JSON shape."""

    code = "malformed-envelope"


@dataclasses.dataclass(frozen=True)
class Signature:
    keyid: str
    sig: bytes


@dataclasses.dataclass(frozen=True)
class DecodedEnvelope:
    payload_type: str
    payload: bytes
    signatures: tuple[Signature, ...]


def pae(payload_type: str, payload: bytes) -> bytes:
    """Pre-Authentication Encoding: "DSSEv1" SP len(type) SP type SP len(body) SP body (byte lengths)."""
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(type_bytes), type_bytes, len(payload), payload)


def b64decode(text: object, field: str) -> bytes:
    if not isinstance(text, str):
        raise MalformedEnvelopeError(f"{field} must be a base64 string")
    # DSSE allows standard or URL-safe base64; padding may be dropped.
    text = text.replace("-", "+").replace("_", "/")
    text += "=" * (-len(text) % 4)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as err:
        raise MalformedEnvelopeError(f"{field} is not base64 ({err})") from err


def decode_envelope(obj: object) -> DecodedEnvelope:
    """The envelope in a parsed JSON object; MalformedEnvelopeError unless it has the standard shape."""
    if not isinstance(obj, dict):
        raise MalformedEnvelopeError("a DSSE envelope is a JSON object with payloadType, payload, signatures")
    missing = [k for k in ("payloadType", "payload", "signatures") if k not in obj]
    if missing:
        raise MalformedEnvelopeError(f"DSSE envelope lacks {', '.join(missing)}")
    if not isinstance(obj["payloadType"], str) or not isinstance(obj["signatures"], list):
        raise MalformedEnvelopeError("payloadType must be a string and signatures a list")
    payload = b64decode(obj["payload"], "payload")
    signatures = []
    for i, s in enumerate(obj["signatures"]):
        if not isinstance(s, dict) or "sig" not in s:
            raise MalformedEnvelopeError(f"signatures[{i}] must be an object with 'sig' (and 'keyid')")
        keyid = s.get("keyid", "")
        if not isinstance(keyid, str):
            raise MalformedEnvelopeError(f"signatures[{i}].keyid must be a string")
        signatures.append(Signature(keyid, b64decode(s["sig"], f"signatures[{i}].sig")))
    return DecodedEnvelope(obj["payloadType"], payload, tuple(signatures))
