"""DSSE v1 envelopes (https://github.com/secure-systems-lab/dsse) signed with Ed25519.

The signature covers PAE(payloadType, payload), so neither the payload nor its type can be swapped.
On disk an envelope is the standard DSSE JSON:
  {"payloadType": ..., "payload": <base64>, "signatures": [{"keyid": ..., "sig": <base64>}]}
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from proto import certification_pb2
from tools.certify.errors import BadSignatureError, MalformedEnvelopeError, UnknownKeyError

Envelope = certification_pb2.Envelope


def raw_public_key(key: Ed25519PublicKey | Ed25519PrivateKey) -> bytes:
    if isinstance(key, Ed25519PrivateKey):
        key = key.public_key()
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def keyid_for(key: Ed25519PublicKey | Ed25519PrivateKey | bytes) -> str:
    """sha256 hex of the raw 32-byte Ed25519 public key."""
    raw = key if isinstance(key, bytes) else raw_public_key(key)
    return hashlib.sha256(raw).hexdigest()


def pae(payload_type: str, payload: bytes) -> bytes:
    """Pre-Authentication Encoding: "DSSEv1" SP len(type) SP type SP len(body) SP body (byte lengths)."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def sign(payload_type: str, payload: bytes, private_key: Ed25519PrivateKey) -> Envelope:
    env = Envelope(payload=payload, payload_type=payload_type)
    add_signature(env, private_key)
    return env


def add_signature(env: Envelope, private_key: Ed25519PrivateKey) -> None:
    sig = private_key.sign(pae(env.payload_type, env.payload))
    env.signatures.add(keyid=keyid_for(private_key), sig=sig)


def verify(env: Envelope, trusted: Mapping[str, Ed25519PublicKey]) -> list[str]:
    """Key ids (of `trusted`) whose signature over the envelope verifies; at least one, else raises.

    UnknownKeyError: no signature names a trusted key. BadSignatureError: some do, none verifies.
    A signature without a keyid is tried against every trusted key (DSSE makes keyid optional).
    """
    if not env.signatures:
        raise UnknownKeyError("the envelope carries no signatures; sign it with tools/certify")
    message = pae(env.payload_type, env.payload)
    verified: list[str] = []
    tried: list[str] = []
    for s in env.signatures:
        candidates = [s.keyid] if s.keyid else list(trusted)
        for keyid in candidates:
            key = trusted.get(keyid)
            if key is None:
                continue
            tried.append(keyid)
            try:
                key.verify(s.sig, message)
            except InvalidSignature:
                continue
            if keyid not in verified:
                verified.append(keyid)
    if verified:
        return verified
    if tried:
        raise BadSignatureError(
            f"signature by trusted key {tried[0][:16]}.. does not verify: the payload or its type was "
            "altered after signing; re-issue the record from the runner report"
        )
    named = ", ".join(s.keyid[:16] + ".." for s in env.signatures if s.keyid) or "(no keyid)"
    raise UnknownKeyError(
        f"signed by {named}, which the policy does not trust; add the key with "
        "tools/admission/policy_tool.py or re-sign with a trusted key"
    )


def _b64decode(text: str, field: str) -> bytes:
    if not isinstance(text, str):
        raise MalformedEnvelopeError(f"{field} must be a base64 string")
    # DSSE allows standard or URL-safe base64; padding may be dropped.
    text = text.replace("-", "+").replace("_", "/")
    text += "=" * (-len(text) % 4)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as err:
        raise MalformedEnvelopeError(f"{field} is not base64 ({err})") from err


def envelope_to_dict(env: Envelope) -> dict:
    return {
        "payloadType": env.payload_type,
        "payload": base64.b64encode(env.payload).decode("ascii"),
        "signatures": [
            {"keyid": s.keyid, "sig": base64.b64encode(s.sig).decode("ascii")} for s in env.signatures
        ],
    }


def envelope_to_json(env: Envelope) -> str:
    """Deterministic JSON (sorted keys), so the file digest is a stable record digest."""
    return json.dumps(envelope_to_dict(env), sort_keys=True, indent=2) + "\n"


def envelope_from_dict(obj: object) -> Envelope:
    if not isinstance(obj, dict):
        raise MalformedEnvelopeError("a DSSE envelope is a JSON object with payloadType, payload, signatures")
    missing = [k for k in ("payloadType", "payload", "signatures") if k not in obj]
    if missing:
        raise MalformedEnvelopeError(f"DSSE envelope lacks {', '.join(missing)}")
    if not isinstance(obj["payloadType"], str) or not isinstance(obj["signatures"], list):
        raise MalformedEnvelopeError("payloadType must be a string and signatures a list")
    env = Envelope(payload_type=obj["payloadType"], payload=_b64decode(obj["payload"], "payload"))
    for i, s in enumerate(obj["signatures"]):
        if not isinstance(s, dict) or "sig" not in s:
            raise MalformedEnvelopeError(f"signatures[{i}] must be an object with 'sig' (and 'keyid')")
        keyid = s.get("keyid", "")
        if not isinstance(keyid, str):
            raise MalformedEnvelopeError(f"signatures[{i}].keyid must be a string")
        env.signatures.add(keyid=keyid, sig=_b64decode(s["sig"], f"signatures[{i}].sig"))
    return env


def envelope_from_json(text: str | bytes) -> Envelope:
    try:
        obj = json.loads(text)
    except (ValueError, UnicodeDecodeError) as err:
        raise MalformedEnvelopeError(f"not JSON ({err}); expected a DSSE envelope") from err
    return envelope_from_dict(obj)
