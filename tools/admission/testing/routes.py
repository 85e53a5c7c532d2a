"""Test fixtures (testonly): routes over sample reports' nodes, and compatibility records bound to
certification records, for deciding with admission."""

from __future__ import annotations

from collections.abc import Sequence

from proto import certification_pb2, runner_report_pb2
from tools.admission import admission
from tools.certify import records, sample_reports
from tools.runner.checks import corpus_parity


def route_for(report, route_id: str = "r1"):
    recipe = sample_reports.make_recipe(kv_cache_types=["f16"], flash_attention=["off"], context_size=2048,
                                        parallel_sequences=1)
    return admission.route_from_nodes([sample_reports.node_for(report)], sample_reports.MODEL_SHA256, route_id, recipe)


def codes(decision) -> set[str]:
    """The refusal codes of a decision (each reason is "<code>: <why>")."""
    return {r.split(":", 1)[0] for r in decision.reasons}


def refused_with(decision, code: str, shown: int = 160) -> None:
    assert not decision.routable, decision
    assert code in codes(decision), decision.reasons
    print(f"REFUSED {code}: {decision.reasons[0][:shown]}")


def admitted(decision) -> None:
    assert decision.routable, decision.reasons


def compatibility_record(certs: Sequence[certification_pb2.CertificationRecord],
                         recipe: runner_report_pb2.Recipe | None = None, corpus_bounds: str = "f16",
                         **fields) -> certification_pb2.CompatibilityRecord:
    """An unsigned CompatibilityRecord measured with exactly `certs`, as tools/compat builds one: their
    lanes, device classes, builds, record ids, model and llama.cpp pin, and the recipe the route ran
    (default: the first record's). `corpus_bounds`: the model's kind as its corpus comparison states
    it ("f16": an F32 model on accelerators; "quantized"). `fields` sets the rest (figures,
    tolerances, issuer, times)."""
    rec = certification_pb2.CompatibilityRecord(
        schema_version=records.COMPATIBILITY_SCHEMA_VERSION, model_sha256=certs[0].model.sha256,
        upstream_commit=certs[0].upstream_commit, patch_stack_digest=certs[0].patch_stack_digest, **fields)
    for cert in certs:
        rec.lane_ids.append(cert.scope.lane_id)
        rec.lanes.add(lane_id=cert.scope.lane_id, device_class=cert.scope.device_class,
                      build_evidence_digest=cert.build_evidence_digest, server_device="X0")
        rec.certification_record_ids.append(cert.record_id)
    rec.recipe.CopyFrom(recipe if recipe is not None else certs[0].recipe)
    # tools/compat's corpus comparison with the CPU lane, as a compatible measurement gives it.
    mean_kl, p99_kl, top1 = (0.002, 0.02, 0.99) if corpus_bounds == "quantized" else (0.0005, 0.005, 0.995)
    rec.corpus_parity.CopyFrom(certification_pb2.CompatibilityCorpus(
        corpus_sha256=corpus_parity.CORPUS_SHA256, bounds=corpus_bounds, positions=4096, decisive_positions=2000,
        mean_kl=mean_kl, p99_kl=p99_kl, top1_agreement_decisive=top1, perplexity_ratio=1.001, route_perplexity=15.0,
        cpu_perplexity=14.99))
    if not rec.recipe.longest_sequence_tokens:
        # tools/compat states the longest sequence it compared; the sample routes ask for whole contexts.
        rec.recipe.longest_sequence_tokens = rec.recipe.context_size
    return rec


def candidate_codes(decision) -> list[str]:
    """The refusal code of each compatibility record a mixed route's reason names as a candidate
    ("mixed-backends-without-compatibility: ...; candidates: <file>: <code>: <why> | ...")."""
    out = []
    for reason in decision.reasons:
        if reason.startswith(admission.MIXED_WITHOUT_COMPATIBILITY + ":") and "; candidates: " in reason:
            for note in reason.split("; candidates: ", 1)[1].split(" | "):
                parts = note.split(": ", 2)
                out.append(parts[1] if len(parts) == 3 else "")
    return out
