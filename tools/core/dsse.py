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
import hashlib

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


def signed_digest(payload_type: str, payload: bytes) -> str:
    """"sha256:<hex>" over PAE(payloadType, payload): what every signature on the envelope covers.

    It names a signed statement independently of how its envelope is encoded (JSON layout, base64
    alphabet or padding, keyid hints, unknown fields, which or how many signatures it carries), so
    a re-serialised copy of a record is the same record to revocation, dedup and the log.
    """
    return "sha256:" + hashlib.sha256(pae(payload_type, payload)).hexdigest()


# An envelope carries one signature per signer; Lanes signs with one key (two during a rotation).
# More than this is refused before any verification: each keyid-less signature is tried against
# every trusted key, so thousands of them would cost seconds of Ed25519 work per envelope.
MAX_SIGNATURES = 16


def _utf8_text(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise MalformedEnvelopeError(f"{field} must be a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:  # a lone surrogate ("\\ud800" in the JSON) has no UTF-8 form
        raise MalformedEnvelopeError(f"{field} is not valid Unicode text (lone surrogate at {err.start})") from err
    return value


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
    if not isinstance(obj["signatures"], list):
        raise MalformedEnvelopeError("payloadType must be a string and signatures a list")
    payload_type = _utf8_text(obj["payloadType"], "payloadType")
    if len(obj["signatures"]) > MAX_SIGNATURES:
        raise MalformedEnvelopeError(f"{len(obj['signatures'])} signatures, more than the {MAX_SIGNATURES} an "
                                     "envelope may carry")
    payload = b64decode(obj["payload"], "payload")
    signatures = []
    for i, s in enumerate(obj["signatures"]):
        if not isinstance(s, dict) or "sig" not in s:
            raise MalformedEnvelopeError(f"signatures[{i}] must be an object with 'sig' (and 'keyid')")
        keyid = _utf8_text(s.get("keyid", ""), f"signatures[{i}].keyid")
        signatures.append(Signature(keyid, b64decode(s["sig"], f"signatures[{i}].sig")))
    return DecodedEnvelope(payload_type, payload, tuple(signatures))
