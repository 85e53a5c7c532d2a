"""Record schema versions: a v2 that adds a field leaves every committed v1 record verifying.

The test makes a CertificationRecord message with one more field (as the proto would after the field
is added) and registers v1 and v2 on it, v1 with its own fields only; then v2 records sign and
verify, the committed v1 records under evidence/records still verify, and a policy accepting only
v2, an unknown version and a v1 payload that sets the v2 field are refused.
"""

import os
import pathlib
import sys

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from proto import certification_pb2
from tools.certify import records, sample_reports, schema_versions
from tools.policy import dsse
from tools.policy import policy as policy_lib
from tools.policy.errors import MalformedRecordError, UnsupportedSchemaError

EVIDENCE = (pathlib.Path(os.environ["TEST_SRCDIR"], "lanes", "evidence") if "TEST_SRCDIR" in os.environ
            else pathlib.Path(__file__).resolve().parents[2] / "evidence")
COMMITTED_RECORDS = sorted((EVIDENCE / "records").glob("*.record.dsse.json"))
ADDED_FIELD = "review_note"


def _certification_record_with_added_field() -> type:
    """CertificationRecord plus `string review_note = 100`, in a pool of its own."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(file_desc) -> None:
        for dep in file_desc.dependencies:
            add(dep)
        if file_desc.name in added:
            return
        proto = descriptor_pb2.FileDescriptorProto()
        file_desc.CopyToProto(proto)
        if file_desc.name == certification_pb2.DESCRIPTOR.name:
            message = next(m for m in proto.message_type if m.name == "CertificationRecord")
            message.field.add(name=ADDED_FIELD, number=100, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                              label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL, json_name="reviewNote")
        pool.Add(proto)
        added.add(file_desc.name)

    add(certification_pb2.DESCRIPTOR)
    full_name = certification_pb2.CertificationRecord.DESCRIPTOR.full_name
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(full_name))


RecordV2 = _certification_record_with_added_field()


@pytest.fixture
def v2_known(monkeypatch):
    family = schema_versions.SchemaFamily(schema_versions.CERTIFICATION_FAMILY, [
        schema_versions.SchemaVersion(1, RecordV2, schema_versions.CERTIFICATION_V1_FIELDS),
    ])
    family.register(schema_versions.SchemaVersion(2, RecordV2, schema_versions.CERTIFICATION_V1_FIELDS | {ADDED_FIELD}))
    monkeypatch.setattr(schema_versions, "CERTIFICATION", family)
    return family


def _policy_and_store():
    policy = policy_lib.load_policy(EVIDENCE / "policy.json")
    return policy, policy_lib.validate(policy)


def _signed(version: int, review_note: str = "", key=None):
    key = key or Ed25519PrivateKey.generate()
    report = sample_reports.make_report()
    v1 = records.record_from_report(report, report.SerializeToString(), dsse.keyid_for(key), sample_reports.NOW, 30, "p")
    record = RecordV2.FromString(v1.SerializeToString())
    record.schema_version = version
    if review_note:
        setattr(record, ADDED_FIELD, review_note)
    return records.sign_record(record, key), {dsse.keyid_for(key): key.public_key()}


def test_the_latest_version_lists_every_field_of_the_message():
    for family in (schema_versions.CERTIFICATION, schema_versions.COMPATIBILITY):
        current = family.current()
        assert current.fields == {f.name for f in current.message.DESCRIPTOR.fields}, family.family


def test_a_version_cannot_list_fields_its_message_lacks_or_be_registered_twice():
    with pytest.raises(ValueError, match="lacks"):
        schema_versions.SchemaFamily("f", [schema_versions.SchemaVersion(
            1, certification_pb2.CertificationRecord, schema_versions.CERTIFICATION_V1_FIELDS | {ADDED_FIELD})])
    family = schema_versions.SchemaFamily("f", [schema_versions.SchemaVersion(
        1, certification_pb2.CertificationRecord, schema_versions.CERTIFICATION_V1_FIELDS)])
    with pytest.raises(ValueError, match="registered already"):
        family.register(family.current())


def test_policy_accepts_every_known_version_unless_it_names_some():
    assert policy_lib.accepted_record_schema_versions([], {1, 2}) == {1, 2}
    assert policy_lib.accepted_record_schema_versions(None, {1, 2}) == {1, 2}
    assert policy_lib.accepted_record_schema_versions([2, 9], {1, 2}) == {2}


def test_there_are_committed_records():
    assert COMMITTED_RECORDS


@pytest.mark.parametrize("path", COMMITTED_RECORDS, ids=lambda p: p.name.split(".")[0])
def test_committed_v1_records_verify_with_v2_known(v2_known, path):
    policy, store = _policy_and_store()
    env = dsse.envelope_from_json(path.read_bytes())
    for supported in (policy.supported_record_schema_versions, [], [1, 2]):
        record = records.verify_record(env, store, supported)
        assert record.schema_version == 1 and isinstance(record, RecordV2)
        assert not getattr(record, ADDED_FIELD)
        assert record.scope.lane_id in path.name


@pytest.mark.parametrize("path", COMMITTED_RECORDS, ids=lambda p: p.name.split(".")[0])
def test_a_policy_accepting_only_v2_refuses_the_committed_v1_records(v2_known, path):
    _, store = _policy_and_store()
    with pytest.raises(UnsupportedSchemaError, match=r"schema v1, accepted \[2\]"):
        records.verify_record(dsse.envelope_from_json(path.read_bytes()), store, [2])


def test_a_v2_record_with_the_added_field_signs_and_verifies(v2_known):
    env, trusted = _signed(2, review_note="reviewed by the release team")
    assert env.payload_type == "application/vnd.lanes.certification-record.v2+protobuf"
    record = records.verify_record(env, trusted)
    assert record.schema_version == 2 and getattr(record, ADDED_FIELD) == "reviewed by the release team"
    with pytest.raises(UnsupportedSchemaError, match=r"schema v2, accepted \[1\]"):
        records.verify_record(env, trusted, [1])


def test_a_v2_record_is_refused_where_v2_is_not_known():
    env, trusted = _signed(2, review_note="x")
    with pytest.raises(UnsupportedSchemaError, match=r"schema v2, accepted \[1\]"):
        records.verify_record(env, trusted)


def test_an_unknown_version_is_refused(v2_known):
    env, trusted = _signed(3)
    with pytest.raises(UnsupportedSchemaError, match=r"schema v3, accepted \[1, 2\]"):
        records.verify_record(env, trusted)
    with pytest.raises(UnsupportedSchemaError, match="schema v3"):
        records.verify_record(env, trusted, [3])


def test_a_v1_payload_that_sets_the_v2_field_is_refused(v2_known):
    env, trusted = _signed(1, review_note="a v1 signer never wrote this")
    with pytest.raises(MalformedRecordError, match=f"sets {ADDED_FIELD}, not defined in schema v1"):
        records.verify_record(env, trusted)
    env, trusted = _signed(1)
    assert records.verify_record(env, trusted).schema_version == 1


def test_compatibility_v2_states_the_recipe_and_a_v1_payload_cannot():
    key = Ed25519PrivateKey.generate()
    trusted = {dsse.keyid_for(key): key.public_key()}
    rec = certification_pb2.CompatibilityRecord(schema_version=records.COMPATIBILITY_SCHEMA_VERSION, lane_ids=["a", "b"])
    rec.recipe.kv_cache_types.append("f16")
    assert rec.schema_version == 2
    assert list(records.verify_compatibility(records.sign_compatibility(rec, key), trusted).recipe.kv_cache_types) == ["f16"]
    rec.schema_version = 1
    with pytest.raises(MalformedRecordError, match="sets recipe, not defined in schema v1"):
        records.verify_compatibility(records.sign_compatibility(rec, key), trusted)
    assert 2 in schema_versions.known_versions() and 1 in schema_versions.known_versions()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
