"""Compares output trees pairwise, byte for byte: `compare_outputs.py A1 B1 [A2 B2 ...]`.

Every regular file under A must be under B with the same bytes, and B must have nothing more.
Prints one line per pair and each difference; exits 1 on any difference or a missing tree.
"""

import hashlib
import pathlib
import sys


def tree(root: pathlib.Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def compare(a: pathlib.Path, b: pathlib.Path) -> list[str]:
    for root in (a, b):
        if not root.is_dir():
            return [f"{root}: no such output directory"]
    left, right = tree(a), tree(b)
    problems = [f"only in {a}: {name}" for name in sorted(set(left) - set(right))]
    problems += [f"only in {b}: {name}" for name in sorted(set(right) - set(left))]
    problems += [f"differs: {name} ({left[name][:12]} != {right[name][:12]})"
                 for name in sorted(set(left) & set(right)) if left[name] != right[name]]
    equal = sum(1 for name in set(left) & set(right) if left[name] == right[name])
    print(f"{a} ~ {b}: {equal} files equal, {len(problems)} differences")
    return problems


def main(args: list[str]) -> int:
    if not args or len(args) % 2:
        print("usage: compare_outputs.py A1 B1 [A2 B2 ...]", file=sys.stderr)
        return 2
    problems = []
    for a, b in zip(args[::2], args[1::2]):
        problems += compare(pathlib.Path(a), pathlib.Path(b))
    for problem in problems:
        print("  " + problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
