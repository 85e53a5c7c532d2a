"""One-way layering of tools/ (design.md section 2): the package import graph, test code included.

Every .py file under tools/ and proto/ is parsed with `ast`; each `import tools.X...`,
`from tools.X... import`, `from tools import X` and `importlib.import_module("tools.X...")` (a
constant or an f-string that starts with "tools.X.") becomes an edge from the file's package to X.
The graph must have no cycle and no edge from a stage to a later one:

  core < proto < evidence < model < ctest < runner < bench < audit < compat < policy < certify <
  publish < admission < matrix < job

- model is a utility (the embedded GGUF, the model store, the float64 reference): the runner and
  everything above it may use it.
- audit sits right above the runner: it re-derives the runner's figures and verdicts from the raw
  logs (it imports the runner's check modules), and the main job audits every run before signing.
- compat measures a mixed-backend route and builds the (unsigned) CompatibilityRecord from the
  runner's pieces; signing it is certify's, deciding with it admission's, so it sits below both.
- policy is the neutral trust base under both signing and admission: error codes, RFC 3339 times,
  DSSE envelopes, key files, trust stores and reading/validating policy files. certify (signing a
  report, which refuses keys the policy does not trust) and admission (deciding routes) both build
  on it, so neither imports the other's internals and certify <-> admission cannot come back.
- publish distributes signed records to Trackers (TUF repository, revocations, transparency log,
  the Tracker's refresh); it verifies records as certify signs them, and admission decides from a
  Tracker's view, so it sits between the two.
- job (the main job behind `bazel run //tools:certify`) sits above everything and only calls down.

Test code (py_test sources, testonly targets, *_test.py, testing/ and testdata/) obeys the same
stage order: a test lives in the package of the highest stage it uses (the tests of publishing that
decide with admission are tools/admission/publish_*_test.py), and its helpers live in its package's
testing/ (tools/publish/testing/repo.py), which every package at or above that stage may use.

Where the files come from: under `bazel test` the runfiles of the test: //tools:layering_sources, a
non-testonly py_library over the libraries of tools/ (their imports come along transitively) and
the CLI files, plus whatever test sources the target lists as data. Outside Bazel
(`/opt/lanes-pytest tests/layering_test.py`, or `python tests/layering_test.py` from the repository
root) the whole source tree, with test files found from the BUILD files: that mode sees every test
file and also a file no Bazel target reaches.
"""

from __future__ import annotations

import ast
import os
import pathlib
import re
import sys
from collections.abc import Iterable, Mapping

import pytest

# Lowest first. A package may import only packages at its own position or before it.
STAGES = ("core", "proto", "evidence", "model", "ctest", "runner", "bench", "audit", "compat", "policy", "certify", "publish", "probe",
          "admission", "matrix", "job")

# Edges from an earlier stage to a later one that are known and waiting for a fix in a file the
# layering work does not own, each with the fix. An entry that no longer occurs fails the test
# (delete it then), so this list only shrinks.
KNOWN_BACK_EDGES: dict[tuple[str, str], str] = {}

# The same, from test code only (checked, and checked for staleness, where test files are scanned).
KNOWN_TEST_BACK_EDGES: dict[tuple[str, str], str] = {}

SCANNED_DIRS = ("tools", "proto")
_MODULE_PATH = re.compile(r"^tools\.([A-Za-z_][A-Za-z0-9_]*)(\.|$)")
_TEST_RULES = re.compile(r"(^|_)test$")  # py_test, sh_test, ...
_MACRO_PREFIX = "lanes_py_"  # tools/python.bzl: srcs default to [name + ".py"]


# ---- collecting the graph -----------------------------------------------------------------------

def package_of(rel_path: str) -> str:
    """'tools/runner/runner.py' -> 'runner'; 'proto/admission_pb2.py' -> 'proto'."""
    parts = pathlib.PurePosixPath(rel_path).parts
    if parts[0] == "tools" and len(parts) > 2:
        return parts[1]
    return parts[0] if parts[0] != "tools" else "tools"


def _target_package(module: str) -> str | None:
    if module == "proto" or module.startswith("proto."):
        return "proto"
    m = _MODULE_PATH.match(module)
    return m.group(1) if m else None


def _dynamic_module(node: ast.AST) -> str | None:
    """The module path of a string that names one: "tools.x.y" or f"tools.x.{name}"."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        text = str(node.values[0].value)
    else:
        return None
    return text if _MODULE_PATH.match(text) and " " not in text else None


def imported_packages(source: str, filename: str = "<source>") -> list[tuple[str, int]]:
    """(package, line) for every import of tools.<package> or proto in `source`."""
    tree = ast.parse(source, filename)
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "tools":  # from tools import runner
                modules = [f"tools.{a.name}" for a in node.names]
            else:
                modules = [node.module]
        elif isinstance(node, ast.Call) and node.args and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__"))):
            module = _dynamic_module(node.args[0])
            modules = [module] if module else []
        elif isinstance(node, (ast.Constant, ast.JoinedStr)):
            # A module path kept in a table and imported later (a registry of module names).
            module = _dynamic_module(node)
            modules = [module] if module else []
        for module in modules:
            pkg = _target_package(module)
            if pkg:
                found.append((pkg, node.lineno))
    return found


def build_test_sources(build_file: pathlib.Path) -> set[str]:
    """File names (relative to the BUILD file's directory) of test rules and testonly targets."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(build_file.read_text(), str(build_file))):
        if not isinstance(node, ast.Call):
            continue
        rule = node.func.id if isinstance(node.func, ast.Name) else ""
        kw = {k.arg: k.value for k in node.keywords}
        testonly = isinstance(kw.get("testonly"), ast.Constant) and kw["testonly"].value is True
        if not (_TEST_RULES.search(rule) or testonly):
            continue
        srcs, name = kw.get("srcs"), kw.get("name")
        if isinstance(srcs, ast.List):
            names.update(e.value for e in srcs.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
        elif srcs is None and rule.startswith(_MACRO_PREFIX) and isinstance(name, ast.Constant):
            names.add(f"{name.value}.py")  # the macros' default srcs (tools/python.bzl)
    return names


def is_test_file(rel_path: str, build_test_srcs: set[str]) -> bool:
    p = pathlib.PurePosixPath(rel_path)
    return (p.name.endswith("_test.py") or "testdata" in p.parts or "testing" in p.parts
            or rel_path in build_test_srcs)


def source_files(root: pathlib.Path) -> tuple[list[str], list[str]]:
    """Workspace-relative paths of the .py files under tools/ and proto/: (non-test, test)."""
    build_test_srcs: set[str] = set()
    for d in SCANNED_DIRS:
        for build in (root / d).rglob("BUILD*"):
            rel_dir = build.parent.relative_to(root).as_posix()
            build_test_srcs.update(f"{rel_dir}/{name}" for name in build_test_sources(build))
    code: list[str] = []
    tests: list[str] = []
    for d in SCANNED_DIRS:
        for path in sorted((root / d).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            (tests if is_test_file(rel, build_test_srcs) else code).append(rel)
    return code, tests


def non_test_files(root: pathlib.Path) -> list[str]:
    """Workspace-relative paths of the non-test .py files under tools/ and proto/."""
    return source_files(root)[0]


Edges = dict[tuple[str, str], list[str]]  # (from package, to package) -> ["file:line", ...]


def import_graph(root: pathlib.Path, files: Iterable[str]) -> tuple[set[str], Edges]:
    packages: set[str] = set()
    edges: Edges = {}
    for rel in files:
        src_pkg = package_of(rel)
        packages.add(src_pkg)
        for dst_pkg, line in imported_packages((root / rel).read_text(), rel):
            packages.add(dst_pkg)
            if dst_pkg != src_pkg:
                edges.setdefault((src_pkg, dst_pkg), []).append(f"{rel}:{line}")
    return packages, edges


# ---- checking it --------------------------------------------------------------------------------

def find_cycles(packages: Iterable[str], edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """Strongly connected components of more than one package (Tarjan), each sorted."""
    graph: dict[str, list[str]] = {p: [] for p in packages}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(cycles)


def layering_problems(packages: Iterable[str], edges: Mapping[tuple[str, str], list[str]],
                      stages: tuple[str, ...] = STAGES,
                      known: Mapping[tuple[str, str], str] | None = None) -> list[str]:
    """Every violation, one line each: an edge to a later stage, a cycle, or an edge that touches a
    package with no stage (add it to STAGES where it belongs). `known` back-edges are exempt."""
    known = KNOWN_BACK_EDGES if known is None else known
    rank = {p: i for i, p in enumerate(stages)}
    problems = []
    for (a, b), where in sorted(edges.items()):
        if a not in rank or b not in rank:
            missing = ", ".join(p for p in (a, b) if p not in rank)
            problems.append(f"package {missing} has no stage: add it to STAGES in tests/layering_test.py "
                            f"(edge {a} -> {b} at {', '.join(where)})")
        elif rank[a] < rank[b] and (a, b) not in known:
            problems.append(f"back-edge {a} -> {b}: {a} (stage {rank[a]}) imports the later stage {b} "
                            f"(stage {rank[b]}) at {', '.join(where)}")
    for cycle in find_cycles(packages, [e for e in edges if e not in known]):
        problems.append(f"cycle among {', '.join(cycle)}")
    for (a, b) in sorted(known):
        if (a, b) not in edges:
            problems.append(f"known back-edge {a} -> {b} no longer occurs: delete it from KNOWN_BACK_EDGES")
    return problems


def render(packages: Iterable[str], edges: Mapping[tuple[str, str], list[str]], stages: tuple[str, ...] = STAGES) -> str:
    rank = {p: i for i, p in enumerate(stages)}
    order = sorted(packages, key=lambda p: (rank.get(p, len(stages)), p))
    lines = ["package import graph, test code included (stage: package -> imports)"]
    for p in order:
        targets = sorted({b for (a, b) in edges if a == p}, key=lambda b: (rank.get(b, len(stages)), b))
        known = {**KNOWN_BACK_EDGES, **KNOWN_TEST_BACK_EDGES}
        marks = [b + ("  <-- LATER STAGE" + (" (known)" if (p, b) in known else "")
                      if rank.get(b, -1) > rank.get(p, -1) else "") for b in targets]
        stage = str(rank[p]) if p in rank else "-"
        lines.append(f"  {stage:>2} {p:<10} -> {', '.join(marks) if marks else '(nothing)'}")
    return "\n".join(lines)


# ---- the repository -----------------------------------------------------------------------------

def repository_root() -> pathlib.Path:
    """Bazel: the runfiles tree of this test (the workspace's own directory in it). Else the source tree."""
    srcdir, workspace = os.environ.get("TEST_SRCDIR"), os.environ.get("TEST_WORKSPACE")
    if srcdir and workspace and (pathlib.Path(srcdir) / workspace / "tools").is_dir():
        return pathlib.Path(srcdir) / workspace
    return pathlib.Path(__file__).resolve().parent.parent


def under_bazel() -> bool:
    return repository_root() != pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def graph():
    root = repository_root()
    files, tests = source_files(root)
    assert any(f.startswith("tools/job/") for f in files) and any(f.startswith("tools/runner/") for f in files), (
        f"no tools/ sources under {root}: the test's dependency //tools:layering_sources is missing")
    packages, edges = import_graph(root, [*files, *tests])
    print(f"\n{len(files)} non-test and {len(tests)} test files under {root}")
    print(render(packages, edges))
    return packages, edges, tests


def test_no_back_edges_and_no_cycles(graph):
    packages, edges, tests = graph
    problems = layering_problems(packages, edges, known={**KNOWN_BACK_EDGES, **(KNOWN_TEST_BACK_EDGES if tests else {})})
    assert not problems, "layering violations:\n" + "\n".join(problems)


def test_test_code_is_in_the_graph(graph):
    _, edges, tests = graph
    if under_bazel() and not tests:
        pytest.skip("no test sources in this target's runfiles; `python tests/layering_test.py` checks them")
    assert any(t.startswith("tools/admission/publish_") for t in tests) and "tools/publish/testing/repo.py" in tests
    assert any(w.startswith("tools/admission/publish_loopback_test.py:") for w in edges[("admission", "publish")])


def test_every_stage_exists(graph):
    packages, _, _ = graph
    assert set(STAGES) <= packages, f"stages without a package: {sorted(set(STAGES) - packages)}"


# ---- the checker can fail -----------------------------------------------------------------------

def test_reports_a_synthetic_back_edge():
    packages = {"evidence", "runner", "certify", "admission"}
    edges = {("certify", "runner"): ["tools/certify/records.py:3"],
             ("runner", "certify"): ["tools/runner/runner.py:9"]}  # the back-edge (and a cycle with it)
    problems = layering_problems(packages, edges, known={})
    assert any(p.startswith("back-edge runner -> certify") and "tools/runner/runner.py:9" in p for p in problems), problems
    assert "cycle among certify, runner" in problems
    assert layering_problems(packages, {("certify", "runner"): ["x:1"]}, known={}) == []


def test_reports_a_cycle_inside_one_stage_and_an_unstaged_package():
    edges = {("a", "b"): ["a.py:1"], ("b", "c"): ["b.py:1"], ("c", "a"): ["c.py:1"], ("job", "newpkg"): ["j.py:1"]}
    problems = layering_problems({"a", "b", "c", "job", "newpkg"}, edges, stages=("a", "b", "c", "job"), known={})
    assert "cycle among a, b, c" in problems
    assert any(p.startswith("package newpkg has no stage") for p in problems)


def test_reports_a_stale_known_back_edge():
    problems = layering_problems({"evidence", "runner"}, {}, known={("evidence", "runner"): "fixed"})
    assert problems == ["known back-edge evidence -> runner no longer occurs: delete it from KNOWN_BACK_EDGES"]


def test_import_forms_are_all_seen():
    source = '''
"""Docstring naming tools.certify.records in prose is not an import."""
import tools.runner.runner
from tools.certify import records
from tools import admission
from proto import certification_pb2
import importlib
MODULES = {n: f"tools.matrix.{n}" for n in ("a",)}
importlib.import_module("tools.job.main_job")
def f():
    from tools.audit import audit  # a lazy import counts too
'''
    assert sorted({p for p, _ in imported_packages(source)}) == [
        "admission", "audit", "certify", "job", "matrix", "proto", "runner"]


def test_test_code_is_recognised(tmp_path):
    (tmp_path / "BUILD.bazel").write_text(
        'py_library(name = "helper", testonly = True, srcs = ["helper.py"])\n'
        'py_library(name = "lib", srcs = ["lib.py"])\n'
        'py_test(name = "t", srcs = ["check.py"])\n'
        'lanes_py_library(name = "fixture", testonly = True)\n'
        'lanes_py_library(name = "code")\n'
        'lanes_py_test(name = "probe")\n')
    assert build_test_sources(tmp_path / "BUILD.bazel") == {"helper.py", "check.py", "fixture.py", "probe.py"}
    assert is_test_file("tools/x/y_test.py", set()) and is_test_file("tools/x/testdata/s.py", set())
    assert not is_test_file("tools/x/lib.py", {"tools/x/helper.py"})
    assert is_test_file("tools/x/testing/fixture.py", set())


def test_a_test_file_importing_a_later_stage_is_a_back_edge(tmp_path):
    (tmp_path / "tools" / "publish" / "testing").mkdir(parents=True)
    (tmp_path / "tools" / "publish" / "BUILD.bazel").write_text('py_test(name = "t", srcs = ["flow_test.py"])\n')
    (tmp_path / "tools" / "publish" / "flow_test.py").write_text(
        "from tools.publish.testing import repo\nfrom tools.admission import admission\n")
    (tmp_path / "tools" / "publish" / "testing" / "repo.py").write_text("from tools.certify import records\n")
    code, tests = source_files(tmp_path)
    assert code == [] and tests == ["tools/publish/flow_test.py", "tools/publish/testing/repo.py"]
    packages, edges = import_graph(tmp_path, tests)
    assert layering_problems(packages, edges, known={}) == [
        "back-edge publish -> admission: publish (stage 11) imports the later stage admission (stage 13) "
        "at tools/publish/flow_test.py:2"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-s", "-p", "no:cacheprovider"]))
