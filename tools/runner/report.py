"""The RunnerReport: host facts, assembly of the verdict, writing (.pb + .json twin), summary table."""

from __future__ import annotations

import os
import pathlib
import platform
import socket

from google.protobuf import json_format

from proto import runner_report_pb2 as rpb
from tools.core import atomic_files, errors
from tools.core.digest import sha256_file

CR = rpb.CheckResult
SCHEMA_VERSION = 1


# Every ReportWriteError message starts so; a finished report carries it among its reasons.
UNWRITABLE = "cannot write the report"


class ReportWriteError(errors.UnwritableOutputError):
    """The report path cannot be written."""


def host_info() -> rpb.HostInfo:
    uname = platform.uname()
    h = rpb.HostInfo(hostname=socket.gethostname(), os=uname.system.lower(), arch=uname.machine,
                     kernel=uname.release, cpu_count=os.cpu_count() or 0)
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                h.cpu_model = line.partition(":")[2].strip()
                break
        for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                h.memory_bytes = int(line.split()[1]) * 1024
                break
    except OSError:
        pass  # not Linux: informational fields stay empty
    return h


def log_digest(path: pathlib.Path, report_dir: pathlib.Path) -> rpb.LogDigest:
    return rpb.LogDigest(path=os.path.relpath(path, report_dir), sha256=sha256_file(path), size=path.stat().st_size)


def verdict(report: rpb.RunnerReport, non_recordable: list[str]) -> None:
    """Sets status and pass_recordable from the checks: fail closed."""
    required = [c for c in report.checks if c.required]
    if any(c.status == CR.UNAVAILABLE for c in required):
        report.status = rpb.RunnerReport.UNAVAILABLE
    elif required and all(c.status == CR.PASS for c in required):
        report.status = rpb.RunnerReport.PASS
    else:
        report.status = rpb.RunnerReport.FAIL
    report.non_recordable_reasons[:] = list(dict.fromkeys(non_recordable))
    report.pass_recordable = report.status == rpb.RunnerReport.PASS and not report.non_recordable_reasons


def check_writable(report_path: pathlib.Path) -> None:
    """Fails fast, before hours of checks, when the report cannot be written."""
    try:
        report_path.parent.mkdir(parents=True, exist_ok=True)
        probe = report_path.with_name(report_path.name + ".probe")
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise ReportWriteError(f"{UNWRITABLE} at {report_path}: {err.strerror or err}; "
                               "pass a writable --report path") from err


def json_path(report_path: pathlib.Path) -> pathlib.Path:
    return report_path.with_suffix(".json") if report_path.suffix == ".pb" else report_path.with_name(report_path.name + ".json")


def write_report(report: rpb.RunnerReport, report_path: pathlib.Path) -> pathlib.Path:
    """Writes <report>.pb and its .json twin atomically; returns the JSON path."""
    twin = json_path(report_path)
    try:
        # The .json twin first: the .pb (what certify reads and digests) appears only when both exist.
        for path, data in ((twin, (json_format.MessageToJson(report, sort_keys=True) + "\n").encode()),
                           (report_path, report.SerializeToString(deterministic=True))):
            atomic_files.write_bytes_atomic(path, data)
    except OSError as err:
        reason = err.strerror.partition(": ")[2] if isinstance(err, atomic_files.AtomicWriteError) else (err.strerror or err)
        raise ReportWriteError(f"{UNWRITABLE} at {report_path}: {reason}") from err
    return twin


def unwritable(report: rpb.RunnerReport) -> bool:
    """The run ended because its report could not be written (a ReportWriteError's reason)."""
    return any(r.startswith(UNWRITABLE) for r in report.non_recordable_reasons)


def _figures(c: rpb.CheckResult) -> str:
    from tools.runner import checks  # the registry imports the checks, which use this module's callers
    check = checks.get(c.name)
    return check.summary_figures(dict(c.counts), dict(c.metrics)) if check is not None else ""


def summary_table(report: rpb.RunnerReport) -> str:
    rows = [("check", "status", "seconds", "figures")]
    for c in report.checks:
        rows.append((c.name, CR.Status.Name(c.status), f"{c.seconds:.1f}", _figures(c) or c.message[:80]))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = ["  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3] for r in rows]
    lines.append(f"lane {report.lane_id}: {rpb.RunnerReport.Status.Name(report.status)}, "
                 f"pass_recordable={str(report.pass_recordable).lower()}")
    lines += [f"  non-recordable: {r}" for r in report.non_recordable_reasons]
    lines += [f"  {c.name}: {c.message}" for c in report.checks if c.required and c.status != CR.PASS]
    return "\n".join(lines)
