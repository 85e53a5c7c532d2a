"""The committed GPU diagnoses re-derive from their raw files: each build-difference probe table
(evidence/bench/*/probes/<name>.txt) from its llama-bench JSON (<name>.raw.tar.xz), and each KL probe
(evidence/diagnosis/*/kl_probe/<model>/kl_probe.txt) from the llama-perplexity outputs it names, by
digest, with every figure line found verbatim in the output it was read from. Diagnoses are never
certification evidence, but their figures are quoted in docs/ and must be what the raw files say.
"""

import collections
import hashlib
import io
import json
import pathlib
import sys
import tarfile

import pytest

from tools.bench import probe_table

EVIDENCE = pathlib.Path(__file__).resolve().parent.parent / "evidence"
# Every probe table: the probes' .txt files but their GPU and build logs (each table's raw archive
# must exist; a table without one fails rather than being left out).
PROBE_TABLES = sorted(p for p in EVIDENCE.glob("bench/*/probes/*.txt")
                      if not p.name.endswith(".gpu.txt") and ".reference_build" not in p.name)
KL_PROBES = sorted(EVIDENCE.glob("diagnosis/*/kl_probe/*/kl_probe.txt"))


def _variant_build(lines: list[str], where: pathlib.Path) -> str:
    """The variant reference a probe table compares: its '# <build>:' header other than lane and ref."""
    builds = {line[2:].split(":", 1)[0] for line in lines if line.startswith("# ")}
    variants = builds - {"lane", "ref"}
    assert len(variants) == 1, f"{where}: expected one variant build among {sorted(builds)}"
    return variants.pop()


def _committed_table(path: pathlib.Path) -> tuple[str, list[str]]:
    lines = path.read_text().splitlines()
    return _variant_build(lines, path), [line for line in lines if line and not line.startswith("# ")]


def _raw_archive(path: pathlib.Path) -> pathlib.Path:
    return path.with_name(path.name[:-len(".txt")] + ".raw.tar.xz")


def _members(archive: pathlib.Path) -> dict[str, bytes]:
    with tarfile.open(archive, "r:xz") as tar:
        return {pathlib.PurePosixPath(m.name).name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def lane_vmm(path: pathlib.Path) -> str:
    """Whether the probe's lane was built with VMM, as its '# lane:' header states from the lane's
    libggml-cuda (arch_probe_remote.sh); a header that states nothing is of a lane built without, and
    a probe of the references alone has no such line."""
    lines = [line for line in path.read_text().splitlines() if line.startswith("# lane:")]
    assert len(lines) <= 1, f"{path}: expected at most one '# lane:' header line, found {len(lines)}"
    return "yes" if lines and "VMM on:" in lines[0] else "no"


def raw_identity_problems(files: dict[str, bytes], lane_vmm_state: str = "no") -> list[str]:
    """Whether each raw file is from the build and model its name says, by llama-bench's own output:
    the lane states the pin's commit, a reference built from the source archive states none
    ('unknown'); ggml-cuda prints whether VMM is on (the lane: as its header says; a *novmm
    reference: no; any other reference: yes); the model file is the one named; and every build ran
    as many rounds of each model as the others."""
    problems, rounds = [], collections.Counter()
    for name, data in sorted(files.items()):
        if not name.endswith(".json"):
            continue
        model, build, _ = name[:-len(".json")].rsplit(".", 2)
        rows = json.loads(data or b"[]")
        if not rows:
            problems.append(f"{name}: no rows (a failed round)")
        for row in rows:
            rounds[(model, build, "pp" if row["n_prompt"] else "tg")] += 1
            commit = row.get("build_commit", "")
            if (build == "lane") != (commit != "unknown"):
                problems.append(f"{name}: build_commit {commit!r} is not {build}'s")
            if pathlib.PurePath(row.get("model_filename", "")).name != model + ".gguf":
                problems.append(f"{name}: model {row.get('model_filename')!r} is not {model}.gguf")
        vmm = lane_vmm_state if build == "lane" else "no" if "novmm" in build else "yes"
        log = files.get(name + ".log", b"").decode(errors="replace")
        if f"VMM: {vmm}," not in log:
            problems.append(f"{name}.log: expected ggml-cuda to report 'VMM: {vmm}' for {build}")
    for model, test in {(m, t) for m, _, t in rounds}:
        counts = {b: n for (m, b, t), n in rounds.items() if (m, t) == (model, test)}
        if len(set(counts.values())) != 1:
            problems.append(f"{model} {test}: unequal rounds per build {counts}")
    return problems


@pytest.mark.parametrize("path", PROBE_TABLES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_probe_table_is_recomputed_from_its_raw_json(path):
    variant, committed = _committed_table(path)
    raw = _raw_archive(path)
    assert raw.is_file(), f"{path}: its raw llama-bench JSON {raw.name} is not committed"
    assert probe_table.table_from_tar(raw, variant) == committed
    assert raw_identity_problems(_members(raw), lane_vmm(path)) == []


def test_a_raw_file_of_another_build_or_a_failed_round_is_found():
    path = next(p for p in PROBE_TABLES if p.name.startswith("gcc12novmm_probe."))
    files = _members(_raw_archive(path))
    assert raw_identity_problems(files) == []
    # This lane was built without VMM: a header claiming VMM on for it is refused by its own log.
    assert any("'VMM: yes' for lane" in p for p in raw_identity_problems(files, "yes"))
    ref = next(n for n in sorted(files) if ".refgcc12novmm." in n and n.endswith(".json"))
    swapped = dict(files)
    lane = ref.replace(".refgcc12novmm.", ".lane.")
    swapped[lane], swapped[lane + ".log"] = files[ref], files[ref + ".log"]  # the reference's run as the lane's
    assert any("is not lane's" in p for p in raw_identity_problems(swapped))
    failed = dict(files)
    failed[ref] = b""
    problems = raw_identity_problems(failed)
    assert any("a failed round" in p for p in problems) and any("unequal rounds" in p for p in problems)


@pytest.mark.parametrize("path", PROBE_TABLES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_a_lane_header_that_misstates_vmm_is_found(path):
    """The lane's VMM state is read from llama-bench's own log, not taken from the header: each probe
    of a lane, its header's state flipped, fails."""
    files = _members(_raw_archive(path))
    if not any(".lane." in name for name in files):
        pytest.skip(f"{path.name}: the references alone, no lane")
    flipped = "no" if lane_vmm(path) == "yes" else "yes"
    assert any(f"'VMM: {flipped}' for lane" in p for p in raw_identity_problems(files, flipped))


def test_the_host_compiler_and_vmm_probes_are_committed():
    names = {p.name.split(".")[0] for p in PROBE_TABLES}
    assert {"arch_probe", "gcc12_probe", "gcc12novmm_probe"} <= names, sorted(names)


def _tar_xz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_a_changed_raw_figure_changes_the_table(tmp_path):
    """The comparison can fail: one round of the lane made faster moves its median and ratio."""
    path = next(p for p in PROBE_TABLES if p.name.startswith("gcc12_probe."))
    variant, committed = _committed_table(path)
    raw = path.with_name(path.name[:-len(".txt")] + ".raw.tar.xz")
    with tarfile.open(raw, "r:xz") as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    name = next(n for n in sorted(files) if ".lane." in n and n.endswith(".json"))
    rows = json.loads(files[name])
    rows[0]["avg_ts"] *= 10
    files[name] = json.dumps(rows).encode()
    forged = tmp_path / "forged.raw.tar.xz"
    forged.write_bytes(_tar_xz(files))
    assert probe_table.table_from_tar(forged, variant) != committed


def test_raw_files_that_are_not_llama_bench_json_are_refused(tmp_path):
    with pytest.raises(probe_table.ProbeTableError, match="expected <model>.<build>.<round>.json"):
        probe_table.table([("tiny.json", "[]")], "ref90a")
    with pytest.raises(probe_table.ProbeTableError, match="not llama-bench JSON"):
        probe_table.table([("tiny.lane.0.json", "{")], "ref90a")
    empty = tmp_path / "empty.raw.tar.xz"
    empty.write_bytes(_tar_xz({"raw/README": b"x"}))
    with pytest.raises(probe_table.ProbeTableError, match="no raw llama-bench JSON"):
        probe_table.table_from_tar(empty, "ref90a")


def _build_problem(heading: str, log_text: str) -> str | None:
    """Whether the output is from the build its heading names, by llama.cpp's own system_info line:
    the CPU lane has no CUDA backend, the CUDA lane is built without VMM, upstream's default with it."""
    info = next((line for line in log_text.splitlines() if "system_info:" in line), "")
    cuda, no_vmm = "CUDA :" in info, "NO_VMM = 1" in info
    if "cpu lane" in heading.lower():
        ok = bool(info) and not cuda
    elif "cuda lane" in heading:
        ok = cuda and no_vmm
    elif "ref lane" in heading:
        ok = cuda and not no_vmm
    else:
        return f"heading names no build: {heading!r}"
    return None if ok else f"output under {heading!r} is not that build's (system_info: {info[:120]!r})"


def kl_probe_problems(probe: pathlib.Path) -> list[str]:
    """What in a KL probe's text its kept llama-perplexity outputs do not show: each heading (a base
    or a comparison) is followed by exactly one kept output, named <model>.<n>.log with n counting
    from 1 in order, from the build the heading names, with the digest the line states; every figure
    line after it is a line of that output. Only the file's last line may be a heading without an
    output (a probe stopped there)."""
    logs_dir = probe.parent / "kl_logs"
    model = probe.parent.name
    problems: list[str] = []
    lines = probe.read_text().splitlines()
    heading, current, runs = None, None, 0
    for i, line in enumerate(lines):
        if line.startswith("#"):
            if heading is not None:
                problems.append(f"heading without its output: {heading!r}")
            heading, current = line, None
            continue
        if line.startswith("log: "):
            fields = line.split(" ")
            runs += 1
            expected = f"{model}.{runs}.log"
            if len(fields) != 4 or fields[1] != expected or fields[2] != "sha256":
                problems.append(f"{line!r}: expected 'log: {expected} sha256 <digest>'")
                current = None
                continue
            if heading is None:
                problems.append(f"{expected}: no heading names the run")
            log = logs_dir / expected
            if not log.is_file():
                problems.append(f"{expected}: no such kept output")
                current = None
                continue
            if hashlib.sha256(log.read_bytes()).hexdigest() != fields[3]:
                problems.append(f"{expected}: sha256 is not the one {probe.name} names")
            text = log.read_text(errors="replace")
            if heading is not None and (problem := _build_problem(heading.lstrip("# "), text)):
                problems.append(f"{expected}: {problem}")
            heading, current = None, set(text.splitlines())
        elif line and (current is None or line not in current):
            problems.append(f"figure line not in its output: {line!r}")
    if heading is not None and heading != lines[-1]:
        problems.append(f"heading without its output: {heading!r}")
    kept = sorted(p.name for p in logs_dir.glob("*.log"))
    named = sorted(f"{model}.{n}.log" for n in range(1, runs + 1))
    if kept != named:
        problems.append(f"kept outputs {kept} are not the ones named {named}")
    return problems


@pytest.mark.parametrize("probe", KL_PROBES, ids=lambda p: f"{p.parent.parent.parent.name}/{p.parent.name}")
def test_kl_probe_figures_are_read_from_their_kept_outputs(probe):
    assert kl_probe_problems(probe) == []
    assert "Mean    KLD" in probe.read_text()


def test_kl_probes_are_committed_for_the_models_without_a_cuda_record():
    assert {p.parent.name for p in KL_PROBES} >= {"smollm2-135m-instruct-q4_1", "gemma-3-270m-q4_k_m"}


def test_a_kl_figure_not_in_its_output_or_a_swapped_output_is_found(tmp_path):
    probe = next(p for p in KL_PROBES if p.parent.name == "gemma-3-270m-q4_k_m")
    copy = tmp_path / probe.parent.name
    (copy / "kl_logs").mkdir(parents=True)
    for log in (probe.parent / "kl_logs").glob("*.log"):
        (copy / "kl_logs" / log.name).write_bytes(log.read_bytes())
    text = probe.read_text()
    (copy / "kl_probe.txt").write_text(text.replace("99.0%   KLD:   0.057234", "99.0%   KLD:   0.007234", 1))
    assert any("figure line not in its output" in p for p in kl_probe_problems(copy / "kl_probe.txt"))
    (copy / "kl_probe.txt").write_text(text)
    assert kl_probe_problems(copy / "kl_probe.txt") == []
    swapped = sorted((copy / "kl_logs").glob("*.log"))[0]
    swapped.write_bytes(swapped.read_bytes() + b"\n")
    assert any("sha256 is not the one" in p for p in kl_probe_problems(copy / "kl_probe.txt"))
    (copy / "kl_logs" / "extra.log").write_text("x\n")
    assert any("are not the ones named" in p for p in kl_probe_problems(copy / "kl_probe.txt"))


def test_a_lane_output_relabelled_as_the_reference_is_found(tmp_path):
    """"The reference gives the lane's figures" cannot be forged by naming the lane's output under
    the reference's heading: the output's own system_info says which build ran."""
    probe = next(p for p in KL_PROBES if p.parent.name == "gemma-3-270m-q4_k_m")
    model = probe.parent.name
    copy = tmp_path / model
    (copy / "kl_logs").mkdir(parents=True)
    logs = {p.name: p.read_bytes() for p in (probe.parent / "kl_logs").glob("*.log")}
    lines = probe.read_text().splitlines()
    ref_at = lines.index("## vs ref lane -fa auto") + 1
    ref_name = lines[ref_at].split(" ")[1]
    lane_name = lines[lines.index("## vs cuda lane -fa auto") + 1].split(" ")[1]
    logs[ref_name] = logs[lane_name]  # the lane's output kept under the reference's number
    lines[ref_at] = f"log: {ref_name} sha256 {hashlib.sha256(logs[lane_name]).hexdigest()}"
    for name, data in logs.items():
        (copy / "kl_logs" / name).write_bytes(data)
    (copy / "kl_probe.txt").write_text("\n".join(lines) + "\n")
    assert any("is not that build's" in p for p in kl_probe_problems(copy / "kl_probe.txt"))


def test_a_heading_without_its_output_is_found_unless_the_probe_stopped_there(tmp_path):
    probe = next(p for p in KL_PROBES if p.parent.name == "gemma-3-270m-q4_k_m")
    copy = tmp_path / probe.parent.name
    (copy / "kl_logs").mkdir(parents=True)
    for log in (probe.parent / "kl_logs").glob("*.log"):
        (copy / "kl_logs" / log.name).write_bytes(log.read_bytes())
    lines = probe.read_text().splitlines()
    (copy / "kl_probe.txt").write_text("\n".join(lines + ["## vs ref lane -fa off"]) + "\n")
    assert kl_probe_problems(copy / "kl_probe.txt") == []  # stopped at its last heading
    at = lines.index("## vs cuda lane -fa auto")
    (copy / "kl_probe.txt").write_text("\n".join(lines[:at] + ["## vs cuda lane -fa off"] + lines[at:]) + "\n")
    assert any("heading without its output" in p for p in kl_probe_problems(copy / "kl_probe.txt"))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
