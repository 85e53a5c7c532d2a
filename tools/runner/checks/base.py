"""What a runner check is: one descriptor per check module, and the options it adds to a run.

A check module exports CHECK = Check(...). Its options are a dataclass whose fields are made with
option(): the field's name is the runner flag, its default the flag's default, metadata["help"]
the flag's help. tools/runner/config.py flattens every check's options into RunnerConfig and
tools/runner/cli.py defines the flags from the same fields, so an option is written once.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable, Sequence
from typing import Any

Figures = tuple[dict[str, int], dict[str, float]]


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """A check that adds no option to the run."""


@dataclasses.dataclass(frozen=True)
class Check:
    name: str
    # (ctx, step, report) -> (CheckResult status, message); report is the run's report so far.
    run: Callable[..., tuple[int, str]]
    # recompute(logs_dir) -> (counts, metrics) from the step's digested raw files; None: the audit
    # reports the check's figures as unverifiable.
    recompute: Callable[..., Figures] | None = None
    # problems(logs_dir) -> the reasons the raw files do not pass (the audit re-derives the verdict).
    problems: Callable[..., list[str]] | None = None
    # Figure keys shown in the summary table, in order; prefixes name a family of keys.
    figures: tuple[str, ...] = ()
    figure_prefixes: tuple[str, ...] = ()
    options: type = NoOptions
    # The runner version that added the check: runs made before it are not judged on its absence.
    since: tuple[int, ...] = ()
    # How far the audit lets a recomputed metric differ, relative (0: the audit's default, summation
    # order only). Wider only for metrics whose float64 reference is itself CPU-dependent.
    metric_rel_tol: float = 0.0

    def summary_figures(self, counts: dict[str, int], metrics: dict[str, float]) -> str:
        parts = []
        for k in self.figures:
            if k in counts:
                parts.append(f"{k}={counts[k]}")
            elif k in metrics:
                parts.append(f"{k}={metrics[k]:.4g}")
        parts += [f"{k}={v}" for k, v in sorted(counts.items()) if k.startswith(self.figure_prefixes or ("\0",))]
        return " ".join(parts)


def option(default: Any = dataclasses.MISSING, help: str = "", *, path: bool = False, required: bool = False,
           default_factory: Callable[[], Any] | None = None) -> Any:
    """A run option: a flag when help is given (path: a string flag read as a pathlib.Path or None)."""
    metadata = {"help": help, "path": path, "required": required}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def option_fields(options: type) -> tuple[dataclasses.Field, ...]:
    return dataclasses.fields(options)


def by_name(checks: Sequence[Check]) -> dict[str, Check]:
    named: dict[str, Check] = {}
    for c in checks:
        if c.name in named:
            raise ValueError(f"two checks are named {c.name!r}")
        named[c.name] = c
    return named


def as_path(value: str | pathlib.Path | None) -> pathlib.Path | None:
    return pathlib.Path(value) if value else None
