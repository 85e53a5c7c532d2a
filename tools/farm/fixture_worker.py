"""TEST FIXTURE: a minimal Remote Workers API bot for the loopback farm (tools/farm/farm.sh).

Production farms bring their own workers (buildbox-worker, bb_worker, Buildfarm's worker, ...); this one
exists only so the loopback proof runs a real engine (BuildGrid) end to end. It advertises its pools as
`Pool` properties of its primary device, takes leases through CreateBotSession/UpdateBotSession, runs
each lease's Action in a fresh directory holding the input root (no sandbox, no container: loopback
only), uploads the declared outputs with BuildGrid's CAS client and completes the lease with an
ActionResult. One log line per action (`executed ...`) is what the farm test reads for placement.

Runs under the farm venv (Python >= 3.13, BuildGrid installed), not under Bazel.
"""

import concurrent.futures
import io
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import grpc
from absl import app, flags
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from buildgrid._protos.google.devtools.remoteworkers.v1test2 import bots_pb2, bots_pb2_grpc
from buildgrid._protos.google.rpc import code_pb2, status_pb2
from buildgrid.server.client.cas import download, upload

FLAGS = flags.FLAGS
flags.DEFINE_string("server", "127.0.0.1:8980", "BuildGrid endpoint (bots and CAS).")
flags.DEFINE_string("instance", "", "REAPI instance name.")
flags.DEFINE_string("name", "worker", "Bot id and log name.")
flags.DEFINE_list("pools", ["cpu-build"], "Values of the Pool property this worker advertises.")
flags.DEFINE_integer("capacity", 1, "Leases run at once.")
flags.DEFINE_string("work_dir", None, "Scratch root for action directories.")
flags.DEFINE_float("poll_s", 10.0, "UpdateBotSession deadline; must stay below the server's bot keepalive.")
flags.DEFINE_float("default_timeout_s", 3600.0, "Action timeout when the Action sets none.")

_LEASE_ACTIVE = bots_pb2.LeaseState.Value("ACTIVE")
_LEASE_COMPLETED = bots_pb2.LeaseState.Value("COMPLETED")


def log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {FLAGS.name}: {msg}", flush=True)


def _output_paths(command: re_pb2.Command) -> list[str]:
    # REAPI 2.1 clients send output_paths; Bazel 4.2 still sends output_files/output_directories.
    return list(command.output_paths) or list(command.output_files) + list(command.output_directories)


def execute(channel: grpc.Channel, action: re_pb2.Action, work_root: pathlib.Path) -> tuple[status_pb2.Status, re_pb2.ActionResult]:
    """Runs one Action; returns the lease status and the ActionResult to report."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="action-", dir=work_root))
    started = time.time()
    try:
        with download(channel, instance=FLAGS.instance) as down:
            command = down.get_message(action.command_digest, re_pb2.Command())
            down.download_directory(action.input_root_digest, str(root / "in"))
        cwd = root / "in" / command.working_directory
        for rel in _output_paths(command):
            (cwd / rel).parent.mkdir(parents=True, exist_ok=True)
        env = {v.name: v.value for v in command.environment_variables}
        timeout = action.timeout.seconds or FLAGS.default_timeout_s
        result = re_pb2.ActionResult()
        status = status_pb2.Status(code=code_pb2.OK)
        try:
            proc = subprocess.run(list(command.arguments), cwd=cwd, env=env, capture_output=True,
                                  timeout=timeout, check=False)
            result.exit_code, out, err = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            status = status_pb2.Status(code=code_pb2.DEADLINE_EXCEEDED, message=f"action exceeded {timeout}s")
            result.exit_code, out, err = 124, exc.stdout or b"", exc.stderr or b""
        except OSError as exc:  # e.g. the argv[0] is not there: a failed action, not a dead worker
            result.exit_code, out, err = 127, b"", f"fixture worker: cannot run {command.arguments[:1]}: {exc}\n".encode()
        with upload(channel, instance=FLAGS.instance) as up:
            for rel in _output_paths(command):
                path = cwd / rel
                if path.is_dir() and not path.is_symlink():
                    result.output_directories.add(path=rel, tree_digest=up.upload_tree(str(path), queue=True))
                elif path.is_file():
                    result.output_files.add(path=rel, digest=up.upload_file(str(path), queue=True),
                                            is_executable=os.access(path, os.X_OK))
            result.stdout_digest.CopyFrom(up.put_blob(io.BytesIO(out), queue=True))
            result.stderr_digest.CopyFrom(up.put_blob(io.BytesIO(err), queue=True))
            up.flush()
        result.execution_metadata.worker = FLAGS.name
        # Tests carry their label in TEST_TARGET; other actions are named by their first arguments.
        what = env.get("TEST_TARGET") or " ".join(a.rsplit("/", 1)[-1] for a in list(command.arguments)[:2])
        log(f"executed action={action.command_digest.hash[:12]} pools={','.join(FLAGS.pools)} "
            f"exit={result.exit_code} seconds={time.time() - started:.1f} what={what}")
        return status, result
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _new_session() -> bots_pb2.BotSession:
    session = bots_pb2.BotSession(bot_id=f"{FLAGS.name}-{os.getpid()}", status=bots_pb2.BotStatus.Value("OK"))
    device = session.worker.devices.add(handle=FLAGS.name)
    for pool in FLAGS.pools:
        device.properties.add(key="Pool", value=pool)
    session.worker.configs.add(key="capacity", value=str(FLAGS.capacity))
    return session


def run(stop: threading.Event) -> None:
    work_root = pathlib.Path(FLAGS.work_dir or tempfile.mkdtemp(prefix=f"{FLAGS.name}-"))
    work_root.mkdir(parents=True, exist_ok=True)
    channel = grpc.insecure_channel(FLAGS.server)
    bots = bots_pb2_grpc.BotsStub(channel)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=FLAGS.capacity)
    running: dict[str, concurrent.futures.Future] = {}
    session = None
    while not stop.is_set():
        try:
            if session is None:
                session = bots.CreateBotSession(
                    bots_pb2.CreateBotSessionRequest(parent=FLAGS.instance, bot_session=_new_session()),
                    timeout=FLAGS.poll_s)
                log(f"bot session {session.name} pools={','.join(FLAGS.pools)} capacity={FLAGS.capacity}")
            for lease in session.leases:
                future = running.get(lease.id)
                if future is None and lease.state == _LEASE_ACTIVE:
                    action = re_pb2.Action()
                    if lease.payload.Is(re_pb2.Action.DESCRIPTOR):
                        lease.payload.Unpack(action)
                    else:  # the engine sent only the Action's digest
                        digest = re_pb2.Digest()
                        lease.payload.Unpack(digest)
                        with download(channel, instance=FLAGS.instance) as down:
                            action = down.get_message(digest, re_pb2.Action())
                    running[lease.id] = pool.submit(execute, channel, action, work_root)
                elif future is not None and future.done():
                    try:
                        status, result = future.result()
                        lease.result.Pack(result)
                    except Exception as exc:  # CAS trouble: report it so the engine can retry elsewhere
                        status = status_pb2.Status(code=code_pb2.INTERNAL, message=f"fixture worker: {exc}")
                    lease.status.CopyFrom(status)
                    lease.state = _LEASE_COMPLETED
            busy = any(not f.done() for f in running.values())
            session = bots.UpdateBotSession(
                bots_pb2.UpdateBotSessionRequest(name=session.name, bot_session=session), timeout=FLAGS.poll_s)
            live = {lease.id for lease in session.leases}
            running = {k: f for k, f in running.items() if k in live or not f.done()}
            if busy:  # the engine does not long-poll while we hold leases: heartbeat once a second
                stop.wait(1.0)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                continue  # an idle long-poll ran out
            log(f"engine said {exc.code().name}: {exc.details()}; retrying")
            if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                session = None  # the engine dropped our session
            stop.wait(2.0)
    pool.shutdown(wait=False, cancel_futures=True)
    log("stopped")


def main(argv: list[str]) -> None:
    del argv
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    run(stop)
    sys.exit(0)


if __name__ == "__main__":
    app.run(main)
