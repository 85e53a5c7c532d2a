"""Artifact integrity: bin/ and lib/ re-hashed against the build evidence, the binary itself says it
is the evidence's upstream commit and patch stack (the lane stamp of patch 0001), and every shared
library the dynamic loader resolves for the lane's ELF files, in the lane processes' environment, is
a lane file, a system library or the SDK's (runs of runner >= RESOLUTION_SINCE)."""

from __future__ import annotations

import pathlib
import re

from proto import build_evidence_pb2
from proto import runner_report_pb2 as rpb
from tools.core.digest import sha256_file
from tools.evidence import build_evidence
from tools.runner import exits, lane_files, loaded_libraries, log_blocks
from tools.runner.checks.base import Check
from tools.runner.context import RunContext
from tools.runner.steps import Step

CR = rpb.CheckResult

_COMMIT_RE = re.compile(r"^version: .*\(build \d+, commit ([0-9a-f]+)\)", re.MULTILINE)
_STAMP_RE = re.compile(r"^lanes: lane (\S+), patch stack (\S+)\s*$", re.MULTILINE)


def hash_artifacts(lane_dir: pathlib.Path) -> list[rpb.ArtifactDigest]:
    return [rpb.ArtifactDigest(path=str(p.relative_to(lane_dir)), sha256=sha256_file(p))
            for p in lane_files.files(lane_dir)]


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


STEP = "artifact_integrity"
# Runs from this runner version on list what the loader resolves for every lane ELF file.
RESOLUTION_SINCE = (0, 4, 0)


def logged_hashes(logs_dir: pathlib.Path) -> tuple[dict[str, str], dict[str, str]]:
    """(evidence path -> sha256, found path -> sha256) from the runner's own lines of the step log;
    a lane binary's output (inside a command block) cannot add or change one."""
    listed: dict[str, str] = {}
    found: dict[str, str] = {}
    text = log_blocks.runner_lines(log_blocks.read(pathlib.Path(logs_dir) / f"{STEP}.log"))
    for kind, path, sha in _HASH_LINE.findall(text):
        (listed if kind == "evidence" else found)[path] = sha
    return listed, found


def found_artifacts(logs_dir: pathlib.Path) -> list[rpb.ArtifactDigest]:
    """report.artifacts as the step logged them (the audit compares the report's list with this)."""
    return [rpb.ArtifactDigest(path=p, sha256=sha) for p, sha in logged_hashes(logs_dir)[1].items()]


def recompute(logs_dir: pathlib.Path) -> tuple[dict[str, int], dict[str, float]]:
    """Artifacts the evidence lists and how many differ from what was hashed on disk (or are extra)."""
    listed, found = logged_hashes(logs_dir)
    mismatched = sum(1 for p, sha in listed.items() if found.get(p) != sha)
    mismatched += sum(1 for p in found if p not in listed)  # extra files are not covered by the evidence
    return {"artifacts_checked": len(listed), "artifacts_mismatched": mismatched}, {}


def evidence_beside(logs_dir: pathlib.Path) -> build_evidence_pb2.BuildEvidence | None:
    """The run's build evidence (<run dir>/build_evidence.pb, bound by the report's digest), if there."""
    try:
        return build_evidence_pb2.BuildEvidence.FromString((pathlib.Path(logs_dir).parent / "build_evidence.pb").read_bytes())
    except Exception:  # OSError, DecodeError: the caller names what it lacks
        return None


def problems(logs_dir: pathlib.Path, lane: object = None) -> list[str]:
    """Why the raw files fail this check (empty = PASS): the logged hashes of both sides, and the
    logged `--version` output against the bindings in the step config (the audit checks those
    against the run's build evidence; runs made before the config held them: that evidence)."""
    logs_dir = pathlib.Path(logs_dir)
    config = log_blocks.step_config(logs_dir, STEP)
    bindings = {k: config.get(k, "") for k in ("lane_id", "upstream_commit", "patch_stack_digest")}
    if not all(bindings.values()):
        ev = evidence_beside(logs_dir)
        if ev is None:
            return [f"{STEP}.config.json lacks {', '.join(k for k, v in bindings.items() if not v)} and no "
                    "build_evidence.pb is beside the logs: the verdict cannot be re-derived"]
        bindings = {"lane_id": ev.lane_id, "upstream_commit": ev.upstream.commit, "patch_stack_digest": ev.patch_stack_digest}
    listed, found = logged_hashes(logs_dir)
    out = [] if listed else ["the evidence lists no artifacts"]
    for path, sha in listed.items():
        if path not in found:
            out.append(f"{path}: missing")
        elif found[path] != sha:
            out.append(f"{path}: sha256 {found[path][:12]}.. != evidence {sha[:12]}..")
    out += [f"{path}: not in the evidence" for path in found if path not in listed]
    version = [c for c in log_blocks.commands(log_blocks.read(logs_dir / f"{STEP}.log"))
               if c.argv[-1:] == ["--version"] and c.argv[0].endswith("/llama-completion")]
    if not version:
        return out + ["no `llama-completion --version` in the step log"]
    res = version[-1]
    if res.exit_code != 0:
        out.append(f"llama-completion --version exited {exits.describe(res.exit_code)}")
    if not log_blocks.run_predates(RESOLUTION_SINCE):
        out += resolution_problems(logs_dir, config, set(found))
    return out + version_problems(res.output, bindings["lane_id"], bindings["upstream_commit"], bindings["patch_stack_digest"])


def logged_resolutions(logs_dir: pathlib.Path) -> list[tuple[str, str, str]]:
    text = log_blocks.runner_lines(log_blocks.read(pathlib.Path(logs_dir) / f"{STEP}.log"))
    return [(m["file"], m["name"], m["where"]) for m in loaded_libraries.RESOLUTION_LINE.finditer(text)]


def resolution_problems(logs_dir: pathlib.Path, config: dict[str, str], lane_paths: set[str]) -> list[str]:
    """The loader's resolutions as logged: every lane ELF file listed (config `elf_files`), each
    resolution the lane's, the system's or the SDK's (config `sdk_roots`)."""
    if "elf_files" not in config:
        return ["the step config lists no elf_files: the loader's resolutions were not recorded"]
    elf_files = [f for f in config["elf_files"].split(",") if f]
    resolutions = logged_resolutions(logs_dir)
    listed = {file for file, _, _ in resolutions}
    out = [f"{f}: the loader's resolutions were not recorded" for f in elf_files if f not in listed]
    out += [f"loader listing: {p}" for p in config.get("loader_errors", "").split(";") if p]
    roots = [r for r in config.get("sdk_roots", "").split(",") if r]
    cache = {f for f in config.get("loader_cache_files", "").split(",") if f}
    return out + loaded_libraries.resolution_problems(resolutions, lane_paths, roots, cache)


def record_resolutions(ctx: RunContext, step: Step) -> None:
    """Lists each lane ELF file with the system loader (`--list`: resolves, runs nothing of the
    lane) in the lane processes' environment and logs each resolution, classified by real path.
    Executables first; then the shared objects, with the lane libraries the executables load
    preloaded: ggml dlopens its CPU variants (bin/libggml-cpu-*.so) into a process that already has
    libggml-base, which satisfies their NEEDED entry by its soname."""
    lane_dir = ctx.config.lane_dir
    files = [p for p in lane_files.files(lane_dir) if loaded_libraries.is_elf(p)]
    own = {loaded_libraries._real(p): str(p.relative_to(lane_dir)) for p in lane_files.files(lane_dir)}
    roots = [loaded_libraries._real(r) for r in loaded_libraries.sdk_roots(ctx.lane.is_accelerator)]
    # The GPU driver's libraries (libcuda.so.1, which ggml-cuda's VMM pool links) come from the host:
    # accepted where the system loader's cache names a root-controlled file, as llama-server's mapped
    # libraries are; each one used is listed in the step config for the audit.
    cache = loaded_libraries.loader_cache_files()
    cache_used: set[str] = set()
    errors: list[str] = []
    interpreters: dict[pathlib.Path, str | None] = {}
    for p in files:
        try:
            interpreters[p] = loaded_libraries.elf_interpreter(p)
        except (OSError, loaded_libraries.LoaderListError) as err:
            errors.append(f"{p.relative_to(lane_dir)}: {err}")
    named = set(v for v in interpreters.values() if v)
    loader = named.pop() if len(named) == 1 else None
    if named:
        errors.append(f"the lane's executables name different loaders: {loader}, {', '.join(sorted(named))}")
        loader = None
    elif files and loader is None:
        errors.append("no lane executable names a loader (PT_INTERP)")
    step.config("elf_files", ",".join(str(p.relative_to(lane_dir)) for p in files))
    step.config("sdk_roots", ",".join(roots))
    executables = [p for p, interp in interpreters.items() if interp]
    shared = [p for p, interp in interpreters.items() if not interp]
    loaded_by_executables: set[str] = set()

    def listing(p: pathlib.Path, preload: list[str]) -> None:
        rel = str(p.relative_to(lane_dir))
        argv = [loader] + (["--preload", " ".join(preload)] if preload else []) + ["--list", str(p)]
        res = step.run(argv, ctx.config.timeout_s)
        try:
            if res.exit_code != 0:
                raise loaded_libraries.LoaderListError(f"{loader} --list exited {exits.describe(res.exit_code)}")
            resolved = loaded_libraries.parse_loader_list(res.output)
        except loaded_libraries.LoaderListError as err:
            errors.append(f"{rel}: {err}")
            return
        for name, path in resolved:
            where = "missing:" if path is None else loaded_libraries.classify(path, own, roots, cache)
            if where.startswith("cache:"):
                cache_used.add(where.removeprefix("cache:"))
            if where.startswith("lane:lib/") and p in executables:
                loaded_by_executables.add(path)
            step.log(f"resolves {rel} {name} => {where}")

    for p in executables if loader else []:
        listing(p, [])
    preload = sorted(loaded_by_executables)
    if any(" " in x or ":" in x for x in preload):
        errors.append("a lane library path has a space or colon: the loader cannot preload it")
        preload = []
    for p in shared if loader else []:
        listing(p, preload)
    step.config("loader_errors", ";".join(e.replace(";", ",") for e in errors))
    step.config("loader_cache_files", ",".join(sorted(cache_used)))


def run_artifact_integrity(ctx: RunContext, step: Step, report: rpb.RunnerReport) -> tuple[int, str]:
    ev, lane_dir = ctx.evidence, ctx.config.lane_dir
    # The bindings problems() judges the log against (the audit ties them to the run's evidence).
    step.config("lane_id", ctx.lane.lane_id)
    step.config("upstream_commit", ev.upstream.commit)
    step.config("patch_stack_digest", ev.patch_stack_digest)
    step.config("build_evidence_digest", build_evidence.evidence_digest(ctx.config.evidence))
    report.artifacts.extend(hash_artifacts(lane_dir))
    # Both sides logged per file, so an auditor recomputes the comparison (and can re-hash the files).
    for a in ev.artifacts:
        step.log(f"evidence {a.path} sha256={a.sha256}")
    for a in report.artifacts:
        step.log(f"found {a.path} sha256={a.sha256}")
    problems = lane_files.differences(ev, lane_dir)
    counts, _ = recompute(ctx.logs_dir)
    step.result.counts.update(counts)
    for p in problems:
        step.log(f"artifact: {p}")
    res = step.run([ctx.bin("llama-completion"), "--version"], ctx.config.timeout_s)
    step.result.exit_code = res.exit_code
    if res.exit_code != 0:
        problems.append(f"llama-completion --version exited {exits.describe(res.exit_code)}")
    problems += version_problems(res.output, ctx.lane.lane_id, ev.upstream.commit, ev.patch_stack_digest)
    record_resolutions(ctx, step)
    problems += resolution_problems(ctx.logs_dir, log_blocks.step_config(ctx.logs_dir, STEP),
                                    {a.path for a in report.artifacts})
    if problems:
        return CR.FAIL, "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else "")
    return CR.PASS, f"{len(ev.artifacts)} artifacts match the evidence; commit {ev.upstream.commit[:7]}, patch stack {ev.patch_stack_digest}"


CHECK = Check(name=STEP, run=run_artifact_integrity, recompute=recompute, problems=problems)
