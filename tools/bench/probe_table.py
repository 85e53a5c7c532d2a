"""The table of a build-difference probe (tools/device/arch_probe_remote.sh): per model and test (pp,
tg), each build's median llama-bench tok/s over the rotated rounds and the ratios between the lane,
the upstream-default reference and the variant reference. One function for the GPU host that writes
the table and for the test that re-derives the committed tables from their raw JSON, so a committed
figure is never only what a script printed once.

Stdlib only: it runs on GPU hosts with a bare python3.
"""

from __future__ import annotations

import collections
import json
import pathlib
import statistics
import sys
import tarfile
from collections.abc import Iterable

TESTS = ("pp", "tg")


class ProbeTableError(ValueError):
    """A raw file that cannot be part of a probe table (name or content)."""


def _rows(name: str, text: str) -> tuple[str, str, list[dict]]:
    """(model, build, rows) of one raw file named <model>.<build>.<round>.json."""
    if not name.endswith(".json") or name.count(".") < 3:
        raise ProbeTableError(f"{name}: expected <model>.<build>.<round>.json")
    model, build, round_text = name[:-len(".json")].rsplit(".", 2)
    if not round_text.isdigit():
        raise ProbeTableError(f"{name}: round {round_text!r} is not a number")
    try:
        rows = json.loads(text or "[]")  # a failed llama-bench leaves an empty file: no rows
    except json.JSONDecodeError as err:
        raise ProbeTableError(f"{name}: not llama-bench JSON ({err})") from err
    if not isinstance(rows, list):
        raise ProbeTableError(f"{name}: expected a JSON list of llama-bench rows")
    return model, build, rows


def table(raw_files: Iterable[tuple[str, str]], variant_build: str) -> list[str]:
    """The table's lines from (file name, text) pairs, files in name order, as the probe prints it."""
    runs: dict[str, dict[tuple[str, str], list[float]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for name, text in sorted(raw_files):
        model, build, rows = _rows(name, text)
        for row in rows:
            test = "pp" if row["n_prompt"] else "tg"
            runs[model][(build, test)].append(row["avg_ts"])
    lines = []
    for model, by in sorted(runs.items()):
        for test in TESTS:
            med = {b: statistics.median(by[(b, test)]) for b in ("lane", "ref", variant_build) if by[(b, test)]}
            rounds = {b: [round(v) for v in by[(b, test)]] for b in med}

            def ratio(a: str, b: str) -> str:
                return f"{med[a] / med[b]:.3f}" if a in med and b in med else "n/a"

            lines.append(f"{model} {test}: medians {({b: round(v) for b, v in med.items()})}; "
                         f"lane/ref {ratio('lane', 'ref')}, {variant_build}/ref {ratio(variant_build, 'ref')}, "
                         f"lane/{variant_build} {ratio('lane', variant_build)}; rounds {rounds}")
    return lines


def table_from_dir(raw_dir: pathlib.Path, variant_build: str) -> list[str]:
    return table(((p.name, p.read_text()) for p in raw_dir.glob("*.json")), variant_build)


def table_from_tar(archive: pathlib.Path, variant_build: str) -> list[str]:
    """The table of a committed probe's raw archive (raw/<model>.<build>.<round>.json members)."""
    files = []
    with tarfile.open(archive, "r:xz") as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.endswith(".json"):
                handle = tar.extractfile(member)
                if handle is None:
                    raise ProbeTableError(f"{archive}: {member.name} cannot be read")
                files.append((pathlib.PurePosixPath(member.name).name, handle.read().decode()))
    if not files:
        raise ProbeTableError(f"{archive}: no raw llama-bench JSON in it")
    return table(files, variant_build)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python3 -m tools.bench.probe_table RAW_DIR VARIANT_BUILD", file=sys.stderr)
        return 2
    for line in table_from_dir(pathlib.Path(argv[1]), argv[2]):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
