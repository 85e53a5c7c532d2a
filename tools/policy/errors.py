"""One exception type per failure kind. Each carries the reason code admission reports for it.

Codes are stable, distinct prefixes ("bad-signature", "expired", ...): decision records and tests
match on them, so a code never changes meaning once released.
"""

from __future__ import annotations

from tools.core.errors import LanesError


class TrustError(LanesError):
    """Base of every failure to sign, verify, read or trust a record, key, policy or input file;
    `code` is the reason-code prefix admission reports."""

    code = "certify-error"


class MalformedEnvelopeError(TrustError):
    """The file is not a DSSE envelope in the standard JSON shape."""

    code = "malformed-envelope"


class BadSignatureError(TrustError):
    """A signature from a trusted key does not verify: the payload or its type was altered."""

    code = "bad-signature"


class UnknownKeyError(TrustError):
    """No signature on the envelope comes from a key the policy trusts."""

    code = "unknown-key"


class KeyOutsideValidityError(TrustError):
    """The signing key is trusted, but not at the record's issue time or not now."""

    code = "key-outside-validity"


class ExpiredRecordError(TrustError):
    """The record's expiry has passed, or it is older than the policy's maximum record age."""

    code = "expired"


class NotYetValidError(TrustError):
    """The record says it was issued in the future: a clock or a forgery problem."""

    code = "not-yet-valid"


class UnsupportedSchemaError(TrustError):
    """Payload type or schema_version is one this tool (or the policy) does not accept."""

    code = "unsupported-schema"


class IssuerMismatchError(TrustError):
    """The record names an issuer other than the key whose signature verified."""

    code = "issuer-mismatch"


class BadTimestampError(TrustError):
    """A time field is not RFC 3339 UTC."""

    code = "bad-timestamp"


class NotRecordableError(TrustError):
    """The runner report may not be certified (not pass_recordable, not PASS, a required check not PASS)."""

    code = "not-recordable"


class IncompleteReportError(TrustError):
    """The runner report lacks a field a record needs (lane, device class, artifacts, digests)."""

    code = "incomplete-report"


class KeyLocationError(TrustError):
    """Refused to write a private key inside a git work tree."""

    code = "key-in-repo"


class KeyFileError(TrustError):
    """A key file is missing, unreadable, of the wrong type, or too widely readable."""

    code = "key-file"


class PolicyError(TrustError):
    """The admission policy file is unreadable or inconsistent."""

    code = "bad-policy"


class ReportDigestError(TrustError):
    """The report bytes given for the digest are not the report given for the record."""

    code = "report-digest-mismatch"


class UnreadableInputError(TrustError):
    """An input file (report, record, compatibility JSON, node description) is missing or not parseable."""

    code = "unreadable-input"


class MalformedRecordError(TrustError):
    """A signed payload is ambiguous: a duplicate artifact path, check name, shard or lane, a field this
    schema does not define (protobuf keeps it as an unknown field), or bytes that are not the canonical
    encoding of the record they decode to. No field is ignorable in a signed payload."""

    code = "malformed-record"


class MalformedInputError(TrustError):
    """An input file (policy, node, route, record) is ambiguous: a duplicate JSON key, a duplicate
    keyid, node id, artifact path; or nested deeper than the parser accepts."""

    code = "malformed-input"


class NotRegularFileError(TrustError):
    """A record path is a FIFO, device, socket, directory or symlink: never opened."""

    code = "not-regular-file"


class InputTooLargeError(TrustError):
    """An input file is larger than the limit for its kind."""

    code = "input-too-large"


class NotUtf8Error(TrustError):
    """A JSON input file is not valid UTF-8."""

    code = "not-utf8"
