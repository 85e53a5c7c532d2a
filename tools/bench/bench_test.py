"""The benchmark's schedule, figures and refusals, with fake llama-bench binaries."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

from tools.bench import bench


def _fake_build(root: pathlib.Path, pp: float, tg: float, model_bytes: int = 1000) -> pathlib.Path:
    (root / "bin").mkdir(parents=True)
    tests = [{"n_prompt": 128, "n_gen": 0, "avg_ts": pp, "model_size": model_bytes, "samples_ts": [pp, pp]},
             {"n_prompt": 0, "n_gen": 32, "avg_ts": tg, "model_size": model_bytes, "samples_ts": [tg, tg]}]
    exe = root / "bin" / "llama-bench"
    exe.write_text(f"#!/bin/sh\necho 'loading' >&2\ncat <<'J'\n{json.dumps(tests)}\nJ\n")
    exe.chmod(0o755)
    return root


def _config(tmp_path: pathlib.Path, lane_pp=90.0, ref_pp=100.0, ref_bytes=1000) -> bench.BenchConfig:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    return bench.BenchConfig(lane_id="linux-x86_64-cpu", lane_dir=_fake_build(tmp_path / "lane", lane_pp, 20.0),
                             reference_dir=_fake_build(tmp_path / "ref", ref_pp, 25.0, ref_bytes),
                             models={"tiny": model}, out_dir=tmp_path / "out", rounds=2, threads=2)


def test_abba_schedule_puts_each_build_first_equally():
    assert bench.schedule(2) == [(0, "lane"), (0, "reference"), (1, "reference"), (1, "lane")]


def test_ratios_come_from_the_raw_files(tmp_path):
    report = bench.run(_config(tmp_path))
    (c,) = report.comparisons
    assert (c.pp_ratio, c.tg_ratio) == (pytest.approx(0.9), pytest.approx(0.8))
    assert len(report.samples) == 4 and all(s.raw_sha256 for s in report.samples)
    assert bench.recompute(tmp_path / "out") == report or report.lane_build_evidence_digest == ""
    assert "0.900" in bench.table(report)


def test_a_missing_raw_file_is_an_error_not_a_smaller_comparison(tmp_path):
    bench.run(_config(tmp_path))
    (tmp_path / "out" / "logs" / "tiny.reference.1.json").unlink()
    with pytest.raises(bench.BenchError, match="tiny.reference.1.json"):
        bench.recompute(tmp_path / "out")


def test_builds_benched_on_different_model_files_are_refused(tmp_path):
    with pytest.raises(bench.BenchError, match="different sizes or files"):
        bench.run(_config(tmp_path, ref_bytes=2000))


def test_a_missing_build_names_what_to_build(tmp_path):
    cfg = _config(tmp_path)
    (cfg.reference_dir / "bin" / "llama-bench").unlink()
    with pytest.raises(bench.BenchError, match="_upstream"):
        bench.run(cfg)


def test_one_round_is_refused(tmp_path):
    import dataclasses
    with pytest.raises(bench.BenchError, match="rounds"):
        bench.run(dataclasses.replace(_config(tmp_path), rounds=1))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
