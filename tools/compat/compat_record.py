"""A CompatibilityRecord (unsigned) from a mixed-route measurement (rpc_route.py's out_dir).

The figures are re-derived from the raw files (recompute) and must equal compat_report.json's;
every raw file's digest is checked against the report's. The lanes' certification records are the
records whose report digest is the runner report named in the measurement (same host, same
session), so the compatibility record is bound to exactly those certified runs, and its llama.cpp
pin (upstream commit, patch stack digest) is theirs. Its recipe is the one the route's commands ran
(rpc_route.recipe_from_argv); a measurement that states none makes no record.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import pathlib
from collections.abc import Mapping

from google.protobuf import json_format
from google.protobuf.message import DecodeError

from proto import certification_pb2
from proto import runner_report_pb2 as rpb
from tools.compat import rpc_route
from tools.runner.checks import corpus_parity, reference_parity


class CompatibilityInputError(Exception):
    """The measurement is incomplete, inconsistent with its raw files, or not compatible."""


def _digest(path: pathlib.Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def same_figures(a: object, b: object) -> bool:
    """Equal, floats to 1e-9 relative: a figure re-derived on another CPU (numpy's SIMD sums) may
    differ in its last bits; anything an editor could change differs by far more."""
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(same_figures(a[k], b[k]) for k in a)
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(same_figures(x, y) for x, y in zip(a, b))
        return type(a) is type(b) and a == b
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15)


def load_measurement(out_dir: pathlib.Path) -> dict:
    path = out_dir / rpc_route.REPORT_FILE
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise CompatibilityInputError(f"{path}: not a readable measurement ({err}); run tools.compat.rpc_route_cli") from err
    for name, digest in sorted(report.get("log_digests", {}).items()):
        raw = out_dir / "logs" / name
        if not raw.is_file() or _digest(raw) != digest:
            raise CompatibilityInputError(f"{raw}: missing or changed since the measurement (digest {digest})")
    again = rpc_route.recompute(out_dir)
    for key in ("comparisons", "worst", "rpc_protocol_version", "problems", "compatible", "tolerances",
                "model_sha256", "prompts_measured", "logit_prompts_measured", "endpoints", "lanes_measured"):
        if not same_figures(again[key], report.get(key)):
            raise CompatibilityInputError(f"{path}: {key} differs from what its raw files give: the report was edited")
    # A measurement made before the recipe was recorded states none, in its report and its raw files.
    if not same_figures(again["recipe"], report.get("recipe", {})):
        raise CompatibilityInputError(f"{path}: recipe differs from what its raw files give: the report was edited")
    # Likewise the corpus comparison ({} before the route had one).
    if not same_figures(again["corpus"], report.get("corpus", {})):
        raise CompatibilityInputError(f"{path}: corpus differs from what its raw files give: the report was edited")
    logged = sorted(f"{lane['lane_id']} {lane['build_evidence_digest']} {lane['certification_report_digest'] or '-'} "
                    f"{lane['server_device']}" for lane in report["lanes"])
    if logged != again["lanes_measured"]:
        raise CompatibilityInputError(f"{path}: its lanes differ from the lanes compat.log says were measured")
    if not report["compatible"]:
        raise CompatibilityInputError(f"{path}: the route is not compatible: {'; '.join(report['problems'])}")
    return report


def records_by_report_digest(records_dir: pathlib.Path) -> dict[str, certification_pb2.CertificationRecord]:
    """{runner report digest: certification record} of the records in a directory, read without
    verifying them: what binds the measurement to them. Signing verifies; admission re-checks every
    record it is given (and the pin and recipe against them)."""
    out: dict[str, certification_pb2.CertificationRecord] = {}
    for path in sorted(records_dir.glob("*.record.dsse.json")):
        try:
            payload = base64.b64decode(json.loads(path.read_text())["payload"])
            rec = certification_pb2.CertificationRecord()
            rec.ParseFromString(payload)
        except (OSError, ValueError, KeyError, DecodeError) as err:
            raise CompatibilityInputError(f"{path}: not a readable record envelope ({err})") from err
        if rec.report_digest in out and out[rec.report_digest].record_id != rec.record_id:
            raise CompatibilityInputError(f"{path}: a second record for runner report {rec.report_digest}")
        out[rec.report_digest] = rec
    return out


def record_ids_by_report_digest(records_dir: pathlib.Path) -> dict[str, str]:
    """{runner report digest: certification record id} of the records in a directory (unverified)."""
    return {digest: rec.record_id for digest, rec in records_by_report_digest(records_dir).items()}


def _pin(certified: list[certification_pb2.CertificationRecord]) -> tuple[str, str]:
    """The one llama.cpp pin (upstream commit, patch stack digest) of the lanes' certification records:
    from their signed build facts, never from anything a lane process printed."""
    pins = sorted({(c.upstream_commit, c.patch_stack_digest) for c in certified})
    if len(pins) != 1:
        raise CompatibilityInputError(f"the lanes' certification records name different llama.cpp pins {pins}: "
                                      "a compatibility record states one")
    if not all(pins[0]):
        raise CompatibilityInputError(f"the lanes' certification records name no upstream commit or patch stack "
                                      f"digest ({pins[0]}): re-certify the lanes")
    return pins[0]


def _check_corpus_bounds(report: dict, model: pathlib.Path) -> None:
    if _digest(model).removeprefix("sha256:") != report["model_sha256"]:
        raise CompatibilityInputError(f"{model}: not the model the route was measured with ({report['model_sha256'][:16]})")
    try:
        kind = corpus_parity.bounds_kind(reference_parity.quantized_types(model), accelerator=True)
    except (OSError, ValueError) as err:
        raise CompatibilityInputError(f"{model}: cannot read its tensor types ({err})") from err
    stated = (report.get("corpus") or {}).get("bounds")
    if stated is not None and stated != kind:
        raise CompatibilityInputError(f"the measurement judged its corpus parity with {stated!r} bounds; the model's "
                                      f"tensor types call for {kind!r}")


def build(out_dir: pathlib.Path, certified: Mapping[str, certification_pb2.CertificationRecord],
          model: pathlib.Path | None = None) -> certification_pb2.CompatibilityRecord:
    """The record of a compatible measurement; `certified` is records_by_report_digest's map. With
    `model` (the CLI requires it) the corpus bounds kind is re-derived from the model's tensor types:
    a measurement whose configuration names looser bounds than its model's makes no record."""
    report = load_measurement(out_dir)
    if model is not None:
        _check_corpus_bounds(report, pathlib.Path(model))
    if not report.get("recipe"):
        raise CompatibilityInputError(f"{out_dir}: the measurement states no recipe (made before tools/compat "
                                      "recorded one): measure the route again")
    corpus = report.get("corpus") or {}
    if not corpus:
        raise CompatibilityInputError(f"{out_dir}: the measurement has no corpus comparison with the CPU lane (made "
                                      "before tools/compat ran one): measure the route again")
    rec = certification_pb2.CompatibilityRecord(
        lane_ids=[lane["lane_id"] for lane in report["lanes"]],
        model_sha256=report["model_sha256"],  # equal to the digest compat.log names (checked above)
        kl_divergence=report["worst"]["mean_kl"],
        top1_agreement=report["worst"]["top1_agreement"],
        max_abs_delta_logit=report["worst"]["max_abs_delta_logit"],
        greedy_agreement=report["worst"]["greedy_agreement"],
        rpc_protocol_version=report["rpc_protocol_version"],
        endpoints=report["endpoints"],
        loopback=bool(report["network"]["loopback"]),
        prompts=report["prompts_measured"],
        measurement_digest=_digest(out_dir / rpc_route.REPORT_FILE),
    )
    tol = report["tolerances"]
    rec.tolerances.CopyFrom(certification_pb2.Tolerances(
        max_kl_divergence=tol["max_mean_kl"], min_top1_agreement=tol["min_top1_agreement"],
        max_abs_delta_logit=tol["max_abs_delta_logit"], min_greedy_agreement=tol["min_greedy_agreement"]))
    rec.raw_file_digests.update(report["log_digests"])
    for who, c in sorted(report["comparisons"].items()):
        rec.comparisons[who].CopyFrom(certification_pb2.CompatibilityComparison(
            max_abs_delta_logit=c["max_abs_delta_logit"], mean_kl=c["mean_kl"],
            top1_agreement_decisive=c["top1_agreement_decisive"], greedy_agreement=c["greedy_agreement"],
            positions=c["n_tokens"], decisive_positions=c["n_decisive"]))
    rec.corpus_parity.CopyFrom(certification_pb2.CompatibilityCorpus(
        corpus_sha256=corpus["corpus_sha256"], bounds=corpus["bounds"], positions=corpus["n_compared"],
        decisive_positions=corpus["n_decisive"], mean_kl=corpus["mean_kl"], p99_kl=corpus["p99_kl"],
        top1_agreement_decisive=corpus["top1_agreement_decisive"], perplexity_ratio=corpus["ppl_ratio"],
        route_perplexity=corpus["compared_perplexity"], cpu_perplexity=corpus["reference_perplexity"]))
    try:
        json_format.ParseDict(report["recipe"], rec.recipe)
    except json_format.ParseError as err:
        raise CompatibilityInputError(f"{out_dir}: the measurement's recipe is not a Recipe ({err})") from err
    bound = []
    for lane in report["lanes"]:
        entry = rec.lanes.add(lane_id=lane["lane_id"], build_evidence_digest=lane["build_evidence_digest"],
                              server_device=lane["server_device"])
        json_format.ParseDict(lane["device_class"], entry.device_class)
        cert = certified.get(lane["certification_report_digest"]) if lane["certification_report_digest"] else None
        if cert is None:
            raise CompatibilityInputError(
                f"lane {lane['lane_id']}: no certification record for its runner report "
                f"{lane['certification_report_digest'] or '(none named)'}: certify the lane from that run first")
        if cert.scope.lane_id != lane["lane_id"] or cert.build_evidence_digest != lane["build_evidence_digest"]:
            raise CompatibilityInputError(
                f"lane {lane['lane_id']}: the certification record of its runner report is of lane "
                f"{cert.scope.lane_id} built as {cert.build_evidence_digest}, not the build measured")
        rec.certification_record_ids.append(cert.record_id)
        bound.append(cert)
    rec.upstream_commit, rec.patch_stack_digest = _pin(bound)
    for value in (rec.kl_divergence, rec.max_abs_delta_logit, rec.top1_agreement, rec.greedy_agreement,
                  rec.corpus_parity.mean_kl, rec.corpus_parity.p99_kl, rec.corpus_parity.perplexity_ratio):
        if not math.isfinite(value):
            raise CompatibilityInputError("non-finite figure in the measurement")
    _ = rpb  # runner_report_pb2 registers DeviceClass for json_format
    return rec
