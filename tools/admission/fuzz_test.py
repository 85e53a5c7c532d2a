"""Hypothesis fuzzing of admission's inputs (issue 8): envelopes, policies, node and route files.

Properties: no input crashes admission (only TrustError, the refusal/unusable-input path, may
leave the loaders; decide() never raises) or hangs (per-example deadline), and no mutation of a
valid record is routable unless it decodes to the very same signed envelope (whitespace, key
order and base64 spelling are not content). Bounded: MAX_EXAMPLES per test, about 10 s in all.
"""

import datetime as dt
import json
import pathlib
import tempfile

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import json_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tools.admission import admission, admission_files
from tools.certify import records, sample_reports
from tools.policy import dsse
from tools.policy import policy as policy_lib
from tools.policy.errors import TrustError

MAX_EXAMPLES = 500
FUZZ = settings(max_examples=MAX_EXAMPLES, deadline=dt.timedelta(seconds=2), derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
COUNTS: dict[str, int] = {}

KEY = Ed25519PrivateKey.generate()
POLICY = sample_reports.make_policy(KEY)
STORE = policy_lib.validate(POLICY)
REPORT = sample_reports.make_report()
RECORD = records.record_from_report(REPORT, REPORT.SerializeToString(), dsse.keyid_for(KEY), sample_reports.NOW, 30, "p")
ENVELOPE = records.sign_record(RECORD, KEY)
ENVELOPE_JSON = dsse.envelope_to_json(ENVELOPE).encode()
NODE = sample_reports.node_for(REPORT)
RECIPE = sample_reports.make_recipe(kv_cache_types=["f16"], flash_attention=["off"])
ROUTE = admission.route_from_nodes([NODE], sample_reports.MODEL_SHA256, "r", RECIPE)
LATER = sample_reports.NOW + dt.timedelta(days=1)
TMP = pathlib.Path(tempfile.mkdtemp(prefix="admission-fuzz-"))

edits = st.lists(
    st.tuples(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]), st.integers(0, 1 << 20),
              st.integers(0, 255)),
    min_size=1, max_size=6,
)


def mutate(data: bytes, ops) -> bytes:
    b = bytearray(data)
    for kind, pos, val in ops:
        if not b:
            b.append(val)
            continue
        i = pos % len(b)
        if kind == "flip":
            b[i] ^= 1 << (val % 8)
        elif kind == "set":
            b[i] = val
        elif kind == "insert":
            b.insert(i, val)
        elif kind == "delete":
            del b[i]
        else:
            del b[i:]
    return bytes(b)


def _count(name):
    COUNTS[name] = COUNTS.get(name, 0) + 1


def test_valid_record_is_routable():
    d = admission.decide(POLICY, [ENVELOPE], [], ROUTE, LATER, trust_store=STORE)
    assert d.routable, d.reasons


@FUZZ
@given(ops=edits)
def test_mutated_envelope_file(ops):
    _count("envelope file")
    data = mutate(ENVELOPE_JSON, ops)
    d = TMP / "env"
    d.mkdir(exist_ok=True)
    (d / "r.dsse.json").write_bytes(data)
    certs, compats, problems = admission.load_records_dir(d)
    decision = admission.decide(POLICY, certs, compats, ROUTE, LATER, trust_store=STORE)
    if decision.routable:
        env = certs[0].envelope
        assert (env.payload, env.payload_type) == (ENVELOPE.payload, ENVELOPE.payload_type), data


@FUZZ
@given(ops=edits, which=st.sampled_from(["payload", "type", "sig", "keyid"]))
def test_mutated_envelope_fields(ops, which):
    _count("envelope fields")
    env = dsse.Envelope()
    env.CopyFrom(ENVELOPE)
    if which == "payload":
        env.payload = mutate(env.payload, ops)
    elif which == "type":
        env.payload_type = mutate(env.payload_type.encode(), ops).decode("utf-8", "replace")
    elif which == "sig":
        env.signatures[0].sig = mutate(env.signatures[0].sig, ops)
    else:
        env.signatures[0].keyid = mutate(env.signatures[0].keyid.encode(), ops).decode("utf-8", "replace")
    decision = admission.decide(POLICY, [env], [], ROUTE, LATER, trust_store=STORE)
    if decision.routable:  # only an unchanged signed content may pass
        assert (env.payload, env.payload_type) == (ENVELOPE.payload, ENVELOPE.payload_type)


@FUZZ
@given(ops=edits)
def test_resigned_mutated_payload_never_crashes(ops):
    # The trusted key signs garbage: verification must refuse or decide, never raise.
    _count("re-signed payload")
    env = dsse.sign(records.CERTIFICATION_PAYLOAD_TYPE, mutate(ENVELOPE.payload, ops), KEY)
    admission.decide(POLICY, [env], [env], ROUTE, LATER, trust_store=STORE)


POLICY_JSON = policy_lib.policy_to_json(POLICY).encode()


@FUZZ
@given(ops=edits)
def test_mutated_policy(ops):
    _count("policy")
    try:
        p = policy_lib.policy_from_json(mutate(POLICY_JSON, ops))
    except TrustError:
        return
    admission.decide(p, [ENVELOPE], [], ROUTE, LATER)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
NODE_DICT = json_format.MessageToDict(NODE)
ROUTE_DICT = json_format.MessageToDict(ROUTE)


@FUZZ
@given(kind=st.sampled_from(["node", "route"]), ops=edits, field=st.sampled_from(sorted(NODE_DICT) + sorted(ROUTE_DICT)),
       value=json_values, raw=st.booleans())
def test_node_and_route_files(kind, ops, field, value, raw):
    _count(f"{kind} file")
    base = dict(NODE_DICT if kind == "node" else ROUTE_DICT)
    if raw:
        data = mutate(json.dumps(base).encode(), ops)
    else:
        base[field] = value
        data = json.dumps(base).encode()
    path = TMP / f"{kind}.json"
    path.write_bytes(data)
    try:
        if kind == "node":
            route = admission.route_from_nodes([admission_files.load_node(path)], sample_reports.MODEL_SHA256, "r", RECIPE)
        else:
            route = admission_files.load_route(path)
    except TrustError:
        return
    decision = admission.decide(POLICY, [ENVELOPE], [], route, LATER, trust_store=STORE)
    if decision.routable:
        assert route.nodes and all(n.lane_id == NODE.lane_id for n in route.nodes)


def test_zz_examples_run():
    print(f"\nfuzz examples run: {COUNTS} (total {sum(COUNTS.values())})")
    assert sum(COUNTS.values()) >= 5 * MAX_EXAMPLES * 0.9


if __name__ == "__main__":
    import sys
    sys.exit(pytest.main([__file__, "-q", "-s", "-p", "no:cacheprovider"]))
