"""The runner's command line: flags derived from the option fields (config.option_fields), once each.

  python3 -m tools.runner.runner --lane=cpu --lane_dir=LANE --evidence=LANE.evidence.pb \
      --spec=spec.json --model=tiny.gguf --out_dir=OUT --report=OUT/runner_report.pb
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys

from absl import app, flags

from tools.core import errors
from tools.runner import config as config_lib
from tools.runner import report as report_lib
from tools.runner import runner
from tools.runner.lane_spec import LaneSpecError

FLAGS = flags.FLAGS


def _flag_fields() -> list[dataclasses.Field]:
    return [f for f in config_lib.option_fields() if f.metadata.get("help")]


def define_flags() -> None:
    required = []
    for f in _flag_fields():
        help_text = f.metadata["help"]
        default = None if f.default is dataclasses.MISSING else f.default
        if f.metadata.get("path"):
            flags.DEFINE_string(f.name, None if default is None else str(default), help_text)
        elif isinstance(default, bool):
            flags.DEFINE_bool(f.name, default, help_text)
        elif isinstance(default, tuple):
            flags.DEFINE_list(f.name, list(default), help_text)
        elif isinstance(default, int) or f.type in ("int", int):
            flags.DEFINE_integer(f.name, default, help_text)
        elif isinstance(default, float):
            flags.DEFINE_float(f.name, default, help_text)
        else:
            flags.DEFINE_string(f.name, default, help_text)
        if f.metadata.get("required"):
            required.append(f.name)
    flags.mark_flags_as_required(required)


def config_from_flags() -> config_lib.RunnerConfig:
    values = {}
    for f in _flag_fields():
        value = getattr(FLAGS, f.name)
        if f.metadata.get("path"):
            value = pathlib.Path(value) if value else None
        elif isinstance(f.default, tuple):
            value = tuple(value)
        if value is None and f.default_factory is not dataclasses.MISSING:
            continue  # not given: the field's own default (e.g. threads: every core)
        values[f.name] = value
    return config_lib.RunnerConfig(**values)


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    try:
        report = runner.run(config_from_flags())
    except (errors.UsageError, LaneSpecError) as err:  # lane_spec's error is not yet a LanesError
        print(f"runner: {err}", file=sys.stderr)
        return runner.EXIT_USAGE
    print(report_lib.summary_table(report))
    code = runner.exit_code(report)
    if code == runner.EXIT_REPORT_UNWRITABLE:
        print(f"runner: {report.non_recordable_reasons[-1]}", file=sys.stderr)
    elif code == runner.EXIT_OK:
        print(f"runner: report {FLAGS.report} (+ .json)")
    return code


def start() -> None:
    define_flags()
    app.run(main)


if __name__ == "__main__":
    start()
