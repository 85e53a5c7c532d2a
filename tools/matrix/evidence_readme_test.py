"""evidence/README.md is exactly the generator's output for the committed records and policy, and the
comparison fails when the records, the policy or the time a record is judged at change."""

import datetime as dt
import json
import os
import pathlib
import shutil
import sys

import pytest

from tools.matrix import evidence_readme

# Under Bazel the runfiles tree; run directly, the workspace's evidence/.
EVIDENCE = (pathlib.Path(os.environ["TEST_SRCDIR"], "lanes", "evidence") if "TEST_SRCDIR" in os.environ
            else pathlib.Path(__file__).resolve().parents[2] / "evidence")


def _copy_evidence(target: pathlib.Path) -> pathlib.Path:
    """What the generator reads, as regular files: under Bazel the runfiles are symlinks, which
    admission refuses to open (a record file must be a regular file)."""
    (target / "records").mkdir(parents=True)
    shutil.copy(EVIDENCE / "policy.json", target / "policy.json")
    for record in (EVIDENCE / "records").glob("*.dsse.json"):
        shutil.copy(record, target / "records" / record.name)
    for run in (EVIDENCE / "runs").iterdir():
        (target / "runs" / run.name).mkdir(parents=True)
    return target


@pytest.fixture(scope="module")
def committed(tmp_path_factory) -> pathlib.Path:
    return _copy_evidence(tmp_path_factory.mktemp("committed") / "evidence")


def _rows(page: str) -> list[str]:
    return [line for line in page.splitlines() if line.startswith("| linux-")]


def test_committed_readme_is_the_generators_output(committed):
    on_disk = (EVIDENCE / "README.md").read_text(encoding="utf-8")
    assert on_disk == evidence_readme.render(committed), (
        f"evidence/README.md is stale: regenerate it with `{evidence_readme.GENERATOR}`")


def _states_recipe(path: pathlib.Path) -> bool:
    from proto import certification_pb2
    from tools.policy import dsse
    return certification_pb2.CompatibilityRecord.FromString(
        dsse.envelope_from_json(path.read_bytes()).payload).HasField("recipe")


def test_every_committed_record_is_a_row_routable_unless_it_states_no_recipe(committed):
    page = evidence_readme.render(committed)
    certs, compats = page.split("## Compatibility records", 1)
    assert len(_rows(certs)) == len(list((EVIDENCE / "records").glob("*.record.dsse.json")))
    assert all(row.endswith("| yes |") for row in _rows(certs)), page
    # A compatibility record measured before records stated their recipe admits no route.
    compat_files = sorted((EVIDENCE / "records").glob("*.compat.dsse.json"), key=lambda p: p.name)
    assert len(_rows(compats)) == len(compat_files)
    for row, path in zip(_rows(compats), compat_files):
        assert row.endswith("| yes |") if _states_recipe(path) else "candidates: " + path.name + ": compat-recipe-missing: " in row, row
    assert "Files that are not certification" not in page


def test_tables_have_no_blank_line_inside(committed):
    lines = evidence_readme.render(committed).splitlines()
    for sep in [i for i, line in enumerate(lines) if line.startswith("|---")]:
        assert lines[sep - 1].startswith("| ") and lines[sep + 1].startswith("| "), lines[sep - 1:sep + 2]


def test_a_removed_record_makes_the_committed_readme_stale(committed, tmp_path):
    copy = _copy_evidence(tmp_path / "evidence")
    removed = copy / "records" / "linux-x86_64-cpu.cpu-authenticamd-amd-epyc-zen4.record.dsse.json"
    removed.unlink()
    page = evidence_readme.render(copy)
    assert page != evidence_readme.render(committed)
    assert len(_rows(page)) == len(_rows(evidence_readme.render(committed))) - 1
    assert "runs/linux-x86_64-cpu.cpu-authenticamd-amd-epyc-zen4/" not in page


def test_a_distrusted_key_leaves_its_records_out_with_the_reason(committed, tmp_path):
    copy = _copy_evidence(tmp_path / "evidence")
    policy = json.loads((copy / "policy.json").read_text())
    # The key that signed the CPU lane's records, read from them (it changes when the issuer rotates).
    cpu_records = sorted((copy / "records").glob("linux-x86_64-cpu.*.record.dsse.json"))
    cpu_issuers = {sig["keyid"] for record in cpu_records for sig in json.loads(record.read_text())["signatures"]}
    assert len(cpu_issuers) == 1, cpu_issuers
    policy["trusted_keys"] = [k for k in policy["trusted_keys"] if k["keyid"] not in cpu_issuers]
    assert policy["trusted_keys"], "the committed policy trusts the GPU records' key too"
    (copy / "policy.json").write_text(json.dumps(policy))
    page = evidence_readme.render(copy)
    assert page != evidence_readme.render(committed)
    assert not any(row.startswith("| linux-x86_64-cpu ") for row in _rows(page)), page
    refused = page.split("## Files that are not certification", 1)[1]
    assert refused.count("does not verify") == len(cpu_records), refused


def test_an_expired_record_is_shown_not_routable(committed):
    # After the records' expiry, inside the issuer keys' validity window: expiry is the reason.
    later = dt.datetime(2027, 6, 1, tzinfo=dt.timezone.utc)
    page = evidence_readme.render(committed, as_of=later)
    rows = _rows(page)
    assert rows and all("| no: " in row for row in rows), page
    assert all("expired" in row for row in rows), page
    assert "2027-06-01T00:00:00Z (the time asked for)" in page


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
