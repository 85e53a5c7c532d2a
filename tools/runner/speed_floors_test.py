"""Speed floors come from the policy, per lane or for every lane."""

import json
import sys

import pytest

from tools.runner import speed_floors


def test_lane_and_wildcard_floors(tmp_path):
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"speed_floors": [
        {"lane_id": "linux-x86_64-cuda", "metric": "speed.tg_tokens_per_s", "min_value": 1000},
        {"lane_id": "*", "metric": "speed.tg_tokens_per_s", "min_value": 5},
        {"lane_id": "*", "metric": "speed.pp_tokens_per_s", "min_value": 50},
        {"lane_id": "linux-x86_64-cpu", "metric": "speed.pp_tokens_per_s", "min_value": 9999},
    ]}))
    assert speed_floors.floors_for_lane(policy, "linux-x86_64-cuda") == (1000.0, 50.0)
    assert speed_floors.floors_for_lane(policy, "linux-x86_64-rocm") == (5.0, 50.0)


def test_unreadable_policy_is_named(tmp_path):
    with pytest.raises(speed_floors.PolicyFloorsError, match="absent.json"):
        speed_floors.floors_for_lane(tmp_path / "absent.json", "x")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
