"""The patch stack applies cleanly to the pinned llama.cpp tree and reverses back to it."""

import os
import pathlib
import shutil
import sys

import pytest

from tests import patch_stack

RUNFILES = pathlib.Path(os.environ.get("TEST_SRCDIR", "."))


def _pristine() -> pathlib.Path:
    return RUNFILES / "llama_cpp" / "pristine"


def _patches() -> pathlib.Path:
    return RUNFILES / "lanes" / "third_party" / "llama_cpp" / "patches"


def test_stack_verifies_against_pinned_tree():
    names = patch_stack.verify(_pristine(), _patches())
    assert names and names == patch_stack.read_series(_patches())


def test_a_broken_patch_is_named(tmp_path):
    broken = tmp_path / "patches"
    shutil.copytree(_patches(), broken)
    names = patch_stack.read_series(broken)
    # The first patch with context lines: drift one of them, as an upstream change would.
    victim = next(broken / n for n in names if "\n " in (broken / n).read_text())
    lines = victim.read_text().split("\n")
    first_hunk = next(i for i, line in enumerate(lines) if line.startswith("@@"))
    context = next(i for i in range(first_hunk, len(lines)) if lines[i].startswith(" ") and lines[i].strip())
    lines[context] = " /* drifted */" + lines[context][1:]
    victim.write_text("\n".join(lines))
    with pytest.raises(patch_stack.PatchStackError, match=f"{victim.name}: check failed"):
        patch_stack.verify(_pristine(), broken)


def test_series_and_files_must_agree(tmp_path):
    broken = tmp_path / "patches"
    shutil.copytree(_patches(), broken)
    (broken / "9999-unlisted.patch").write_text("Purpose: nothing\n")
    with pytest.raises(patch_stack.PatchStackError, match="list every patch once"):
        patch_stack.read_series(broken)


def test_a_series_entry_without_its_file_is_named(tmp_path):
    broken = tmp_path / "patches"
    shutil.copytree(_patches(), broken)
    with (broken / "series").open("a") as series:
        series.write("0099-missing-file.patch\n")
    with pytest.raises(patch_stack.PatchStackError, match="0099-missing-file.patch.*list every patch once"):
        patch_stack.read_series(broken)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
