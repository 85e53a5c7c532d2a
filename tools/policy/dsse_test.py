"""DSSE: PAE matches the spec's vector; sign/verify and JSON round trip; tampering is detected."""

import base64
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from securesystemslib import dsse as ssl_dsse

from tools.core import dsse as core_dsse
from tools.core.errors import LanesError
from tools.policy import dsse
from tools.policy.errors import BadSignatureError, MalformedEnvelopeError, UnknownKeyError

PAYLOAD_TYPE = "http://example.com/HelloWorld"


def test_pae_known_vector():
    # From the DSSE v1 protocol document.
    assert dsse.pae(PAYLOAD_TYPE, b"hello world") == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"


def test_pae_counts_bytes_not_characters():
    assert dsse.pae("t\u00e9", b"") == b"DSSEv1 3 t\xc3\xa9 0 "


def test_sign_verify_json_round_trip():
    key = Ed25519PrivateKey.generate()
    env = dsse.sign(PAYLOAD_TYPE, b"hello world", key)
    text = dsse.envelope_to_json(env)
    obj = json.loads(text)
    assert set(obj) == {"payloadType", "payload", "signatures"}
    assert obj["payload"] == base64.b64encode(b"hello world").decode()
    assert obj["signatures"][0]["keyid"] == dsse.keyid_for(key.public_key())
    assert len(obj["signatures"][0]["keyid"]) == 64
    back = dsse.envelope_from_json(text)
    assert back == env
    assert dsse.envelope_to_json(back) == text
    assert dsse.verify(back, {dsse.keyid_for(key): key.public_key()}) == [dsse.keyid_for(key)]


def test_keyid_is_sha256_of_raw_public_key():
    import hashlib

    key = Ed25519PrivateKey.generate()
    assert dsse.keyid_for(key) == hashlib.sha256(dsse.raw_public_key(key)).hexdigest()


def test_tampered_payload_or_type_is_bad_signature():
    key = Ed25519PrivateKey.generate()
    trusted = {dsse.keyid_for(key): key.public_key()}
    env = dsse.sign(PAYLOAD_TYPE, b"hello world", key)
    env.payload = b"hello worle"
    with pytest.raises(BadSignatureError):
        dsse.verify(env, trusted)
    env = dsse.sign(PAYLOAD_TYPE, b"hello world", key)
    env.payload_type = PAYLOAD_TYPE + "2"
    with pytest.raises(BadSignatureError):
        dsse.verify(env, trusted)


def test_untrusted_key_is_unknown_key():
    env = dsse.sign(PAYLOAD_TYPE, b"x", Ed25519PrivateKey.generate())
    other = Ed25519PrivateKey.generate()
    with pytest.raises(UnknownKeyError):
        dsse.verify(env, {dsse.keyid_for(other): other.public_key()})


def test_unsigned_envelope_is_refused():
    with pytest.raises(UnknownKeyError):
        dsse.verify(dsse.Envelope(payload=b"x", payload_type="t"), {})


def test_urlsafe_unpadded_base64_and_missing_keyid_accepted():
    key = Ed25519PrivateKey.generate()
    payload = b"\xfb\xff\xfe?"  # encodes with + and / in standard base64
    env = dsse.sign(PAYLOAD_TYPE, payload, key)
    obj = {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.urlsafe_b64encode(payload).decode().rstrip("="),
        "signatures": [{"sig": base64.urlsafe_b64encode(env.signatures[0].sig).decode().rstrip("=")}],
    }
    back = dsse.envelope_from_json(json.dumps(obj))
    assert back.payload == payload
    assert dsse.verify(back, {dsse.keyid_for(key): key.public_key()}) == [dsse.keyid_for(key)]


@pytest.mark.parametrize("text", ["not json", "[]", '{"payloadType": "t", "payload": "!!", "signatures": []}',
                                  '{"payloadType": "t", "payload": ""}'])
def test_malformed_envelopes(text):
    with pytest.raises(MalformedEnvelopeError):
        dsse.envelope_from_json(text)


@pytest.mark.parametrize("payload_type,payload", [(PAYLOAD_TYPE, b"hello world"), ("t\u00e9", b""),
                                                  ("application/x", bytes(range(256)))])
def test_core_pae_is_securesystemslib_pae(payload_type, payload):
    expected = ssl_dsse.Envelope(payload=payload, payload_type=payload_type, signatures={}).pae()
    assert core_dsse.pae(payload_type, payload) == expected


def test_core_decoder_reads_the_envelope_without_cryptography():
    key = Ed25519PrivateKey.generate()
    env = dsse.sign(PAYLOAD_TYPE, b"body", key)
    decoded = core_dsse.decode_envelope(json.loads(dsse.envelope_to_json(env)))
    assert decoded == core_dsse.DecodedEnvelope(PAYLOAD_TYPE, b"body", (core_dsse.Signature(dsse.keyid_for(key),
                                                                                            env.signatures[0].sig),))


@pytest.mark.parametrize("obj", [[], {"payloadType": "t", "payload": "!!", "signatures": []},
                                 {"payloadType": "t", "payload": ""},
                                 {"payloadType": "t", "payload": "", "signatures": [{"keyid": 1, "sig": ""}]}])
def test_core_decoder_refuses_malformed_envelopes(obj):
    with pytest.raises(core_dsse.MalformedEnvelopeError) as caught:
        core_dsse.decode_envelope(obj)
    assert isinstance(caught.value, LanesError) and caught.value.code == "malformed-envelope"
    with pytest.raises(MalformedEnvelopeError) as caught:
        dsse.envelope_from_dict(obj)
    assert caught.value.code == "malformed-envelope" and isinstance(caught.value, LanesError)


if __name__ == "__main__":
    import sys

    import pytest
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
