"""The committed GPU diagnoses re-derive from their raw files: each build-difference probe table
(evidence/bench/*/probes/<name>.txt) from its llama-bench JSON (<name>.raw.tar.xz), and each KL probe
(evidence/diagnosis/*/kl_probe/<model>/kl_probe.txt) from the llama-perplexity outputs it names, by
digest, with every figure line found verbatim in the output it was read from. Diagnoses are never
certification evidence, but their figures are quoted in docs/ and must be what the raw files say.
"""

import hashlib
import io
import json
import pathlib
import sys
import tarfile

import pytest

from tools.bench import probe_table

EVIDENCE = pathlib.Path(__file__).resolve().parent.parent / "evidence"
PROBE_TABLES = sorted(p for p in EVIDENCE.glob("bench/*/probes/*.txt")
                      if p.with_name(p.name[:-len(".txt")] + ".raw.tar.xz").exists())
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


@pytest.mark.parametrize("path", PROBE_TABLES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_probe_table_is_recomputed_from_its_raw_json(path):
    variant, committed = _committed_table(path)
    raw = path.with_name(path.name[:-len(".txt")] + ".raw.tar.xz")
    assert probe_table.table_from_tar(raw, variant) == committed


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


def kl_probe_problems(probe: pathlib.Path) -> list[str]:
    """What in a KL probe's text its kept llama-perplexity outputs do not show."""
    logs_dir = probe.parent / "kl_logs"
    problems, named, current = [], set(), None
    for line in probe.read_text().splitlines():
        if line.startswith("log: "):
            _, name, label, digest = line.split(" ")
            log = logs_dir / name
            if label != "sha256" or pathlib.PurePath(name).name != name or not log.is_file():
                problems.append(f"{line}: no such kept output")
                current = None
                continue
            if hashlib.sha256(log.read_bytes()).hexdigest() != digest:
                problems.append(f"{name}: sha256 is not the one {probe.name} names")
            named.add(name)
            current = set(log.read_text(errors="replace").splitlines())
        elif line.startswith("#"):
            current = None  # a heading: figures after it belong to the next named output
        elif line and (current is None or line not in current):
            problems.append(f"figure line not in its output: {line!r}")
    unnamed = sorted({p.name for p in logs_dir.glob("*.log")} - named)
    if unnamed:
        problems.append(f"kept outputs no line names: {unnamed}")
    return problems


@pytest.mark.parametrize("probe", KL_PROBES, ids=lambda p: f"{p.parent.parent.parent.name}/{p.parent.name}")
def test_kl_probe_figures_are_read_from_their_kept_outputs(probe):
    assert kl_probe_problems(probe) == []
    assert "Mean    KLD" in probe.read_text()


def test_kl_probes_are_committed_for_the_models_without_a_cuda_record():
    assert {p.parent.name for p in KL_PROBES} >= {"smollm2-135m-instruct-q4_1", "gemma-3-270m-q4_k_m"}


def test_a_kl_figure_not_in_its_output_or_a_swapped_output_is_found(tmp_path):
    probe = next(p for p in KL_PROBES if p.parent.name == "gemma-3-270m-q4_k_m")
    copy = tmp_path / "m"
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
    assert any("kept outputs no line names" in p for p in kl_probe_problems(copy / "kl_probe.txt"))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
