"""The keys a policy trusts, each with its validity window, ready for fast repeated verification."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
from collections.abc import Iterable, Mapping

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from proto import admission_pb2
from tools.policy import dsse, timestamps
from tools.policy.errors import KeyOutsideValidityError, PolicyError


@dataclasses.dataclass(frozen=True)
class TrustedSigner:
    keyid: str
    public_key: Ed25519PublicKey
    not_before: dt.datetime
    not_after: dt.datetime
    owner: str


class TrustStore:
    """keyid -> TrustedSigner. Built once per policy: parsing keys per verification is wasted work."""

    def __init__(self, signers: Iterable[TrustedSigner] = ()):
        self.signers: dict[str, TrustedSigner] = {}
        for s in signers:
            if s.keyid in self.signers:
                # Two entries for one key (say an expired window and a valid one): whichever came
                # last would win, so order would decide trust. Refuse instead.
                raise PolicyError(f"keyid {s.keyid[:16]}.. is listed twice; keep one entry per key")
            self.signers[s.keyid] = s
        self.public_keys: dict[str, Ed25519PublicKey] = {k: s.public_key for k, s in self.signers.items()}
        self.digest = self._content_digest()

    def _content_digest(self) -> str:
        """sha256 over every signer's keyid, raw key, window and owner, in keyid order: two stores
        with the same content share cache entries, and any change gives a new digest."""
        h = hashlib.sha256()
        for keyid in sorted(self.signers):
            s = self.signers[keyid]
            for part in (keyid, dsse.raw_public_key(s.public_key).hex(), s.not_before.isoformat(),
                         s.not_after.isoformat(), s.owner):
                data = part.encode("utf-8", "surrogatepass")
                h.update(len(data).to_bytes(8, "big") + data)  # length-prefixed: no ambiguous joins
        return "sha256:" + h.hexdigest()

    @classmethod
    def from_trusted_keys(cls, keys: Iterable[admission_pb2.TrustedKey]) -> "TrustStore":
        signers = []
        for k in keys:
            if len(k.public_key) != 32:
                raise PolicyError(
                    f"trusted key {k.keyid[:16]}.. has a {len(k.public_key)}-byte public_key; expected the "
                    "raw 32-byte Ed25519 key (base64 in JSON); re-add it with policy_tool"
                )
            actual = dsse.keyid_for(bytes(k.public_key))
            if k.keyid != actual:
                raise PolicyError(
                    f"trusted key {k.keyid[:16]}..: keyid is not sha256(public_key) (that is {actual[:16]}..); "
                    "re-add the key with policy_tool so the two agree"
                )
            try:
                not_before = timestamps.parse_utc(k.not_before, f"key {k.keyid[:16]}.. not_before")
                not_after = timestamps.parse_utc(k.not_after, f"key {k.keyid[:16]}.. not_after")
            except Exception as err:
                raise PolicyError(f"{err}; every trusted key needs a not_before/not_after window") from err
            signers.append(
                TrustedSigner(
                    keyid=k.keyid,
                    public_key=Ed25519PublicKey.from_public_bytes(bytes(k.public_key)),
                    not_before=not_before,
                    not_after=not_after,
                    owner=k.owner,
                )
            )
        return cls(signers)

    def __contains__(self, keyid: str) -> bool:
        return keyid in self.signers

    def check_window(self, keyid: str, issued_at: dt.datetime, now: dt.datetime) -> None:
        """Raises unless the key was valid when the record was issued and is still valid now."""
        s = self.signers[keyid]
        for label, t in (("issue time", issued_at), ("now", now)):
            if not s.not_before <= t <= s.not_after:
                raise KeyOutsideValidityError(
                    f"key {keyid[:16]}.. ({s.owner or 'no owner'}) is trusted only from "
                    f"{timestamps.format_utc(s.not_before)} to {timestamps.format_utc(s.not_after)}, "
                    f"not at {label} {timestamps.format_utc(t)}; re-issue the record with a current key"
                )


def as_trust_store(trusted: "TrustStore | Mapping[str, Ed25519PublicKey] | Iterable[admission_pb2.TrustedKey]") -> TrustStore:
    """Accepts a TrustStore, the policy's TrustedKey list, or a bare keyid -> public key mapping.

    A bare mapping has no validity windows; its keys are treated as valid at every time.
    """
    if isinstance(trusted, TrustStore):
        return trusted
    if isinstance(trusted, Mapping):
        far_past = dt.datetime.min.replace(tzinfo=timestamps.UTC)
        far_future = dt.datetime.max.replace(tzinfo=timestamps.UTC)
        return TrustStore(TrustedSigner(k, v, far_past, far_future, "") for k, v in trusted.items())
    return TrustStore.from_trusted_keys(trusted)
