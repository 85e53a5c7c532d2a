"""Admission: may these nodes serve this route? Decided from signed records and a policy only.

Fail closed: a node is routable only with a record that (1) is signed by a key the policy trusts,
valid at issue time and now, (2) is unexpired and young enough, of a supported schema, (3) has
exactly the node's lane and device class as scope, (4) names the node's build evidence and
artifact digests, (5) proves the route's model (sha256 of every GGUF split, in order) and a recipe
that contains the route's recipe (see recipe_refusal), (6) shows every required check PASS and
(7) meets the speed floors. A route over more than one lane also needs a signed CompatibilityRecord
for exactly those lanes and the model, measured under a recipe that contains the route's and with
the llama.cpp pin (upstream commit, patch stack digest) of the lanes' records; a compatibility record
that states no recipe, no pin or no corpus parity covers nothing. Its refusal,
in the mixed-route reason's candidates, starts with its own code (compat-recipe-missing,
compat-corpus-missing, scope-recipe-mismatch, compat-pin-missing, compat-pin-mismatch).
Nothing here knows backend names: scope is compared field by field, never against an allowlist.
Every refusal starts with its reason code ("expired: ...") so tools can match on it.

Ambiguity is refusal: a signed record with duplicate entries or unknown fields is malformed
(records.check_well_formed), and so is a route listing one node id twice or a node listing one
artifact path twice. Several nodes of one lane (replicas, distinct node ids) are a normal route.
A route that states no recipe is refused (scope-recipe-mismatch "route states no recipe"): nothing
is assumed about how the model will be run. A record that proves no recipe (issued before records
carried one) is refused likewise ("record proves no recipe; re-certify").
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import hashlib
import math
import os
import pathlib
from collections.abc import Callable, Iterable, Sequence

from proto import admission_pb2, certification_pb2, runner_report_pb2
from tools.certify import records
from tools.policy import dsse, safe_io, timestamps, trust
from tools.policy import policy as policy_lib
from tools.policy.errors import TrustError, UnreadableInputError
from tools.probe import probe as probe_lib
from tools.probe.probe_log import VerifiedProbe
from tools.runner import gpu_set
from tools.runner.checks import corpus_parity

VERIFIER = "lanes-admission/1 (tools/admission/admission.py)"

# Refusal codes decided here; the signature/schema/time codes come from tools.certify.errors.
NO_RECORD = "no-record"
NO_NODES = "no-nodes"
SCOPE_LANE_MISMATCH = "scope-lane-mismatch"
SCOPE_DEVICE_CLASS_MISMATCH = "scope-device-class-mismatch"
BUILD_EVIDENCE_MISMATCH = "build-evidence-mismatch"
ARTIFACT_DIGEST_MISMATCH = "artifact-digest-mismatch"
REQUIRED_CHECK_MISSING = "required-check-missing"
REQUIRED_CHECK_FAILED = "required-check-failed"
SPEED_FLOOR = "speed-floor"
METRIC_CEILING = "metric-ceiling"
MIXED_WITHOUT_COMPATIBILITY = "mixed-backends-without-compatibility"
SCOPE_MODEL_MISMATCH = "scope-model-mismatch"
SCOPE_RECIPE_MISMATCH = "scope-recipe-mismatch"
COMPAT_RECIPE_MISSING = "compat-recipe-missing"
COMPAT_CORPUS_MISSING = "compat-corpus-missing"
COMPAT_CORPUS_FAILED = "compat-corpus-failed"
# Serving-time probes (policy.probes): the node's latest probe failed, or found it far below its
# certified speed, or too few recent probes passed.
PROBE_FAILED = probe_lib.FAILED
PROBE_SPEED = probe_lib.SPEED
UNPROBED = "unprobed"
COMPAT_PIN_MISSING = "compat-pin-missing"
COMPAT_PIN_MISMATCH = "compat-pin-mismatch"
WRONG_RECORD_KIND = "wrong-record-kind"
MALFORMED_ROUTE = "malformed-route"

# The scope key. driver_version, runtime_version and isa_features are informational.
SCOPE_FIELDS = ("backend", "os", "arch", "vendor", "device_name", "compute_capability", "driver_major")

_PASS = runner_report_pb2.CheckResult.PASS


@dataclasses.dataclass(frozen=True)
class SignedInput:
    """An envelope and the digest that names it in decisions, revocations and the transparency log:
    records.record_digest, over what was signed (never the file's bytes, which a copy may re-encode)."""

    envelope: certification_pb2.Envelope
    digest: str
    source: str = ""

    @classmethod
    def from_envelope(cls, env: certification_pb2.Envelope, source: str = "") -> "SignedInput":
        return cls(env, records.record_digest(env), source)

    @property
    def label(self) -> str:
        return self.source or self.digest[:19]


def load_signed(path: pathlib.Path | str, follow_symlinks: bool = True) -> SignedInput:
    """Reads a DSSE JSON file (a regular file of at most safe_io.MAX_INPUT_BYTES, strict JSON of
    bounded depth); raises a TrustError naming the reason if it cannot."""
    path = pathlib.Path(path)
    data = safe_io.read_regular_file(path, follow_symlinks=follow_symlinks)
    env = dsse.envelope_from_json(data)
    return SignedInput(env, records.record_digest(env), file_label(path.name))


def file_label(name: str) -> str:
    """A file name as valid UTF-8 for decisions: undecodable bytes become \\xNN. Control characters
    stay (JSON escapes them); human output escapes them with safe_io.escape."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def _is_compatibility_type(payload_type: str) -> bool:
    return payload_type.startswith(records.COMPATIBILITY_FAMILY + ".")


def load_records_dir(
    directory: pathlib.Path | str,
) -> tuple[list[SignedInput], list[SignedInput], list[admission_pb2.InputProblem]]:
    """(certification inputs, compatibility inputs, problems) from every *.dsse.json in a directory.

    Each file is isolated: it is read only if it is a regular file (not a symlink, FIFO, device) of
    at most safe_io.MAX_INPUT_BYTES, parsed as strict JSON of bounded depth, and any failure is one
    InputProblem (file name, reason code, reason) while every other file is still read. Files are
    sorted by payloadType family; anything not a compatibility record goes to the certification
    list, where verification refuses it with a named reason. Raises UnreadableInputError if the
    directory itself is missing, not a directory or not readable: that is unusable input, not
    "no record".
    """
    directory = pathlib.Path(directory)
    try:
        with os.scandir(directory) as it:
            names = sorted(e.name for e in it if e.name.endswith(".dsse.json"))
    except NotADirectoryError as err:
        raise UnreadableInputError(f"records directory {directory} is not a directory") from err
    except OSError as err:
        raise UnreadableInputError(f"records directory {directory}: cannot list ({err.strerror or err})") from err
    certs, compats, problems = [], [], []
    for name in names:
        try:
            item = load_signed(directory / name, follow_symlinks=False)
        except TrustError as err:
            problems.append(admission_pb2.InputProblem(file=file_label(name), code=err.code, reason=str(err)))
            continue
        except Exception as err:  # noqa: BLE001 - one file's surprise must not stop the others
            problems.append(admission_pb2.InputProblem(file=file_label(name), code="unreadable-input",
                                                       reason=f"{type(err).__name__}: {err}"))
            continue
        (compats if _is_compatibility_type(item.envelope.payload_type) else certs).append(item)
    return certs, compats, problems


class VerificationCache:
    """Signature/schema results keyed by envelope content and trust store, for long-lived verifiers.

    Ed25519 verification dominates admission cost; a service deciding many routes over the same
    records verifies each envelope once. Time checks are never cached (they depend on `now`).
    """

    def __init__(self, max_entries: int = 100_000):
        self.max_entries = max_entries
        self._entries: dict[tuple, object] = {}

    @staticmethod
    def key(store: trust.TrustStore, env: certification_pb2.Envelope, supported=(), kind: str = "") -> tuple:
        """Everything the cached result depends on: the trust store's content digest (not its
        identity), the policy's accepted schema versions, which verifier ran, and the envelope."""
        h = hashlib.sha256(dsse.pae(env.payload_type, env.payload))
        for s in env.signatures:
            keyid = s.keyid.encode("utf-8", "surrogatepass")
            h.update(len(keyid).to_bytes(8, "big") + keyid + len(s.sig).to_bytes(8, "big") + s.sig)
        return store.digest, tuple(sorted(set(supported))), kind, h.digest()

    def get(self, key):
        return self._entries.get(key)

    def put(self, key, value) -> None:
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[key] = value


@dataclasses.dataclass
class _Checked:
    """One input after verification: either a usable record or the refusal that ended it."""

    item: SignedInput
    record: object = None  # CertificationRecord / CompatibilityRecord when verified and current
    refusal_code: str = ""
    refusal: str = ""  # "record <file>: <what to do>", without the code
    claimed_lane: str | None = None  # from the unverified payload, only to route refusal messages


def _verify_cached(verify_fn, item: SignedInput, store, supported, cache):
    if cache is None:
        return verify_fn(item.envelope, store, supported)
    key = VerificationCache.key(store, item.envelope, supported, verify_fn.__name__)
    hit = cache.get(key)
    if hit is None:
        try:
            hit = verify_fn(item.envelope, store, supported)
        except TrustError as err:
            hit = err
        cache.put(key, hit)
    if isinstance(hit, TrustError):
        raise hit
    return hit


def _claimed_lane(item: SignedInput) -> str | None:
    """Which lane the unverified payload claims, only to show a refusal on that lane's nodes."""
    try:
        return certification_pb2.CertificationRecord.FromString(item.envelope.payload).scope.lane_id
    except Exception:  # noqa: BLE001 - unsigned bytes may be anything
        return None


# (digest, envelope, verified record or None) -> (code, reason) refusing the input, or None. Called
# before verification with None and after it with the record: a Tracker refuses what the record
# repository does not vouch for now (not in the transparency log, retired key, revoked).
Screen = Callable[[str, certification_pb2.Envelope, object], "tuple[str, str] | None"]


def _check(item, verify_fn, store, policy, now, cache, screen: Screen | None = None) -> _Checked:
    want_compat = verify_fn is records.verify_compatibility
    if _is_compatibility_type(item.envelope.payload_type) != want_compat:
        # Named, never moved aside silently: a compatibility record cannot admit a node, and a
        # certification record cannot stand in for a compatibility record.
        kind = "a compatibility record" if not want_compat else "not a compatibility record"
        return _Checked(item, refusal_code=WRONG_RECORD_KIND,
                        refusal=f"record {item.label}: payload type {item.envelope.payload_type!r} is {kind}; "
                                f"it was given as {'a compatibility' if want_compat else 'a certification'} record")
    screened = screen(item.digest, item.envelope, None) if screen else None
    if screened:
        return _Checked(item, refusal_code=screened[0], refusal=f"record {item.label}: {screened[1]}",
                        claimed_lane=_claimed_lane(item))
    try:
        rec = _verify_cached(verify_fn, item, store, policy.supported_record_schema_versions, cache)
        records.check_times(rec, store, now, policy.max_record_age_days)
    except TrustError as err:
        return _Checked(item, refusal_code=err.code, refusal=f"record {item.label}: {err}", claimed_lane=_claimed_lane(item))
    screened = screen(item.digest, item.envelope, rec) if screen else None
    if screened:
        return _Checked(item, refusal_code=screened[0], refusal=f"record {item.label}: {screened[1]}",
                        claimed_lane=_claimed_lane(item))
    return _Checked(item, record=rec)


def _norm_digest(d: str) -> str:
    d = d.strip().lower()
    return d[len("sha256:"):] if d.startswith("sha256:") else d


def _model_files(sha256: str, shards) -> list[str]:
    return [_norm_digest(s) for s in shards] or [_norm_digest(sha256)]


def model_refusal(rec: certification_pb2.CertificationRecord, route: admission_pb2.RouteRequest) -> str:
    """Why the record's model is not the route's; empty when it is. A model in GGUF splits is
    identified by every split's sha256 in order, so another split set is another model."""
    if not route.model_sha256:
        return "route names no model sha256"
    if _norm_digest(rec.model.sha256) != _norm_digest(route.model_sha256):
        return f"record proves model {rec.model.sha256 or '(none)'}, route serves {route.model_sha256}; certify this model"
    proven = _model_files(rec.model.sha256, [s.sha256 for s in rec.model.shards])
    asked = _model_files(route.model_sha256, route.model_shard_sha256)
    if proven != asked:
        return (f"record proves the model as {len(proven)} file(s) {[p[:12] for p in proven]}, route gives "
                f"{len(asked)} {[a[:12] for a in asked]}; every GGUF split must match")
    return ""


def recipe_refusal(proven: runner_report_pb2.Recipe | None, asked: runner_report_pb2.Recipe | None) -> str:
    """Why `asked` is not inside `proven`; empty when it is. Inside means: KV types a subset of the
    proven ones, every flash-attention mode proven, the same n_gpu_layers, and context, batch,
    ubatch and parallel sequences no larger than proven. A size of 0 in the route is refused as
    unstated: llama.cpp reads 0 as "the model's own context", which may be larger than proven."""
    if asked is None:
        return "route states no recipe; give the recipe the route runs (admission_cli --kv_cache_type etc.)"
    if proven is None:
        return "record proves no recipe; re-certify the lane with a runner that records its recipe"
    out = []
    if not asked.kv_cache_types:
        out.append("route states no KV cache type")
    extra = sorted(set(asked.kv_cache_types) - set(proven.kv_cache_types))
    if extra:
        out.append(f"KV cache types {extra} not proven (proven {sorted(set(proven.kv_cache_types))})")
    if not asked.flash_attention:
        out.append("route states no flash-attention mode")
    extra = sorted(set(asked.flash_attention) - set(proven.flash_attention))
    if extra:
        out.append(f"flash attention {extra} not proven (proven {sorted(set(proven.flash_attention))})")
    if asked.n_gpu_layers != proven.n_gpu_layers:
        out.append(f"n_gpu_layers {asked.n_gpu_layers} != proven {proven.n_gpu_layers}")
    # A multi-GPU split is proven per split mode and tensor split: layer never vouches for row.
    for field, label in (("gpu_count", "GPU count"), ("split_mode", "split mode"), ("tensor_split", "tensor split")):
        a, p = getattr(asked, field), getattr(proven, field)
        if a != p:
            out.append(f"{label} {a or '(none)'} != proven {p or '(none)'}")
    for field in ("context_size", "batch_size", "ubatch_size", "parallel_sequences"):
        a, p = getattr(asked, field), getattr(proven, field)
        if a == 0:
            out.append(f"route states no {field}")
        elif a > p:
            out.append(f"{field} {a} > proven {p}")
    # Records from runner 0.5.0 on say the longest sequence a step verified: a route's cells per
    # sequence must not exceed it. Unstated, one sequence may fill the whole context (a unified KV
    # cache allows it). Older records state none; the fields above bound them as before.
    if proven.longest_sequence_tokens and asked.context_size:
        per_sequence = asked.context_per_sequence or asked.context_size
        if per_sequence > proven.longest_sequence_tokens:
            out.append(f"context per sequence {per_sequence} > the longest sequence proven, "
                       f"{proven.longest_sequence_tokens} tokens (state --context_per_sequence)")
    return "; ".join(out)


def record_refusals(
    rec: certification_pb2.CertificationRecord,
    node: admission_pb2.NodeDescription,
    policy: admission_pb2.AdmissionPolicy,
    route: admission_pb2.RouteRequest,
) -> list[str]:
    """Why a verified, current record does not admit `node` on `route`; empty when it does."""
    where = f"node {node.node_id}: record {rec.record_id[:16]}"
    if rec.scope.lane_id != node.lane_id:
        return [f"{SCOPE_LANE_MISMATCH}: {where}: record is for lane {rec.scope.lane_id!r}, node runs {node.lane_id!r}"]
    rdc, ndc = rec.scope.device_class, node.device_class
    diffs = [f"{f} {getattr(rdc, f)!r} != node {getattr(ndc, f)!r}" for f in SCOPE_FIELDS if getattr(rdc, f) != getattr(ndc, f)]
    # Multi-GPU classes: the same count, GPUs and interconnect; a one-GPU record never admits a
    # two-GPU node, nor the other way round.
    diffs += gpu_set.diffs(rdc, ndc)
    # Every mismatch is named, not the first: an operator fixing the device class should not learn
    # about the model only on the next refusal.
    out = []
    if diffs:
        out.append(f"{SCOPE_DEVICE_CLASS_MISMATCH}: {where}: certified on another device class ({'; '.join(diffs)}); "
                   "certify this lane on the node's device class")
    if not node.build_evidence_digest or _norm_digest(rec.build_evidence_digest) != _norm_digest(node.build_evidence_digest):
        out.append(
            f"{BUILD_EVIDENCE_MISMATCH}: {where}: node build evidence {node.build_evidence_digest or '(none)'} "
            f"!= record {rec.build_evidence_digest}; deploy the certified build or certify this one"
        )
    want = {a.path: _norm_digest(a.sha256) for a in rec.artifacts}
    have = {a.path: _norm_digest(a.sha256) for a in node.artifacts}
    if want != have:
        changed = sorted(p for p in want.keys() & have.keys() if want[p] != have[p])
        missing = sorted(want.keys() - have.keys())
        extra = sorted(have.keys() - want.keys())
        parts = [f"{label} {', '.join(ps[:5])}{' ...' if len(ps) > 5 else ''}"
                 for label, ps in (("differ:", changed), ("missing on node:", missing), ("not certified:", extra)) if ps]
        out.append(f"{ARTIFACT_DIGEST_MISMATCH}: {where}: artifacts {'; '.join(parts)}; deploy exactly the certified artifacts")
    why = model_refusal(rec, route)
    if why:
        out.append(f"{SCOPE_MODEL_MISMATCH}: {where}: {why}")
    why = recipe_refusal(rec.recipe if rec.HasField("recipe") else None, route.recipe if route.HasField("recipe") else None)
    if why:
        out.append(f"{SCOPE_RECIPE_MISMATCH}: {where}: {why}")
    statuses = {c.name: c.status for c in rec.checks}
    for name in policy_lib.required_checks_for(policy, node.lane_id):
        if name not in statuses:
            out.append(f"{REQUIRED_CHECK_MISSING}: {where}: policy requires check {name!r}, the record has none; rerun the runner with it")
        elif statuses[name] != _PASS:
            status = runner_report_pb2.CheckResult.Status.DESCRIPTOR.values_by_number.get(statuses[name])
            status = status.name if status else str(statuses[name])
            out.append(f"{REQUIRED_CHECK_FAILED}: {where}: policy requires check {name!r} PASS, the record says {status}")
    # Floors and ceilings on record metrics: one rule each way; `not (value >= bound)` also refuses NaN.
    bounds = [(f.lane_id, f.metric, f.min_value, SPEED_FLOOR, "floor", lambda v, b: v >= b, "<")
              for f in policy.speed_floors
              if not f.model_sha256 or _norm_digest(f.model_sha256) == _norm_digest(rec.model.sha256)]
    bounds += [(c.lane_id, c.metric, c.max_value, METRIC_CEILING, "ceiling", lambda v, b: v <= b, ">")
               for c in policy.metric_ceilings]
    for lane_id, metric, bound, code, kind, within, op in bounds:
        if lane_id not in ("*", node.lane_id):
            continue
        value = rec.metrics.get(metric)
        if value is None:
            out.append(f"{code}: {where}: metric {metric!r} absent, policy {kind} {bound:g}")
        elif not math.isfinite(value):  # a measurement is finite; +inf would pass any floor, -inf any ceiling
            out.append(f"{code}: {where}: {metric} {value:g} is not a finite measurement, policy {kind} {bound:g}")
        elif not within(value, bound):
            out.append(f"{code}: {where}: {metric} {value:g} {op} {kind} {bound:g}")
    return out


def scope_key(lane_id: str, dc: runner_report_pb2.DeviceClass) -> tuple:
    return (lane_id, *(getattr(dc, f) for f in SCOPE_FIELDS), gpu_set.key(dc))


def _node_problem(node: admission_pb2.NodeDescription) -> str:
    seen: set[str] = set()
    dup = None
    for a in node.artifacts:
        if a.path in seen:
            dup = a.path
            break
        seen.add(a.path)
    return f"{MALFORMED_ROUTE}: node {node.node_id}: lists artifact path {dup} twice" if dup is not None else ""


def _decide_node(node, by_scope, by_lane, failed, policy, route, compat_labels=()) -> admission_pb2.LaneDecision:
    lane = admission_pb2.LaneDecision(node_id=node.node_id, lane_id=node.lane_id)
    problem = _node_problem(node)
    if problem:
        lane.reasons.append(problem)
        return lane
    # Fast path: only records of exactly this scope can admit the node.
    for c in by_scope.get(scope_key(node.lane_id, node.device_class), ()):
        if not record_refusals(c.record, node, policy, route):
            lane.routable = True
            lane.record_id = c.record.record_id
            return lane
    # Refused: explain with every record of this lane.
    candidates = by_lane.get(node.lane_id, [])
    reasons: list[str] = []
    for c in candidates:
        reasons.extend(record_refusals(c.record, node, policy, route))
    same_lane_failed = [f for f in failed if f.claimed_lane == node.lane_id]
    if not candidates and not same_lane_failed:
        # Nothing claims this lane: show every unverifiable record (its claim may be garbled) and
        # what the verified records do cover.
        reasons.extend(f"{f.refusal_code}: node {node.node_id}: {f.refusal}" for f in failed)
        other = sorted(by_lane)
        if other:
            reasons.append(
                f"{SCOPE_LANE_MISMATCH}: node {node.node_id}: no verified record for lane {node.lane_id!r}; "
                f"records cover {other}; certify this lane"
            )
        elif not failed:
            also = (f" (compatibility records {', '.join(compat_labels[:5])} were given, but they prove agreement "
                    "between certified lanes, not a lane)") if compat_labels else ""
            reasons.append(f"{NO_RECORD}: node {node.node_id}: no certification record for lane {node.lane_id!r}{also}; "
                           "certify this lane first")
    else:
        reasons.extend(f"{f.refusal_code}: node {node.node_id}: {f.refusal}" for f in same_lane_failed)
    lane.reasons.extend(reasons)
    return lane


def _corpus_parity_problem(c: certification_pb2.CompatibilityCorpus) -> str:
    """Why a record's corpus parity is not one the runner's corpus_parity would pass: another corpus,
    a bounds kind it does not define, or figures outside that kind's bounds (empty: none)."""
    bounds = corpus_parity.BOUNDS.get(c.bounds)
    if c.corpus_sha256 != corpus_parity.CORPUS_SHA256:
        return f"measured over corpus {c.corpus_sha256[:16] or '(none)'}, not the committed corpus"
    if bounds is None:
        return f"bounds {c.bounds!r} are none of {sorted(corpus_parity.BOUNDS)}"
    ratio_ok = c.perplexity_ratio > 0 and abs(math.log(c.perplexity_ratio)) <= bounds["tol_abs_log_ppl_ratio"]
    # `not (x <= bound)` also refuses NaN.
    if not (c.mean_kl <= bounds["tol_mean_kl"] and c.p99_kl <= bounds["tol_p99_kl"] and ratio_ok
            and c.top1_agreement_decisive >= bounds["tol_top1_agreement_decisive"]
            and c.positions >= corpus_parity.MIN_SCORED):
        return (f"mean KL {c.mean_kl:g} / p99 KL {c.p99_kl:g} / top-1 {c.top1_agreement_decisive:g} / perplexity "
                f"ratio {c.perplexity_ratio:g} over {c.positions} positions are outside the {c.bounds!r} bounds")
    return ""


def _compatibility_refusal(rec, lanes, model, admitted, policy=None, recipe=None) -> str:
    """Why a verified, current compatibility record does not cover this route; empty when it does.

    It must name exactly the route's lanes and model, a recipe that contains the route's `recipe`
    (recipe_refusal, as for a lane record), and each admitted node's certified record, llama.cpp pin,
    device class and build evidence (it was measured with exactly those), and meet its own tolerances
    and the policy's compatibility bounds. A refusal of the recipe or the pin starts with its code."""
    if sorted(rec.lane_ids) != lanes:
        return f"covers lanes {sorted(rec.lane_ids)}, route needs exactly {lanes}"
    if not model or _norm_digest(rec.model_sha256) != model:
        return f"for model {rec.model_sha256 or '(none)'}, route model is {model or '(none)'}"
    if policy is None or not policy.HasField("compatibility"):
        return "the policy states no compatibility bounds (AdmissionPolicy.compatibility): no mixed route is admitted"
    # Nothing is assumed of a recipe or pin the record does not state (schema v1 records state no recipe).
    if not rec.HasField("recipe"):
        return (f"{COMPAT_RECIPE_MISSING}: states no recipe the route was measured under; measure the route "
                "again (tools/compat) and sign a record that states it")
    # A route longer than any sequence compared on it was never measured: no unstated length is read
    # as "any" here (lane records from before runner 0.5.0 get that reading; no compat record does).
    if not rec.recipe.longest_sequence_tokens:
        return (f"{COMPAT_RECIPE_MISSING}: states no longest sequence the route was measured on; measure the "
                "route again (tools/compat) and sign a record that states it")
    if not rec.HasField("corpus_parity") or not rec.corpus_parity.positions:
        return (f"{COMPAT_CORPUS_MISSING}: states no corpus parity of the route; measure "
                "the route again (tools/compat) and sign a record that states it")
    why = _corpus_parity_problem(rec.corpus_parity)
    if why:
        return f"{COMPAT_CORPUS_FAILED}: {why}"
    why = recipe_refusal(rec.recipe, recipe)
    if why:
        return f"{SCOPE_RECIPE_MISMATCH}: the route's recipe is not the one measured on it: {why}"
    missing = [f for f in ("upstream_commit", "patch_stack_digest") if not getattr(rec, f)]
    if missing:
        return (f"{COMPAT_PIN_MISSING}: states no {' or '.join(missing)} of the lanes it measured; build the record "
                "from the lanes' certification records (tools/compat)")
    t = rec.tolerances
    bounds = [("its own tolerances", t.max_kl_divergence, t.min_top1_agreement, t.max_abs_delta_logit, t.min_greedy_agreement)]
    # A model with weight types other than F32 (the signer re-derives the corpus bounds kind from the
    # model file) is judged by the policy's bounds for such models; every other by the F32 ones.
    field = "quantized_compatibility" if rec.corpus_parity.bounds == "quantized" else "compatibility"
    if not policy.HasField(field):
        return (f"the policy states no compatibility bounds for a model of this kind (AdmissionPolicy.{field}): "
                "no mixed route on it is admitted")
    b = getattr(policy, field)
    bounds.append((f"the policy's {field} bounds", b.max_mean_kl, b.min_top1_agreement, b.max_abs_delta_logit,
                   b.min_greedy_agreement))
    for whose, max_kl, min_top1, max_delta, min_greedy in bounds:
        # `not (x <= bound)` also refuses NaN.
        if not (rec.kl_divergence <= max_kl and rec.top1_agreement >= min_top1
                and rec.max_abs_delta_logit <= max_delta and rec.greedy_agreement >= min_greedy):
            return (f"measured kl {rec.kl_divergence:g} / top1 {rec.top1_agreement:g} / max|dlogit| "
                    f"{rec.max_abs_delta_logit:g} / greedy {rec.greedy_agreement:g} outside {whose} "
                    f"{max_kl:g} / {min_top1:g} / {max_delta:g} / {min_greedy:g}")
    by_lane = {entry.lane_id: entry for entry in rec.lanes}
    for cert in admitted:
        for field in ("upstream_commit", "patch_stack_digest"):
            if getattr(rec, field) != getattr(cert, field):
                return (f"{COMPAT_PIN_MISMATCH}: {field} {getattr(rec, field)[:23]} != certified lane "
                        f"{cert.scope.lane_id}'s {getattr(cert, field)[:23] or '(none)'}")
        lane_id = cert.scope.lane_id
        entry = by_lane.get(lane_id)
        if entry is None:
            return f"names no device class or build evidence for lane {lane_id}: it cannot bind the route's nodes"
        if scope_key(lane_id, entry.device_class) != scope_key(lane_id, cert.scope.device_class):
            return (f"measured lane {lane_id} on device class {_dc_label(entry.device_class)}, the route's node is "
                    f"certified on {_dc_label(cert.scope.device_class)}")
        if entry.build_evidence_digest != cert.build_evidence_digest:
            return (f"measured lane {lane_id} built as {entry.build_evidence_digest[:23]}, the route's node runs "
                    f"{cert.build_evidence_digest[:23]}")
        if cert.record_id not in rec.certification_record_ids:
            return f"does not name lane {lane_id}'s certification record {cert.record_id[:16]}"
    return ""


def _dc_label(dc: runner_report_pb2.DeviceClass) -> str:
    text = "/".join(v for v in (dc.backend, dc.vendor, dc.device_name, dc.compute_capability, dc.driver_major) if v) or "(none)"
    return f"{text} ({gpu_set.label(dc)})" if gpu_set.count(dc) >= 2 else text


def decide(
    policy: admission_pb2.AdmissionPolicy,
    records_in: Sequence[SignedInput | certification_pb2.Envelope],
    compat_records: Sequence[SignedInput | certification_pb2.Envelope],
    route: admission_pb2.RouteRequest,
    now: dt.datetime | None = None,
    *,
    trust_store: trust.TrustStore | None = None,
    policy_digest: str | None = None,
    cache: VerificationCache | None = None,
    screen: Screen | None = None,
    probes: Sequence[VerifiedProbe] = (),
) -> admission_pb2.AdmissionDecision:
    """The admission decision for `route`. Pass trust_store/policy_digest/cache to amortise them;
    `screen` (a Tracker's view, tools/publish/tracker.py) refuses inputs its repository does not vouch for.
    `probes` (tools/probe/probe_log.read) are consulted as policy.probes says."""
    now = now or timestamps.now()
    store = trust_store or policy_lib.validate(policy)
    items = [r if isinstance(r, SignedInput) else SignedInput.from_envelope(r) for r in records_in]
    compat_items = [r if isinstance(r, SignedInput) else SignedInput.from_envelope(r) for r in compat_records]
    decision = admission_pb2.AdmissionDecision(
        route_id=route.route_id,
        policy_id=policy.policy_id,
        policy_digest=policy_digest or policy_lib.policy_digest(policy),
        decided_at=timestamps.format_utc(now),
        verifier=VERIFIER,
    )
    decision.input_record_digests.extend(sorted({i.digest for i in (*items, *compat_items)}))

    by_lane: dict[str, list[_Checked]] = {}
    failed: list[_Checked] = []
    for item in items:
        c = _check(item, records.verify_record, store, policy, now, cache, screen)
        if c.record is None:
            failed.append(c)
        else:
            by_lane.setdefault(c.record.scope.lane_id, []).append(c)
    by_scope: dict[tuple[str, ...], list[_Checked]] = {}
    for cands in by_lane.values():  # newest first: a re-certification supersedes
        cands.sort(key=lambda c: timestamps.parse_utc(c.record.issued_at), reverse=True)
        for c in cands:
            by_scope.setdefault(scope_key(c.record.scope.lane_id, c.record.scope.device_class), []).append(c)

    if not route.nodes:
        decision.reasons.append(f"{NO_NODES}: route {route.route_id!r} lists no nodes")
    dup_ids = sorted(i for i, n in collections.Counter(n.node_id for n in route.nodes).items() if n > 1)
    if dup_ids:  # which description of the node would count? Neither: the route is ambiguous
        decision.reasons.append(f"{MALFORMED_ROUTE}: route lists node id(s) {dup_ids} more than once")
    admitted: list[certification_pb2.CertificationRecord] = []
    record_by_id = {c.record.record_id: c.record for cs in by_lane.values() for c in cs}
    compat_labels = [i.label for i in compat_items]
    for node in route.nodes:
        lane = _decide_node(node, by_scope, by_lane, failed, policy, route, compat_labels)
        if lane.routable and policy.probes.min_passing_probes:
            why, cited = _probe_refusal(node, record_by_id[lane.record_id], _norm_digest(route.model_sha256), probes,
                                        policy, now)
            decision.probe_record_digests.extend(d for d in cited if d not in decision.probe_record_digests)
            if why:
                lane.routable = False
                lane.reasons.append(why)
        decision.lanes.append(lane)
        decision.reasons.extend(lane.reasons)
        if lane.routable:
            admitted.append(record_by_id[lane.record_id])

    lanes = sorted({n.lane_id for n in route.nodes})
    if len(lanes) > 1:
        model = _norm_digest(route.model_sha256)
        notes = []
        covered = False
        for item in compat_items:
            c = _check(item, records.verify_compatibility, store, policy, now, cache, screen)
            why = (f"{c.refusal_code}: {c.refusal}" if c.record is None else _compatibility_refusal(
                c.record, lanes, model, admitted, policy, route.recipe if route.HasField("recipe") else None))
            if not why:
                covered = True
                break
            notes.append(f"{item.label}: {why}")
        if not covered:
            detail = f"; candidates: {' | '.join(notes)}" if notes else "; none supplied"
            decision.reasons.append(
                f"{MIXED_WITHOUT_COMPATIBILITY}: route spans lanes {lanes} for model {model or '(none)'} without a "
                f"verified compatibility record for exactly those lanes and that model{detail}"
            )
    decision.routable = bool(route.nodes) and not decision.reasons and all(l.routable for l in decision.lanes)
    return decision


# A probe dated this far after the decision's clock still counts as now (Tracker clocks drift).
PROBE_CLOCK_SKEW_S = 300
# The record metric a probe's speed floor must be judged against.
CERTIFIED_SPEED_METRIC = "speed.tg_tokens_per_s"


def _probe_refusal(node, rec: certification_pb2.CertificationRecord, model: str, probes: Sequence[VerifiedProbe],
                   policy: admission_pb2.AdmissionPolicy, now: dt.datetime) -> tuple[str, list[str]]:
    """Why the node's probes do not admit it (empty when they do), and the probe records consulted:
    those of this node, lane, certification record and model, signed by a Tracker key the policy
    names, probed within max_age_s (one record per challenge). Any failure at the latest time
    refuses (a node is refused until a later probe passes); min_passing_probes of them must pass,
    each judged at least as strictly as the policy asks and against the record's certified speed."""
    p = policy.probes
    trackers = set(p.tracker_keyids)
    recent: dict[str, tuple[dt.datetime, VerifiedProbe]] = {}
    future = []
    for v in probes:
        r = v.record
        if (r.node_id, r.lane_id, r.certification_record_id) != (node.node_id, node.lane_id, rec.record_id):
            continue
        if _norm_digest(r.model_sha256) != model or not trackers & set(v.keyids):
            continue
        at = timestamps.parse_utc(r.probed_at, "probed_at")
        age = (now - at).total_seconds()
        if age < -PROBE_CLOCK_SKEW_S:
            future.append(v.digest)
        elif age <= p.max_age_s:
            # One challenge is one probe (a copied record counts once); of two records of it, a failure wins.
            kept = recent.get(r.challenge_digest)
            if kept is None or (kept[1].record.verdict == probe_lib.PASS and r.verdict != probe_lib.PASS):
                recent[r.challenge_digest] = (at, v)
    cited = sorted(v.digest for _, v in recent.values()) + sorted(future)
    if future:
        return (f"{UNPROBED}: node {node.node_id!r} has probe record(s) dated more than {PROBE_CLOCK_SKEW_S} s "
                "after this decision: the Tracker's clock or the records are wrong", cited)
    if not recent:
        return (f"{UNPROBED}: node {node.node_id!r} has no probe of record {rec.record_id} for this model in the "
                f"last {p.max_age_s} s by a Tracker the policy names", cited)
    latest_at = max(at for at, _ in recent.values())
    # Timestamps have one-second resolution: at the latest second a failure wins over a pass.
    latest = [v for at, v in recent.values() if (latest_at - at).total_seconds() < 1.0]
    failed = [v for v in latest if v.record.verdict != probe_lib.PASS]
    if failed:
        worst = failed[0]
        return (f"{worst.record.verdict}: the latest probe of node {node.node_id!r} ({worst.digest[:23]}, "
                f"{worst.record.probed_at}): {'; '.join(worst.record.reasons) or 'no reason given'}", cited)
    defaults = probe_lib.Tolerances()
    max_delta = p.max_abs_delta_logprob or defaults.max_abs_delta_logprob
    min_speed = p.min_speed_fraction or defaults.min_speed_fraction
    certified = rec.metrics.get(CERTIFIED_SPEED_METRIC)
    counted, looser = 0, 0
    for _, v in recent.values():
        r = v.record
        if r.verdict != probe_lib.PASS:
            continue
        strict = (r.tol_max_abs_delta_logprob <= max_delta and r.tol_min_speed_fraction >= min_speed
                  and r.tol_min_top1_agreement >= defaults.min_top1_agreement
                  and r.tol_min_greedy_prefix >= defaults.min_greedy_prefix)
        same_speed = certified is None or math.isclose(r.certified_tokens_per_s, certified, rel_tol=1e-9)
        if strict and same_speed:
            counted += 1
        else:
            looser += 1
    if counted < p.min_passing_probes:
        note = (f" ({looser} more passed under looser tolerances or another certified speed than the record's "
                f"{CERTIFIED_SPEED_METRIC})") if looser else ""
        return (f"{UNPROBED}: node {node.node_id!r} passed {counted} probe(s) in the last {p.max_age_s} s; the policy "
                f"needs {p.min_passing_probes}{note}", cited)
    return "", cited


def route_from_nodes(
    nodes: Iterable[admission_pb2.NodeDescription],
    model_sha256: str,
    route_id: str = "",
    recipe: runner_report_pb2.Recipe | None = None,
    model_shard_sha256: Sequence[str] = (),
) -> admission_pb2.RouteRequest:
    """A RouteRequest; without `recipe` the route states none and every node is refused for it."""
    route = admission_pb2.RouteRequest(route_id=route_id, model_sha256=model_sha256)
    route.nodes.extend(nodes)
    if recipe is not None:
        route.recipe.CopyFrom(recipe)
    route.model_shard_sha256.extend(model_shard_sha256)
    return route


def node_for_record(record: certification_pb2.CertificationRecord, node_id: str = "") -> admission_pb2.NodeDescription:
    """A node exactly as `record` certifies it: its lane, device class, build and artifacts."""
    node = admission_pb2.NodeDescription(node_id=node_id, lane_id=record.scope.lane_id,
                                         build_evidence_digest=record.build_evidence_digest)
    node.device_class.CopyFrom(record.scope.device_class)
    node.artifacts.extend(record.artifacts)
    return node


def route_for_record(record: certification_pb2.CertificationRecord, route_id: str = "",
                     node_id: str = "") -> admission_pb2.RouteRequest:
    """The route that asks for exactly what the record proves: its lane, device class, build, model
    files and recipe. Admission admitting it means a node matching the record is routable."""
    return route_from_nodes([node_for_record(record, node_id)], record.model.sha256, route_id,
                            recipe=record.recipe if record.HasField("recipe") else None,
                            model_shard_sha256=[s.sha256 for s in record.model.shards])
