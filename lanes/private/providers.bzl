"""Providers of the lane rules: what a consumer reads instead of guessing file names."""

LaneInfo = provider(
    doc = "A built lane: its relocatable directory, its build evidence and the spec entry it was built from.",
    fields = {
        "alias": "str: the lane's alias in the spec (the target name, e.g. \"cpu\").",
        "lane_id": "str: the lane's id, a key of the spec's `lanes` (e.g. \"linux-x86_64-cpu\").",
        "lane_dir": "str: the lane directory's path from the execution root (holds bin/ and lib/).",
        "lane_dir_short_path": "str: the same directory's runfiles path (e.g. \"lanes/cpu\").",
        "binaries": "depset of File: the lane's bin/ (tools and runtime-loaded CPU variants).",
        "libraries": "depset of File: the lane's lib/ (the shared libraries the tools load).",
        "evidence": "File: the build evidence (BuildEvidence, binary proto) of exactly these files.",
        "evidence_json": "File: the same build evidence as JSON.",
        "spec_entry": "dict: the lane's entry of the spec (lanes/private/lanes.bzl LANES[lane_id]).",
    },
)
