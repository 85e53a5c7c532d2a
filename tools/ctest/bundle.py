"""A relocatable bundle of llama.cpp's CTest suite for one lane, and instantiating it to run.

Made at build time from the CTest stage's build tree (its CTestTestfile.cmake files, which name
the build and source directories of a build action long gone): the build root, bin/ and the
source root become placeholders, so the bundle runs anywhere with the lane's own libraries.

Layout:
  manifest.json      lane id, every registered test (command, labels, working directory,
                     exclusion reason from the lane spec), covered-elsewhere notes, and the
                     sha256 of each test executable in bin/ ("binaries": the only digest source of
                     the test executables: the lane's build evidence lists the lane's own files)
  bin/               the test executables
  ctest/<dir>/CTestTestfile.cmake.in   CTest's own files, with placeholders
  source/            the source files the tests read (vocabularies, chat templates, scripts)
"""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess
import tempfile
from typing import Any

from tools.core.digest import sha256_file
from tools.core.errors import LanesError

SCHEMA_VERSION = 1
BIN, WORK, SOURCE = "@LANES_CTEST_BIN@", "@LANES_CTEST_WORK@", "@LANES_CTEST_SOURCE@"
_HEADER = re.compile(r"^# (Source|Build) directory: (?P<path>.+)$", re.M)
_ADD_TEST = re.compile(r"^add_test\(\[=\[(?P<name>.+?)\]=\]", re.M)
# Upstream's "model" tests print this and exit 0 when no model is given: CTest must call it a skip.
MODEL_SKIP_REGEX = "No model file provided. Skipping this test"
# A vocabulary's expected tokenizations sit beside it (test-tokenizer-0 reads both).
_COMPANIONS = (".inp", ".out")


class BundleError(LanesError):
    """The bundle cannot be made or used; the message names the file and what to do."""

    code = "ctest-bundle"


def _roots(text: str, sub: str, path: pathlib.Path) -> tuple[str, str]:
    """(source root, build root) from the header CMake writes atop every CTestTestfile.cmake."""
    found = {m[1]: m["path"].strip() for m in _HEADER.finditer(text)}
    if set(found) != {"Source", "Build"}:
        raise BundleError(f"{path}: no '# Source directory' / '# Build directory' header; is it CMake's CTestTestfile.cmake?")
    roots = []
    for kind in ("Source", "Build"):
        if not found[kind].endswith("/" + sub):
            raise BundleError(f"{path}: {kind.lower()} directory {found[kind]} does not end in /{sub}")
        roots.append(found[kind][: -len(sub) - 1])
    return roots[0], roots[1]


def template(text: str, source_root: str, build_root: str) -> str:
    """Build and source paths -> placeholders (bin/ first: binaries live in the bundle)."""
    out = text.replace(build_root + "/bin/", BIN + "/").replace(build_root + "/bin", BIN)
    out = out.replace(build_root, WORK).replace(source_root, SOURCE)
    return out


def instantiate(text: str, bin_dir: str, work_dir: str, source_dir: str) -> str:
    return text.replace(BIN, bin_dir).replace(WORK, work_dir).replace(SOURCE, source_dir)


def _show_only(ctest: str, work: pathlib.Path) -> list[dict[str, Any]]:
    """CTest's own reading of the test files (names, commands, properties)."""
    proc = subprocess.run([ctest, "--show-only=json-v1"], cwd=work, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BundleError(f"`{ctest} --show-only=json-v1` in {work} failed: {proc.stderr.strip()}")
    return json.loads(proc.stdout)["tests"]


def _props(test: dict[str, Any]) -> dict[str, Any]:
    return {p["name"]: p["value"] for p in test.get("properties", [])}


def make(
    lane_id: str,
    ctest_spec: dict[str, Any],
    build_tree: pathlib.Path,
    binaries: list[pathlib.Path],
    source_root: pathlib.Path,
    out: pathlib.Path,
    ctest: str = "ctest",
) -> dict[str, Any]:
    """Writes the bundle into `out` and returns its manifest.

    build_tree holds the CTest stage's copied test directories (<build_tree>/<dir>/CTestTestfile.cmake
    for each of ctest_spec["test_dirs"]); source_root is the patched tree (with models/).
    """
    excluded: dict[str, str] = dict(ctest_spec["excluded"])
    dirs: list[str] = list(ctest_spec["test_dirs"])
    roots = set()
    texts = {}
    for sub in dirs:
        path = build_tree / sub / "CTestTestfile.cmake"
        if not path.is_file():
            raise BundleError(f"{path}: missing; the CTest stage must copy the build tree's {sub}/ (out_data_dirs)")
        text = path.read_text()
        roots.add(_roots(text, sub, path))
        texts[sub] = text
    if len(roots) != 1:
        raise BundleError(f"{build_tree}: the test directories name different build/source roots: {sorted(roots)}")
    src_root, build_root = roots.pop()

    out.mkdir(parents=True, exist_ok=True)
    (out / "bin").mkdir(exist_ok=True)
    for binary in binaries:
        shutil.copy2(binary, out / "bin" / binary.name)
    defined_in: dict[str, str] = {}
    for sub, text in texts.items():
        templated = template(text, src_root, build_root)
        if build_root in templated or src_root in templated:
            raise BundleError(f"{build_tree / sub}/CTestTestfile.cmake: a build or source path survived templating")
        dest = out / "ctest" / sub / "CTestTestfile.cmake.in"
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(templated)
        for m in _ADD_TEST.finditer(templated):
            defined_in[m["name"]] = sub
    (out / "ctest" / "CTestTestfile.cmake.in").write_text("".join(f'subdirs("{sub}")\n' for sub in dirs))

    # Let CTest itself read the files (into a scratch tree) rather than parsing CMake syntax here.
    # CTest resolves paths, so the scratch tree has real absolute roots, mapped back afterwards.
    with tempfile.TemporaryDirectory(prefix="ctest-show-") as scratch:
        roots_back = {str(pathlib.Path(scratch, d)): p for d, p in (("bin", BIN), ("work", WORK), ("source", SOURCE))}
        work = pathlib.Path(scratch, "work")
        # CTest lists a command only when its executable exists: the bundle's own bin/.
        pathlib.Path(scratch, "bin").symlink_to((out / "bin").resolve())
        instantiate_tree(out, work, bin_dir=str(pathlib.Path(scratch, "bin")), source_dir=str(pathlib.Path(scratch, "source")))
        shown = _show_only(ctest, work)

    tests = []
    for t in shown:
        props = _props(t)
        tests.append({
            "name": t["name"],
            "command": [_placeholder_path(a, roots_back) for a in t.get("command", [])],
            "labels": props.get("LABELS", []),
            "working_directory": _placeholder_path(props.get("WORKING_DIRECTORY", ""), roots_back),
            "directory": defined_in.get(t["name"], ""),
            "excluded_reason": excluded.get(t["name"], ""),
        })
    names = [t["name"] for t in tests]
    stale = sorted(set(excluded) - set(names))
    if stale:
        raise BundleError(f"the lane spec excludes tests {stale} that {lane_id}'s build does not register; remove them from lanes/lanes.bzl")
    labels = set(ctest_spec.get("labels", []))
    for t in tests:
        other = sorted(set(t["labels"]) - labels)
        if other and not t["excluded_reason"]:
            raise BundleError(f"test {t['name']} has CTest label(s) {other} that the lane spec's ctest labels {sorted(labels)} do not list; add the label (lanes/lanes.bzl) or exclude the test with a reason")
    present = {b.name for b in binaries}
    source_files = set()
    for t in tests:
        if t["excluded_reason"]:
            continue
        if not t["command"]:
            raise BundleError(f"test {t['name']} runs an executable the CTest stage did not build; add its target to the lane spec's ctest targets (lanes/lanes.bzl) or exclude the test with a reason")
        for arg in t["command"]:
            if arg.startswith(BIN + "/") and arg[len(BIN) + 1:] not in present:
                raise BundleError(f"test {t['name']} runs {arg[len(BIN) + 1:]}, which the CTest stage did not build; add it to the lane spec's ctest targets")
            if arg.startswith(SOURCE + "/"):
                rel = arg[len(SOURCE) + 1:]
                source_files.add(rel)
                source_files.update(rel + c for c in _COMPANIONS if (source_root / (rel + c)).is_file())
    for rel in ctest_spec.get("source_data", []):
        base = source_root / rel
        if not base.exists():
            raise BundleError(f"{base}: source data the lane spec lists is not in the pinned tree")
        if base.is_dir():
            source_files.update(str(p.relative_to(source_root)) for p in base.rglob("*") if p.is_file())
        else:
            source_files.add(rel)
    for rel in sorted(source_files):
        src = source_root / rel
        if not src.is_file():
            raise BundleError(f"{src}: a test reads it, but it is not in the pinned tree's data given to the bundle")
        dest = out / "source" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest)

    manifest = {
        "schema_version": SCHEMA_VERSION,
        "lane_id": lane_id,
        "test_dirs": dirs,
        "tests": tests,
        "covered_elsewhere": dict(ctest_spec.get("covered_elsewhere", {})),
        "source_files": sorted(source_files),
        "binaries": {b.name: sha256_file(out / "bin" / b.name) for b in sorted(binaries, key=lambda b: b.name)},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def _placeholder_path(value: str, roots_back: dict[str, str]) -> str:
    # Anywhere in the value: CTest keeps arguments such as -DDEST=<build root>/... whole.
    for root, placeholder in roots_back.items():
        value = value.replace(root, placeholder)
    return value


def instantiate_tree(bundle: pathlib.Path, work: pathlib.Path, bin_dir: str, source_dir: str,
                     extra_properties: str = "") -> None:
    """Writes runnable CTestTestfile.cmake files under `work` from the bundle's templates.

    Working directories inside the build tree are created (CMake made them at configure time);
    extra_properties is appended to each directory's file after the tests it defines.
    """
    for template_path in sorted((bundle / "ctest").rglob("CTestTestfile.cmake.in")):
        rel = template_path.relative_to(bundle / "ctest").parent
        text = instantiate(template_path.read_text(), bin_dir, str(work), source_dir)
        dest = work / rel / "CTestTestfile.cmake"
        dest.parent.mkdir(parents=True, exist_ok=True)
        names = [m["name"] for m in _ADD_TEST.finditer(text)]
        if extra_properties and names:
            text += "set_tests_properties(" + " ".join(f"[=[{n}]=]" for n in names) + f" PROPERTIES {extra_properties})\n"
        dest.write_text(text)


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError(f"key(s) {sorted({k for k in keys if keys.count(k) > 1})} appear twice")
    return dict(pairs)


def load_manifest(bundle: pathlib.Path) -> dict[str, Any]:
    return load_manifest_file(bundle / "manifest.json")


def load_manifest_file(path: pathlib.Path) -> dict[str, Any]:
    """A bundle's manifest.json (or a kept copy of it), checked: one schema, no repeated key or test."""
    try:
        manifest = json.loads(path.read_text(), object_pairs_hook=_refuse_duplicate_keys)
    except FileNotFoundError:
        raise BundleError(f"{path}: missing; --bundle must be a CTest bundle (bazel build //lanes:<lane>_ctest)") from None
    except (OSError, ValueError) as err:
        raise BundleError(f"{path}: unreadable ({err}); rebuild the bundle") from None
    if not isinstance(manifest, dict) or manifest.get("schema_version") != SCHEMA_VERSION:
        raise BundleError(f"{path}: schema_version {manifest.get('schema_version') if isinstance(manifest, dict) else '?'} is not {SCHEMA_VERSION}; rebuild the bundle with this checkout")
    for key in ("lane_id", "tests", "test_dirs"):
        if not manifest.get(key):
            raise BundleError(f"{path}: no '{key}'; rebuild the bundle")
    names = [t["name"] for t in manifest["tests"]]
    if len(names) != len(set(names)):
        raise BundleError(f"{path}: a test name appears twice; rebuild the bundle")
    return manifest


def binary_digests(manifest: dict[str, Any]) -> dict[str, str] | None:
    """Test executable -> its hex sha256, as the bundle recorded them when it was made (None: a
    bundle made before the manifest carried them)."""
    value = manifest.get("binaries")
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return None
    return dict(value)


def binary_problems(bundle: pathlib.Path, manifest: dict[str, Any]) -> list[str]:
    """Why the bundle's bin/ is not the executables its manifest recorded (empty: every file is
    listed with its digest, and nothing else is there)."""
    digests = binary_digests(manifest)
    if digests is None:
        return [f"{bundle / 'manifest.json'}: no 'binaries' digests; rebuild the bundle with this checkout"]
    present = {p.name: p for p in sorted((bundle / "bin").iterdir())} if (bundle / "bin").is_dir() else {}
    out = [f"bin/{name}: not in the manifest's binaries" for name in sorted(set(present) - set(digests))]
    out += [f"bin/{name}: missing (the manifest lists it)" for name in sorted(set(digests) - set(present))]
    for name in sorted(set(present) & set(digests)):
        actual = sha256_file(present[name])
        if actual != digests[name]:
            out.append(f"bin/{name}: sha256 {actual[:16]}... is not the manifest's {digests[name][:16]}...")
    return out


def exclusions(manifest: dict[str, Any]) -> dict[str, str]:
    """Excluded test -> the lane spec's reason, as the manifest records them."""
    return {t["name"]: t["excluded_reason"] for t in manifest["tests"] if t["excluded_reason"]}


def work_dirs(manifest: dict[str, Any], work: pathlib.Path) -> list[pathlib.Path]:
    """Directories under the build tree that tests write into or run in (configure made them)."""
    out = []
    for t in manifest["tests"]:
        for value in [t["working_directory"], *t["command"]]:
            if isinstance(value, str) and value.startswith(WORK + "/") and value.endswith("/"):
                out.append(work / value[len(WORK) + 1:])
        wd = t["working_directory"]
        if wd.startswith(WORK):
            out.append(work / wd[len(WORK):].lstrip("/"))
    return out
