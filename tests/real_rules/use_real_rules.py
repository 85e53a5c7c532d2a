"""Points a copy of the workspace at the real rules_foreign_cc, rules_python and bazel-skylib.

Used by compare_rule_sets.sh on its copy, never on the repository: WORKSPACE's two stand-in
local_repository paths are replaced, bazel-skylib is declared, rules_foreign_cc's own
dependencies are set up with the preinstalled cmake and ninja, and .bazelrc gets the flag the
real rule needs on Bazel 4.2.3.
"""

import pathlib
import sys

_DEPENDENCIES = """
load("@rules_foreign_cc//foreign_cc:repositories.bzl", "rules_foreign_cc_dependencies")

rules_foreign_cc_dependencies(
    register_built_pkgconfig_toolchain = False,
    register_built_tools = False,
    register_default_tools = False,
    register_preinstalled_tools = True,
)
"""


def main(workspace: pathlib.Path, rules: pathlib.Path) -> None:
    path = workspace / "WORKSPACE"
    text = path.read_text()
    for name in ("rules_python", "rules_foreign_cc"):
        stand_in = f'path = "third_party/offline/{name}"'
        if text.count(stand_in) != 1:
            sys.exit(f"{path}: expected exactly one local_repository for {name} at third_party/offline/{name}")
        if not any((rules / name / f).is_file() for f in ("WORKSPACE", "WORKSPACE.bazel")):
            sys.exit(f"{rules / name}: not an unpacked {name} (no WORKSPACE); is the archive the real-rules one?")
        text = text.replace(stand_in, f'path = "{rules / name}"')
    header = 'workspace(name = "lanes")\n'
    if not text.startswith(header):
        sys.exit(f"{path}: does not start with {header!r}")
    skylib = f'\nlocal_repository(\n    name = "bazel_skylib",\n    path = "{rules / "bazel_skylib"}",\n)\n'
    path.write_text(header + skylib + text[len(header):] + _DEPENDENCIES)
    with (workspace / ".bazelrc").open("a") as rc:
        rc.write("\n# The real rules_foreign_cc on Bazel 4.2.3.\nbuild --experimental_enable_aggregating_middleman=false\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: use_real_rules.py WORKSPACE_COPY UNPACKED_RULES")
    main(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]))
