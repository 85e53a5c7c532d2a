"""LaneSpec: the schema of one lane's entry in the spec, the only list of its fields.

Starlark checks every lane against it when lanes/BUILD.bazel is loaded (check_lane_spec), and
spec.bzl writes it into spec.json as `lane_schema`, which tools/runner/lane_spec.py validates the
lanes against before reading them: a field added, renamed or retyped here is seen by both sides,
and a spec that does not match fails on both.

Each field: type ("string", "bool", "list" of strings, "dict"), required, doc.
"""

LANE_SPEC_FIELDS = {
    "alias": {"type": "string", "required": True, "doc": "the Bazel target and CLI name; empty: registered only, no targets"},
    "os": {"type": "string", "required": True, "doc": "linux, darwin, windows, android"},
    "arch": {"type": "string", "required": True, "doc": "x86_64, aarch64, arm64"},
    "backend": {"type": "string", "required": True, "doc": "the ggml backend (cpu, cuda, rocm, vulkan, metal); not cpu: an accelerator lane"},
    "sdk": {"type": "string", "required": True, "doc": "the SDK that builds it: a name in //toolchains:sdk_table.bzl"},
    "ggml_cache_entries": {"type": "dict", "required": True, "doc": "CMake cache entries of the ggml stage"},
    "ggml_libs": {"type": "list", "required": True, "doc": "the ggml libraries the lane ships (lib<name>.so.0)"},
    "llama_cache_entries": {"type": "dict", "required": True, "doc": "CMake cache entries of the llama stage"},
    "llama_libs": {"type": "list", "required": True, "doc": "the llama stage's runtime libraries (SONAMEs)"},
    "targets": {"type": "list", "required": True, "doc": "the tools the lane ships"},
    "rpc": {"type": "bool", "required": True, "doc": "whether it can serve layers of a mixed RPC route"},
    "log_evidence": {"type": "list", "required": True, "doc": "regexes the backend logs when it really ran the graph"},
    "fixture_ops": {"type": "list", "required": True, "doc": "the ops fixture parity checks (test-backend-ops -o)"},
    "op_coverage": {"type": "dict", "required": True, "doc": "op -> the check that covers it where fixture parity cannot"},
    "ops_absent_from_graph": {"type": "list", "required": True, "doc": "required ops the lane's graph never runs (confirmed per run)"},
    "notes": {"type": "string", "required": True, "doc": "one line for the matrix"},
    "ctest": {"type": "dict", "required": True, "doc": "llama.cpp's CTest suite: targets, test_dirs, excluded, labels, in_certification, ..."},
    "cpu_variants": {"type": "list", "required": False, "doc": "ggml's runtime-selected CPU variants (GGML_BACKEND_DL lanes only)"},
}

_STARLARK_TYPES = {"string": "string", "bool": "bool", "list": "list", "dict": "dict"}

def lane_spec_problems(lane_id, lane, fields = LANE_SPEC_FIELDS):
    """What is wrong with one lane's entry, as sentences (empty when it matches the schema).

    Args:
      lane_id: the lane's key in the spec.
      lane: its entry.
      fields: the schema (LANE_SPEC_FIELDS).
    Returns:
      a list of strings.
    """
    problems = []
    for name in sorted(lane.keys()):
        if name not in fields:
            problems.append("{}: field {} is not in the LaneSpec schema (lanes/private/spec_schema.bzl)".format(lane_id, name))
    for name, field in fields.items():
        if name not in lane:
            if field["required"]:
                problems.append("{}: required field {} is missing".format(lane_id, name))
            continue
        if type(lane[name]) != _STARLARK_TYPES[field["type"]]:
            problems.append("{}: field {} is a {}, the schema says {}".format(lane_id, name, type(lane[name]), field["type"]))
    if "-".join([lane.get("os", ""), lane.get("arch", ""), lane.get("backend", "")]) != lane_id:
        problems.append("{}: the id is not <os>-<arch>-<backend>".format(lane_id))
    return problems

def check_lane_spec(lanes, fields = LANE_SPEC_FIELDS):
    """fail()s, naming every problem, unless each lane matches the schema and aliases are unique.

    Args:
      lanes: the spec's lanes, {lane_id: entry}.
      fields: the schema (LANE_SPEC_FIELDS).
    """
    problems = []
    aliases = {}
    for lane_id, lane in lanes.items():
        problems += lane_spec_problems(lane_id, lane, fields)
        alias = lane.get("alias", "")
        if alias in aliases:
            problems.append("{}: alias {} is {}'s already".format(lane_id, alias, aliases[alias]))
        elif alias:
            aliases[alias] = lane_id
    if problems:
        fail("the lane spec does not match LaneSpec:\n  " + "\n  ".join(problems))
