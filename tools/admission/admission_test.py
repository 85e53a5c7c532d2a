"""Admission refuses every way a record can fail to cover a node, each with its own reason code."""

import datetime as dt
import inspect
import re

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from proto import admission_pb2, certification_pb2, runner_report_pb2
from tools.admission import admission
from tools.admission.testing import routes
from tools.certify import records, sample_reports
from tools.policy import dsse
from tools.policy import policy as policy_lib

NOW = sample_reports.NOW
LATER = NOW + dt.timedelta(days=1)
CPU, GPU = "linux-x86_64-cpu", "linux-x86_64-cuda"  # lane ids as data only
MODEL = sample_reports.MODEL_SHA256


@pytest.fixture(scope="module")
def key():
    return Ed25519PrivateKey.generate()


@pytest.fixture(scope="module")
def policy(key):
    return sample_reports.make_policy(key)


def signed(report, key, issued_at=NOW, days=30, mutate=None):
    rec = records.record_from_report(report, report.SerializeToString(), dsse.keyid_for(key), issued_at, days, "test-policy")
    if mutate:
        mutate(rec)
    return records.sign_record(rec, key)


_ROUTE_FIELDS = dict(kv_cache_types=["f16"], flash_attention=["off"], context_size=2048, parallel_sequences=1)
ROUTE_RECIPE = sample_reports.make_recipe(**_ROUTE_FIELDS)


def decide(policy, envs, nodes, compat=(), now=LATER, model=MODEL, recipe=ROUTE_RECIPE, shards=()):
    route = admission.route_from_nodes(nodes, model, "r1", recipe, shards)
    return admission.decide(policy, list(envs), list(compat), route, now)


def codes(decision):
    return {r.split(":", 1)[0] for r in decision.reasons}


def assert_refused(decision, code):
    assert not decision.routable
    assert codes(decision) == {code}, decision.reasons
    assert all(r.startswith(code + ": ") for r in decision.reasons)


def test_valid_record_is_routable(policy, key):
    report = sample_reports.make_report()
    env = signed(report, key)
    d = decide(policy, [env], [sample_reports.node_for(report)])
    assert d.routable, d.reasons
    assert list(d.reasons) == []
    lane = d.lanes[0]
    assert lane.routable and lane.lane_id == CPU
    assert lane.record_id == records.verify_record(env, {dsse.keyid_for(key): key.public_key()}).record_id
    assert list(d.input_record_digests) == [admission.SignedInput.from_envelope(env).digest]
    assert d.policy_id == "test-policy" and d.policy_digest == policy_lib.policy_digest(policy)
    assert d.decided_at == "2026-03-02T12:00:00Z" and d.verifier == admission.VERIFIER


def test_flipped_payload_byte_is_bad_signature(policy, key):
    report = sample_reports.make_report()
    env = signed(report, key)
    payload = bytearray(env.payload)
    payload[len(payload) // 2] ^= 0x01
    env.payload = bytes(payload)
    assert_refused(decide(policy, [env], [sample_reports.node_for(report)]), "bad-signature")


def test_unknown_key(policy):
    report = sample_reports.make_report()
    env = signed(report, Ed25519PrivateKey.generate())
    assert_refused(decide(policy, [env], [sample_reports.node_for(report)]), "unknown-key")


def test_key_outside_validity(policy, key):
    report = sample_reports.make_report()
    env = signed(report, key, issued_at=NOW + dt.timedelta(days=364), days=30)
    d = decide(policy, [env], [sample_reports.node_for(report)], now=NOW + dt.timedelta(days=366))
    assert_refused(d, "key-outside-validity")


def test_expired_record(policy, key):
    report = sample_reports.make_report()
    env = signed(report, key, days=30)
    assert_refused(decide(policy, [env], [sample_reports.node_for(report)], now=NOW + dt.timedelta(days=31)), "expired")


def test_record_older_than_policy_max_age(policy, key):
    report = sample_reports.make_report()
    strict = policy_lib.policy_from_json(policy_lib.policy_to_json(policy))
    strict.max_record_age_days = 1
    env = signed(report, key, days=30)
    assert_refused(decide(strict, [env], [sample_reports.node_for(report)], now=NOW + dt.timedelta(days=2)), "expired")


def test_unsupported_schema_version(policy, key):
    report = sample_reports.make_report()
    rec = records.record_from_report(report, report.SerializeToString(), dsse.keyid_for(key), NOW, 30, "p")
    rec.schema_version = 2
    env = records.sign_record(rec, key)  # payload type says v2
    assert env.payload_type.endswith(".v2+protobuf")
    assert_refused(decide(policy, [env], [sample_reports.node_for(report)]), "unsupported-schema")
    only_v9 = policy_lib.policy_from_json(policy_lib.policy_to_json(policy))
    only_v9.supported_record_schema_versions[:] = [9]
    assert_refused(decide(only_v9, [signed(report, key)], [sample_reports.node_for(report)]), "unsupported-schema")


def test_other_device_class(policy, key):
    report = sample_reports.make_report(GPU)
    node = sample_reports.node_for(report)
    node.device_class.device_name = "NVIDIA H100 80GB HBM3"
    node.device_class.compute_capability = "9.0"
    d = decide(policy, [signed(report, key)], [node])
    assert_refused(d, "scope-device-class-mismatch")
    assert "device_name" in d.reasons[0]


def test_every_scope_mismatch_is_named_not_the_first(policy, key):
    """A node on another device class, serving another model and another build, hears all three."""
    report = sample_reports.make_report(GPU)
    node = sample_reports.node_for(report)
    node.device_class.device_name = "NVIDIA H100 80GB HBM3"
    node.build_evidence_digest = "sha256:" + "e" * 64
    d = decide(policy, [signed(report, key)], [node], model="sha256:" + "d" * 64)
    assert codes(d) == {"scope-device-class-mismatch", "build-evidence-mismatch", "scope-model-mismatch"}, d.reasons


def test_driver_version_is_informational(policy, key):
    report = sample_reports.make_report(GPU)
    node = sample_reports.node_for(report)
    node.device_class.driver_version = "580.99.01"
    node.device_class.runtime_version = "12.9"
    assert decide(policy, [signed(report, key)], [node]).routable
    node.device_class.driver_major = "575"
    assert_refused(decide(policy, [signed(report, key)], [node]), "scope-device-class-mismatch")


def test_other_lane(policy, key):
    report = sample_reports.make_report(CPU)
    node = sample_reports.node_for(sample_reports.make_report("linux-aarch64-cpu", arch="aarch64"))
    assert_refused(decide(policy, [signed(report, key)], [node]), "scope-lane-mismatch")


def test_no_record(policy):
    assert_refused(decide(policy, [], [sample_reports.node_for(sample_reports.make_report())]), "no-record")


def test_artifact_digest_mismatch(policy, key):
    report = sample_reports.make_report()
    node = sample_reports.node_for(report)
    node.artifacts[1].sha256 = "0" * 64
    assert_refused(decide(policy, [signed(report, key)], [node]), "artifact-digest-mismatch")
    node = sample_reports.node_for(report)
    node.artifacts.add(path="bin/extra", sha256="1" * 64)
    assert_refused(decide(policy, [signed(report, key)], [node]), "artifact-digest-mismatch")


def test_build_evidence_mismatch(policy, key):
    report = sample_reports.make_report()
    node = sample_reports.node_for(report)
    node.build_evidence_digest = "sha256:" + "2" * 64
    assert_refused(decide(policy, [signed(report, key)], [node]), "build-evidence-mismatch")


def test_required_check_missing(policy, key):
    report = sample_reports.make_report()
    stricter = policy_lib.policy_from_json(policy_lib.policy_to_json(policy))
    stricter.required_checks.append("concurrency")
    assert_refused(decide(stricter, [signed(report, key)], [sample_reports.node_for(report)]), "required-check-missing")


def test_required_check_not_pass(policy, key):
    report = sample_reports.make_report()  # "cancellation" ran as SKIPPED, not required by the runner
    stricter = policy_lib.policy_from_json(policy_lib.policy_to_json(policy))
    stricter.required_checks.append("cancellation")
    assert_refused(decide(stricter, [signed(report, key)], [sample_reports.node_for(report)]), "required-check-failed")


def test_lane_required_check_applies_to_its_lane_only(policy, key):
    report = sample_reports.make_report()  # a CPU record without upstream_ctest
    node = sample_reports.node_for(report)
    for_gpu = policy_lib.policy_from_json(policy_lib.policy_to_json(policy))
    for_gpu.lane_required_checks.add(lane_id=GPU, check="upstream_ctest")
    assert decide(for_gpu, [signed(report, key)], [node]).routable
    for_this = policy_lib.policy_from_json(policy_lib.policy_to_json(policy))
    for_this.lane_required_checks.add(lane_id=report.lane_id, check="upstream_ctest")
    decision = decide(for_this, [signed(report, key)], [node])
    assert_refused(decision, "required-check-missing")
    assert "policy requires check 'upstream_ctest'" in " ".join(decision.reasons)
    every = policy_lib.policy_from_json(policy_lib.policy_to_json(policy))
    every.lane_required_checks.add(lane_id="*", check="cancellation")  # SKIPPED in the sample record
    assert_refused(decide(every, [signed(report, key)], [node]), "required-check-failed")


def test_a_lane_required_check_listed_twice_is_refused(policy):
    twice = policy_lib.policy_from_json(policy_lib.policy_to_json(policy))
    twice.lane_required_checks.add(lane_id=GPU, check="upstream_ctest")
    twice.lane_required_checks.add(lane_id=GPU, check="upstream_ctest")
    with pytest.raises(policy_lib.PolicyError, match="lane required check 'upstream_ctest' for lane .* listed twice"):
        policy_lib.policy_from_json(policy_lib.policy_to_json(twice))
    empty = policy_lib.policy_from_json(policy_lib.policy_to_json(policy))
    empty.lane_required_checks.add(lane_id=GPU)
    with pytest.raises(policy_lib.PolicyError, match="needs lane_id .* and check"):
        policy_lib.validate(empty)


def test_speed_floor(policy, key):
    slow = sample_reports.make_report(tg_tokens_per_s=3.0)
    assert_refused(decide(policy, [signed(slow, key)], [sample_reports.node_for(slow)]), "speed-floor")
    no_metric = sample_reports.make_report()
    del no_metric.checks[3].metrics["tg_tokens_per_s"]
    assert_refused(decide(policy, [signed(no_metric, key)], [sample_reports.node_for(no_metric)]), "speed-floor")


def test_speed_floor_for_other_lane_does_not_apply(policy, key):
    slow = sample_reports.make_report(tg_tokens_per_s=3.0)
    p = sample_reports.make_policy(key)
    p.speed_floors[0].lane_id = GPU
    assert decide(p, [signed(slow, key)], [sample_reports.node_for(slow)]).routable


def test_metric_ceiling(policy, key):
    report = sample_reports.make_report()
    report.checks[3].metrics["slot_seconds"] = 7.5  # check 3 is speed in the sample report
    p = sample_reports.make_policy(key)
    p.metric_ceilings.add(lane_id="*", metric="speed.slot_seconds", max_value=5.0)
    assert_refused(decide(p, [signed(report, key)], [sample_reports.node_for(report)]), "metric-ceiling")
    p.metric_ceilings[0].max_value = 8.0
    assert decide(p, [signed(report, key)], [sample_reports.node_for(report)]).routable
    p.metric_ceilings[0].metric = "speed.absent_seconds"  # a ceiling on a figure the record lacks refuses
    assert_refused(decide(p, [signed(report, key)], [sample_reports.node_for(report)]), "metric-ceiling")
    report.checks[3].metrics["slot_seconds"] = float("nan")
    p.metric_ceilings[0].metric = "speed.slot_seconds"
    assert_refused(decide(p, [signed(report, key)], [sample_reports.node_for(report)]), "metric-ceiling")


def test_newest_good_record_wins_over_bad_ones(policy, key):
    report = sample_reports.make_report()
    stale = signed(report, key, issued_at=NOW - dt.timedelta(days=40), days=30)
    forged = signed(report, Ed25519PrivateKey.generate())
    d = decide(policy, [stale, forged, signed(report, key)], [sample_reports.node_for(report)])
    assert d.routable and len(d.input_record_digests) == 3


def _compat(key, lanes=(CPU, GPU), model=MODEL, mutate=None, certs=None, recipe=ROUTE_RECIPE):
    """A compatibility record measured with exactly the certified records `certs` (the two_lanes ones),
    their pin, under `recipe` (the route's)."""
    rec = routes.compatibility_record(
        [certification_pb2.CertificationRecord.FromString(env.payload) for env in certs or _TWO_LANE_ENVS], recipe,
        kl_divergence=0.001, top1_agreement=0.99, max_abs_delta_logit=0.05, greedy_agreement=1.0,
        issuer=dsse.keyid_for(key), issued_at="2026-03-01T12:00:00Z", expires_at="2026-04-01T12:00:00Z",
    )
    rec.lane_ids[:] = list(lanes)
    rec.model_sha256 = model
    rec.tolerances.max_kl_divergence = 0.01
    rec.tolerances.min_top1_agreement = 0.95
    rec.tolerances.max_abs_delta_logit = 0.5
    rec.tolerances.min_greedy_agreement = 1.0
    if mutate:
        mutate(rec)
    return records.sign_compatibility(rec, key)


_TWO_LANE_ENVS: list = []


@pytest.fixture(scope="module")
def two_lanes(key):
    a, b = sample_reports.make_report(CPU), sample_reports.make_report(GPU)
    envs = [signed(a, key), signed(b, key)]
    _TWO_LANE_ENVS[:] = envs
    return envs, [sample_reports.node_for(a), sample_reports.node_for(b)]


def _other_device(rec):
    rec.lanes[1].device_class.device_name = "NVIDIA H100"


def _other_build(rec):
    rec.lanes[1].build_evidence_digest = "sha256:" + "9" * 64


def _other_record(rec):
    rec.certification_record_ids[1] = "f" * 64


def _no_lanes(rec):
    del rec.lanes[:]


def test_two_lane_route_without_compatibility_refused(policy, two_lanes):
    envs, nodes = two_lanes
    d = decide(policy, envs, nodes)
    assert all(lane.routable for lane in d.lanes)  # each node alone is fine
    assert_refused(d, "mixed-backends-without-compatibility")


def test_two_lane_route_with_compatibility_accepted(policy, key, two_lanes):
    envs, nodes = two_lanes
    d = decide(policy, envs, nodes, compat=[_compat(key)])
    assert d.routable, d.reasons
    assert len(d.input_record_digests) == 3


@pytest.mark.parametrize(
    "make",
    [
        lambda key: _compat(key, lanes=(CPU, GPU, "linux-x86_64-rocm")),  # not exactly these lanes
        lambda key: _compat(key, lanes=(CPU, "linux-x86_64-rocm")),
        lambda key: _compat(key, model="f" * 64),  # another model
        lambda key: _compat(Ed25519PrivateKey.generate()),  # untrusted signer
        lambda key: _compat(key, mutate=lambda r: setattr(r, "expires_at", "2026-03-01T13:00:00Z")),
        lambda key: _compat(key, mutate=lambda r: setattr(r, "top1_agreement", 0.5)),  # outside its tolerances
        lambda key: _compat(key, mutate=lambda r: setattr(r, "upstream_commit", "deadbeef")),
        lambda key: _compat(key, mutate=_no_recipe),  # states no recipe (a schema v1 record)
        lambda key: _compat(key, recipe=sample_reports.make_recipe(**{**_ROUTE_FIELDS, "flash_attention": ["on"]})),
        lambda key: _compat(key, mutate=lambda r: setattr(r, "greedy_agreement", 0.75)),  # below its tolerance
        lambda key: _compat(key, mutate=_other_device),  # measured on another device class
        lambda key: _compat(key, mutate=_other_build),  # measured with another build of the lane
        lambda key: _compat(key, mutate=_other_record),  # names another certification record
        lambda key: _compat(key, mutate=_no_lanes),  # binds no device class at all
    ],
)
def test_two_lane_route_with_unfit_compatibility_refused(policy, key, two_lanes, make):
    envs, nodes = two_lanes
    assert_refused(decide(policy, envs, nodes, compat=[make(key)]), "mixed-backends-without-compatibility")


def _no_recipe(rec):
    rec.ClearField("recipe")


def _assert_compat_refused(decision, code: str) -> None:
    """Refused as a mixed route without compatibility; the one candidate refused with `code`."""
    assert_refused(decision, "mixed-backends-without-compatibility")
    assert routes.candidate_codes(decision) == [code], decision.reasons


def test_compatibility_record_without_a_recipe_is_refused(policy, key, two_lanes):
    # As a schema v1 record (the committed CUDA+Vulkan one): nothing is assumed of its recipe.
    envs, nodes = two_lanes
    _assert_compat_refused(decide(policy, envs, nodes, compat=[_compat(key, mutate=_no_recipe)]),
                           "compat-recipe-missing")


@pytest.mark.parametrize("measured, asked", [
    # Measured with flash attention on (the lanes' recipe), the route runs it off.
    (dict(flash_attention=["on"]), {}),
    # Measured with an F32 KV cache and flash attention off (the committed measurement's flags).
    (dict(kv_cache_types=["f32"]), {}),
    (dict(n_gpu_layers=-1), {}),
    ({}, dict(kv_cache_types=["q8_0"])),  # both lanes prove q8_0; the route never ran it
    ({}, dict(context_size=4096)),  # the lanes prove 4096, the route was measured at 2048
    ({}, dict(parallel_sequences=4)),
])
def test_compatibility_record_for_another_recipe_is_refused(policy, key, two_lanes, measured, asked):
    envs, nodes = two_lanes
    measured_recipe = sample_reports.make_recipe(**{**_ROUTE_FIELDS, **measured})
    route_recipe = sample_reports.make_recipe(**{**_ROUTE_FIELDS, **asked})
    d = decide(policy, envs, nodes, compat=[_compat(key, recipe=measured_recipe)], recipe=route_recipe)
    assert all(lane.routable for lane in d.lanes), d.reasons  # each lane's record proves the route's recipe
    _assert_compat_refused(d, "scope-recipe-mismatch")
    assert "the route's recipe is not the one measured on it" in d.reasons[0]


def test_compatibility_record_covers_a_recipe_inside_the_measured_one(policy, key, two_lanes):
    envs, nodes = two_lanes
    smaller = sample_reports.make_recipe(**{**_ROUTE_FIELDS, "context_size": 1024, "batch_size": 512})
    assert decide(policy, envs, nodes, compat=[_compat(key)], recipe=smaller).routable


def test_compatibility_record_admits_no_sequence_longer_than_it_compared(policy, key, two_lanes):
    """tools/compat states the longest sequence whose logits it compared (a prompt, ~20-50 tokens):
    a route asking for whole 2048-token sequences was never measured; one stating 32 per sequence is
    inside it; a record stating no length is refused outright."""
    envs, nodes = two_lanes
    short = _compat(key, mutate=lambda r: setattr(r.recipe, "longest_sequence_tokens", 48))
    d = decide(policy, envs, nodes, compat=[short])
    _assert_compat_refused(d, "scope-recipe-mismatch")
    assert "48 tokens" in d.reasons[0]
    per_sequence = sample_reports.make_recipe(**{**_ROUTE_FIELDS, "context_per_sequence": 32})
    assert decide(policy, envs, nodes, compat=[short], recipe=per_sequence).routable
    unstated = _compat(key, mutate=lambda r: r.recipe.ClearField("longest_sequence_tokens"))
    _assert_compat_refused(decide(policy, envs, nodes, compat=[unstated]), "compat-recipe-missing")


def test_compatibility_record_without_corpus_parity_is_refused(policy, key, two_lanes):
    """A route measured only on its prompts' logits (tens of tokens) was never compared with the CPU
    lane over the corpus: no record without that comparison, or with none of its positions, admits it."""
    envs, nodes = two_lanes
    absent = _compat(key, mutate=lambda r: r.ClearField("corpus_parity"))
    _assert_compat_refused(decide(policy, envs, nodes, compat=[absent]), "compat-corpus-missing")
    empty = _compat(key, mutate=lambda r: setattr(r.corpus_parity, "positions", 0))
    _assert_compat_refused(decide(policy, envs, nodes, compat=[empty]), "compat-corpus-missing")
    # The figures a signer wrote are held to corpus_parity's bounds for the kind they name.
    for field, value in (("mean_kl", 0.05), ("corpus_sha256", "0" * 64), ("bounds", "loose"),
                         ("perplexity_ratio", 1.2), ("positions", 100), ("top1_agreement_decisive", float("nan"))):
        bad = _compat(key, mutate=lambda r, f=field, v=value: setattr(r.corpus_parity, f, v))
        _assert_compat_refused(decide(policy, envs, nodes, compat=[bad]), "compat-corpus-failed")
    assert decide(policy, envs, nodes, compat=[_compat(key)]).routable


@pytest.mark.parametrize("field", ["upstream_commit", "patch_stack_digest"])
def test_compatibility_record_without_the_lanes_pin_is_refused(policy, key, two_lanes, field):
    # Never skipped when empty: a record that names no pin binds no build of llama.cpp.
    envs, nodes = two_lanes
    _assert_compat_refused(decide(policy, envs, nodes, compat=[_compat(key, mutate=lambda r: r.ClearField(field))]),
                           "compat-pin-missing")


@pytest.mark.parametrize("field, other", [("upstream_commit", "deadbeef" * 5), ("patch_stack_digest", "sha256:" + "e" * 64)])
def test_compatibility_record_of_another_pin_is_refused(policy, key, two_lanes, field, other):
    envs, nodes = two_lanes
    d = decide(policy, envs, nodes, compat=[_compat(key, mutate=lambda r: setattr(r, field, other))])
    _assert_compat_refused(d, "compat-pin-mismatch")
    assert f"{field} {other[:23]} != certified lane" in d.reasons[0]


def test_compatibility_record_with_the_route_recipe_and_the_lanes_pin_is_admitted(policy, key, two_lanes):
    envs, nodes = two_lanes
    compat = _compat(key)
    rec = certification_pb2.CompatibilityRecord.FromString(compat.payload)
    certs = [certification_pb2.CertificationRecord.FromString(e.payload) for e in envs]
    stated = runner_report_pb2.Recipe()
    stated.CopyFrom(rec.recipe)
    assert stated.longest_sequence_tokens == ROUTE_RECIPE.context_size
    stated.ClearField("longest_sequence_tokens")
    assert stated == ROUTE_RECIPE and rec.schema_version == 2
    assert {(c.upstream_commit, c.patch_stack_digest) for c in certs} == {(rec.upstream_commit, rec.patch_stack_digest)}
    d = decide(policy, envs, nodes, compat=[compat])
    assert d.routable and not d.reasons, d.reasons


def test_policy_compatibility_bounds_refuse_a_looser_record(policy, key, two_lanes):
    envs, nodes = two_lanes
    strict = admission_pb2.AdmissionPolicy()
    strict.CopyFrom(policy)
    strict.compatibility.max_mean_kl = 1e-4  # the record measured 1e-3 (within its own 1e-2)
    strict.compatibility.min_top1_agreement = 0.9
    strict.compatibility.max_abs_delta_logit = 1.0
    strict.compatibility.min_greedy_agreement = 1.0
    d = decide(strict, envs, nodes, compat=[_compat(key)])
    assert_refused(d, "mixed-backends-without-compatibility")
    assert "outside the policy's compatibility bounds" in " ".join(d.reasons)
    strict.compatibility.max_mean_kl = 1e-2
    assert decide(strict, envs, nodes, compat=[_compat(key)]).routable


def _quantized_compat(key, kl: float):
    """A route on a quantized model (its corpus comparison under the quantized bounds) whose logits
    differ from the parties' by mean KL `kl`: a quantized model's lanes differ from each other so."""
    def quantized(rec):
        rec.corpus_parity.bounds = "quantized"
        rec.corpus_parity.mean_kl, rec.corpus_parity.p99_kl = 0.002, 0.02
        rec.kl_divergence, rec.max_abs_delta_logit, rec.top1_agreement = kl, 1.2, 0.97
        rec.tolerances.max_kl_divergence, rec.tolerances.max_abs_delta_logit = 0.1, 5.0
    return _compat(key, mutate=quantized)


def test_a_route_on_a_quantized_model_is_judged_by_the_policys_quantized_bounds(policy, key, two_lanes):
    """The F32 bounds (mean KL 1e-4-level) can never pass a quantized model, whose lanes' own records
    allow mean KL 0.03: such a route meets the policy's quantized_compatibility, and only those."""
    envs, nodes = two_lanes
    judged = admission_pb2.AdmissionPolicy()
    judged.CopyFrom(policy)
    q = judged.quantized_compatibility
    q.max_mean_kl, q.min_top1_agreement, q.max_abs_delta_logit, q.min_greedy_agreement = 0.03, 0.95, 5.0, 1.0
    assert decide(judged, envs, nodes, compat=[_quantized_compat(key, 0.01)]).routable
    # Over the quantized bounds: refused, naming them.
    d = decide(judged, envs, nodes, compat=[_quantized_compat(key, 0.05)])
    assert_refused(d, "mixed-backends-without-compatibility")
    assert "outside the policy's quantized_compatibility bounds 0.03" in " ".join(d.reasons)
    # An F32 model's route with those figures is held to the F32 bounds.
    f32 = _compat(key, mutate=lambda r: (setattr(r, "kl_divergence", 0.02), setattr(r.tolerances, "max_kl_divergence", 0.03)))
    d = decide(judged, envs, nodes, compat=[f32])
    assert_refused(d, "mixed-backends-without-compatibility")
    assert "outside the policy's compatibility bounds" in " ".join(d.reasons)
    # A policy that states no quantized bounds admits no route on a quantized model.
    d = decide(policy, envs, nodes, compat=[_quantized_compat(key, 0.01)])
    assert_refused(d, "mixed-backends-without-compatibility")
    assert "states no compatibility bounds for a model of this kind (AdmissionPolicy.quantized_compatibility)" in " ".join(d.reasons)


def test_policy_without_compatibility_bounds_admits_no_mixed_route(policy, key, two_lanes):
    envs, nodes = two_lanes
    bare = admission_pb2.AdmissionPolicy()
    bare.CopyFrom(policy)
    bare.ClearField("compatibility")
    d = decide(bare, envs, nodes, compat=[_compat(key)])
    assert_refused(d, "mixed-backends-without-compatibility")
    assert "states no compatibility bounds" in " ".join(d.reasons)


def test_compatibility_record_is_not_a_certification_record(policy, key):
    report = sample_reports.make_report()
    d = decide(policy, [_compat(key)], [sample_reports.node_for(report)])
    assert_refused(d, "wrong-record-kind")


def test_cache_gives_same_decision(policy, key, two_lanes):
    envs, nodes = two_lanes
    cache = admission.VerificationCache()
    route = admission.route_from_nodes(nodes, MODEL, "r1", ROUTE_RECIPE)
    bad = dsse.Envelope()
    bad.CopyFrom(envs[0])
    bad.payload = bad.payload[:-1] + bytes([bad.payload[-1] ^ 1])
    for _ in range(2):
        d = admission.decide(policy, envs, [_compat(key)], route, LATER, cache=cache)
        assert d.routable
        d = admission.decide(policy, [bad, envs[1]], [], route, LATER, cache=cache)
        assert not d.routable and "bad-signature" in codes(d)


def test_reason_codes_are_distinct():
    from tools.policy import errors

    decided_here = [v for k, v in vars(admission).items() if k.isupper() and isinstance(v, str) and re.fullmatch(r"[a-z-]+", v)]
    from_errors = [c.code for c in vars(errors).values() if inspect.isclass(c) and issubclass(c, errors.TrustError)]
    all_codes = decided_here + from_errors
    assert len(all_codes) == len(set(all_codes))


def test_no_backend_names_in_decision_logic():
    source = inspect.getsource(admission).lower()
    assert "cuda" not in source and "cpu" not in source


if __name__ == "__main__":
    import sys

    import pytest
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
