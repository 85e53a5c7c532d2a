"""A llama-server on loopback for the concurrency and cancellation checks: start, wait for /health,
send /completion requests (urllib, bounded timeouts), stop. Nothing leaves 127.0.0.1."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import time
import urllib.error
import urllib.request

from tools.runner.context import RunContext
from tools.runner.steps import Step

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class ServerError(Exception):
    pass


class LlamaServer:
    def __init__(self, ctx: RunContext, step: Step, n_parallel: int, ctx_size: int):
        self.ctx, self.step = ctx, step
        self.port = free_port()
        self.log_path = ctx.logs_dir / f"{step.name}.server.log"
        self.argv = [str(ctx.bin("llama-server")), "-m", str(ctx.config.model), "--host", HOST,
                     "--port", str(self.port), "-np", str(n_parallel), "-c", str(ctx_size),
                     "-t", str(ctx.config.threads), "-cram", "0", "-lv", "4", *ctx.ngl]
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
                raise ServerError(f"llama-server exited {self.proc.returncode} while starting (see {self.log_path.name})")
            if self.healthy():
                return self
            time.sleep(0.2)
        raise ServerError("llama-server did not become healthy in time")

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            code = self.ctx.tracker.stop(self.proc)
            self.step.log(f"# llama-server stopped, exit {code}")
        self._log.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def healthy(self, timeout_s: float = 2.0) -> bool:
        try:
            with urllib.request.urlopen(self.base + "/health", timeout=timeout_s) as r:
                return r.status == 200 and json.loads(r.read()).get("status") == "ok"
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def complete(self, prompt: str, n_predict: int, timeout_s: float = 120.0, n_probs: int = 0) -> dict:
        body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "seed": self.ctx.config.seed,
                "cache_prompt": False, "ignore_eos": True, "return_tokens": True, "n_probs": n_probs}
        req = urllib.request.Request(self.base + "/completion", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return json.loads(r.read())

    def stream_and_abort(self, prompt: str, n_predict: int, chunks_before_abort: int, timeout_s: float = 60.0) -> tuple[int, bool]:
        """Starts a streaming completion, reads some chunks, drops the connection.
        Returns (chunks read, whether the stream had already finished)."""
        body = json.dumps({"prompt": prompt, "n_predict": n_predict, "temperature": 0, "stream": True,
                           "ignore_eos": True, "cache_prompt": False})
        conn = http.client.HTTPConnection(HOST, self.port, timeout=timeout_s)
        try:
            conn.request("POST", "/completion", body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            chunks, finished = 0, False
            while chunks < chunks_before_abort:
                line = resp.fp.readline()
                if not line:
                    finished = True
                    break
                if line.startswith(b"data:"):
                    chunks += 1
                    if b'"stop":true' in line.replace(b" ", b""):
                        finished = True
                        break
            return chunks, finished
        finally:
            # Close the socket outright, as a client that goes away mid-generation does.
            if conn.sock is not None:
                conn.sock.shutdown(socket.SHUT_RDWR)
            conn.close()
