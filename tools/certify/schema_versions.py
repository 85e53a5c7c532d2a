"""The record schema versions a verifier knows, each with the message it decodes to and its fields.

A signed payload names its version in its payload type ("...certification-record.v1+protobuf").
Adding a field is a new version: its entry lists the fields of the version before plus the new one,
and the message it decodes with defines them all. A record of an older version still verifies, since
its payload sets only fields its own version defines; a payload that sets a field its version does
not define is refused (a v1 record carrying a v2 field was not written by a v1 signer).

The policy names the versions it accepts (AdmissionPolicy.supported_record_schema_versions, empty
for every known one: tools/policy/policy.accepted_record_schema_versions).
"""

from __future__ import annotations

import dataclasses

from google.protobuf import message as pb_message

from proto import certification_pb2

CERTIFICATION_FAMILY = "application/vnd.lanes.certification-record"
COMPATIBILITY_FAMILY = "application/vnd.lanes.compatibility-record"


@dataclasses.dataclass(frozen=True)
class SchemaVersion:
    version: int
    message: type[pb_message.Message]
    # Top-level field names this version defines; a payload may set only these.
    fields: frozenset[str]


class SchemaFamily:
    """One record kind's versions, keyed by version number."""

    def __init__(self, family: str, versions: list[SchemaVersion]):
        self.family = family
        self._versions: dict[int, SchemaVersion] = {}
        for v in versions:
            self.register(v)

    def register(self, version: SchemaVersion) -> None:
        if version.version in self._versions:
            raise ValueError(f"{self.family} schema v{version.version} is registered already")
        undefined = version.fields - {f.name for f in version.message.DESCRIPTOR.fields}
        if undefined:
            raise ValueError(f"{self.family} v{version.version} lists fields its message lacks: {sorted(undefined)}")
        self._versions[version.version] = version

    def unregister(self, version: int) -> None:
        del self._versions[version]

    def known(self) -> frozenset[int]:
        return frozenset(self._versions)

    def get(self, version: int) -> SchemaVersion | None:
        return self._versions.get(version)

    def current(self) -> SchemaVersion:
        return self._versions[max(self._versions)]


CERTIFICATION_V1_FIELDS = frozenset({
    "schema_version", "record_id", "scope", "report_digest", "build_evidence_digest", "artifacts", "model",
    "checks", "metrics", "upstream_commit", "patch_stack_digest", "issuer", "issued_at", "expires_at",
    "policy_id", "build_provenance", "recipe",
})
COMPATIBILITY_V1_FIELDS = frozenset({
    "schema_version", "lane_ids", "certification_record_ids", "model_sha256", "upstream_commit",
    "patch_stack_digest", "kl_divergence", "top1_agreement", "max_abs_delta_logit", "tolerances", "issuer",
    "issued_at", "expires_at", "lanes", "rpc_protocol_version", "endpoints", "loopback", "greedy_agreement",
    "prompts", "measurement_digest", "raw_file_digests", "comparisons",
})
# v2: the recipe the route was measured under and its corpus parity against the CPU lane
# (admission refuses a mixed route without either).
COMPATIBILITY_V2_FIELDS = COMPATIBILITY_V1_FIELDS | {"recipe", "corpus_parity"}

CERTIFICATION = SchemaFamily(CERTIFICATION_FAMILY, [
    SchemaVersion(1, certification_pb2.CertificationRecord, CERTIFICATION_V1_FIELDS),
])
COMPATIBILITY = SchemaFamily(COMPATIBILITY_FAMILY, [
    SchemaVersion(1, certification_pb2.CompatibilityRecord, COMPATIBILITY_V1_FIELDS),
    SchemaVersion(2, certification_pb2.CompatibilityRecord, COMPATIBILITY_V2_FIELDS),
])


def known_versions() -> list[int]:
    """Every version of every record kind this verifier knows: what a fresh policy accepts (the
    policy's supported_record_schema_versions is one list for both kinds)."""
    return sorted(CERTIFICATION.known() | COMPATIBILITY.known())
