"""The build's own speed, benchmarked (a script, not a timed test). Run from the workspace root:

  python3 tools/bench/build_speed.py noop                 # no-op rebuild of //lanes:cpu
  python3 tools/bench/build_speed.py cold_cpu             # //lanes:cpu in a fresh output base, no cache
  python3 tools/bench/build_speed.py by_hand_cpu          # the same two CMake stages by hand
  python3 tools/bench/build_speed.py llama_patch --lane=cuda   # a llama-only patch change
  python3 tools/bench/build_speed.py stages               # each built stage's own CMake timings

Each prints one JSON line (what, seconds, and what Bazel executed) and nothing is timed inside a
test. `llama_patch` appends a comment line to a llama-only file of patch 0002 (tools/llama-logits),
rebuilds the lane, restores the patch and reports whether the ggml stage re-ran (it must not: its
sources are only ggml/, which that patch does not touch).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

WORKSPACE = pathlib.Path.cwd()
PATCH = WORKSPACE / "third_party/llama_cpp/patches/0002-llama-logits-tool.patch"


def _bazel(*args: str, output_base: str | None = None) -> tuple[float, str]:
    argv = ["bazel"] + ([f"--output_base={output_base}"] if output_base else []) + list(args)
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"build_speed: {' '.join(argv)} failed:\n{proc.stderr[-3000:]}")
    return seconds, proc.stderr


def _executed(stderr: str) -> dict[str, object]:
    """What Bazel ran: its `N processes: ...` summary and the CMake stages it executed."""
    summary = re.findall(r"INFO: (\d+ process(?:es)?:[^\n]*)", stderr)
    stages = sorted(set(re.findall(r"CMake build of (\S+)", stderr)))
    return {"bazel_processes": summary[-1] if summary else "", "cmake_stages_run": stages}


def _emit(what: str, seconds: float, **extra: object) -> None:
    print(json.dumps({"what": what, "seconds": round(seconds, 1), "host_cores": os.cpu_count(), **extra}, sort_keys=True))


def noop(lane: str) -> None:
    _bazel("build", f"//lanes:{lane}")
    seconds, err = _bazel("build", f"//lanes:{lane}")
    _emit(f"no-op rebuild of //lanes:{lane}", seconds, **_executed(err))


def cold(lane: str) -> None:
    base = tempfile.mkdtemp(prefix="lanes-cold-")
    try:
        seconds, err = _bazel("build", "--disk_cache=", "--noremote_accept_cached", f"//lanes:{lane}", output_base=base)
        _emit(f"cold //lanes:{lane} (fresh output base, no cache)", seconds, **_executed(err))
    finally:
        subprocess.run(["bazel", f"--output_base={base}", "shutdown"], check=False, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def by_hand(lane: str) -> None:
    """The lane's two stages with plain cmake/ninja, the cache entries read from its own meta.json."""
    src = pathlib.Path(subprocess.run(["bazel", "info", "output_base"], capture_output=True, text=True,
                                      check=True).stdout.strip()) / "external/llama_cpp/src"
    stages = {}
    for stage in ("ggml", "llama"):
        meta = WORKSPACE / f"bazel-bin/lanes/{lane}_{stage}_foreign_cc/meta.json"
        stages[stage] = json.loads(meta.read_text())["cache_entries"]
    work = pathlib.Path(tempfile.mkdtemp(prefix="lanes-by-hand-"))
    jobs = str(os.cpu_count() or 1)
    start = time.monotonic()
    try:
        ggml_install = work / "ggml-install"
        for stage, source in (("ggml", src / "ggml"), ("llama", src)):
            entries = dict(stages[stage])
            if stage == "llama":
                entries["CMAKE_PREFIX_PATH"] = str(ggml_install)
            build = work / f"{stage}-build"
            defs = [f"-D{k}={v}" for k, v in sorted(entries.items())]
            subprocess.run(["cmake", "-GNinja", "-S", str(source), "-B", str(build),
                            f"-DCMAKE_INSTALL_PREFIX={ggml_install if stage == 'ggml' else work / 'llama-install'}",
                            *defs], check=True, capture_output=True)
            subprocess.run(["cmake", "--build", str(build), "--parallel", jobs], check=True, capture_output=True)
            if stage == "ggml":
                subprocess.run(["cmake", "--install", str(build)], check=True, capture_output=True)
        _emit(f"//lanes:{lane}'s two CMake stages by hand (same cache entries, {jobs} jobs)", time.monotonic() - start)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def llama_patch(lane: str) -> None:
    original = PATCH.read_bytes()
    lines = original.decode().split("\n")
    # A comment added to the llama-logits tool's source inside the patch: llama-only by construction.
    at = next((i for i, line in enumerate(lines) if line.startswith("+int main(")), None)
    hunk = next((i for i in range(at, -1, -1) if lines[i].startswith("@@ ")), None) if at is not None else None
    m = re.match(r"@@ -(\d+(?:,\d+)?) \+(\d+),(\d+) @@(.*)", lines[hunk]) if hunk is not None else None
    if m is None:
        sys.exit(f"build_speed: {PATCH} has no added 'int main(' line inside a hunk to put a comment before")
    lines[hunk] = f"@@ -{m.group(1)} +{m.group(2)},{int(m.group(3)) + 1} @@{m.group(4)}"
    lines.insert(at, "+// build_speed: a llama-only change")
    changed = "\n".join(lines)
    _bazel("build", f"//lanes:{lane}")
    try:
        PATCH.write_text(changed)
        seconds, err = _bazel("build", f"//lanes:{lane}")
    finally:
        PATCH.write_bytes(original)
    info = _executed(err)
    _emit(f"//lanes:{lane} after a llama-only patch change", seconds,
          ggml_stage_rebuilt=f"{lane}_ggml" in " ".join(info["cmake_stages_run"]), **info)
    _bazel("build", f"//lanes:{lane}")  # back to the committed patch stack (a cache hit)


def stages() -> None:
    for meta in sorted(WORKSPACE.glob("bazel-bin/lanes/*_foreign_cc/meta.json")):
        data = json.loads(meta.read_text())
        steps = {c.get("step"): round(float(c.get("seconds", 0)), 1) for c in data.get("commands", [])}
        print(json.dumps({"stage": data.get("name"), "jobs": data.get("jobs"), **steps}, sort_keys=True))


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in ("noop", "cold_cpu", "by_hand_cpu", "llama_patch", "stages"):
        print(__doc__, file=sys.stderr)
        return 2
    lane = next((a.split("=", 1)[1] for a in argv[2:] if a.startswith("--lane=")), "cpu")
    {"noop": lambda: noop(lane), "cold_cpu": lambda: cold("cpu"), "by_hand_cpu": lambda: by_hand("cpu"),
     "llama_patch": lambda: llama_patch(lane), "stages": stages}[argv[1]]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
