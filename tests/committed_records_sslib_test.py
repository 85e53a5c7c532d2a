"""Issue 13: the committed records verify on the field's DSSE library alone (securesystemslib),
under the committed policy's keys, with no Lanes code in the verification path; a changed payload
does not. (tools/policy/dsse.py signs and verifies through securesystemslib too; this test shows
that records signed before that switch are plain DSSE any securesystemslib user can check.)"""

import base64
import json
import os
import pathlib
import sys

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from securesystemslib import dsse as ssl_dsse
from securesystemslib import exceptions as ssl_exceptions
from securesystemslib.signer import SSlibKey

EVIDENCE = (pathlib.Path(os.environ["TEST_SRCDIR"], "lanes", "evidence") if "TEST_SRCDIR" in os.environ
            else pathlib.Path(__file__).resolve().parents[1] / "evidence")
RECORDS = sorted((EVIDENCE / "records").glob("*.record.dsse.json"))


def policy_keys() -> list[SSlibKey]:
    policy = json.loads((EVIDENCE / "policy.json").read_text())
    return [SSlibKey.from_crypto(Ed25519PublicKey.from_public_bytes(base64.b64decode(k["public_key"])), keyid=k["keyid"])
            for k in policy["trusted_keys"]]


def test_there_are_committed_records():
    assert RECORDS


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.name)
def test_committed_record_verifies_with_securesystemslib(path):
    env = ssl_dsse.Envelope.from_dict(json.loads(path.read_text()))
    assert env.verify(policy_keys(), 1)
    env.payload = env.payload + b"\x00"
    with pytest.raises(ssl_exceptions.VerificationError):
        env.verify(policy_keys(), 1)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
