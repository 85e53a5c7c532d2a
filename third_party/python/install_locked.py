"""Installs a hash-locked requirements file, one directory and one py_library per package.

Run by the `locked_requirements` repository rule; stdlib only (it runs before any package is
installed).
"""

import argparse
import email.parser
import os
import pathlib
import re
import subprocess
import sys

_LINE = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)==(?P<version>\S+)\s+--hash=sha256:(?P<sha>[0-9a-f]{64})$")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def parse_lock(path: pathlib.Path) -> list[tuple[str, str, str]]:
    entries = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match:
            sys.exit(f"{path}:{number}: expected 'name==version --hash=sha256:<64 hex>', got {line!r}")
        entries.append((match["name"], match["version"], match["sha"]))
    return entries


def requires(dist_info: pathlib.Path) -> list[str]:
    metadata = email.parser.Parser().parsestr((dist_info / "METADATA").read_text())
    names = []
    for req in metadata.get_all("Requires-Dist") or []:
        if "extra ==" in req:
            continue
        names.append(canonical(re.split(r"[ ;<>=!~\[(]", req.strip(), maxsplit=1)[0]))
    return names


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lock", type=pathlib.Path, required=True)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    args = parser.parse_args()
    entries = parse_lock(args.lock)
    locked = {canonical(name) for name, _, _ in entries}
    targets = []
    for name, version, sha in entries:
        key = canonical(name)
        req = args.out / f"{key}.requirement.txt"
        req.write_text(f"{name}=={version} --hash=sha256:{sha}\n")
        site = args.out / key / "site"
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--isolated", "--quiet", "--no-deps",
             "--require-hashes", "--only-binary=:all:", "--no-compile", "--disable-pip-version-check",
             "--target", str(site), "-r", str(req)],
            check=True,
            env={**os.environ, "PIP_ROOT_USER_ACTION": "ignore"},
        )
        dist = next(site.glob("*.dist-info"))
        deps = sorted({d for d in requires(dist) if d in locked and d != key})
        targets.append((key, version, deps))
    for key, version, deps in targets:
        dep_labels = ", ".join(f'"//{d}"' for d in deps)
        (args.out / key / "BUILD.bazel").write_text(
            'load("@rules_python//python:defs.bzl", "py_library")\n\n'
            f"# {key}=={version}, installed with --require-hashes from the lock file.\n"
            "py_library(\n"
            f'    name = "{key}",\n'
            '    srcs = glob(["site/**/*.py"], allow_empty = True),\n'
            '    # Runfiles manifests cannot hold names with spaces (setuptools vendors one such file).\n    data = glob(["site/**"], exclude = ["site/**/*.py", "site/**/__pycache__/**", "site/**/* *"]),\n'
            '    imports = ["site"],\n'
            '    visibility = ["//visibility:public"],\n'
            f"    deps = [{dep_labels}],\n"
            ")\n"
        )
    (args.out / "BUILD.bazel").write_text("")
    (args.out / "WORKSPACE").write_text('workspace(name = "pypi")\n')


if __name__ == "__main__":
    main()
