"""DSSE v1 envelopes (https://github.com/secure-systems-lab/dsse) signed with Ed25519.

The signature covers PAE(payloadType, payload), so neither the payload nor its type can be swapped.
On disk an envelope is the standard DSSE JSON:
  {"payloadType": ..., "payload": <base64>, "signatures": [{"keyid": ..., "sig": <base64>}]}

The envelope's shape and PAE are decoded by tools/core/dsse.py (pure, no cryptography); signing with
securesystemslib's CryptoSigner and verification with SSlibKey are here, under Lanes key ids (sha256
of the raw Ed25519 key). Also here: strict parsing of untrusted JSON (duplicate keys, depth, UTF-8),
and the protobuf Envelope the records carry.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from securesystemslib import exceptions as ssl_exceptions
from securesystemslib.signer import CryptoSigner, Signature, SSlibKey

from proto import certification_pb2
from tools.core import dsse as core_dsse
from tools.policy.errors import (
    BadSignatureError,
    MalformedEnvelopeError,
    MalformedInputError,
    NotUtf8Error,
    UnknownKeyError,
)

Envelope = certification_pb2.Envelope


def raw_public_key(key: Ed25519PublicKey | Ed25519PrivateKey) -> bytes:
    if isinstance(key, Ed25519PrivateKey):
        key = key.public_key()
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def keyid_for(key: Ed25519PublicKey | Ed25519PrivateKey | bytes) -> str:
    """sha256 hex of the raw 32-byte Ed25519 public key."""
    raw = key if isinstance(key, bytes) else raw_public_key(key)
    return hashlib.sha256(raw).hexdigest()


pae = core_dsse.pae
signed_digest = core_dsse.signed_digest


def envelope_digest(env: Envelope) -> str:
    """What the envelope's signatures cover, as "sha256:<hex>" (tools/core/dsse.signed_digest)."""
    return core_dsse.signed_digest(env.payload_type, env.payload)


def sslib_key(key: Ed25519PublicKey | Ed25519PrivateKey) -> SSlibKey:
    """The securesystemslib key under its Lanes key id."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return SSlibKey.from_crypto(public, keyid=keyid_for(public))


def sign(payload_type: str, payload: bytes, private_key: Ed25519PrivateKey) -> Envelope:
    env = Envelope(payload=payload, payload_type=payload_type)
    add_signature(env, private_key)
    return env


def add_signature(env: Envelope, private_key: Ed25519PrivateKey) -> None:
    sig = CryptoSigner(private_key, sslib_key(private_key)).sign(pae(env.payload_type, env.payload))
    env.signatures.add(keyid=sig.keyid, sig=bytes.fromhex(sig.signature))


def _verifies(key: SSlibKey, sig: bytes, message: bytes) -> bool:
    try:
        key.verify_signature(Signature(key.keyid, sig.hex()), message)
    except (ssl_exceptions.UnverifiedSignatureError, ssl_exceptions.VerificationError):
        return False
    return True


def verify(env: Envelope, trusted: Mapping[str, Ed25519PublicKey]) -> list[str]:
    """Key ids (of `trusted`) whose signature over the envelope verifies; at least one, else raises.

    UnknownKeyError: no signature names a trusted key. BadSignatureError: some do, none verifies.
    A signature without a keyid is tried against every trusted key (DSSE makes keyid optional).
    The returned key ids are the keys whose signatures verified, never the keyid hints written in
    the envelope: DSSE's keyid is unauthenticated and must not decide anything, so revocation and
    retirement are applied to these.
    """
    if not env.signatures:
        raise UnknownKeyError("the envelope carries no signatures; sign it with tools/certify")
    if len(env.signatures) > core_dsse.MAX_SIGNATURES:
        raise MalformedEnvelopeError(f"{len(env.signatures)} signatures, more than the {core_dsse.MAX_SIGNATURES} "
                                     "an envelope may carry")
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
            if not _verifies(SSlibKey.from_crypto(key, keyid=keyid), s.sig, message):
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
    try:
        decoded = core_dsse.decode_envelope(obj)
    except core_dsse.MalformedEnvelopeError as err:
        raise MalformedEnvelopeError(str(err)) from err
    env = Envelope(payload_type=decoded.payload_type, payload=decoded.payload)
    for s in decoded.signatures:
        env.signatures.add(keyid=s.keyid, sig=s.sig)
    return env


# Every JSON file the tools read (envelopes, policies, nodes, routes) is nested a few levels deep;
# anything deeper is hostile or broken, and refusing it before parsing keeps recursion bounded.
MAX_JSON_DEPTH = 32

_JSON_SPECIAL = re.compile(r'[\\"\[\]{}]')


def check_json_depth(text: str, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raises MalformedInputError if brackets outside strings nest deeper than max_depth.

    One linear pass over the special characters (a regex per string literal can go quadratic on
    unterminated strings), run before json.loads so the parser never recurses deeply.
    """
    depth = 0
    in_string = False
    skip_to = -1
    for m in _JSON_SPECIAL.finditer(text):
        pos, c = m.start(), m.group()
        if pos < skip_to:
            continue
        if in_string:
            if c == "\\":
                skip_to = pos + 2  # the escaped character, whatever it is
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            if depth > max_depth:
                raise MalformedInputError(f"JSON nested deeper than {max_depth} levels")
        elif c in "]}":
            depth -= 1


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    obj: dict = {}
    for k, v in pairs:
        if k in obj:
            # json.loads (and json_format) silently keep the last value: order must never decide.
            raise MalformedInputError(f"duplicate JSON key {k!r}")
        obj[k] = v
    return obj


def loads_strict(data: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> object:
    """json.loads that refuses non-UTF-8 bytes (NotUtf8Error), duplicate keys and deep nesting
    (MalformedInputError) and any other non-JSON (MalformedInputError); never RecursionError."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise NotUtf8Error(f"not UTF-8 (byte {err.start}: {data[err.start:err.start + 1]!r})") from err
    check_json_depth(data, max_depth)
    try:
        return json.loads(data, object_pairs_hook=_unique_keys)
    except RecursionError as err:  # unreachable after the depth check; kept as a second fence
        raise MalformedInputError("JSON nested too deeply") from err
    except ValueError as err:
        raise MalformedInputError(f"not JSON ({err})") from err


def envelope_from_json(text: str | bytes) -> Envelope:
    """Parses DSSE JSON strictly: duplicate keys or deep nesting are a malformed envelope."""
    try:
        obj = loads_strict(text)
    except MalformedInputError as err:
        raise MalformedEnvelopeError(f"{err}; expected a DSSE envelope") from err
    return envelope_from_dict(obj)
