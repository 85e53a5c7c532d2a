"""Every red-team case over fake lanes is refused, naming the check and the reason."""

from __future__ import annotations

import sys

import pytest

from tests.red_team import corpus


@pytest.mark.parametrize("case", corpus.all_cases(), ids=lambda c: f"class{c.klass}-{c.name}")
def test_refused(case, tmp_path):
    refusal = case.run(tmp_path)
    assert refusal.check and refusal.reason


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
