"""llama-eval-callback's log as data: the runs it holds, each with its argv, tokens and printed nodes.

common_debug_cb_eval prints each graph node as `<name> = (<type>) <OP>(<src0>{ne}, <src1>{ne}}) = {ne}`,
then its values (the first and last N_EDGE indices of dims 0-2, "%12.4f") and `sum = %f`.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import shlex

from tools.runner import log_blocks

EVAL_BIN = "llama-eval-callback"
N_EDGE = 3  # common_debug_print_tensor prints the first/last 3 indices of dims 0-2

_HEADER = re.compile(
    r"^common_debug_cb_eval:\s*(?P<name>.+?) = \((?P<type>\w+)\)\s+(?P<op>\w+)\("
    r"(?P<src0>.*?)\{(?P<ne0>[-\d, ]+)\}, (?:(?P<src1>.*?)\{(?P<ne1>[-\d, ]+)\})?\}\) = \{(?P<ne>[-\d, ]+)\}\s*$")
_ROW = re.compile(r"^\s*\[(?P<vals>[^\[\]]*\S[^\[\]]*)\],?\s*$")
_SUM = re.compile(r"^\s*sum = (?P<v>\S+)\s*$")
_N_TOKENS = re.compile(r"number of input tokens = (\d+)\s*$")
_TOKEN = re.compile(r"^(?:[\d.]+ I)?\s+(-?\d+)\s*$")
_CONFIG = re.compile(r"^# lanes-config (.*)$")


class OracleLogError(ValueError):
    """The log cannot be parsed into the runs it claims to hold."""


@dataclasses.dataclass
class Node:
    name: str
    type: str
    op: str
    src0: str
    src1: str
    ne: tuple[int, int, int, int]
    line: int
    values: list[float] = dataclasses.field(default_factory=list)
    sums: list[float] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Run:
    """One llama-eval-callback invocation in the log."""
    argv: list[str]
    flash_attn: str
    tokens: list[int] = dataclasses.field(default_factory=list)
    nodes: list[Node] = dataclasses.field(default_factory=list)
    exit_code: int | None = None


def printed_indices(n: int) -> list[int]:
    """Indices common_debug_print_tensor prints along a dim of size n (dims 0-2)."""
    if n > 2 * N_EDGE:
        return list(range(N_EDGE)) + list(range(n - N_EDGE, n))
    return list(range(n))


def n_printed(ne: tuple[int, ...]) -> int:
    return len(printed_indices(ne[0])) * len(printed_indices(ne[1])) * len(printed_indices(ne[2])) * ne[3]


def _ne(text: str) -> tuple[int, int, int, int]:
    parts = tuple(int(x) for x in text.split(","))
    if len(parts) != 4:
        raise OracleLogError(f"expected 4 dims in {{{text}}}")
    return parts  # type: ignore[return-value]


def flash_attn_of(argv: list[str]) -> str:
    """The -fa mode an eval-callback argv asks for ("auto" when it names none)."""
    for flag in ("-fa", "--flash-attn"):
        if flag in argv and argv.index(flag) + 1 < len(argv):
            return argv[argv.index(flag) + 1]
    return "auto"


def parse_config(text: str) -> dict[str, str]:
    """`# lanes-config k=v [k=v ...]` lines (later lines win)."""
    config: dict[str, str] = {}
    for line in text.splitlines():
        m = _CONFIG.match(line)
        if m:
            for item in m.group(1).split():
                key, sep, value = item.partition("=")
                if sep:
                    config[key] = value
    return config


def parse_runs(text: str) -> list[Run]:
    """Every llama-eval-callback run in a step log, with its tokens, nodes and exit status."""
    runs: list[Run] = []
    run: Run | None = None
    node: Node | None = None
    want_tokens = 0
    for i, line in enumerate(text.splitlines(), 1):
        if line.startswith("$ "):
            argv = shlex.split(line[2:])
            run = node = None
            if argv and pathlib.Path(argv[0]).name == EVAL_BIN:
                run = Run(argv=argv, flash_attn=flash_attn_of(argv))
                runs.append(run)
            continue
        if run is None:
            continue
        m = log_blocks.EXIT_LINE.match(line)
        if m:
            run.exit_code = int(m.group(1))
            node = None
            continue
        if want_tokens:
            m = _TOKEN.match(line)
            if m:
                run.tokens.append(int(m.group(1)))
                want_tokens -= 1
                continue
        m = _N_TOKENS.search(line)
        if m:
            want_tokens = int(m.group(1))
            continue
        m = _HEADER.match(line)
        if m:
            node = Node(name=m.group("name").strip(), type=m.group("type"), op=m.group("op"),
                        src0=m.group("src0").strip(), src1=(m.group("src1") or "").strip(),
                        ne=_ne(m.group("ne")), line=i)
            run.nodes.append(node)
            continue
        if node is None:
            continue
        m = _ROW.match(line)
        if m:
            vals = [v.strip() for v in m.group("vals").split(",")]
            # float() reads "nan", "-nan", "inf"; "..." marks the elided middle.
            node.values.extend(float(v) for v in vals if v and v != "...")
            continue
        m = _SUM.match(line)
        if m:
            node.sums.append(float(m.group("v")))
    return runs
