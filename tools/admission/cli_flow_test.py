"""The user flow through the library functions behind the CLIs: keygen -> policy_edit -> certify_report -> admission."""

import base64
import datetime as dt
import json

import pytest
from google.protobuf import json_format

from proto import certification_pb2
from tools.admission import admission, admission_files, policy_edit
from tools.certify import certify, sample_reports
from tools.policy import keys, timestamps
from tools.policy import policy as policy_lib
from tools.policy.errors import PolicyError
from tools.runner.checks import corpus_parity

CPU, GPU = "linux-x86_64-cpu", "linux-x86_64-cuda"  # lane ids as data only


def test_policy_tool_creates_and_updates(tmp_path):
    files = keys.generate("ci", tmp_path / "keys")
    path = tmp_path / "policy.json"
    start = dt.datetime(2026, 1, 1, tzinfo=timestamps.UTC)
    p = policy_edit.update_policy_file(
        path, policy_id="lanes-test", public_key=files.public_pem.read_bytes(), owner="ci",
        not_before=start, valid_days=10, required_checks=["preflight", "speed"],
        speed_floors=[policy_edit.parse_speed_floor("*:speed.tg_tokens_per_s:5")],
    )
    assert p.trusted_keys[0].keyid == files.keyid
    assert p.trusted_keys[0].not_after == "2026-01-11T00:00:00Z"
    obj = json.loads(path.read_text())
    assert obj["policy_id"] == "lanes-test" and obj["required_checks"] == ["preflight", "speed"]
    # Update: same key again replaces (no duplicate), floor replaced, checks kept.
    p = policy_edit.update_policy_file(path, public_key=files.public_raw.read_bytes(), not_before=start, valid_days=20,
                                       speed_floors=[("*", "speed.tg_tokens_per_s", 7.5)])
    assert len(p.trusted_keys) == 1 and p.trusted_keys[0].not_after == "2026-01-21T00:00:00Z"
    assert [(f.lane_id, f.min_value) for f in p.speed_floors] == [("*", 7.5)]
    assert list(p.required_checks) == ["preflight", "speed"]
    assert policy_lib.policy_digest(policy_lib.load_policy(path)) == policy_lib.policy_digest(p)


def test_policy_tool_removes_a_key(tmp_path):
    old, new = keys.generate("old", tmp_path / "keys"), keys.generate("new", tmp_path / "keys")
    path = tmp_path / "policy.json"
    policy_edit.update_policy_file(path, policy_id="t", public_key=old.public_raw.read_bytes())
    policy_edit.update_policy_file(path, public_key=new.public_raw.read_bytes())
    p = policy_edit.update_policy_file(path, remove_keyids=[old.keyid])
    assert [k.keyid for k in p.trusted_keys] == [new.keyid]
    with pytest.raises(PolicyError, match="no trusted key"):
        policy_edit.update_policy_file(path, remove_keyids=[old.keyid])


def test_a_lane_scoped_entry_must_name_a_known_lane(tmp_path):
    path = tmp_path / "policy.json"
    policy_edit.update_policy_file(path, policy_id="t")
    known = [CPU, GPU]
    # A mistyped lane id would apply to no lane: refused, and nothing is written.
    before = path.read_text()
    for kwargs in ({"lane_required_checks": [("linux-x86_64-cdua", "upstream_ctest")]},
                   {"speed_floors": [("linux-x86_64-cdua", "speed.tg_tokens_per_s", 5.0)]},
                   {"metric_ceilings": [("linux-x86_64-cdua", "cancellation.stream_task_seconds", 5.0)]}):
        with pytest.raises(PolicyError, match=r"lane\(s\) \['linux-x86_64-cdua'\] are not in the lane spec"):
            policy_edit.update_policy_file(path, known_lanes=known, **kwargs)
        assert path.read_text() == before
    p = policy_edit.update_policy_file(path, known_lanes=known, lane_required_checks=[(GPU, "upstream_ctest")],
                                       speed_floors=[("*", "speed.tg_tokens_per_s", 5.0)])
    assert [(r.lane_id, r.check) for r in p.lane_required_checks] == [(GPU, "upstream_ctest")]


def test_policy_errors(tmp_path):
    with pytest.raises(PolicyError, match="policy_id"):
        policy_edit.update_policy_file(tmp_path / "p.json")
    with pytest.raises(PolicyError, match="LANE:METRIC:MIN"):
        policy_edit.parse_speed_floor("speed.tg")
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1, "policy_id": "x", "trusted_keys": [{"keyid": "00", "public_key": "'
                   + "A" * 43 + '=", "not_before": "2026-01-01T00:00:00Z", "not_after": "2027-01-01T00:00:00Z"}]}')
    with pytest.raises(PolicyError, match="sha256"):
        policy_lib.load_policy(bad)


def test_sign_then_admit_through_files(tmp_path, monkeypatch):
    # Sample reports carry no logs: the audit certify runs first is tested over real runs in
    # tools/audit and tests/red_team; here, the flow once a run audits.
    monkeypatch.setattr(certify, "require_audited", lambda *args, **kwargs: None)
    files = keys.generate("ci", tmp_path / "keys")
    now = timestamps.now()
    policy_path = tmp_path / "policy.json"
    policy_edit.update_policy_file(
        policy_path, policy_id="lanes-test", public_key=files.public_pem.read_bytes(),
        not_before=now - dt.timedelta(days=1), required_checks=list(sample_reports.REQUIRED_CHECKS),
        speed_floors=[("*", "speed.tg_tokens_per_s", 5.0)], compatibility_bounds=(0.01, 0.95, 1.0, 1.0),
    )
    records_dir = tmp_path / "records"
    node_paths = []
    for lane in (CPU, GPU):
        report = sample_reports.make_report(lane)
        (tmp_path / lane).mkdir()
        report_path = tmp_path / lane / "runner_report.pb"  # certify signs a run directory's report
        report_path.write_bytes(report.SerializeToString())
        certify.certify_report(report_path, files.private_key, policy_path, records_dir, 30)
        node_path = tmp_path / f"{lane}.node.json"
        node_path.write_text(json_format.MessageToJson(sample_reports.node_for(report)))
        node_paths.append(str(node_path))
    (records_dir / "junk.dsse.json").write_text("not json")

    recipe = sample_reports.make_recipe(kv_cache_types=["f16"])
    one, problems = admission_files.decide_from_files(policy_path, records_dir, node_paths[:1], sample_reports.MODEL_SHA256,
                                                    recipe=recipe)
    assert one.routable, one.reasons
    assert len(problems) == 1 and problems[0].file == "junk.dsse.json" and problems[0].code == "malformed-envelope"
    assert list(one.unusable_inputs) == problems

    two, _ = admission_files.decide_from_files(policy_path, records_dir, node_paths, sample_reports.MODEL_SHA256,
                                             recipe=recipe)
    assert not two.routable
    assert two.reasons[0].startswith(admission.MIXED_WITHOUT_COMPATIBILITY + ":")

    compat = {"lane_ids": [CPU, GPU], "model_sha256": sample_reports.MODEL_SHA256, "kl_divergence": 0.001,
              "top1_agreement": 0.99, "greedy_agreement": 1.0,
              "tolerances": {"max_kl_divergence": 0.01, "min_top1_agreement": 0.95, "max_abs_delta_logit": 1.0,
                             "min_greedy_agreement": 1.0},
              "lanes": [], "certification_record_ids": []}
    for path in sorted(records_dir.glob("*.record.dsse.json")):  # the route's lanes as certified
        cert = certification_pb2.CertificationRecord.FromString(
            base64.b64decode(json.loads(path.read_text())["payload"]))
        compat["lanes"].append({"lane_id": cert.scope.lane_id, "build_evidence_digest": cert.build_evidence_digest,
                                "device_class": json_format.MessageToDict(cert.scope.device_class)})
        compat["certification_record_ids"].append(cert.record_id)
        # As tools/compat builds it: the lanes' llama.cpp pin and the recipe the route was measured under.
        compat.update(upstream_commit=cert.upstream_commit, patch_stack_digest=cert.patch_stack_digest)
    # tools/compat states the longest sequence it compared; this route asks for whole contexts.
    compat["recipe"] = {**json_format.MessageToDict(recipe), "longestSequenceTokens": recipe.context_size}
    # ... and the route's corpus parity against the CPU lane.
    # (the sample model is F32: an accelerator route on it is held to corpus_parity's "f16" bounds).
    compat["corpus_parity"] = {"corpus_sha256": corpus_parity.CORPUS_SHA256, "bounds": "f16", "positions": 4096,
                               "decisive_positions": 2000, "mean_kl": 0.0005, "p99_kl": 0.005,
                               "top1_agreement_decisive": 0.995, "perplexity_ratio": 1.001}
    (tmp_path / "compat.json").write_text(json.dumps(compat))
    certify.sign_compatibility_file(tmp_path / "compat.json", files.private_key, policy_path, records_dir, 30)
    two, _ = admission_files.decide_from_files(policy_path, records_dir, node_paths, sample_reports.MODEL_SHA256, "r",
                                             recipe=recipe)
    assert two.routable, two.reasons
    assert len(two.input_record_digests) == 3


if __name__ == "__main__":
    import sys
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
