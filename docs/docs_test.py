"""README.md stays an entrance and docs/ stays navigable: the two commands, the sections the README
promises, the stage order of //tests:layering_test, links and anchors that resolve, tables without a
blank line inside, and no diary in the prose."""

import ast
import os
import pathlib
import re
import sys

import pytest

# Under Bazel the runfiles tree; run directly, the checkout.
ROOT = (pathlib.Path(os.environ["TEST_SRCDIR"], "lanes") if "TEST_SRCDIR" in os.environ
        else pathlib.Path(__file__).resolve().parents[1])
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS, ROOT / "evidence" / "README.md"]

MAX_README_LINES = 150
README_COMMANDS = (
    "bash tools/setup_host.sh && bazel run //tools:certify -- --lane=cpu",
    "bazel test //...",
)
README_SECTIONS = ("## Two commands", "## Lanes", "## Certify your own model", "## Certify on a GPU host",
                   "## Layout and layering")
DOC_PAGES = ("README.md", "runner.md", "trust-and-distribution.md", "patches-and-ctest.md", "farm.md",
             "performance.md", "developing.md", "models.md", "probes.md")
# Prose written as a diary: the reader needs what is, not when it changed.
DIARY = re.compile(r"\b(in this round|issue \d+|previously|next rebuild|last round)\b", re.IGNORECASE)
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.lstrip("#").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    return {slug(line) for _, line in prose_lines(text) if line.startswith("#")}


def broken_links(page: pathlib.Path, root: pathlib.Path = ROOT) -> list[str]:
    """Every relative link of `page` whose file or anchor does not exist."""
    problems = []
    text = page.read_text(encoding="utf-8")
    for number, line in prose_lines(text):
        for target in _LINK.findall(line):
            if re.match(r"^[a-z]+:", target):
                continue
            path_part, _, anchor = target.partition("#")
            resolved = (page.parent / path_part).resolve() if path_part else page
            if path_part and not (page.parent / path_part).exists():
                problems.append(f"{page.name}:{number}: {target}: no such file")
                continue
            if anchor and resolved.suffix == ".md" and anchor not in anchors(resolved.read_text(encoding="utf-8")):
                problems.append(f"{page.name}:{number}: {target}: no heading #{anchor}")
    return problems


def table_problems(text: str, name: str = "") -> list[str]:
    """A table's rows must all have the header's column count, and a table ends at its first
    non-row line: a blank line followed by more rows is a table broken in two (the second half
    renders as text)."""
    problems = []
    lines = prose_lines(text)
    for i, (number, line) in enumerate(lines):
        if not re.match(r"^\|[-| :]+\|$", line) or i == 0:
            continue
        columns = lines[i - 1][1].count("|") - lines[i - 1][1].count("\\|")
        j = i + 1
        while j < len(lines) and lines[j][1].startswith("|"):
            row = lines[j][1]
            if row.count("|") - row.count("\\|") != columns:
                problems.append(f"{name}:{lines[j][0]}: {row.count('|') - 1} columns, header has {columns - 1}")
            j += 1
        if j + 1 < len(lines) and lines[j][1].strip() == "" and lines[j + 1][1].startswith("| "):
            problems.append(f"{name}:{lines[j][0]}: blank line inside the table that starts at line {number - 1}")
    return problems


def diary_lines(text: str, name: str = "") -> list[str]:
    return [f"{name}:{n}: {line.strip()}" for n, line in prose_lines(text) if DIARY.search(line)]


def layering_stages(source: str) -> tuple[str, ...]:
    """STAGES as tests/layering_test.py assigns it."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "STAGES" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise AssertionError("tests/layering_test.py assigns no STAGES")


def readme_stages(text: str) -> tuple[str, ...]:
    """The stage order the README states: one backticked `a < b < ...` span, possibly wrapped."""
    match = re.search(r"`(core[^`]*)`", text, re.DOTALL)
    assert match, "README states no stage order"
    return tuple(s.strip() for s in match.group(1).replace("\n", " ").split("<"))


# ---- the committed pages -------------------------------------------------------------------------

def test_readme_is_an_entrance():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_README_LINES
    lines = text.splitlines()
    for command in README_COMMANDS:
        assert command in lines, f"README lost the command line {command!r}"
    for section in README_SECTIONS:
        assert section in lines, f"README lost its section {section!r}"


def test_docs_has_every_page_and_the_readme_links_the_index():
    assert sorted(p.name for p in DOCS) == sorted(DOC_PAGES)
    assert "(docs/README.md)" in README.read_text(encoding="utf-8")
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    for page in DOC_PAGES[1:]:
        assert f"]({page})" in index, f"docs/README.md does not list {page}"


def test_readme_states_the_layering_tests_stage_order():
    layering = ROOT / "tests" / "layering_test.py"
    if not layering.exists():
        # Under Bazel the file is a runfile only once tests/BUILD.bazel exports it to //docs.
        pytest.skip("tests/layering_test.py is not in this test's runfiles")
    stages = layering_stages(layering.read_text(encoding="utf-8"))
    assert readme_stages(README.read_text(encoding="utf-8")) == stages


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve(page):
    assert broken_links(page) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_tables_are_whole(page):
    assert table_problems(page.read_text(encoding="utf-8"), page.name) == []


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_prose_is_reference_not_diary(page):
    assert diary_lines(page.read_text(encoding="utf-8"), page.name) == []


# ---- each check fails where it must --------------------------------------------------------------

def test_a_blank_line_inside_a_table_is_found():
    broken = "| a | b |\n|---|---|\n| 1 | 2 |\n\n| 3 | 4 |\n"
    assert table_problems(broken) and not table_problems("| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\n")


def test_a_row_with_another_column_count_is_found():
    assert table_problems("| a | b |\n|---|---|\n| 1 | 2 | 3 |\n")
    assert not table_problems("| a | b |\n|---|---|\n| 1 \\| x | 2 |\n")


def test_a_missing_file_or_anchor_is_found(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## A section\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#a-section) [gone](missing.md) [bad](other.md#nope) [web](https://x.org)\n"
                    "```\n[in code](not-checked.md)\n```\n")
    problems = broken_links(page, tmp_path)
    assert len(problems) == 2 and "missing.md" in problems[0] and "#nope" in problems[1]


def test_diary_prose_is_found():
    assert diary_lines("The floor moved in this round.\n") and diary_lines("Fixed for issue 12.\n")
    assert not diary_lines("```\nissue 12\n```\nA floor.\n")


def test_a_stage_order_that_differs_is_found():
    assert readme_stages("x `core < proto <\nevidence` y") == ("core", "proto", "evidence")
    assert layering_stages('STAGES = ("core", "proto")\n') == ("core", "proto")
    assert readme_stages("`core < evidence < proto`") != layering_stages('STAGES = ("core", "proto", "evidence")\n')


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
