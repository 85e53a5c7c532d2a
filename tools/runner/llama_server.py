"""A llama-server on loopback for the concurrency and cancellation checks: start, wait for /health,
send /completion requests (plain or streamed), read GET /slots, stop with SIGINT. Nothing leaves
127.0.0.1.

The client's own record (what arrived when, on its monotonic clock) is evidence the server cannot
write: stream() and stream_drop() keep every SSE `data:` line with its arrival time. A streamed
/completion at the pin sends one `data: {json}` event per generated token ("content", "tokens",
"stop": false; with n_probs also "completion_probabilities") and a last one with "stop": true
(tools/server/server-context.cpp send_partial_response / send_final_response); a token that ends
inside a UTF-8 sequence gets no event of its own (its bytes ride on the next one).

Also parses the server's own log (kept as <step>.server.log, digested): its slot lines are the
server-side evidence of what it decoded and when (tools/server/server-context.cpp at the pin):
  I slot launch_slot_: id  3 | task 0 | processing task, is_child = 0
  I slot   operator(): id  3 | task 0 | new prompt, n_ctx_slot = 256, n_keep = 0, task.n_tokens = 6
  W srv          stop: cancel task, id_task = 0          (server-queue.cpp, client went away)
  I slot      release: id  3 | task 0 | stop processing: n_tokens = 37, truncated = 0
  I srv    operator(): operator(): cleaning up before exit...   (SIGINT/SIGTERM: clean shutdown)
Each line starts with the log's timestamp, minutes.seconds.milliseconds.microseconds since start.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

from tools.runner import exits, lane_files, loaded_libraries
from tools.runner.context import RunContext
from tools.runner.steps import Step

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class ServerError(Exception):
    pass


# llama-server's exit status after one SIGINT: the handler stops the task loop and main returns 0
# (tools/server/server.cpp); a second SIGINT would exit(1).
SERVER_SIGINT_EXIT = 0

_TS = r"(?P<min>\d+)\.(?P<sec>\d{2})\.(?P<ms>\d{3})\.(?P<us>\d{3})"
_SLOT = re.compile(_TS + r" \S slot +(?P<fn>\S+): id +(?P<slot>\d+) \| task (?P<task>-?\d+) \| (?P<msg>.*)$")
_CANCEL = re.compile(_TS + r" \S srv +\S+: cancel task, id_task = (?P<task>\d+)")
_NEW_PROMPT = re.compile(r"new prompt, .*task\.n_tokens = (\d+)")
_RELEASE = re.compile(r"stop processing: n_tokens = (\d+)")
SHUTDOWN_LINE = "cleaning up before exit"


def _seconds(m: re.Match) -> float:
    return int(m["min"]) * 60 + int(m["sec"]) + int(m["ms"]) / 1e3 + int(m["us"]) / 1e6


@dataclasses.dataclass
class ServerTask:
    task: int
    slot: int
    launched: float  # server clock, seconds
    prompt_tokens: int | None = None
    released: float | None = None
    n_tokens_at_release: int | None = None
    cancelled: float | None = None  # when the server logged "cancel task" for it

    @property
    def decoded(self) -> int | None:
        """Tokens generated (n_tokens at release less the prompt)."""
        if self.n_tokens_at_release is None or self.prompt_tokens is None:
            return None
        return self.n_tokens_at_release - self.prompt_tokens


@dataclasses.dataclass
class ServerLog:
    tasks: list[ServerTask]  # in launch order
    shutdown_logged: bool


def parse_server_log(text: str) -> ServerLog:
    tasks: dict[int, ServerTask] = {}
    for line in text.splitlines():
        m = _SLOT.match(line)
        if m:
            task_id, msg = int(m["task"]), m["msg"]
            if m["fn"] == "launch_slot_" and msg.startswith("processing task"):
                tasks[task_id] = ServerTask(task_id, int(m["slot"]), _seconds(m))
            elif task_id in tasks:
                t = tasks[task_id]
                if (p := _NEW_PROMPT.search(msg)) and t.prompt_tokens is None:
                    t.prompt_tokens = int(p.group(1))
                elif m["fn"] == "release" and (r := _RELEASE.search(msg)):
                    t.released, t.n_tokens_at_release = _seconds(m), int(r.group(1))
            continue
        m = _CANCEL.match(line)
        if m and int(m["task"]) in tasks:
            tasks[int(m["task"])].cancelled = _seconds(m)
    return ServerLog(sorted(tasks.values(), key=lambda t: t.launched), SHUTDOWN_LINE in text)


def max_busy(tasks: list[ServerTask]) -> int:
    """Most tasks in processing at one instant on the server's clock (checked at each launch)."""
    spans = [(t.launched, t.released if t.released is not None else float("inf")) for t in tasks]
    return max((sum(1 for s, e in spans if s <= at < e) for at, _ in spans), default=0)


class LlamaServer:
    def __init__(self, ctx: RunContext, step: Step, n_parallel: int, ctx_size: int, extra_args: tuple[str, ...] = ()):
        self.ctx, self.step = ctx, step
        self.port = free_port()
        self.log_path = ctx.logs_dir / f"{step.name}.server.log"
        # --slots: GET /slots (each slot's is_processing) is the client's view of a free slot; on by
        # default at the pin, named so that a changed default cannot turn it off.
        self.argv = [str(ctx.bin("llama-server")), "-m", str(ctx.config.model), "--host", HOST,
                     "--port", str(self.port), "-np", str(n_parallel), "-c", str(ctx_size),
                     "-t", str(ctx.config.threads), "-cram", "0", "-lv", "4", "--slots", *extra_args, *ctx.ngl]
        self.proc: subprocess.Popen | None = None

    @property
    def base(self) -> str:
        return f"http://{HOST}:{self.port}"

    def __enter__(self) -> "LlamaServer":
        self.step.log(f"$ {' '.join(self.argv)}  (log: {self.log_path.name})")
        self._log = open(self.log_path, "wb")
        self.step.extra_logs.append(self.log_path)
        self.proc = self.ctx.tracker.popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + min(self.ctx.config.timeout_s, 300)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerError(f"llama-server exited {exits.describe(self.proc.returncode)} while starting (see {self.log_path.name})")
            if self.healthy():
                self._check_loaded_libraries()
                return self
            time.sleep(0.2)
        raise ServerError("llama-server did not become healthy in time")

    def _check_loaded_libraries(self) -> None:
        """The server may map only the lane's own files, the system's libraries and the SDK's: what it
        loaded from anywhere else (a preloaded or planted library) was never hashed."""
        roots = loaded_libraries.sdk_roots(self.ctx.lane.is_accelerator)
        cache = loaded_libraries.loader_cache_files()
        try:
            # Without the cache first, to log what the cache alone let through.
            mapped = loaded_libraries.foreign_libraries(self.proc.pid, self.ctx.config.lane_dir, roots)
            foreign = loaded_libraries.foreign_libraries(self.proc.pid, self.ctx.config.lane_dir, roots, cache)
        except OSError as err:
            mapped = foreign = [f"(/proc/{self.proc.pid}/maps unreadable: {err.strerror})"]
        # A lane directory of links (Bazel's runfiles) maps its files by their targets: those are its own.
        own = {os.path.realpath(p) for p in lane_files.files(self.ctx.config.lane_dir)}
        mapped = [f for f in mapped if os.path.realpath(f) not in own]
        foreign = [f for f in foreign if os.path.realpath(f) not in own]
        by_cache = [f for f in mapped if os.path.realpath(f) in cache]
        if by_cache:
            self.step.log(f"# llama-server pid {self.proc.pid}: from the system loader's cache (ldconfig -p): "
                          f"{', '.join(by_cache)}")
        if loaded_libraries.DRIVER_MEMFD in mapped and loaded_libraries.DRIVER_MEMFD not in foreign:
            self.step.log(f"# llama-server pid {self.proc.pid}: {loaded_libraries.DRIVER_MEMFD} accepted: "
                          "the NVIDIA GL driver's dispatch memory, beside its library from the system")
        self.step.log(f"# llama-server pid {self.proc.pid}: {len(foreign)} mapped librar(ies) from outside the lane, "
                      "the system library dirs and the SDK" + (f": {', '.join(foreign)}" if foreign else ""))
        if foreign:
            self.sigint_stop()
            raise ServerError(f"llama-server mapped libraries from outside the lane and the system: {', '.join(foreign[:5])}")

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.sigint_stop()
        self._log.close()

    def sigint_stop(self, bound_s: float = 10.0) -> tuple[int | None, float]:
        """SIGINT (as an operator's Ctrl-C), then the tracker's SIGTERM/SIGKILL if it is still up after
        bound_s. Logs `# llama-server SIGINT: exit N after S s`; returns (exit status or None, seconds)."""
        if self.proc is None or self.proc.poll() is not None:
            return (None if self.proc is None else self.proc.returncode), 0.0
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGINT)
        try:
            code = self.proc.wait(timeout=bound_s)
        except subprocess.TimeoutExpired:
            code = None
        seconds = time.monotonic() - t0
        if code is None:
            forced = self.ctx.tracker.stop(self.proc)
            self.step.log(f"# llama-server SIGINT: still running after {bound_s:g}s; killed, exit {forced}")
        else:
            self.step.log(f"# llama-server SIGINT: exit {code} after {seconds:.3f}s")
        return code, seconds

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def healthy(self, timeout_s: float = 2.0) -> bool:
        try:
            with urllib.request.urlopen(self.base + "/health", timeout=timeout_s) as r:
                return r.status == 200 and json.loads(r.read()).get("status") == "ok"
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _body(self, prompt: str, n_predict: int, n_probs: int, stream: bool) -> str:
        return json.dumps({"prompt": prompt, "n_predict": n_predict, "temperature": 0, "seed": self.ctx.config.seed,
                           "cache_prompt": False, "ignore_eos": True, "return_tokens": True, "n_probs": n_probs,
                           "stream": stream})

    def complete(self, prompt: str, n_predict: int, timeout_s: float = 120.0, n_probs: int = 0) -> dict:
        req = urllib.request.Request(self.base + "/completion", data=self._body(prompt, n_predict, n_probs, False).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return json.loads(r.read())

    def timed_complete(self, prompt: str, n_predict: int, origin: float, timeout_s: float = 120.0) -> dict:
        """complete(), timed on the client's clock (seconds since origin); an error is recorded, not raised."""
        out: dict = {"prompt": prompt, "n_predict": n_predict, "started": round(time.monotonic() - origin, 6)}
        try:
            r = self.complete(prompt, n_predict, timeout_s=timeout_s)
            out["tokens_predicted"] = r.get("tokens_predicted")
            out["content"] = r.get("content")
        except (OSError, ValueError) as err:
            out["error"] = f"{type(err).__name__}: {err}"
        out["finished"] = round(time.monotonic() - origin, 6)
        return out

    def slots(self, origin: float, timeout_s: float = 10.0) -> dict:
        """One GET /slots: {"t": seconds since origin, "status", "body": the raw text}."""
        try:
            with urllib.request.urlopen(self.base + "/slots", timeout=timeout_s) as r:
                status, body = r.status, r.read()
        except urllib.error.HTTPError as err:
            status, body = err.code, err.read()
        except OSError as err:
            status, body = 0, f"{type(err).__name__}: {err}".encode()
        return {"t": round(time.monotonic() - origin, 6), "status": status, "body": body.decode("utf-8", "replace")}

    def _open_stream(self, prompt: str, n_predict: int, n_probs: int, timeout_s: float):
        conn = http.client.HTTPConnection(HOST, self.port, timeout=timeout_s)
        conn.request("POST", "/completion", body=self._body(prompt, n_predict, n_probs, True),
                     headers={"Content-Type": "application/json"})
        sock = conn.sock  # getresponse() lets go of it when the server says Connection: close
        return conn, sock, conn.getresponse()

    def stream(self, prompt: str, n_predict: int, origin: float, n_probs: int = 0, timeout_s: float = 120.0) -> dict:
        """A streamed completion read to its end: {"prompt", "sent", "status", "events": [[t, line]], "end"},
        t the arrival of each `data:` line in seconds since origin (time.monotonic())."""
        out: dict = {"prompt": prompt, "sent": round(time.monotonic() - origin, 6), "events": [], "end": "eof"}
        conn = None
        try:
            conn, _, resp = self._open_stream(prompt, n_predict, n_probs, timeout_s)
            out["status"] = resp.status
            while line := resp.readline():
                if line.startswith(b"data:"):
                    out["events"].append([round(time.monotonic() - origin, 6), line.decode("utf-8", "replace").rstrip()])
        except (OSError, http.client.HTTPException) as err:
            out["end"] = f"{type(err).__name__}: {err}"
        finally:
            if conn is not None:
                conn.close()
        return out

    def stream_drop(self, prompt: str, n_predict: int, chunks_before_drop: int, origin: float, after_drop_s: float,
                    timeout_s: float = 60.0, transcript=None) -> dict:
        """Starts a streamed completion, reads chunks_before_drop token events, then drops the request by
        shutting the client's sending side (the server reads EOF, as from a client gone away: httplib's
        is_socket_alive peeks 0 bytes) and keeps reading, up to after_drop_s, to see the stream end.

        Returns {"events": [[t, line]] before the drop, "dropped": t, "after_drop": [t of each later
        event], "ended": t or None, "end": how it ended}, times in seconds since origin. The raw lines
        read before the drop also go to `transcript` (binary) when given."""
        out: dict = {"prompt": prompt, "n_predict": n_predict, "sent": round(time.monotonic() - origin, 6),
                     "events": [], "dropped": None, "after_drop": [], "ended": None, "end": None}
        conn = sock = resp = None
        try:
            conn, sock, resp = self._open_stream(prompt, n_predict, 0, timeout_s)
            out["status"] = resp.status
            tokens = 0
            while tokens < chunks_before_drop:
                line = resp.readline()
                if transcript is not None:
                    transcript.write(line)
                if not line:
                    out["ended"], out["end"] = round(time.monotonic() - origin, 6), "finished before the drop"
                    return out
                if line.startswith(b"data:"):
                    out["events"].append([round(time.monotonic() - origin, 6), line.decode("utf-8", "replace").rstrip()])
                    tokens += b'"tokens":[]' not in line.replace(b" ", b"")
            sock.shutdown(socket.SHUT_WR)
            dropped = time.monotonic()
            out["dropped"] = round(dropped - origin, 6)
            sock.settimeout(max(0.05, after_drop_s))
            out["end"] = f"still streaming {after_drop_s:g}s after the drop"
            while time.monotonic() - dropped < after_drop_s:
                line = resp.readline()
                if not line:
                    out["ended"], out["end"] = round(time.monotonic() - origin, 6), "eof"
                    break
                if line.startswith(b"data:"):
                    out["after_drop"].append(round(time.monotonic() - origin, 6))
        except TimeoutError:
            out["end"] = "neither a byte nor the end within the read timeout"
        except (OSError, http.client.HTTPException) as err:
            # The server closing the connection mid-body (IncompleteRead, reset) ends the stream too.
            out["ended"], out["end"] = round(time.monotonic() - origin, 6), f"{type(err).__name__}: {err}"
        finally:
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
            if resp is not None:
                resp.close()
            if conn is not None:
                conn.close()
        return out
