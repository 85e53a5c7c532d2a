"""What runs is what was hashed: a lane directory against its build evidence, at any time.

artifact_integrity hashes the lane under test once; a lane binary could rewrite a sibling after that
(the swapped binary would then run unhashed). So the runner re-hashes the lane under test, and the
reference CPU lane of an accelerator run, before every later step and after the last one. The
reference lane is the oracle of reference_parity and the denominator of the speed floors, so it is a
certified thing too: it comes with its build evidence, is hashed against it in preflight, and its
evidence digest is recorded in the report.
"""

from __future__ import annotations

import pathlib

from proto import build_evidence_pb2 as epb
from tools.core.digest import sha256_file
from tools.evidence import build_evidence


def files(lane_dir: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for sub in ("bin", "lib") for p in (lane_dir / sub).rglob("*") if p.is_file())


def differences(evidence: epb.BuildEvidence, lane_dir: pathlib.Path) -> list[str]:
    """Every file of bin/ and lib/ that differs from the evidence, is missing, or is not in it."""
    problems = build_evidence.verify_artifacts(evidence, lane_dir)
    listed = {a.path for a in evidence.artifacts}
    # A file the evidence does not list (say, an extra .so on the RUNPATH) is not covered by it either.
    problems += [f"{p.relative_to(lane_dir)}: not in the evidence" for p in files(lane_dir)
                 if str(p.relative_to(lane_dir)) not in listed]
    return problems


class ReferenceLaneError(ValueError):
    """The reference CPU lane is not the lane its build evidence describes."""


def verify_reference_lane(lane_dir: pathlib.Path, evidence_path: pathlib.Path | None,
                          arch: str) -> tuple[epb.BuildEvidence, str]:
    """(evidence, "sha256:<hex>" of it) of the reference CPU lane, or ReferenceLaneError naming why."""
    if evidence_path is None:
        raise ReferenceLaneError("accelerator lanes need --cpu_lane_evidence (the reference CPU lane's "
                                 "<lane>.evidence.pb): an unverified CPU lane is no oracle")
    try:
        evidence = build_evidence.read_evidence(evidence_path)
    except build_evidence.EvidenceError as err:
        raise ReferenceLaneError(f"--cpu_lane_evidence: {err}") from err
    want = f"linux-{arch}-cpu"
    if evidence.lane_id != want:
        raise ReferenceLaneError(f"--cpu_lane_evidence {evidence_path} is for lane {evidence.lane_id}, not {want}")
    problems = differences(evidence, lane_dir)
    if problems:
        raise ReferenceLaneError(f"the reference CPU lane {lane_dir} is not the lane of {evidence_path}: "
                                 + "; ".join(problems[:5]) + (f" (+{len(problems) - 5})" if len(problems) > 5 else ""))
    return evidence, "sha256:" + sha256_file(evidence_path)
