"""Artifact integrity: bin/ and lib/ re-hashed against the build evidence, and the binary itself says
it is the evidence's upstream commit and patch stack (the lane stamp of patch 0001)."""

from __future__ import annotations

import pathlib
import re

from proto import runner_report_pb2 as rpb
from tools.core.digest import sha256_file
from tools.evidence import build_evidence
from tools.runner import exits, log_blocks
from tools.runner.checks.base import Check
from tools.runner.context import RunContext
from tools.runner.steps import Step

CR = rpb.CheckResult

_COMMIT_RE = re.compile(r"^version: .*\(build \d+, commit ([0-9a-f]+)\)", re.MULTILINE)
_STAMP_RE = re.compile(r"^lanes: lane (\S+), patch stack (\S+)\s*$", re.MULTILINE)


def lane_files(lane_dir: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for sub in ("bin", "lib") for p in (lane_dir / sub).rglob("*") if p.is_file())


def hash_artifacts(lane_dir: pathlib.Path) -> list[rpb.ArtifactDigest]:
    return [rpb.ArtifactDigest(path=str(p.relative_to(lane_dir)), sha256=sha256_file(p))
            for p in lane_files(lane_dir)]


def parse_version(text: str) -> tuple[str, str, str]:
    """(short commit, lane id, patch stack digest) from `llama-completion --version`."""
    commit = _COMMIT_RE.search(text)
    stamp = _STAMP_RE.search(text)
    return (commit.group(1) if commit else "", stamp.group(1) if stamp else "", stamp.group(2) if stamp else "")


def version_problems(text: str, lane_id: str, upstream_commit: str, patch_stack_digest: str) -> list[str]:
    commit, stamped_lane, stamped_digest = parse_version(text)
    problems = []
    if len(commit) < 7 or not upstream_commit.startswith(commit):
        problems.append(f"--version commit {commit or '(none)'} is not the evidence's upstream commit {upstream_commit[:12]}")
    if not stamped_lane:
        problems.append("--version prints no 'lanes: lane <id>, patch stack <digest>' stamp (a stock, unpatched build?)")
    else:
        if stamped_lane != lane_id:
            problems.append(f"binary is stamped for lane {stamped_lane}, not {lane_id}")
        if stamped_digest != patch_stack_digest:
            problems.append(f"binary's patch stack {stamped_digest} != evidence {patch_stack_digest}")
    return problems


_HASH_LINE = re.compile(r"^(evidence|found) (\S+) sha256=(\S*)$", re.MULTILINE)


def recompute(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float]]:
    """Artifacts the evidence lists and how many differ from what was hashed on disk (or are extra)."""
    listed: dict[str, str] = {}
    found: dict[str, str] = {}
    for kind, path, sha in _HASH_LINE.findall(log_blocks.read(logs_dir / "artifact_integrity.log")):
        (listed if kind == "evidence" else found)[path] = sha
    mismatched = sum(1 for p, sha in listed.items() if found.get(p) != sha)
    mismatched += sum(1 for p in found if p not in listed)  # extra files are not covered by the evidence
    return {"artifacts_checked": len(listed), "artifacts_mismatched": mismatched}, {}


def run_artifact_integrity(ctx: RunContext, step: Step, report: rpb.RunnerReport) -> tuple[int, str]:
    ev, lane_dir = ctx.evidence, ctx.config.lane_dir
    report.artifacts.extend(hash_artifacts(lane_dir))
    # Both sides logged per file, so an auditor recomputes the comparison (and can re-hash the files).
    for a in ev.artifacts:
        step.log(f"evidence {a.path} sha256={a.sha256}")
    for a in report.artifacts:
        step.log(f"found {a.path} sha256={a.sha256}")
    problems = build_evidence.verify_artifacts(ev, lane_dir)
    listed = {a.path for a in ev.artifacts}
    # A file the evidence does not list (say, an extra .so on the RUNPATH) is not covered by it either.
    problems += [f"{a.path}: not in the evidence" for a in report.artifacts if a.path not in listed]
    counts, _ = recompute(ctx.logs_dir)
    step.result.counts.update(counts)
    for p in problems:
        step.log(f"artifact: {p}")
    res = step.run([ctx.bin("llama-completion"), "--version"], ctx.config.timeout_s)
    step.result.exit_code = res.exit_code
    if res.exit_code != 0:
        problems.append(f"llama-completion --version exited {exits.describe(res.exit_code)}")
    problems += version_problems(res.output, ctx.lane.lane_id, ev.upstream.commit, ev.patch_stack_digest)
    if problems:
        return CR.FAIL, "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else "")
    return CR.PASS, f"{len(ev.artifacts)} artifacts match the evidence; commit {ev.upstream.commit[:7]}, patch stack {ev.patch_stack_digest}"


CHECK = Check(name="artifact_integrity", run=run_artifact_integrity, recompute=recompute)
