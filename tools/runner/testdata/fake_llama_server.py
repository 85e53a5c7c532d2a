"""A stand-in for llama-server in tests: /health, /completion (plain and streamed), one task per
slot, and llama-server's own slot log lines (format of tools/server/server-context.cpp at the pin).

--fake_mode=cancel: a dropped stream is cancelled (logs `cancel task`, releases the slot at once).
--fake_mode=ignore_cancel: a dropped stream is decoded to the end (n_predict tokens), as a server
that never notices the client left; it logs no `cancel task`.
SIGINT: logs "cleaning up before exit..." and exits 0, as llama-server does.
Other llama-server flags are accepted and ignored, except --port and -np.
"""

from __future__ import annotations

import http.server
import json
import signal
import sys
import threading
import time

T0 = time.monotonic()
LOG_LOCK = threading.Lock()
TOKEN_S = 0.0005  # per generated token


def log(level: str, text: str) -> None:
    us = int((time.monotonic() - T0) * 1e6)
    with LOG_LOCK:
        sys.stdout.write(f"{us // 60_000_000}.{us // 1_000_000 % 60:02d}.{us // 1000 % 1000:03d}.{us % 1000:03d} {level} {text}\n")
        sys.stdout.flush()


def slot_log(level: str, fn: str, slot: int, task: int, msg: str) -> None:
    log(level, f"slot {fn:>12s}: id {slot:2d} | task {task} | {msg}")


class State:
    def __init__(self, n_slots: int, mode: str):
        self.mode = mode
        self.free = list(range(n_slots))
        self.cond = threading.Condition()
        self.next_task = 0

    def acquire(self) -> tuple[int, int]:
        with self.cond:
            while not self.free:
                self.cond.wait()
            slot = self.free.pop()
            task = self.next_task
            self.next_task += 1
        slot_log("I", "launch_slot_", slot, task, "processing task, is_child = 0")
        return slot, task

    def release(self, slot: int, task: int, n_tokens: int) -> None:
        slot_log("I", "release", slot, task, f"stop processing: n_tokens = {n_tokens}, truncated = 0")
        with self.cond:
            self.free.append(slot)
            self.cond.notify()


STATE: State


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _json(self, obj: dict) -> None:
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._json({"status": "ok"})

    def do_POST(self) -> None:
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        n_predict = int(req.get("n_predict", 8))
        n_prompt = len(str(req.get("prompt", "")).split()) + 1
        slot, task = STATE.acquire()
        slot_log("I", "operator()", slot, task, f"new prompt, n_ctx_slot = 4096, n_keep = 0, task.n_tokens = {n_prompt}")
        if not req.get("stream"):
            time.sleep(TOKEN_S * n_predict)
            STATE.release(slot, task, n_prompt + n_predict)
            self._json({"content": " x" * n_predict, "tokens": list(range(n_predict)), "tokens_predicted": n_predict,
                        "id_slot": slot, "completion_probabilities": []})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        generated = 0
        dropped = False
        while generated < n_predict:
            time.sleep(TOKEN_S)
            generated += 1
            if dropped:
                continue  # ignore_cancel: keep decoding for nobody
            try:
                self.wfile.write(b'data: {"content":" x","stop":false}\n\n')
                self.wfile.flush()
            except OSError:
                dropped = True
                if STATE.mode == "cancel":
                    log("W", f"srv          stop: cancel task, id_task = {task}")
                    break
        STATE.release(slot, task, n_prompt + generated)
        self.close_connection = True


def main(argv: list[str]) -> int:
    global STATE
    port, n_slots, mode = 8080, 1, "cancel"
    for i, a in enumerate(argv):
        if a == "--port":
            port = int(argv[i + 1])
        elif a == "-np":
            n_slots = int(argv[i + 1])
        elif a.startswith("--fake_mode="):
            mode = a.split("=", 1)[1]
    STATE = State(n_slots, mode)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True

    def on_sigint(signum, frame) -> None:
        log("I", "srv    operator(): operator(): cleaning up before exit...")
        sys.stdout.flush()
        import os
        os._exit(0)

    signal.signal(signal.SIGINT, on_sigint)
    log("I", f"srv    load_model: initializing, n_slots = {n_slots}")
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
