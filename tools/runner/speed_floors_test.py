"""Speed floors come from the policy, per lane or for every lane."""

import json
import pathlib
import sys

import pytest

from tools.runner import speed_floors


def _floors_policy(tmp_path, *floors: tuple[str, str, float]) -> pathlib.Path:
    """A policy file of these speed floors, each (lane_id, metric, min_value)."""
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"speed_floors": [
        {"lane_id": lane_id, "metric": metric, "min_value": min_value} for lane_id, metric, min_value in floors]}))
    return policy


def test_lane_and_wildcard_floors(tmp_path):
    policy = _floors_policy(tmp_path,
                            ("linux-x86_64-cuda", "speed.tg_tokens_per_s", 1000),
                            ("*", "speed.tg_tokens_per_s", 5),
                            ("*", "speed.pp_tokens_per_s", 50),
                            ("linux-x86_64-cpu", "speed.pp_tokens_per_s", 9999))
    assert speed_floors.floors_for_lane(policy, "linux-x86_64-cuda") == (1000.0, 50.0)
    assert speed_floors.floors_for_lane(policy, "linux-x86_64-rocm") == (5.0, 50.0)


def test_a_floor_scoped_to_a_model_binds_only_that_model(tmp_path):
    tiny, other = "a" * 64, "b" * 64
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"speed_floors": [
        {"lane_id": "linux-x86_64-cpu", "metric": "speed.tg_tokens_per_s", "min_value": 100, "model_sha256": tiny},
        {"lane_id": "linux-x86_64-cpu", "metric": "speed.pp_tokens_per_s", "min_value": 7}]}))
    assert speed_floors.floors_for_lane(policy, "linux-x86_64-cpu", tiny) == (100.0, 7.0)
    assert speed_floors.floors_for_lane(policy, "linux-x86_64-cpu", "sha256:" + tiny.upper()) == (100.0, 7.0)
    assert speed_floors.floors_for_lane(policy, "linux-x86_64-cpu", other) == (0.0, 7.0)


def test_committed_cpu_floors_hold_the_embedded_model_only():
    committed = _committed_policy()
    embedded = "594f903a937349e4ae25ed5013a4491a9b5aec3344509ccf2b81d50eb0707a85"
    assert speed_floors.floors_for_lane(committed, "linux-x86_64-cpu", embedded) == (100.0, 1000.0)
    assert speed_floors.floors_for_lane(committed, "linux-x86_64-cpu", "c" * 64) == (0.0, 0.0)


def test_relative_floors_for_accelerators(tmp_path):
    policy = _floors_policy(tmp_path,
                            ("linux-x86_64-cuda", "speed.roofline_speedup_pp", 2.5),
                            # The tiny-model ratio is informational: a floor on it does not raise the runner's.
                            ("linux-x86_64-cuda", "speed.speedup_pp", 9),
                            ("linux-x86_64-cuda", "speed.roofline_speedup_tg", 4),
                            ("linux-x86_64-cuda", "speed.tg_tokens_per_s", 1000))
    assert speed_floors.relative_floors_for_lane(policy, "linux-x86_64-cuda") == (2.5, 4.0)
    assert speed_floors.relative_floors_for_lane(policy, "linux-x86_64-cpu") == (0.0, 0.0)


def _committed_policy():
    """evidence/policy.json: --policy=PATH under Bazel (a data dependency), else the workspace's."""
    for arg in sys.argv:
        if arg.startswith("--policy="):
            return pathlib.Path(arg.split("=", 1)[1])
    return pathlib.Path(__file__).resolve().parents[2] / "evidence" / "policy.json"


def test_committed_policy_holds_cuda_to_the_cpu_lane():
    """evidence/policy.json: CUDA and Vulkan floors are ratios over the CPU lane, not absolute tokens/s."""
    committed = _committed_policy()
    assert speed_floors.relative_floors_for_lane(committed, "linux-x86_64-cuda") == (2.0, 4.0)
    assert speed_floors.relative_floors_for_lane(committed, "linux-x86_64-vulkan") == (2.0, 4.0)
    assert speed_floors.floors_for_lane(committed, "linux-x86_64-cuda") == (0.0, 0.0)
    assert speed_floors.ceiling_for_lane(committed, "linux-x86_64-cuda", speed_floors.CANCEL_CEILING) == 5.0


def test_the_policy_binds_the_run_and_loosening_is_not_recordable(tmp_path):
    from tools.runner import strictness
    from tools.runner.config import DEFAULT_KV_TYPES, RunnerConfig
    policy = tmp_path / "p.json"
    policy.write_text(json.dumps({
        "speed_floors": [{"lane_id": "*", "metric": "speed.tg_tokens_per_s", "min_value": 9}],
        "metric_ceilings": [{"lane_id": "*", "metric": speed_floors.CANCEL_CEILING, "max_value": 2.5},
                            {"lane_id": "other", "metric": speed_floors.CANCEL_CEILING, "max_value": 0.1}],
    }))

    def config(**kw):
        return RunnerConfig(lane="x", lane_dir=tmp_path, evidence=None, spec=tmp_path, model=None,
                            out_dir=tmp_path, report=tmp_path / "r.pb", **kw)

    cfg = config(policy=policy)
    assert strictness.apply(cfg, "lane-a", DEFAULT_KV_TYPES) == []
    assert (cfg.speed_floor_tg, cfg.cancel_bound_s) == (9.0, 2.5)
    # A flag looser than the policy is tightened to it; one looser than the default is not recordable.
    cfg = config(policy=policy, speed_floor_tg=1.0, cancel_bound_s=1.0)
    assert strictness.apply(cfg, "lane-a", DEFAULT_KV_TYPES) == []
    assert (cfg.speed_floor_tg, cfg.cancel_bound_s) == (9.0, 1.0)
    loose = config(policy=policy, parity_max_abs_delta=1.0, parity_min_top1=0.0, kv_types=("f16",))
    reasons = strictness.apply(loose, "lane-a", DEFAULT_KV_TYPES)
    assert any("--parity_max_abs_delta=1 is looser than the default 0.05" in r for r in reasons)
    assert any("--parity_min_top1=0 is looser than the default 1" in r for r in reasons)
    assert any("--kv_types=f16 leaves out" in r for r in reasons)
    assert strictness.apply(config(), "lane-a", DEFAULT_KV_TYPES) == [
        "no --policy: a recordable run is held to the admission policy's floors and ceilings"]


def test_every_bound_option_is_registered():
    from tools.runner import config, strictness
    bound_like = {f.name for f in config.option_fields()
                  if f.type in ("float", "int", float, int) and any(w in f.name for w in strictness.BOUND_WORDS)}
    assert bound_like - set(strictness.BOUNDS) == set(), "a bound option strictness.BOUNDS does not know"
    names = {f.name for f in config.option_fields()}
    assert set(strictness.BOUNDS) <= names


def test_unreadable_policy_is_named(tmp_path):
    with pytest.raises(speed_floors.PolicyFloorsError, match="absent.json"):
        speed_floors.floors_for_lane(tmp_path / "absent.json", "x")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
