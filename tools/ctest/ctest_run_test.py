"""A fake lane's CTest bundle, made and run with the real ctest: passes, failures, skips, bad input."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from proto import ctest_report_pb2 as pb
from tools.ctest import bundle, ctest_run
from tools.ctest.fake_bundle import BUILD, SCRIPTS, SPEC, SRC, lane_dir, make_bundle


def run(tmp: pathlib.Path, b: pathlib.Path, model: bool = True) -> pb.CTestReport:
    tmp.mkdir(parents=True, exist_ok=True)
    m = tmp / "tiny.gguf"
    m.write_text("GGUF")
    return ctest_run.run(ctest_run.Options(bundle=b, lane_dir=lane_dir(tmp), out=tmp / "out", model=m if model else None))


def test_bundle_is_relocatable_and_carries_only_what_tests_read(tmp_path):
    b = make_bundle(tmp_path)
    manifest = json.loads((b / "manifest.json").read_text())
    assert [t["name"] for t in manifest["tests"]] == ["test-tok-llama", "test-chat", "test-gen", "test-autorelease", "test-download"]
    assert manifest["source_files"] == ["models/templates/a.jinja", "models/vocab-llama.gguf", "models/vocab-llama.gguf.inp"]
    text = (b / "ctest" / "tests" / "CTestTestfile.cmake.in").read_text()
    assert SRC not in text and BUILD not in text
    assert manifest["tests"][0]["command"] == [bundle.BIN + "/test-tok", bundle.SOURCE + "/models/vocab-llama.gguf"]
    # Paths inside an argument are templated too, so the manifest is the same bytes every build.
    assert manifest["tests"][4]["command"][1] == "-DDEST=" + bundle.WORK + "/tinyllamas/x.gguf"
    again = make_bundle(tmp_path / "again")
    assert (again / "manifest.json").read_bytes() == (b / "manifest.json").read_bytes()


def test_a_passing_suite_counts_exclusions_apart(tmp_path):
    b = make_bundle(tmp_path)
    moved = tmp_path / "elsewhere" / "b"
    shutil.move(str(b), moved)  # relocatable: nothing points back to where it was made
    report = run(tmp_path, moved)
    assert report.passed, ctest_run.failure_text(report)
    t = report.totals
    assert (t.total, t.passed, t.failed, t.skipped, t.excluded, t.not_run) == (5, 4, 0, 0, 1, 0)
    excluded = [r for r in report.tests if r.status == pb.CTestReport.EXCLUDED]
    assert [(r.name, r.reason) for r in excluded] == [("test-download", "network: downloads a model")]
    assert [c.name for c in report.covered_elsewhere] == ["test-backend-ops"]
    out = tmp_path / "out"
    assert ctest_run.read(out / "ctest_report.pb") == report
    assert json.loads((out / "ctest_report.json").read_text())["totals"]["passed"] == 4


def test_a_failing_test_fails_the_report_by_name_with_its_output(tmp_path):
    scripts = dict(SCRIPTS, **{"test-tok": 'echo "expected [1, 2] got [1, 3]"; exit 1'})
    report = run(tmp_path, make_bundle(tmp_path, scripts))
    assert not report.passed
    assert report.totals.failed == 1 and report.totals.passed == 3
    text = ctest_run.failure_text(report)
    assert "test-tok-llama: FAILED (***Failed)" in text
    assert "expected [1, 2] got [1, 3]" in text


def test_a_model_test_without_a_model_is_skipped_not_passed(tmp_path):
    report = run(tmp_path, make_bundle(tmp_path), model=False)
    row = next(r for r in report.tests if r.name == "test-autorelease")
    assert row.status == pb.CTestReport.SKIPPED
    assert not report.passed
    assert report.totals.passed == 3 and report.totals.skipped == 1


def test_a_missing_binary_is_not_run_and_fails(tmp_path):
    b = make_bundle(tmp_path)
    (b / "bin" / "test-chat").unlink()
    report = run(tmp_path, b)
    row = next(r for r in report.tests if r.name == "test-chat")
    assert row.status == pb.CTestReport.NOT_RUN
    assert not report.passed


def test_audit_recomputes_the_report_from_the_raw_log(tmp_path):
    b = make_bundle(tmp_path)
    report = run(tmp_path, b)
    out = tmp_path / "out"
    log = (out / "ctest.log").read_text()
    manifest = bundle.load_manifest(b)
    sha = ctest_run.sha256_file
    assert ctest_run.audit(report, log, sha(out / "ctest.log"), manifest, sha(b / "manifest.json")) == []
    forged = pb.CTestReport()
    forged.CopyFrom(report)
    forged.totals.passed += 1
    problems = ctest_run.audit(forged, log, sha(out / "ctest.log"), manifest, sha(b / "manifest.json"))
    assert problems == ["totals.passed: report says 5, the raw log gives 4"]
    edited = log.replace("test-chat ......", "test-chat ...***Failed")
    assert ctest_run.audit(report, edited, "0" * 64, manifest, sha(b / "manifest.json"))


def test_stale_exclusions_and_missing_inputs_are_clear_errors(tmp_path):
    with pytest.raises(bundle.BundleError, match=r"excludes tests \['test-gone'\].*remove them from lanes/lanes.bzl"):
        make_bundle(tmp_path / "a", spec=dict(SPEC, excluded={"test-gone": "x"}))
    with pytest.raises(bundle.BundleError, match=r"test test-autorelease has CTest label\(s\) \['model'\] that the lane spec"):
        make_bundle(tmp_path / "e", spec=dict(SPEC, labels=["main"]))
    with pytest.raises(bundle.BundleError, match="test test-chat runs an executable the CTest stage did not build"):
        make_bundle(tmp_path / "b", scripts={k: v for k, v in SCRIPTS.items() if k != "test-chat"})
    with pytest.raises(bundle.BundleError, match=r"manifest.json: missing; --bundle must be a CTest bundle"):
        run(tmp_path / "c", tmp_path / "nothing")
    b = make_bundle(tmp_path / "d")
    with pytest.raises(ctest_run.RunError, match="no lane libraries"):
        ctest_run.run(ctest_run.Options(bundle=b, lane_dir=tmp_path / "d" / "nolane", out=tmp_path / "d" / "out"))


def run_cli(tmp: pathlib.Path, b: pathlib.Path, *extra: str) -> subprocess.CompletedProcess:
    """run_bundle as a GPU host runs it: python3 -m tools.ctest.run_bundle."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    argv = [sys.executable, "-m", "tools.ctest.run_bundle", f"--bundle={b}", f"--lane_dir={lane_dir(tmp)}", f"--out={tmp / 'cli'}", *extra]
    return subprocess.run(argv, capture_output=True, text=True, env=env, check=False)


def test_cli_exit_status_names_failures_and_bad_input(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_text("GGUF")
    ok = run_cli(tmp_path / "ok", make_bundle(tmp_path / "ok"), f"--model={model}")
    assert ok.returncode == 0, ok.stderr
    assert "4 passed, 0 failed, 0 skipped, 0 not run, 1 excluded of 5 registered" in ok.stdout
    scripts = dict(SCRIPTS, **{"test-chat": 'echo "template mismatch"; exit 1'})
    bad = run_cli(tmp_path / "bad", make_bundle(tmp_path / "bad", scripts), f"--model={model}")
    assert bad.returncode == 1
    assert "===== test-chat: ***Failed" in bad.stderr and "template mismatch" in bad.stderr
    assert (tmp_path / "bad" / "cli" / "ctest_report.json").is_file()
    unusable = run_cli(tmp_path / "none", tmp_path / "none" / "no-bundle")
    assert unusable.returncode == 2
    assert "manifest.json: missing; --bundle must be a CTest bundle" in unusable.stderr


def test_tests_run_beside_the_lanes_runtime_loaded_backends(tmp_path):
    """GGML_BACKEND_DL lanes: ggml looks for libggml-cpu-<variant>.so in the executable's directory,
    so the test binaries are copied next to links to the lane's backend modules."""
    bundle_bin, lane_bin = tmp_path / "bundle" / "bin", tmp_path / "lane" / "bin"
    bundle_bin.mkdir(parents=True)
    lane_bin.mkdir(parents=True)
    (bundle_bin / "test-x").write_text("x")
    (lane_bin / "libggml-cpu-zen4.so").write_text("module")
    (lane_bin / "llama-bench").write_text("not a backend")
    out = ctest_run._test_bin_dir(bundle_bin, lane_bin, tmp_path / "work" / "bin")
    assert sorted(p.name for p in out.iterdir()) == ["libggml-cpu-zen4.so", "test-x"]
    assert not (out / "test-x").is_symlink() and (out / "libggml-cpu-zen4.so").resolve() == lane_bin / "libggml-cpu-zen4.so"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
