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


def test_apply_policy_sets_floors_ratios_and_the_cancel_bound(tmp_path):
    from tools.runner import runner
    from tools.runner.config import RunnerConfig
    policy = tmp_path / "p.json"
    policy.write_text(json.dumps({
        "speed_floors": [{"lane_id": "*", "metric": "speed.tg_tokens_per_s", "min_value": 9}],
        "metric_ceilings": [{"lane_id": "*", "metric": speed_floors.CANCEL_CEILING, "max_value": 2.5},
                            {"lane_id": "other", "metric": speed_floors.CANCEL_CEILING, "max_value": 0.1}],
    }))
    cfg = RunnerConfig(lane="x", lane_dir=tmp_path, evidence=None, spec=tmp_path, model=None,
                       out_dir=tmp_path, report=tmp_path / "r.pb")
    runner.apply_policy(cfg, policy, "lane-a")
    assert (cfg.speed_floor_tg, cfg.cancel_bound_s) == (9.0, 2.5)


def test_unreadable_policy_is_named(tmp_path):
    with pytest.raises(speed_floors.PolicyFloorsError, match="absent.json"):
        speed_floors.floors_for_lane(tmp_path / "absent.json", "x")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
