"""Certification column of the matrix: signed records that verify under the policy, per lane.

A lane is certified only for the exact device classes its verified records name. Routable under
policy means admission (tools/admission) would admit a node that matches the record exactly; any
refusal leaves the lane dark and says why.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import os
import pathlib

from proto import admission_pb2, certification_pb2, runner_report_pb2
from tools.admission import admission
from tools.certify import records as records_lib
from tools.matrix.capability_matrix import DARK, Certifier
from tools.model import model_lock
from tools.policy import dsse, timestamps
from tools.policy import policy as policy_lib
from tools.policy.errors import TrustError
from tools.publish import revocations as revocations_lib
from tools.runner import gpu_set

CERTIFIED = "certified"
# The lane is built here, but no record names this build's evidence: a record proves the artifacts
# it was run on, never a rebuild, so the lane is neither certified nor routable until re-certified.
OTHER_BUILD = "BUILT, record is for another build"
# What the page shows for admission's decision: its own verdict, never one the matrix derives.
ADMITTED, REFUSED = "admitted", "refused"
EMBEDDED = "embedded"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def describe_device_class(dc: runner_report_pb2.DeviceClass) -> str:
    parts = [dc.backend, dc.vendor, dc.device_name]
    if dc.compute_capability:
        parts.append(f"cc {dc.compute_capability}")
    if dc.driver_major:
        parts.append(f"driver {dc.driver_major}")
    if gpu_set.count(dc) >= 2:
        parts.append(gpu_set.label(dc))  # e.g. "2x NVIDIA H200 (9.0), NV18"
    parts.append(f"{dc.os}-{dc.arch}")
    return " / ".join(p for p in parts if p)


def describe_recipe(recipe: runner_report_pb2.Recipe) -> str:
    offload = {-1: "all layers", 0: "none"}.get(recipe.n_gpu_layers, f"{recipe.n_gpu_layers} layers")
    return (f"KV {','.join(recipe.kv_cache_types) or '-'}; flash attention {','.join(recipe.flash_attention) or '-'}; "
            f"offload {offload}; ctx {recipe.context_size}"
            + (f" ({recipe.context_per_sequence}/sequence, {recipe.longest_sequence_tokens}-token sequences verified)"
               if recipe.longest_sequence_tokens else "")
            + f"; batch {recipe.batch_size}/{recipe.ubatch_size}; parallel {recipe.parallel_sequences}")


def _revocation_screen(revocations_dir: pathlib.Path | None, store):
    """admission's screen refusing revoked records (signed revocations, verified under the policy's
    keys); an unreadable revocation refuses everything (it could be the one that matters)."""
    if revocations_dir is None:
        return None
    rev_set, problems = revocations_lib.load_dir(revocations_dir, store)
    if problems:
        return lambda digest, env, rec: ("revocation-unreadable", f"revocations unreadable ({problems[0]}); fix {revocations_dir}")

    def screen(digest, env, rec):
        if rec is None:
            return None
        # The keys whose signatures verified, never the envelope's unauthenticated keyid hints.
        try:
            verified = dsse.verify(env, store.public_keys)
        except TrustError as err:
            return err.code, str(err)
        why = rev_set.reason(digest, rec, verified)
        return (revocations_lib.REVOKED, why[len(revocations_lib.REVOKED) + 2:]) if why else None
    return screen


@dataclasses.dataclass
class Evidence:
    """The records of one directory as the policy sees them, and the instant they are judged at."""

    policy: admission_pb2.AdmissionPolicy
    store: object
    screen: object
    verified: list[tuple[admission.SignedInput, certification_pb2.CertificationRecord]]
    compats: list[admission.SignedInput]  # every compatibility input, verified or not (admission judges each)
    verified_compats: list[tuple[admission.SignedInput, certification_pb2.CompatibilityRecord]]
    refusals: list[tuple[str, str]]  # (file, why) for each record that does not verify
    compat_refusals: list[tuple[str, str]]
    unreadable: list[admission_pb2.InputProblem]
    when: dt.datetime
    instant: str  # why this instant: "the newest record's issue time" or "the time asked for"


def newest_issue_time(records: list) -> dt.datetime:
    """The newest issued_at among verified records (certification or compatibility): the default
    judgement instant, derived from the files alone so that a page rendered twice from the same
    evidence is the same page. Only verified records count: an unsigned file must not move the clock."""
    return max((timestamps.parse_utc(r.issued_at) for r in records), default=_EPOCH)


def load_evidence(policy_path: pathlib.Path, records_dir: pathlib.Path, revocations_dir: pathlib.Path | None = None,
                  now: dt.datetime | None = None) -> Evidence | None:
    """None when there is no policy or no records directory (every lane is then dark)."""
    if not policy_path.exists() or not records_dir.is_dir():
        return None
    policy = policy_lib.load_policy(policy_path)
    store = policy_lib.validate(policy, str(policy_path))
    screen = _revocation_screen(revocations_dir if revocations_dir is not None and revocations_dir.is_dir() else None,
                                store)
    certs, compats, unreadable = admission.load_records_dir(records_dir)
    supported = policy.supported_record_schema_versions or None
    verified, verified_compats, refusals, compat_refusals = [], [], [], []
    for item in certs:
        try:
            verified.append((item, records_lib.verify_record(item.envelope, store, supported)))
        except (TrustError, ValueError) as err:  # every refusal means "dark"; the first is shown
            refusals.append((item.label, str(err)))
    for item in compats:
        try:
            verified_compats.append((item, records_lib.verify_compatibility(item.envelope, store, supported)))
        except (TrustError, ValueError) as err:
            compat_refusals.append((item.label, str(err)))
    when = now or newest_issue_time([r for _, r in (*verified, *verified_compats)])
    return Evidence(policy, store, screen, verified, compats, verified_compats, refusals, compat_refusals, unreadable,
                    when,
                    "the time asked for" if now else "the newest record's issue time")


def decide_record(ev: Evidence, item: admission.SignedInput, record: certification_pb2.CertificationRecord,
                  route_id: str = "matrix") -> admission_pb2.AdmissionDecision:
    return admission.decide(ev.policy, [item], [], admission.route_for_record(record, route_id, node_id="matrix-probe"), ev.when, trust_store=ev.store,
                            screen=ev.screen)


def policy_certifier(policy_path: pathlib.Path, records_dir: pathlib.Path,
                     revocations_dir: pathlib.Path | None = None, now: dt.datetime | None = None) -> Certifier:
    """A Certifier reading every record in records_dir and judging it under the policy file (and the
    signed revocations in revocations_dir: a revoked record leaves its lane dark, "revoked: <reason>")
    at `now` (default: the newest record's issue time)."""
    ev = load_evidence(policy_path, records_dir, revocations_dir, now)
    if ev is None:
        why = f"no policy at {policy_path}" if not policy_path.exists() else "no certification record"
        return lambda lane_id, evidence_digest: (DARK, [], False, why)

    def certify(lane_id: str, evidence_digest: str):
        mine = [(i, r) for i, r in ev.verified if r.scope.lane_id == lane_id]
        if not mine:
            return DARK, [], False, ": ".join(ev.refusals[0]) if ev.refusals else "no certification record"
        if evidence_digest:
            # Bind the record to the build on disk: a rebuilt lane is not the lane that was certified.
            bound = [(i, r) for i, r in mine if r.build_evidence_digest == evidence_digest]
            if not bound:
                others = sorted({r.build_evidence_digest for _, r in mine})
                return OTHER_BUILD, [], False, (
                    f"built evidence {evidence_digest}; record(s) certify {', '.join(others)}; "
                    "re-certify this build (bazel run //tools:certify)")
            mine = bound
        classes, routable, notes = [], False, []
        if not evidence_digest:
            notes.append("not built on this host; records name build "
                         + ", ".join(sorted({r.build_evidence_digest for _, r in mine})))
        for item, record in mine:
            decision = decide_record(ev, item, record)
            if decision.routable:
                dc = describe_device_class(record.scope.device_class)
                if dc not in classes:  # one class certified for several models is one class
                    classes.append(dc)
                routable = True
                notes.append(f"record {record.record_id[:12]} expires {record.expires_at}")
            else:
                notes.append("; ".join(decision.reasons)[:200])
        if not classes:
            return DARK, [], False, "; ".join(notes)
        return CERTIFIED, classes, routable, "; ".join(notes)

    return certify


# ---- the dashboard: what each record certifies, by name, with its figures -------------------------

def locked_model_names(lock_path: pathlib.Path | None) -> dict[str, str]:
    """{file sha256: locked model name} from the model lock (tools/model); {} without one."""
    if lock_path is None or not lock_path.is_file():
        return {}
    lock = model_lock.load(lock_path)
    return {f.sha256: m.name for m in lock.models for f in m.files}


def model_label(model: certification_pb2.Model | runner_report_pb2.Model, locked: dict[str, str]) -> str:
    """The model's name as the lock knows it: a record's own name is the GGUF's metadata, which any
    file can claim; only a locked sha256 names a model an operator can install."""
    digests = [model.sha256] + [s.sha256 for s in model.shards]
    for d in digests:
        name = locked.get(d.lower().removeprefix("sha256:"))
        if name:
            return name
    if model.source.startswith("embedded://"):
        return EMBEDDED
    return f"{model.name or model.sha256[:12]} (not in the model lock)"


@dataclasses.dataclass(frozen=True)
class Figure:
    """One headline figure of a check and the bound the check held it to (bound None: none stated)."""

    check: str
    key: str
    label: str
    value: float
    bound: float | None = None
    relation: str = ""  # "<=" or ">=": how value must compare with bound

    def text(self) -> str:
        shown = f"{self.label} {_num(self.value)}"
        if self.bound is None:
            return shown
        return f"{shown} ({'≤' if self.relation == '<=' else '≥'} {_num(self.bound)})"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:.3g}"


# (check, figure key, label, bound key, relation): the figures an operator reads first, each beside
# its bound where the check records one. Keys a record lacks are left out (checks differ by lane).
_HEADLINES: tuple[tuple[str, str, str, str, str], ...] = (
    ("reference_parity", "max_abs_delta_logit", "max|dlogit|", "tol_max_abs_delta_logit", "<="),
    ("reference_parity", "mean_kl", "mean KL", "tol_mean_kl", "<="),
    ("reference_parity", "top1_agreement_decisive", "top-1 (decisive)", "tol_top1_agreement_decisive", ">="),
    ("corpus_parity", "perplexity", "perplexity", "max_perplexity", "<="),
    ("corpus_parity", "mean_kl", "mean KL", "tol_mean_kl", "<="),
    ("corpus_parity", "top1_agreement_decisive", "top-1 (decisive)", "tol_top1_agreement_decisive", ">="),
    ("speed", "tg_tokens_per_s", "tg tok/s", "floor_tg_tokens_per_s", ">="),
    ("speed", "pp_tokens_per_s", "pp tok/s", "floor_pp_tokens_per_s", ">="),
    ("speed", "speedup_tg", "tg speed-up vs CPU lane", "", ""),
    ("speed", "speedup_pp", "pp speed-up vs CPU lane", "", ""),
    ("speed", "peer_lane_ratio_tg", "tg vs peer lane", "", ""),
    ("speed", "tg_roofline_fraction", "tg roofline fraction", "", ""),
    ("speed", "tg_model_roofline_fraction", "tg model roofline fraction", "floor_tg_model_roofline_fraction", ">="),
    ("speed", "roofline_speedup_tg", "roofline tg speed-up vs CPU lane", "floor_roofline_speedup_tg", ">="),
    ("upstream_ctest", "tests_passed", "CTest passed", "", ""),
    ("upstream_ctest", "tests_failed", "CTest failed", "", ""),
    ("upstream_ctest", "tests_excluded", "CTest excluded", "", ""),
    ("upstream_ctest", "tests_registered", "CTest registered", "", ""),
    ("fixture_parity", "tests_passed", "tests passed", "", ""),
    ("fixture_parity", "tests_failed", "tests failed", "", ""),
    ("fixture_parity", "tests_failed_not_reproduced", "failed tests not reproduced (re-evaluated)", "", ""),
    ("op_oracle", "nodes_fail", "nodes failed", "", ""),
    ("cpu_variants", "variants_runnable", "variants runnable", "", ""),
    ("cancellation", "cancel_to_release_seconds", "cancel-to-slot-release s", "cancel_bound_s", "<="),
)


def headline_figures(record: certification_pb2.CertificationRecord) -> list[Figure]:
    """The record's headline figures, from its check summaries (signed), in _HEADLINES order."""
    checks = {c.name: c for c in record.checks}
    figures = []
    for check, key, label, bound_key, relation in _HEADLINES:
        c = checks.get(check)
        if c is None or c.status != runner_report_pb2.CheckResult.PASS:
            continue
        values = {**c.counts, **c.metrics}
        if key not in values:
            continue
        bound = values.get(bound_key) if bound_key else None
        # A zero floor is "no floor" (the speed check records 0 where the policy sets none).
        if bound is not None and relation == ">=" and bound == 0:
            bound = None
        figures.append(Figure(check, key, label, float(values[key]), None if bound is None else float(bound),
                              relation if bound is not None else ""))
    return figures


def check_states(record: certification_pb2.CertificationRecord) -> list[tuple[str, str]]:
    """(check, status name) for every check the record carries, in its order."""
    return [(c.name, runner_report_pb2.CheckResult.Status.Name(c.status)) for c in record.checks]


def days_to_expiry(record_expires_at: str, when: dt.datetime) -> int:
    """Whole days from `when` until expiry (negative once expired), rounded down: a record with
    half a day left shows 0, never 1."""
    return math.floor((timestamps.parse_utc(record_expires_at) - when).total_seconds() / 86400)


def run_dir_name(record_file: str) -> str:
    return record_file.removesuffix(".record.dsse.json")


def run_readme(records_dir: pathlib.Path, record_file: str) -> pathlib.Path | None:
    """The committed run's hand-off README (runs/<run>/README.md beside records/), if it is there."""
    path = records_dir.parent / "runs" / run_dir_name(record_file) / "README.md"
    return path if path.is_file() else None


@dataclasses.dataclass
class CertifiedEntry:
    lane_id: str
    device_class: str
    model: str
    model_sha256: str
    record_id: str
    record_file: str
    issued_at: str
    expires_at: str
    days_to_expiry: int
    decision: str  # ADMITTED or REFUSED: admission's verdict on a node matching the record exactly
    reasons: list[str]
    recipe: str
    figures: list[Figure]
    checks: list[tuple[str, str]]
    run_readme: str = ""  # path of the hand-off README, "" when the run is not committed

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def certified_entries(ev: Evidence | None, records_dir: pathlib.Path, locked: dict[str, str]) -> list[CertifiedEntry]:
    """One entry per verified record, by lane, device class and model, with admission's decision at ev.when."""
    if ev is None:
        return []
    entries = []
    for item, record in ev.verified:
        decision = decide_record(ev, item, record)
        readme = run_readme(records_dir, item.label)
        entries.append(CertifiedEntry(
            lane_id=record.scope.lane_id,
            device_class=describe_device_class(record.scope.device_class),
            model=model_label(record.model, locked),
            model_sha256=record.model.sha256,
            record_id=record.record_id,
            record_file=item.label,
            issued_at=record.issued_at,
            expires_at=record.expires_at,
            days_to_expiry=days_to_expiry(record.expires_at, ev.when),
            decision=ADMITTED if decision.routable else REFUSED,
            reasons=list(decision.reasons),
            recipe=describe_recipe(record.recipe) if record.HasField("recipe") else "none stated",
            figures=headline_figures(record),
            checks=check_states(record),
            run_readme=str(readme) if readme else "",
        ))
    entries.sort(key=lambda e: (e.lane_id, e.device_class, e.model, e.record_id))
    return entries


def compatibility_probe_recipe(
    compat: certification_pb2.CompatibilityRecord, named: list[certification_pb2.CertificationRecord],
) -> runner_report_pb2.Recipe | None:
    """The recipe a probe of a mixed route asks for: the one the compatibility record was measured
    under (a lane record's larger recipe, e.g. more parallel sequences, was never run on the route).
    A record that states none is probed with the first lane's, so admission names the missing recipe
    (compat-recipe-missing) rather than a recipe mismatch. The context per sequence asked is the
    longest every proof covers: the route's compared sequences and each lane's own (a route without
    it asks for its whole context per sequence, which no measurement compared)."""
    if not compat.HasField("recipe"):
        return named[0].recipe if named and named[0].HasField("recipe") else None
    recipe = runner_report_pb2.Recipe()
    recipe.CopyFrom(compat.recipe)
    if not recipe.context_per_sequence and recipe.longest_sequence_tokens:
        recipe.context_per_sequence = min(
            [recipe.longest_sequence_tokens] + [r.recipe.context_per_sequence or r.recipe.longest_sequence_tokens
                                                for r in named if r.HasField("recipe")])
    return recipe


def compatibility_route(compat: certification_pb2.CompatibilityRecord,
                        named: list[certification_pb2.CertificationRecord],
                        route_id: str = "matrix-compat") -> admission_pb2.RouteRequest:
    """The mixed route a compatibility record was measured on: one node per lane, each exactly the
    certified record the compatibility record names, and the recipe it was measured under."""
    nodes = [admission.node_for_record(r, f"{route_id}-{r.scope.lane_id}") for r in named]
    return admission.route_from_nodes(nodes, compat.model_sha256, route_id,
                                      recipe=compatibility_probe_recipe(compat, named),
                                      model_shard_sha256=[s.sha256 for s in named[0].model.shards])


def _recipe_text(rec: certification_pb2.CompatibilityRecord, named: list[certification_pb2.CertificationRecord]) -> str:
    if rec.HasField("recipe"):
        return describe_recipe(rec.recipe)
    probed = compatibility_probe_recipe(rec, named)
    return "none stated by the record" + (
        f" (admission is asked for {named[0].scope.lane_id}'s certified recipe: {describe_recipe(probed)})"
        if probed is not None else "")


def compatibility_pairs(policy_path: pathlib.Path, records_dir: pathlib.Path,
                        revocations_dir: pathlib.Path | None = None, now: dt.datetime | None = None) -> list[dict]:
    """One row per compatibility record: the lanes, model and device classes it was measured with,
    its recipe, and admission's decision on that mixed pipeline under the policy ("state": admitted
    or refused, "reasons": admission's own) at `now` (default: the newest record's issue time), with
    the signed revocations in revocations_dir applied.

    The probe route has one node per lane, each exactly the certified record the compatibility
    record names, and the recipe it was measured under, so the verdict is admission's own for the
    route the record was measured on."""
    ev = load_evidence(policy_path, records_dir, revocations_dir, now)
    if ev is None:
        return []
    by_id = {record.record_id: (item, record) for item, record in ev.verified}
    rows = []
    for item in ev.compats:
        row = {"source": str(item.source), "lanes": [], "model_sha256": "", "device_classes": [], "routable": False,
               "state": REFUSED, "reasons": [], "recipe": "", "expires_at": "", "days_to_expiry": None, "detail": ""}
        rows.append(row)
        try:
            rec = records_lib.verify_compatibility(item.envelope, ev.store,
                                                   ev.policy.supported_record_schema_versions or None)
        except (TrustError, ValueError) as err:
            row["detail"] = f"does not verify: {err}"
            row["reasons"] = [row["detail"]]
            continue
        row.update(lanes=sorted(rec.lane_ids), model_sha256=rec.model_sha256, expires_at=rec.expires_at,
                   days_to_expiry=days_to_expiry(rec.expires_at, ev.when),
                   device_classes=[f"{e.lane_id}: {describe_device_class(e.device_class)}" for e in rec.lanes])
        named = [by_id[r] for r in rec.certification_record_ids if r in by_id]
        if (len(named) != len(rec.certification_record_ids) or not named
                or len(set(rec.certification_record_ids)) != len(rec.certification_record_ids)
                or sorted(r.scope.lane_id for _, r in named) != sorted(rec.lane_ids)):
            row["detail"] = ("names certification records that are not here, do not verify, repeat, or are not "
                             "exactly one per lane of the record")
            row["reasons"] = [row["detail"]]
            continue
        certs = [r for _, r in named]
        row["recipe"] = _recipe_text(rec, certs)
        decision = admission.decide(ev.policy, [i for i, _ in named], [item], compatibility_route(rec, certs), ev.when,
                                    trust_store=ev.store, screen=ev.screen)
        row.update(routable=decision.routable, state=ADMITTED if decision.routable else REFUSED,
                   reasons=list(decision.reasons))
        row["detail"] = (f"record expires {rec.expires_at}; max|dlogit| {rec.max_abs_delta_logit:.3g}, mean KL "
                         f"{rec.kl_divergence:.3g}, top-1 {rec.top1_agreement:.3f}, greedy {rec.greedy_agreement:.2f}"
                         if decision.routable else "; ".join(decision.reasons))
    return rows


def relative_link(target: str, page_dir: pathlib.Path) -> str:
    """target as a link relative to the page's directory, in URL form (the page is committed: no
    host's absolute paths)."""
    return pathlib.PurePath(os.path.relpath(target, page_dir)).as_posix()
