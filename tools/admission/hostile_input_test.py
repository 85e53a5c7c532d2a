"""Admission under hostile input (issue 8): each test names the defect it covers; every one of them
failed on the code before the fix (noted per test) and passes now."""

import datetime as dt
import io
import json
import os
import subprocess
import sys
import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import json_format

from proto import admission_pb2, certification_pb2, runner_report_pb2
from tools.admission import admission, admission_cli, admission_files
from tools.certify import records, sample_reports
from tools.policy import dsse, safe_io
from tools.policy import policy as policy_lib
from tools.policy.errors import PolicyError

NOW = sample_reports.NOW
LATER = NOW + dt.timedelta(days=1)
CPU, GPU = "linux-x86_64-cpu", "linux-x86_64-cuda"  # lane ids as data only
MODEL = sample_reports.MODEL_SHA256
RECIPE = sample_reports.make_recipe(kv_cache_types=["f16"], flash_attention=["off"], parallel_sequences=1)
FAIL = runner_report_pb2.CheckResult.FAIL


@pytest.fixture(scope="module")
def key():
    return Ed25519PrivateKey.generate()


@pytest.fixture(scope="module")
def policy(key):
    return sample_reports.make_policy(key)


def make_record(key, lane=CPU, mutate=None):
    report = sample_reports.make_report(lane)
    rec = records.record_from_report(report, report.SerializeToString(), dsse.keyid_for(key), NOW, 30, "test-policy")
    if mutate:
        mutate(rec)
    return report, rec


def sign_payload(key, payload: bytes):
    return dsse.sign(records.CERTIFICATION_PAYLOAD_TYPE, payload, key)


def decide(policy, envs, nodes, model=MODEL, recipe=RECIPE, shards=(), compat=()):
    route = admission.route_from_nodes(nodes, model, "r1", recipe, shards)
    return admission.decide(policy, list(envs), list(compat), route, LATER)


def codes(d):
    return {r.split(":", 1)[0] for r in d.reasons}


# --- 1. Ambiguity is refusal --------------------------------------------------------------------

@pytest.mark.parametrize("wrong_first", [True, False])
def test_duplicate_artifact_path_refused_in_either_order(policy, key, wrong_first):
    # Old: wrong digest first, right second was routable (dict kept the last); the reverse refused.
    def dup(rec):
        right = rec.artifacts[1].sha256
        del rec.artifacts[1]
        pair = [("lib/libggml.so", "0" * 64), ("lib/libggml.so", right)]
        for path, sha in (pair if wrong_first else pair[::-1]):
            rec.artifacts.add(path=path, sha256=sha)
    report, rec = make_record(key, mutate=dup)
    d = decide(policy, [records.sign_record(rec, key)], [sample_reports.node_for(report)])
    assert not d.routable and codes(d) == {"malformed-record"}, d.reasons
    assert "duplicate artifact path lib/libggml.so" in d.reasons[0]


def test_duplicate_check_refused(policy, key):
    # Old: FAIL then PASS for one check was routable (the last PASS won).
    def dup(rec):
        name = rec.checks[1].name
        rec.checks[1].status = FAIL
        rec.checks.add(name=name, status=runner_report_pb2.CheckResult.PASS, required=True)
    report, rec = make_record(key, mutate=dup)
    d = decide(policy, [records.sign_record(rec, key)], [sample_reports.node_for(report)])
    assert codes(d) == {"malformed-record"} and "duplicate check fixture_parity" in d.reasons[0]


def test_unknown_field_in_signed_payload_refused(policy, key):
    # Old: protobuf kept the unknown field 99 and the record was routable.
    report, rec = make_record(key)
    rec.issuer = dsse.keyid_for(key)
    payload = rec.SerializeToString(deterministic=True) + b"\x98\x06\x01"  # field 99 varint 1
    d = decide(policy, [sign_payload(key, payload)], [sample_reports.node_for(report)])
    assert codes(d) == {"malformed-record"} and "unknown field" in d.reasons[0]


def test_undefined_enum_value_refused(policy, key):
    # Found by fuzz_test: an undefined CheckResult.Status number crashed decide() with ValueError.
    report, rec = make_record(key, mutate=lambda r: setattr(r.checks[0], "status", 99))
    d = decide(policy, [records.sign_record(rec, key)], [sample_reports.node_for(report)])
    assert codes(d) == {"malformed-record"} and "checks[0].status=99" in d.reasons[0]


def test_non_canonical_payload_refused(policy, key):
    # Old: a payload encoding lane_id twice decoded to the last value and was routable.
    report, rec = make_record(key)
    rec.issuer = dsse.keyid_for(key)
    scope = certification_pb2.Scope(lane_id="other-lane").SerializeToString()
    payload = bytes([0x1A, len(scope)]) + scope + rec.SerializeToString(deterministic=True)
    d = decide(policy, [sign_payload(key, payload)], [sample_reports.node_for(report)])
    assert codes(d) == {"malformed-record"} and "canonical" in d.reasons[0]


def test_duplicate_lane_in_compatibility_record_refused(key):
    rec = certification_pb2.CompatibilityRecord(schema_version=1, lane_ids=[CPU, GPU, CPU], issuer=dsse.keyid_for(key))
    with pytest.raises(Exception, match="duplicate lane"):
        records.verify_compatibility(records.sign_compatibility(rec, key), {dsse.keyid_for(key): key.public_key()})


def test_duplicate_keyid_in_policy_refused(key):
    # Old: an expired entry then a valid entry for one key: the last won.
    p = sample_reports.make_policy(key)
    expired = admission_pb2.TrustedKey()
    expired.CopyFrom(p.trusted_keys[0])
    expired.not_after = "2020-01-01T00:00:00Z"
    p.trusted_keys.insert(0, expired)
    with pytest.raises(PolicyError, match="listed twice"):
        policy_lib.validate(p)


def test_duplicate_json_keys_in_policy_node_route(tmp_path, policy):
    # Old: json_format silently took the last of two equal keys.
    text = policy_lib.policy_to_json(policy)
    dup = text.replace('"policy_id": "test-policy"', '"policy_id": "evil", "policy_id": "test-policy"')
    assert dup != text
    with pytest.raises(PolicyError, match="duplicate JSON key 'policy_id'"):
        policy_lib.policy_from_json(dup)
    node = tmp_path / "n.json"
    node.write_text('{"node_id": "a", "lane_id": "x", "lane_id": "y"}')
    with pytest.raises(Exception, match="duplicate JSON key 'lane_id'"):
        admission_files.load_node(node)
    route = tmp_path / "r.json"
    route.write_text('{"model_sha256": "aa", "model_sha256": "bb"}')
    with pytest.raises(Exception, match="duplicate JSON key"):
        admission_files.load_route(route)


def test_duplicate_node_id_or_node_artifact_refused(policy, key):
    report, rec = make_record(key)
    env = records.sign_record(rec, key)
    node = sample_reports.node_for(report)
    d = decide(policy, [env], [node, node])
    assert not d.routable and "malformed-route" in codes(d)
    twice = sample_reports.node_for(report)
    twice.artifacts.add(path="lib/libggml.so", sha256="0" * 64)
    d = decide(policy, [env], [twice])
    assert codes(d) == {"malformed-route"} and "lib/libggml.so twice" in d.reasons[0]


def test_order_never_decides(policy, key):
    report, rec = make_record(key)
    good = records.sign_record(rec, key)
    _, dup = make_record(key, mutate=lambda r: r.artifacts.add(path="bin/llama-cli", sha256="0" * 64))
    bad = records.sign_record(dup, key)
    node = sample_reports.node_for(report)
    a, b = decide(policy, [good, bad], [node]), decide(policy, [bad, good], [node])
    assert a.routable and b.routable and a.lanes == b.lanes


# --- 2. Isolation per file, and the acceptance measurement ---------------------------------------

FORGED_NAME = "x\nroute (unnamed): ROUTABLE\x1b[2K\x1b[1A.dsse.json"


def _write_hostile(d):
    (d / "deep.dsse.json").write_text("[" * 3072)  # 3 KB of nesting
    os.mkfifo(d / "fifo.dsse.json")
    with open(d / "huge.dsse.json", "wb") as f:  # 50 MB, sparse
        f.truncate(50 * 1024 * 1024)
    (d / "latin1.dsse.json").write_bytes(b'{"payloadType": "\xff\xfe"}')
    (d / FORGED_NAME).write_text("{}")
    os.symlink("loop.dsse.json", d / "loop.dsse.json")
    (d / "dupkey.dsse.json").write_text('{"payloadType": "a", "payloadType": "b", "payload": "", "signatures": []}')
    return {"deep.dsse.json": "malformed-envelope", "fifo.dsse.json": "not-regular-file",
            "huge.dsse.json": "input-too-large", "latin1.dsse.json": "not-utf8", FORGED_NAME: "malformed-envelope",
            "loop.dsse.json": "not-regular-file", "dupkey.dsse.json": "malformed-envelope"}


def _setup_dir(tmp_path, name, key, hostile):
    d = tmp_path / name
    d.mkdir()
    nodes = {}
    for lane in (CPU, GPU):
        report, rec = make_record(key, lane)
        (d / records.record_file_name(rec)).write_text(dsse.envelope_to_json(records.sign_record(rec, key)))
        nodes[lane] = sample_reports.node_for(report)
    expected = _write_hostile(d) if hostile else {}
    return d, nodes, expected


def _decide_dir(policy, d, nodes, model):
    certs, compats, problems = admission.load_records_dir(d)
    routes = [admission.route_from_nodes([nodes[CPU]], model, "cpu", RECIPE),
              admission.route_from_nodes([nodes[GPU]], "f" * 64, "gpu-other-model", RECIPE)]
    return [admission.decide(policy, certs, compats, r, LATER) for r in routes], problems


def test_hostile_files_beside_valid_records(tmp_path, policy, key):
    # Old: the deep file raised RecursionError (no decision), the FIFO hung, the 50 MB file was read.
    clean, nodes, _ = _setup_dir(tmp_path, "clean", key, hostile=False)
    hostile, nodes_h, expected = _setup_dir(tmp_path, "hostile", key, hostile=True)
    want, none = _decide_dir(policy, clean, nodes, MODEL)
    assert none == []
    start = time.monotonic()
    got, problems = _decide_dir(policy, hostile, nodes_h, MODEL)
    seconds = time.monotonic() - start
    for w, g in zip(want, got):
        w.ClearField("decided_at"), g.ClearField("decided_at")
        assert json_format.MessageToDict(w) == json_format.MessageToDict(g)
    assert got[0].routable and not got[1].routable and codes(got[1]) == {"scope-model-mismatch"}
    assert {p.file: p.code for p in problems} == expected
    print(f"\nhostile dir: 2 valid records + {len(expected)} hostile files decided in {seconds:.3f} s")
    for p in problems:
        print(f"  {safe_io.escape(p.file)}: {p.code}: {safe_io.escape(p.reason)}")
    assert seconds < 5.0  # stated bound; measured well under 1 s


def test_compatibility_record_is_named_not_moved_aside(tmp_path, policy, key):
    # Old: a compatibility envelope beside no certification record gave a bare "no-record".
    compat = certification_pb2.CompatibilityRecord(schema_version=1, lane_ids=[CPU, GPU], issuer=dsse.keyid_for(key))
    (tmp_path / "c.compat.dsse.json").write_text(dsse.envelope_to_json(records.sign_compatibility(compat, key)))
    certs, compats, _ = admission.load_records_dir(tmp_path)
    report = sample_reports.make_report()
    d = admission.decide(policy, certs, compats, admission.route_from_nodes([sample_reports.node_for(report)], MODEL, "", RECIPE), LATER)
    assert codes(d) == {"no-record"} and "c.compat.dsse.json" in d.reasons[0] and "compatibility" in d.reasons[0]


# --- 3. Exit codes ------------------------------------------------------------------------------

@pytest.fixture
def files(tmp_path, policy, key):
    report, rec = make_record(key)
    rd = tmp_path / "records"
    rd.mkdir()
    (rd / records.record_file_name(rec)).write_text(dsse.envelope_to_json(records.sign_record(rec, key)))
    (tmp_path / "policy.json").write_text(policy_lib.policy_to_json(policy))
    (tmp_path / "node.json").write_text(json_format.MessageToJson(sample_reports.node_for(report)))
    return tmp_path


def _cli(files, *extra, records_dir=None, policy=None, node=None):
    argv = ["admission_cli", f"--policy={policy or files / 'policy.json'}",
            f"--records_dir={records_dir or files / 'records'}", f"--node={node or files / 'node.json'}",
            f"--model_sha256={MODEL}", "--flash_attention=off", "--n_gpu_layers=0", f"--out={files / 'd.json'}", *extra]
    out, err = io.StringIO(), io.StringIO()
    return admission_cli.cli(argv, out, err), out.getvalue(), err.getvalue()


@pytest.fixture
def frozen_now(monkeypatch):
    monkeypatch.setattr(admission.timestamps, "now", lambda: LATER)


def test_exit_0_routable_and_1_refused(files, frozen_now):
    rc, out, _ = _cli(files)
    assert rc == 0, out
    assert json.loads((files / "d.json").read_text())["routable"] is True
    rc, out, _ = _cli(files, "--kv_cache_type=q4_0")
    assert rc == 1 and "scope-recipe-mismatch" in out


def test_exit_2_unusable_input(files, frozen_now, tmp_path):
    # Old: non-UTF-8 policy/node raised UnicodeDecodeError with exit 1; a missing records dir
    # read as "no record" (exit 1).
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"schema_version": 1, "policy_id": "\xff"}')
    cases = [dict(policy=bad), dict(node=bad), dict(records_dir=tmp_path / "absent"),
             dict(records_dir=files / "policy.json"), dict(node=tmp_path / "absent.json")]
    for case in cases:
        rc, out, err = _cli(files, **case)
        assert rc == 2, (case, out, err)
        assert "Traceback" not in err and err.count("\n") == 1, err
    rc, _, err = _cli(files, "--no_such_flag")
    assert rc == 2 and "usage" in err


def test_exit_3_internal_error_is_one_line(files, monkeypatch):
    def boom(*a, **k):
        raise ZeroDivisionError("bug")
    monkeypatch.setattr(admission, "decide", boom)
    rc, out, err = _cli(files)
    assert rc == 3 and err.startswith("internal-error: ZeroDivisionError") and err.count("\n") == 1


def test_real_entry_point_exit_codes(files):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    base = [sys.executable, "-m", "tools.admission.admission_cli", f"--policy={files / 'policy.json'}",
            f"--node={files / 'node.json'}", f"--model_sha256={MODEL}"]
    p = subprocess.run(base + [f"--records_dir={files / 'absent'}"], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    p = subprocess.run(base + [f"--records_dir={files / 'records'}"], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 1 and "authority" in p.stdout  # default flash_attention=auto: "on" is proven too, ngl -1 is not


# --- 4. Safe human output -------------------------------------------------------------------------

def test_forged_file_name_cannot_forge_output(tmp_path, policy, key, files, frozen_now):
    # Old: the name printed raw made a "route (unnamed): ROUTABLE" line of its own.
    (files / "records" / FORGED_NAME).write_text("{}")
    rc, out, _ = _cli(files, "--kv_cache_type=q4_0")  # refused
    assert rc == 1
    lines = out.splitlines()
    assert not any(l.startswith("route (unnamed): ROUTABLE") for l in lines)
    assert "\x1b" not in out and "x\\x0aroute (unnamed): ROUTABLE\\x1b[2K" in out
    assert lines[-1].startswith("route (unnamed): REFUSED") and "authority" in lines[0]
    assert safe_io.escape("a\u202eb\\") == "a\\u202eb\\\\"


# --- 5. Cache keyed on everything that decides -------------------------------------------------------

def test_warm_and_cold_decisions_identical(policy, key):
    # Old: keyed on id(store): with one store object, a schema-2-only policy admitted a schema-1
    # record after a schema-1 policy had warmed the cache.
    store = policy_lib.validate(policy)
    report, rec = make_record(key)
    env = records.sign_record(rec, key)
    compat = records.sign_compatibility(certification_pb2.CompatibilityRecord(schema_version=1, lane_ids=[CPU, GPU]), key)
    route = admission.route_from_nodes([sample_reports.node_for(report)], MODEL, "r", RECIPE)
    policies = []
    for versions in ([1], [2], [1, 2], []):
        p = sample_reports.make_policy(key)
        p.supported_record_schema_versions[:] = versions
        policies.append(p)
    other = sample_reports.make_policy(Ed25519PrivateKey.generate())
    policies.append(other)
    cold = [admission.decide(p, [env, compat], [], route, LATER, trust_store=policy_lib.validate(p)) for p in policies]
    assert [d.routable for d in cold] == [True, False, True, True, False]
    cache = admission.VerificationCache()
    for _ in range(2):
        for p, c in zip(policies, cold):
            s = store if p is not other else policy_lib.validate(other)
            warm = admission.decide(p, [env, compat], [], route, LATER, trust_store=s, cache=cache)
            assert warm == c, (list(p.supported_record_schema_versions), warm.reasons, c.reasons)


def test_trust_store_digest_is_content():
    k = Ed25519PrivateKey.generate()
    a, b = policy_lib.validate(sample_reports.make_policy(k)), policy_lib.validate(sample_reports.make_policy(k))
    assert a is not b and a.digest == b.digest
    assert policy_lib.validate(sample_reports.make_policy(Ed25519PrivateKey.generate())).digest != a.digest


# --- 6. Records bind model and recipe ---------------------------------------------------------------

def test_record_carries_model_shards_and_recipe(key):
    report, rec = make_record(key)
    assert rec.recipe == report.recipe and rec.model.shards == report.model.shards and len(rec.model.shards) == 1


def test_other_model_refused(policy, key):
    # Old: a route for any model sha256 was routable on any record.
    report, rec = make_record(key)
    env, node = records.sign_record(rec, key), sample_reports.node_for(report)
    d = decide(policy, [env], [node], model="f" * 64)
    assert codes(d) == {"scope-model-mismatch"} and "certify this model" in d.reasons[0]
    assert codes(decide(policy, [env], [node], model="")) == {"scope-model-mismatch"}
    d = decide(policy, [env], [node], shards=[MODEL, "e" * 64])  # another split set
    assert codes(d) == {"scope-model-mismatch"} and "split" in d.reasons[0]
    assert decide(policy, [env], [node], shards=[MODEL]).routable


@pytest.mark.parametrize("change, ok", [
    (dict(kv_cache_types=["q8_0", "f16"]), True),
    (dict(flash_attention=["on", "off"]), True),
    (dict(kv_cache_types=["q4_0"]), False),
    (dict(kv_cache_types=[]), False),
    (dict(flash_attention=[]), False),
    (dict(n_gpu_layers=-1), False),
    (dict(context_size=8192), False),
    (dict(context_size=0), False),
    (dict(batch_size=4096), False),
    (dict(ubatch_size=1024), False),
    (dict(parallel_sequences=8), False),
])
def test_recipe_outside_proven_refused(policy, key, change, ok):
    report, rec = make_record(key)
    env, node = records.sign_record(rec, key), sample_reports.node_for(report)
    recipe = runner_report_pb2.Recipe()
    recipe.CopyFrom(RECIPE)
    for field, value in change.items():
        recipe.ClearField(field)
        if isinstance(value, list):
            getattr(recipe, field).extend(value)
        else:
            setattr(recipe, field, value)
    d = decide(policy, [env], [node], recipe=recipe)
    assert d.routable == ok and (ok or codes(d) == {"scope-recipe-mismatch"}), d.reasons


@pytest.mark.parametrize("context_size, per_sequence, ok", [(1024, 256, True), (512, 200, True), (1024, 0, False),
                                                             (1024, 300, False), (256, 0, True)])
def test_a_route_longer_per_sequence_than_any_proven_sequence_is_refused(policy, key, context_size, per_sequence, ok):
    def longest_256(rec):
        rec.recipe.context_size, rec.recipe.parallel_sequences = 1024, 4
        rec.recipe.context_per_sequence, rec.recipe.longest_sequence_tokens = 256, 257
    report, rec = make_record(key, mutate=longest_256)
    env, node = records.sign_record(rec, key), sample_reports.node_for(report)
    recipe = runner_report_pb2.Recipe()
    recipe.CopyFrom(rec.recipe)
    recipe.context_size, recipe.parallel_sequences, recipe.context_per_sequence = context_size, 4, per_sequence
    recipe.ClearField("longest_sequence_tokens")
    d = decide(policy, [env], [node], recipe=recipe)
    assert d.routable == ok, d.reasons
    assert ok or "longest sequence proven, 257 tokens" in d.reasons[0], d.reasons


def test_no_recipe_on_either_side_refused(policy, key):
    report, rec = make_record(key)
    d = decide(policy, [records.sign_record(rec, key)], [sample_reports.node_for(report)], recipe=None)
    assert codes(d) == {"scope-recipe-mismatch"} and "route states no recipe" in d.reasons[0]
    _, old = make_record(key, mutate=lambda r: r.ClearField("recipe"))
    d = decide(policy, [records.sign_record(old, key)], [sample_reports.node_for(report)])
    assert codes(d) == {"scope-recipe-mismatch"} and "record proves no recipe; re-certify" in d.reasons[0]


def test_report_without_recipe_is_not_certified(key):
    report = sample_reports.make_report()
    report.ClearField("recipe")
    with pytest.raises(Exception, match="recipe"):
        records.record_from_report(report, report.SerializeToString(), dsse.keyid_for(key), NOW, 30, "p")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-s", "-p", "no:cacheprovider"]))
