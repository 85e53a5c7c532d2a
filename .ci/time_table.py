#!/usr/bin/env python3
"""Where a CI run's time went: one row per CMake stage and per test target, slowest first.

Reads what `bazel test //...` leaves behind, nothing else: each test's test.xml under bazel-testlogs
(shards and attempts of one target summed) and each cmake() stage's meta.json under
bazel-bin/<pkg>/<stage>_foreign_cc/ (its configure, build and install commands, timed by the rule).
`--users STAGE=//t1,//t2` names the tests that need a stage (from `bazel query`), so the table says
what each stage is paid for. `--phase NAME=SECONDS` adds the CI script's own phases on top.
Stdlib only: it runs before and without Bazel's Python.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass

# Bazel writes a sharded or repeated test's logs one level further down: shard_1_of_4/, run_2_of_3/.
_SPLIT_DIR = re.compile(r"(shard|run)_[0-9]+_of_[0-9]+")


@dataclass(frozen=True)
class Row:
    kind: str
    target: str
    seconds: float
    what: str


def _target_of(test_xml: pathlib.Path, testlogs: pathlib.Path) -> str:
    parts = list(test_xml.parent.relative_to(testlogs).parts)
    while parts and _SPLIT_DIR.fullmatch(parts[-1]):
        parts.pop()
    return "//{}:{}".format("/".join(parts[:-1]), parts[-1])


def _test_seconds(test_xml: pathlib.Path) -> float:
    root = ElementTree.parse(test_xml).getroot()
    # Bazel's own test.xml puts the wall time on the testcase (duration, else time) in seconds.
    case = root.find(".//testcase")
    if case is None:
        return 0.0
    return float(case.get("duration") or case.get("time") or 0.0)


def test_rows(testlogs: pathlib.Path) -> list[Row]:
    totals: dict[str, float] = {}
    shards: dict[str, int] = {}
    for test_xml in sorted(testlogs.rglob("test.xml")):
        target = _target_of(test_xml, testlogs)
        totals[target] = totals.get(target, 0.0) + _test_seconds(test_xml)
        shards[target] = shards.get(target, 0) + 1
    return [Row("test", t, s, "" if shards[t] == 1 else f"{shards[t]} shards or runs, summed")
            for t, s in totals.items()]


def stage_rows(bin_dir: pathlib.Path, users: dict[str, list[str]]) -> list[Row]:
    rows = []
    for meta_path in sorted(bin_dir.rglob("*_foreign_cc/meta.json")):
        meta = json.loads(meta_path.read_text())
        package = meta_path.parent.parent.relative_to(bin_dir).as_posix()
        label = "//{}:{}".format(package, meta["name"])
        steps = ", ".join("{} {:.0f} s".format(c["step"], c["seconds"]) for c in meta.get("commands", []))
        needed_by = users.get(label) or users.get(meta["name"]) or []
        what = "cmake() stage, {} jobs: {}".format(meta.get("jobs", "?"), steps)
        if needed_by:
            what += "; needed by " + " ".join(needed_by)
        rows.append(Row("build", label, sum(c["seconds"] for c in meta.get("commands", [])), what))
    return rows


def render(rows: list[Row], phases: list[tuple[str, float]]) -> str:
    lines = []
    if phases:
        lines.append("| CI phase | seconds |")
        lines.append("|---|---:|")
        lines += ["| {} | {:.0f} |".format(name, seconds) for name, seconds in phases]
        lines.append("")
    lines.append("| kind | target | seconds | what |")
    lines.append("|---|---|---:|---|")
    for row in sorted(rows, key=lambda r: (-r.seconds, r.target)):
        lines.append("| {} | {} | {:.0f} | {} |".format(row.kind, row.target, row.seconds, row.what))
    builds = sum(r.seconds for r in rows if r.kind == "build")
    tests = sum(r.seconds for r in rows if r.kind == "test")
    lines.append("")
    lines.append("cmake() stages {:.0f} s, test actions {:.0f} s (summed: Bazel runs them two at a time)"
                 .format(builds, tests))
    return "\n".join(lines)


def _pairs(values: list[str], flag: str) -> list[tuple[str, str]]:
    pairs = []
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name:
            raise SystemExit(f"time_table: {flag} {value!r}: expected NAME=VALUE")
        pairs.append((name, rest))
    return pairs


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--testlogs", type=pathlib.Path, required=True)
    parser.add_argument("--bin", type=pathlib.Path, required=True)
    parser.add_argument("--users", action="append", default=[], help="STAGE=//test1,//test2")
    parser.add_argument("--phase", action="append", default=[], help="NAME=SECONDS")
    args = parser.parse_args(argv)
    users = {stage: [t for t in tests.split(",") if t] for stage, tests in _pairs(args.users, "--users")}
    phases = [(name, float(seconds)) for name, seconds in _pairs(args.phase, "--phase")]
    rows = stage_rows(args.bin, users) + test_rows(args.testlogs)
    print(render(rows, phases))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
