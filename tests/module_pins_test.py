"""MODULE.bazel (Bzlmod, Bazel >= 7.4.1) pins exactly what WORKSPACE (Bazel 4.2.3, tested here) pins.

Both files and the module extensions they use are read as text: Starlark's syntax is a subset of
Python's, so `ast` parses them. Checked:
  - every repository rule WORKSPACE calls is called by a module extension tag with equal attributes
    (llama.cpp commit, archive sha256, sdist, strip_prefix and patch series; the lock files;
    the CUDA, SDK and Vulkan repositories), and the other way round; a `**CONSTANT` loaded from a
    .bzl counts as the attributes it holds;
  - the pinned rules (PINNED) take their pin from the one shared constant on both sides, and
    neither side writes one of its attributes itself;
  - each tag wraps the same repository rule (same .bzl file, same symbol) and declares exactly the
    rule's public attributes, less those the extension supplies from a constant;
  - every in-repo stand-in of WORKSPACE (third_party/offline) is replaced by a bazel_dep, every
    WORKSPACE repository is visible (use_repo), every WORKSPACE toolchain is registered;
  - a requirement hash written in MODULE.bazel or an extension (none today: they name the lock
    file) equals the lock file's.
Each check returns findings naming the difference; the mismatch tests below feed altered copies.
"""

import ast
import os
import pathlib
import re
import sys

import pytest


def _root():
    srcdir = os.environ.get("TEST_SRCDIR")
    if srcdir:
        # "lanes" under WORKSPACE, "_main" under Bzlmod.
        return pathlib.Path(srcdir, os.environ.get("TEST_WORKSPACE", "lanes"))
    return pathlib.Path(__file__).resolve().parent.parent


ROOT = _root()


def _source_tree():
    """The checkout the runfiles link into (found through WORKSPACE, which //:BUILD.bazel exports)."""
    workspace = ROOT / "WORKSPACE"
    return pathlib.Path(os.path.realpath(workspace)).parent if workspace.exists() else ROOT


# Files read from the checkout because no BUILD file exports them yet (see test_inputs_are_declared).
UNDECLARED = []

# WORKSPACE stand-ins for Bazel 4.2.3's own default downloads; under Bzlmod Bazel's bundled modules
# provide them, so they need no bazel_dep.
BAZEL_BUILTIN_STAND_INS = {"rules_java", "remote_coverage_tools"}


def label_path(label):
    """//pkg:file -> pkg/file (main repository labels only)."""
    if not label.startswith("//"):
        raise ValueError("not a main-repository label: " + label)
    pkg, _, name = label[2:].partition(":")
    return f"{pkg}/{name}" if pkg else name


# Repository rules whose pin is one constant that WORKSPACE and the module extension both load.
PINNED = {
    ("//third_party/llama_cpp:llama_cpp_archive.bzl", "llama_cpp_archive"):
        ("//third_party/llama_cpp:pin.bzl", "LLAMA_CPP_PIN"),
}


def _literal(node, consts=None):
    if isinstance(node, ast.Name) and consts is not None and node.id in consts:
        return consts[node.id]
    return ast.literal_eval(node)


def _calls(tree):
    """Top-level call statements and assignments of calls: (target or None, ast.Call)."""
    for stmt in tree.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            yield None, stmt.value
        elif isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and len(stmt.targets) == 1:
            target = stmt.targets[0]
            yield (target.id if isinstance(target, ast.Name) else None), stmt.value


def _loads(tree):
    """symbol -> (bzl label, exported name) for every load() of a file."""
    out = {}
    for _, call in _calls(tree):
        if isinstance(call.func, ast.Name) and call.func.id == "load":
            bzl = _literal(call.args[0])
            for arg in call.args[1:]:
                name = _literal(arg)
                out[name] = (bzl, name)
            for kw in call.keywords:
                out[kw.arg] = (bzl, _literal(kw.value))
    return out


def constant_value(texts, bzl, symbol):
    """The literal value of `symbol = ...` in the .bzl `bzl`, or None when that file was not read."""
    text = (texts or {}).get(bzl)
    if text is None:
        return None
    consts = _constants(ast.parse(text, bzl))
    if symbol not in consts:
        raise ValueError(f"{bzl} has no constant {symbol}")
    return ast.literal_eval(consts[symbol])


def _spread(call, loads, texts):
    """(attrs, sources): the attributes of each `**NAME` of a call, NAME a constant loaded from a .bzl."""
    attrs, sources = {}, []
    for kw in call.keywords:
        if kw.arg is not None:
            continue
        if not (isinstance(kw.value, ast.Name) and kw.value.id in loads):
            continue  # a local dict (e.g. a tag's attributes passed on): not a shared pin
        source = loads[kw.value.id]
        sources.append(source)
        attrs.update(constant_value(texts, *source) or {})
    return attrs, sources


def _call_attrs(call, loads, texts):
    """(attrs, literal keyword names, spread sources) of a repository rule call."""
    literal = {kw.arg: _literal(kw.value) for kw in call.keywords if kw.arg is not None}
    attrs, sources = _spread(call, loads, texts)
    return {**attrs, **literal}, set(literal), sources


def _macro_calls(text, symbol, filename, texts=None):
    """The repository rule calls in `def symbol():` of a .bzl (a WORKSPACE macro), else None:
    [(rule, attrs, literal keyword names, spread sources)]."""
    tree = ast.parse(text, filename)
    loads = _loads(tree)
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == symbol:
            calls = []
            for node in ast.walk(stmt):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in loads:
                    calls.append((loads[node.func.id], *_call_attrs(node, loads, texts)))
            return calls
    return None


def workspace_macro_files(text):
    """The .bzl files whose functions WORKSPACE calls (a macro may declare repositories)."""
    return sorted({bzl for bzl, _ in _loads(ast.parse(text, "WORKSPACE")).values()})


def parse_workspace(text, macro_texts=None):
    """WORKSPACE -> dict(repos={(rule label, rule symbol, name): attrs}, local_repositories, toolchains,
    pin_use={repo key: (literal keyword names, spread sources)}).

    A call of a loaded macro (a `def` in a .bzl of macro_texts) counts as the repository rule calls
    in its body, e.g. vulkan_repositories() as its two debian_packages(...); `**NAME` of a constant
    loaded from a .bzl of macro_texts counts as its attributes."""
    tree = ast.parse(text, "WORKSPACE")
    loads = _loads(tree)
    repos, local, toolchains, pin_use = {}, {}, [], {}
    for _, call in _calls(tree):
        if not isinstance(call.func, ast.Name):
            continue
        fn = call.func.id
        kwargs, literal, sources = _call_attrs(call, loads, macro_texts)
        if fn == "local_repository":
            local[kwargs["name"]] = kwargs["path"]
        elif fn == "register_toolchains":
            toolchains += [_literal(a) for a in call.args]
        elif fn in loads:
            bzl, symbol = loads[fn]
            expanded = None
            if macro_texts and macro_texts.get(bzl) is not None:
                expanded = _macro_calls(macro_texts[bzl], symbol, bzl, macro_texts)
            if expanded is None:
                expanded = [((bzl, symbol), kwargs, literal, sources)]
            for (rule_bzl, rule_symbol), attrs, literal_names, spread in expanded:
                attrs = dict(attrs)
                name = attrs.pop("name")
                repos[(rule_bzl, rule_symbol, name)] = attrs
                pin_use[(rule_bzl, rule_symbol, name)] = (literal_names - {"name"}, spread)
    return {"repos": repos, "local_repositories": local, "toolchains": toolchains, "pin_use": pin_use}


def parse_module(text):
    """MODULE.bazel -> dict(bazel_deps, toolchains, extensions={var: (bzl, name)}, tags=[...], use_repo)."""
    tree = ast.parse(text, "MODULE.bazel")
    deps, toolchains, extensions, tags, visible = {}, [], {}, [], set()
    for target, call in _calls(tree):
        func = call.func
        kwargs = {kw.arg: _literal(kw.value) for kw in call.keywords}
        if isinstance(func, ast.Name):
            if func.id == "bazel_dep":
                deps[kwargs["name"]] = kwargs.get("version")
            elif func.id == "register_toolchains":
                toolchains += [_literal(a) for a in call.args]
            elif func.id == "use_extension":
                extensions[target] = (_literal(call.args[0]), _literal(call.args[1]))
            elif func.id == "use_repo":
                visible |= {_literal(a) for a in call.args[1:]}
                visible |= set(kwargs)
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            var = func.value.id
            if var not in extensions:
                raise ValueError(f"MODULE.bazel: {var}.{func.attr}() before {var} = use_extension(...)")
            tags.append({"extension": extensions[var], "tag": func.attr, "attrs": kwargs})
    return {"bazel_deps": deps, "toolchains": toolchains, "extensions": extensions, "tags": tags,
            "use_repo": visible}


def _constants(tree):
    """Module-level `NAME = <literal or call>` assignments, for tag_class(attrs = _ATTRS)."""
    return {s.targets[0].id: s.value for s in tree.body
            if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)}


def _dict_keys(node, consts):
    if isinstance(node, ast.Name):
        node = consts[node.id]
    if not isinstance(node, ast.Dict):
        raise ValueError("attrs is not a dict literal")
    return {_literal(k) for k in node.keys}


def _kw(call, name):
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return None


def parse_extension(text, filename="extension.bzl", constant_texts=None):
    """An extension .bzl -> {extension name: {tag: dict(rule=(bzl, symbol), attrs={...}, supplied={...},
    sources=[...])}}: `supplied` are the attributes the extension passes from loaded constants
    (`**NAME`, read from constant_texts), `sources` those constants."""
    tree = ast.parse(text, filename)
    loads = _loads(tree)
    consts = _constants(tree)
    functions = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
    out = {}
    for target, call in _calls(tree):
        if not (isinstance(call.func, ast.Name) and call.func.id == "module_extension"):
            continue
        impl = functions[_kw(call, "implementation").id]
        tag_classes = _kw(call, "tag_classes")
        if isinstance(tag_classes, ast.Name):
            tag_classes = consts[tag_classes.id]
        tags = {}
        for key, value in zip(tag_classes.keys, tag_classes.values):
            tag = _literal(key)
            tc = consts[value.id] if isinstance(value, ast.Name) else value
            tags[tag] = {"attrs": _dict_keys(_kw(tc, "attrs"), consts), "rule": None, "supplied": {}, "sources": []}
        # Which loaded repository rule each `for tag in mod.tags.<tag>` loop calls.
        for node in ast.walk(impl):
            if (isinstance(node, ast.For) and isinstance(node.iter, ast.Attribute)
                    and isinstance(node.iter.value, ast.Attribute) and node.iter.value.attr == "tags"):
                tag = node.iter.attr
                rule_calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)
                              and isinstance(n.func, ast.Name) and n.func.id in loads]
                called = {n.func.id for n in rule_calls}
                if len(called) != 1:
                    raise ValueError(f"{filename}: the loop over tags.{tag} calls {sorted(called)}, not one repository rule")
                entry = tags.setdefault(tag, {"attrs": set(), "rule": None, "supplied": {}, "sources": []})
                entry["rule"] = loads[called.pop()]
                for rule_call in rule_calls:
                    supplied, sources = _spread(rule_call, loads, constant_texts)
                    entry["supplied"].update(supplied)
                    entry["sources"] += sources
        out[target] = tags
    return out


def rule_attrs(text, symbol, filename="rule.bzl"):
    """The public attributes of `symbol = repository_rule(attrs = {...})`, plus the implicit name."""
    tree = ast.parse(text, filename)
    consts = _constants(tree)
    for target, call in _calls(tree):
        if target == symbol and isinstance(call.func, ast.Name) and call.func.id == "repository_rule":
            attrs = _kw(call, "attrs")
            keys = _dict_keys(attrs, consts) if attrs is not None else set()
            return {k for k in keys if not k.startswith("_")} | {"name"}
    raise ValueError(f"{filename}: no `{symbol} = repository_rule(...)`")


def _describe(key):
    bzl, symbol, name = key
    return f'{symbol}(name = "{name}") [{bzl}]'


def compare_repositories(workspace, module, extensions):
    """Findings: a repository declared on one side only, or with different attributes."""
    findings = []
    module_repos = {}
    for t in module["tags"]:
        ext_bzl, ext_name = t["extension"]
        spec = extensions.get(ext_bzl, {}).get(ext_name)
        if spec is None:
            findings.append(f"MODULE.bazel: extension {ext_name} of {ext_bzl} not found")
            continue
        tag = spec.get(t["tag"])
        if tag is None or tag["rule"] is None:
            findings.append(f"MODULE.bazel: {ext_name}.{t['tag']}(...) is not a tag of {ext_bzl} that calls a repository rule")
            continue
        attrs = {**tag["supplied"], **t["attrs"]}
        name = attrs.pop("name", None)
        key = (tag["rule"][0], tag["rule"][1], name)
        if key in module_repos:
            findings.append(f"MODULE.bazel declares {_describe(key)} twice")
        module_repos[key] = attrs
    for key, attrs in workspace["repos"].items():
        if key not in module_repos:
            findings.append(f"WORKSPACE declares {_describe(key)}; MODULE.bazel has no tag for it")
            continue
        other = module_repos[key]
        for attr in sorted(set(attrs) | set(other)):
            if attrs.get(attr) != other.get(attr):
                findings.append(f"{_describe(key)}: {attr} differs: WORKSPACE {attrs.get(attr)!r}, "
                                f"MODULE.bazel {other.get(attr)!r}")
    for key in module_repos:
        if key not in workspace["repos"]:
            findings.append(f"MODULE.bazel declares {_describe(key)}; WORKSPACE has no such call")
    return findings


def compare_tag_classes(extensions, rule_texts):
    """Findings: a tag class whose attributes are not exactly its repository rule's public ones."""
    findings = []
    for ext_bzl, exts in sorted(extensions.items()):
        for ext_name, tags in sorted(exts.items()):
            for tag_name, tag in sorted(tags.items()):
                bzl, symbol = tag["rule"]
                if bzl not in rule_texts:
                    continue
                want = rule_attrs(rule_texts[bzl], symbol, bzl) - set(tag["supplied"])
                if tag["attrs"] != want:
                    findings.append(
                        f"{ext_bzl} {ext_name}.{tag_name} wraps {symbol} ({bzl}) but its attributes differ: "
                        f"missing {sorted(want - tag['attrs'])}, extra {sorted(tag['attrs'] - want)}")
    return findings


def compare_pin_sources(workspace, module, extensions):
    """Findings: a pinned rule (PINNED) whose pin is not the shared constant on both sides, or one
    of whose pinned attributes a side writes itself."""
    findings = []
    for (bzl, symbol, name), (literal, sources) in sorted(workspace["pin_use"].items()):
        pin = PINNED.get((bzl, symbol))
        if pin is None:
            continue
        where = f'WORKSPACE {symbol}(name = "{name}")'
        if sources != [pin]:
            findings.append(f"{where} does not take its pin from **{pin[1]} of {pin[0]} (it spreads {sources})")
        overridden = sorted(literal & set(workspace["repos"][(bzl, symbol, name)]) - {"urls"})
        if overridden:
            findings.append(f"{where} writes {overridden} itself; the pin is {pin[0]}'s alone")
    for ext_bzl, exts in sorted(extensions.items()):
        for ext_name, tags in sorted(exts.items()):
            for tag_name, tag in sorted(tags.items()):
                pin = PINNED.get(tag["rule"])
                if pin is not None and tag["sources"] != [pin]:
                    findings.append(f"{ext_bzl} {ext_name}.{tag_name} does not take its pin from **{pin[1]} "
                                    f"of {pin[0]} (it spreads {tag['sources']})")
    for t in module["tags"]:
        ext_bzl, ext_name = t["extension"]
        tag = extensions.get(ext_bzl, {}).get(ext_name, {}).get(t["tag"])
        if tag is None or PINNED.get(tag["rule"]) is None:
            continue
        written = sorted(set(t["attrs"]) & set(tag["supplied"]))
        if written:
            findings.append(f"MODULE.bazel {ext_name}.{t['tag']}(...) writes {written}; the pin is "
                            f"{PINNED[tag['rule']][0]}'s alone")
    return findings


def compare_module_structure(workspace, module):
    """Findings: a stand-in without bazel_dep, a repository not visible, a toolchain not registered."""
    findings = []
    for name, path in sorted(workspace["local_repositories"].items()):
        if name in BAZEL_BUILTIN_STAND_INS:
            continue
        if name not in module["bazel_deps"]:
            findings.append(f"WORKSPACE stand-in {name} ({path}) has no bazel_dep in MODULE.bazel")
    for (_, _, name) in sorted(workspace["repos"]):
        if name not in module["use_repo"]:
            findings.append(f"@{name} (declared in WORKSPACE) is not in a use_repo() of MODULE.bazel")
    for tc in workspace["toolchains"]:
        if tc not in module["toolchains"]:
            findings.append(f"WORKSPACE registers toolchain {tc}; MODULE.bazel does not")
    return findings


_HASHED = re.compile(r"([A-Za-z0-9_.\-]+==[A-Za-z0-9_.+!\-]+)\s+--hash=sha256:([0-9a-f]{64})")


_DEB_PINNED = re.compile(r"^\S+ \S+ \S+ [0-9a-f]{64}$")


def lock_entries(text):
    """requirement (name==version) -> set of sha256 of a hash-locked requirements file."""
    out = {}
    for req, digest in _HASHED.findall(text):
        out.setdefault(req.lower(), set()).add(digest)
    return out


def compare_inlined_hashes(texts, locks):
    """Findings: a `name==version --hash=sha256:...` in MODULE.bazel or an extension that no lock has."""
    findings = []
    locked = {}
    for entries in locks.values():
        for req, digests in entries.items():
            locked.setdefault(req, set()).update(digests)
    for filename, text in texts.items():
        for req, digest in _HASHED.findall(text):
            if digest not in locked.get(req.lower(), set()):
                findings.append(f"{filename}: {req} --hash=sha256:{digest} is not in the lock files "
                                f"(they have {sorted(locked.get(req.lower(), set()))})")
    return findings


def check(workspace_text, module_text, extension_texts, rule_texts, lock_texts):
    """Every finding for these texts; extension_texts and rule_texts (the repository rules' and the
    WORKSPACE macros' .bzl files) are keyed by label."""
    workspace = parse_workspace(workspace_text, rule_texts)
    module = parse_module(module_text)
    extensions = {bzl: parse_extension(text, bzl, rule_texts) for bzl, text in extension_texts.items()}
    findings = []
    for bzl, _ in set(module["extensions"].values()):
        if bzl not in extensions:
            findings.append(f"MODULE.bazel uses {bzl}, which could not be read")
    findings += compare_repositories(workspace, module, extensions)
    findings += compare_tag_classes(extensions, rule_texts)
    findings += compare_pin_sources(workspace, module, extensions)
    findings += compare_module_structure(workspace, module)
    locks = {label: lock_entries(text) for label, text in lock_texts.items()}
    findings += compare_inlined_hashes({"MODULE.bazel": module_text, **extension_texts}, locks)
    return findings


# ---- the repository's files ----

def _read(label_or_path):
    rel = label_path(label_or_path) if label_or_path.startswith("//") else label_or_path
    path = ROOT / rel
    if path.exists():
        return path.read_text()
    path = _source_tree() / rel
    if path.exists():
        UNDECLARED.append(label_or_path)
        return path.read_text()
    return None


def repository_texts():
    workspace_text, module_text = _read("WORKSPACE"), _read("MODULE.bazel")
    module = parse_module(module_text)
    extension_texts = {bzl: _read(bzl) for bzl, _ in set(module["extensions"].values())}
    extension_texts = {k: v for k, v in extension_texts.items() if v is not None}
    rule_texts, lock_texts = {}, {}
    for bzl, text in extension_texts.items():
        # Every .bzl an extension loads: its repository rules and the constants it spreads.
        for loaded_bzl, _ in _loads(ast.parse(text, bzl)).values():
            rule_texts.setdefault(loaded_bzl, _read(loaded_bzl))
    for bzl in workspace_macro_files(workspace_text):
        rule_texts.setdefault(bzl, _read(bzl))
        # What a macro loads: the rules it calls and the constants it spreads.
        if rule_texts[bzl] is not None:
            for loaded_bzl, _ in _loads(ast.parse(rule_texts[bzl], bzl)).values():
                rule_texts.setdefault(loaded_bzl, _read(loaded_bzl))
    rule_texts = {k: v for k, v in rule_texts.items() if v is not None}
    for (bzl, _, _), attrs in parse_workspace(workspace_text, rule_texts)["repos"].items():
        rule_texts.setdefault(bzl, _read(bzl))
        for value in attrs.values():
            if isinstance(value, str) and value.startswith("//") and value.endswith(".txt"):
                lock_texts[value] = _read(value)
    rule_texts = {k: v for k, v in rule_texts.items() if v is not None}
    return workspace_text, module_text, extension_texts, rule_texts, lock_texts


VULKAN_RULE = "//toolchains/vulkan:debian_packages.bzl"


@pytest.fixture(scope="module")
def texts():
    return repository_texts()


def test_module_pins_equal_workspace(texts):
    workspace_text, module_text, extension_texts, rule_texts, lock_texts = texts
    workspace = parse_workspace(workspace_text, rule_texts)
    vulkan_landed = any(bzl == VULKAN_RULE for bzl, _, _ in workspace["repos"])
    findings = check(workspace_text, module_text, extension_texts, rule_texts, lock_texts)
    if not vulkan_landed:
        # The Vulkan rule is not in WORKSPACE yet: only its stanza is left unchecked (see below).
        findings = [f for f in findings if VULKAN_RULE not in f]
    assert findings == [], "\n".join(findings)


def test_every_wrapped_rule_was_read(texts):
    """The tag-class check above is real: each rule file (but the Vulkan one, until it lands) was read."""
    _, module_text, extension_texts, rule_texts, _ = texts
    wrapped = {tag["rule"][0] for bzl, text in extension_texts.items()
               for tags in parse_extension(text, bzl).values() for tag in tags.values()}
    assert wrapped - {VULKAN_RULE} <= set(rule_texts), sorted(wrapped - set(rule_texts))
    assert {"llama_cpp_archive", "locked_requirements", "cuda_toolkit", "lane_sdks", "debian_packages"} <= {
        tag["rule"][1] for bzl, text in extension_texts.items()
        for tags in parse_extension(text, bzl).values() for tag in tags.values()}


def test_vulkan_stanza(texts):
    workspace_text, module_text, extension_texts, rule_texts, lock_texts = texts
    if not any(bzl == VULKAN_RULE for bzl, _, _ in parse_workspace(workspace_text, rule_texts)["repos"]):
        pytest.skip(f"WORKSPACE calls no debian_packages from {VULKAN_RULE} yet: MODULE.bazel's vulkan "
                    "stanza is unchecked until the Vulkan rule lands")
    if VULKAN_RULE not in rule_texts:
        pytest.fail(f"add {VULKAN_RULE} to the data of //tests:module_pins_test")
    findings = [f for f in check(workspace_text, module_text, extension_texts, rule_texts, lock_texts)
                if VULKAN_RULE in f]
    assert findings == [], "\n".join(findings)


def test_inputs_are_declared(texts):
    """Every file read is a declared input; until the BUILD files export them, name the ones that are not."""
    if UNDECLARED:
        pytest.skip("read from the checkout, not declared as data (export them and add them to "
                    "//tests:module_pins_test's data): " + ", ".join(sorted(set(UNDECLARED))))


def test_lock_files_are_fully_hashed(texts):
    lock_texts = texts[4]
    assert "//third_party/python:requirements_lock.txt" in lock_texts
    for label, text in lock_texts.items():
        assert text is not None, f"{label} is not in the test's data"
        lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
        # pip locks: name==version --hash=sha256:<hex>; Debian package locks: name version arch <sha256>.
        assert lines and all(_HASHED.search(line) or _DEB_PINNED.match(line) for line in lines), \
            f"{label} has a line without a sha256"


# ---- the checks can fail: altered copies, each difference named ----

def _altered(texts, module=None, workspace=None, extension=None, rule=None, lock=None):
    workspace_text, module_text, extension_texts, rule_texts, lock_texts = texts
    extension_texts, rule_texts, lock_texts = dict(extension_texts), dict(rule_texts), dict(lock_texts)
    if module:
        module_text = _replace(module_text, *module)
    if workspace:
        workspace_text = _replace(workspace_text, *workspace)
    if extension:
        bzl, old, new = extension
        extension_texts[bzl] = _replace(extension_texts[bzl], old, new)
    if rule:
        bzl, old, new = rule
        rule_texts[bzl] = _replace(rule_texts[bzl], old, new)
    if lock:
        lock_texts.update(lock)
    findings = check(workspace_text, module_text, extension_texts, rule_texts, lock_texts)
    return [f for f in findings if VULKAN_RULE not in f]


def _replace(text, old, new):
    assert old in text, f"fixture out of date: {old!r} not found"
    return text.replace(old, new, 1)


COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
PIN_BZL = "//third_party/llama_cpp:pin.bzl"
PIN_LOAD = 'load("//third_party/llama_cpp:pin.bzl", "LLAMA_CPP_PIN")'
EXTENSION_BZL = "//third_party/bzlmod:llama_cpp.bzl"
WORKSPACE_MACRO = "//third_party/llama_cpp:repositories.bzl"


def _other_pin(texts, side, old, new):
    """Findings when `side` ("workspace" or "module") loads a copy of pin.bzl with old -> new."""
    copy = "//third_party/llama_cpp:pin_copy.bzl"
    rule_texts = dict(texts[3])
    rule_texts[copy] = _replace(rule_texts[PIN_BZL], old, new)
    load_copy = PIN_LOAD.replace(":pin.bzl", ":pin_copy.bzl")
    workspace_text, module_text, extension_texts, _, lock_texts = texts
    if side == "workspace":
        rule_texts[WORKSPACE_MACRO] = _replace(rule_texts[WORKSPACE_MACRO], PIN_LOAD, load_copy)
    else:
        extension_texts = dict(extension_texts)
        extension_texts[EXTENSION_BZL] = _replace(extension_texts[EXTENSION_BZL], PIN_LOAD, load_copy)
    findings = check(workspace_text, module_text, extension_texts, rule_texts, lock_texts)
    return [f for f in findings if VULKAN_RULE not in f]


def _not_from_the_pin(findings):
    return [f for f in findings if "does not take its pin from **LLAMA_CPP_PIN of " + PIN_BZL in f]


def test_both_sides_read_the_one_pin(texts):
    workspace = parse_workspace(texts[0], texts[3])
    key = ("//third_party/llama_cpp:llama_cpp_archive.bzl", "llama_cpp_archive", "llama_cpp")
    assert workspace["pin_use"][key] == (set(), [(PIN_BZL, "LLAMA_CPP_PIN")])
    assert workspace["repos"][key]["commit"] == COMMIT
    assert "patches" not in workspace["repos"][key]  # the stack is the series file's alone
    tag = parse_extension(texts[2][EXTENSION_BZL], EXTENSION_BZL, texts[3])["llama_cpp"]["archive"]
    assert tag["sources"] == [(PIN_BZL, "LLAMA_CPP_PIN")] and tag["supplied"]["commit"] == COMMIT


def test_a_different_llama_cpp_commit_is_named(texts):
    findings = _other_pin(texts, "module", COMMIT, "1" * 40)
    differs = [f for f in findings if "commit differs" in f]
    assert len(differs) == 1 and "llama_cpp_archive" in differs[0]
    assert COMMIT in differs[0] and "1" * 40 in differs[0]
    assert len(_not_from_the_pin(findings)) == 1 and len(findings) == 2, findings


def test_a_different_archive_sha256_is_named(texts):
    sha = parse_workspace(texts[0], texts[3])["repos"][("//third_party/llama_cpp:llama_cpp_archive.bzl",
                                                "llama_cpp_archive", "llama_cpp")]["sha256"]
    findings = _other_pin(texts, "workspace", sha, "0" * 64)
    assert len([f for f in findings if "sha256 differs" in f]) == 1
    assert len(_not_from_the_pin(findings)) == 1 and len(findings) == 2, findings


def test_a_different_sdist_is_named(texts):
    findings = _other_pin(texts, "module", "llama-cpp-python==0.3.36", "llama-cpp-python==0.3.35")
    differs = [f for f in findings if "pypi_sdist differs" in f]
    assert len(differs) == 1 and "0.3.35" in differs[0]
    assert len(findings) == 2, findings


def test_a_pin_written_out_in_workspace_is_named(texts):
    literal = ", ".join(f"{k} = {v!r}" for k, v in constant_value(texts[3], PIN_BZL, "LLAMA_CPP_PIN").items())
    findings = _altered(texts, rule=(WORKSPACE_MACRO, "**LLAMA_CPP_PIN", literal.replace(COMMIT, "2" * 40)))
    assert len([f for f in findings if "commit differs" in f and "2" * 40 in f]) == 1
    assert len(_not_from_the_pin(findings)) == 1
    assert any("writes ['commit', 'patch_series', 'pypi_sdist', 'sha256', 'strip_prefix'] itself" in f
               for f in findings), findings
    assert len(findings) == 3, findings


def test_a_pin_attribute_written_in_module_bazel_is_named(texts):
    findings = _altered(texts, module=('llama_cpp.archive(name = "llama_cpp")',
                                       f'llama_cpp.archive(name = "llama_cpp", commit = "{"3" * 40}")'))
    assert any("commit differs" in f and "3" * 40 in f for f in findings), findings
    assert any("llama_cpp.archive(...) writes ['commit']" in f for f in findings), findings


def test_a_missing_patch_is_named(texts):
    """A patch list written beside the series (here in MODULE.bazel) is a second list: named."""
    stack = '"//third_party/llama_cpp/patches:0004-ggml-vulkan-old-headers.patch"'
    findings = _altered(texts, module=('llama_cpp.archive(name = "llama_cpp")',
                                       f'llama_cpp.archive(name = "llama_cpp", patches = [{stack}])'))
    assert len(findings) == 1 and "patches differs" in findings[0] and "0004" in findings[0]


def test_a_different_lock_file_is_named(texts):
    findings = _altered(texts, module=('lock_file = "//third_party/python:requirements_lock.txt"',
                                       'lock_file = "//third_party/python:other_lock.txt"'))
    assert len(findings) == 1 and "locked_requirements" in findings[0] and "lock_file differs" in findings[0]


def test_a_cuda_attribute_set_on_one_side_is_named(texts):
    findings = _altered(texts, module=('cuda.toolkit(name = "cuda_toolkit")',
                                       'cuda.toolkit(name = "cuda_toolkit", lock_file = "//toolchains/cuda:other.txt")'))
    assert len(findings) == 1 and 'cuda_toolkit(name = "cuda_toolkit")' in findings[0]
    assert "lock_file differs" in findings[0] and "None" in findings[0]


def test_a_workspace_repository_without_tag_is_named(texts):
    findings = _altered(texts, module=('lane_sdks.detect(name = "lane_sdks")\n', ""))
    assert any('lane_sdks(name = "lane_sdks")' in f and "no tag" in f for f in findings), findings


def test_a_tag_wrapping_another_rule_is_named(texts):
    bzl = "//third_party/bzlmod:toolchains.bzl"
    findings = _altered(texts, extension=(bzl, 'load("//toolchains:sdk_detect.bzl", _lane_sdks_rule = "lane_sdks")',
                                          'load("//toolchains:sdk_detect2.bzl", _lane_sdks_rule = "lane_sdks")'))
    assert any("WORKSPACE declares lane_sdks" in f for f in findings), findings
    assert any("MODULE.bazel declares lane_sdks" in f and "sdk_detect2.bzl" in f for f in findings), findings


def test_a_tag_class_missing_a_rule_attribute_is_named(texts):
    findings = _altered(texts, rule=("//third_party/llama_cpp:llama_cpp_archive.bzl",
                                     '"urls": attr.string_list(', '"mirror_urls": attr.string_list(), "urls": attr.string_list('))
    assert len(findings) == 1 and "llama_cpp.archive wraps llama_cpp_archive" in findings[0]
    assert "missing ['mirror_urls']" in findings[0]


def test_a_stand_in_without_bazel_dep_is_named(texts):
    findings = _altered(texts, module=('bazel_dep(name = "rules_foreign_cc", version = "0.15.1")\n', ""))
    assert findings == ["WORKSPACE stand-in rules_foreign_cc (third_party/offline/rules_foreign_cc) has no bazel_dep in MODULE.bazel"]


def test_a_toolchain_not_registered_is_named(texts):
    findings = _altered(texts, module=('    "//toolchains/python:python3_toolchain",\n', ""))
    assert findings == ["WORKSPACE registers toolchain //toolchains/python:python3_toolchain; MODULE.bazel does not"]


def test_an_inlined_requirement_hash_is_compared_with_the_lock(texts):
    lock = texts[4]["//third_party/python:requirements_lock.txt"]
    req, digest = _HASHED.search(lock).groups()
    good = f'\n# {req} --hash=sha256:{digest}\n'
    assert _altered(texts, module=("\npypi = use_extension", good + "pypi = use_extension")) == []
    bad = f'\n# {req} --hash=sha256:{"f" * 64}\n'
    findings = _altered(texts, module=("\npypi = use_extension", bad + "pypi = use_extension"))
    assert len(findings) == 1 and req in findings[0] and "f" * 64 in findings[0] and digest in findings[0]


def test_a_vulkan_attribute_changed_in_the_workspace_macro_is_named(texts):
    workspace_text, module_text, extension_texts, rule_texts, lock_texts = texts
    macro = "//toolchains/vulkan:repositories.bzl"
    if macro not in rule_texts:
        pytest.skip("WORKSPACE has no vulkan_repositories() yet")
    rule_texts = dict(rule_texts)
    rule_texts[macro] = _replace(rule_texts[macro], 'lib_dirs = ["usr/lib/x86_64-linux-gnu"]', 'lib_dirs = ["usr/lib"]')
    findings = check(workspace_text, module_text, extension_texts, rule_texts, lock_texts)
    assert len(findings) == 1 and 'debian_packages(name = "vulkan_lavapipe")' in findings[0]
    assert "lib_dirs differs" in findings[0] and "usr/lib'" in findings[0]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-rs", "-p", "no:cacheprovider"]))
