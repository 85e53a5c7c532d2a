"""A stand-in for llama-server in tests: /health, /slots, /completion (plain and streamed as SSE
`data:` events like the pin's), one task per slot, and llama-server's own slot log lines (format of
tools/server/server-context.cpp at the pin).

--fake_mode=cancel: honest. A dropped stream (the client's side closed: a peeked read returns 0
  bytes, as httplib's is_socket_alive sees it) is cancelled: logs `cancel task`, releases the slot.
--fake_mode=ignore_cancel: lies. At the drop it logs `cancel task` and a slot release with few
  tokens, /slots shows the slot idle and the connection closes, but the slot keeps decoding all
  n_predict tokens for nobody: the next request waits for it.
--fake_mode=decode_to_end: a dropped stream is decoded to the end and logged as such (no cancel).
--fake_mode=serial: decodes one request at a time, yet logs every request's slot launch on arrival,
  so that its log shows the requests overlapping on distinct slots. It pauses SERIAL_GAP_S between
  requests so that a client thread scheduled late on a loaded host still reads one stream's tail
  before the next stream's head.
SIGINT: logs "cleaning up before exit..." and exits 0, as llama-server does.
Other llama-server flags are accepted and ignored, except --port and -np.
"""

from __future__ import annotations

import http.server
import json
import os
import select
import signal
import socket
import sys
import threading
import time

T0 = time.monotonic()
LOG_LOCK = threading.Lock()
TOKEN_S = 0.001  # per generated token
SERIAL_GAP_S = 0.25


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
        self.n_slots = n_slots
        self.free = list(range(n_slots))  # slots really free
        self.claimed: dict[int, int] = {}  # slot -> task, as the log and /slots tell it
        self.cond = threading.Condition()
        self.next_task = 0
        self.decoder = threading.Lock()  # serial mode: one request decodes at a time

    def acquire(self) -> tuple[int, int]:
        with self.cond:
            while not self.free:
                self.cond.wait()
            slot = self.free.pop()
            task = self.next_task
            self.next_task += 1
            self.claimed[slot] = task
        slot_log("I", "launch_slot_", slot, task, "processing task, is_child = 0")
        return slot, task

    def release(self, slot: int, task: int, n_tokens: int, free: bool = True) -> None:
        """Logs the release; free=False keeps the slot really busy (the lie of ignore_cancel)."""
        slot_log("I", "release", slot, task, f"stop processing: n_tokens = {n_tokens}, truncated = 0")
        with self.cond:
            self.claimed.pop(slot, None)
            if free:
                self.free.append(slot)
                self.cond.notify()

    def free_silently(self, slot: int) -> None:
        with self.cond:
            self.free.append(slot)
            self.cond.notify()

    def slots_json(self) -> list[dict]:
        with self.cond:
            return [{"id": i, "n_ctx": 4096, "is_processing": i in self.claimed, "id_task": self.claimed.get(i, -1)}
                    for i in range(self.n_slots)]


STATE: State


def prob(i: int) -> dict:
    top = [{"id": i, "token": " x", "bytes": [32, 120], "logprob": -0.1},
           {"id": i + 1000, "token": " y", "bytes": [32, 121], "logprob": -3.0}]
    return dict(top[0], top_logprobs=top)


def peer_gone(sock: socket.socket) -> bool:
    """httplib's is_socket_alive, negated: readable and a peeked read gives 0 bytes."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _json(self, obj: object) -> None:
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.startswith("/slots"):
            self._json(STATE.slots_json())
        else:
            self._json({"status": "ok"})

    def _event(self, obj: dict) -> None:
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()

    def do_POST(self) -> None:
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        n_predict = int(req.get("n_predict", 8))
        n_probs = int(req.get("n_probs", 0))
        n_prompt = len(str(req.get("prompt", "")).split()) + 1
        slot, task = STATE.acquire()
        slot_log("I", "operator()", slot, task, f"new prompt, n_ctx_slot = 4096, n_keep = 0, task.n_tokens = {n_prompt}")
        serial = STATE.decoder if STATE.mode == "serial" else None
        if serial is not None:
            serial.acquire()
        try:
            self._decode(req, slot, task, n_predict, n_probs, n_prompt)
        finally:
            if serial is not None:
                time.sleep(SERIAL_GAP_S)
                serial.release()

    def _decode(self, req: dict, slot: int, task: int, n_predict: int, n_probs: int, n_prompt: int) -> None:
        if not req.get("stream"):
            time.sleep(TOKEN_S * n_predict)
            STATE.release(slot, task, n_prompt + n_predict)
            out = {"content": " x" * n_predict, "tokens": list(range(n_predict)), "tokens_predicted": n_predict,
                   "id_slot": slot, "stop": True}
            if n_probs > 0:
                out["completion_probabilities"] = [prob(i) for i in range(n_predict)]
            self._json(out)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        base = {"index": 0, "id_slot": slot, "tokens_evaluated": n_prompt}
        for generated in range(n_predict):
            time.sleep(TOKEN_S)
            if peer_gone(self.connection):
                self._dropped(slot, task, n_prompt, generated, n_predict)
                return
            event = dict(base, content=" x", tokens=[generated], stop=False, tokens_predicted=generated + 1)
            if n_probs > 0:
                event["completion_probabilities"] = [prob(generated)]
            try:
                self._event(event)
            except OSError:
                self._dropped(slot, task, n_prompt, generated, n_predict)
                return
        try:
            self._event(dict(base, content="", tokens=[], stop=True, tokens_predicted=n_predict))
        except OSError:
            pass
        STATE.release(slot, task, n_prompt + n_predict)

    def _dropped(self, slot: int, task: int, n_prompt: int, generated: int, n_predict: int) -> None:
        if STATE.mode == "decode_to_end":
            time.sleep(TOKEN_S * (n_predict - generated))
            STATE.release(slot, task, n_prompt + n_predict)
            return
        log("W", f"srv          stop: cancel task, id_task = {task}")
        if STATE.mode != "ignore_cancel":
            STATE.release(slot, task, n_prompt + generated)
            return
        STATE.release(slot, task, n_prompt + generated, free=False)

        def keep_decoding() -> None:
            time.sleep(TOKEN_S * (n_predict - generated))
            STATE.free_silently(slot)

        threading.Thread(target=keep_decoding, daemon=True).start()


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
        elif a.startswith("--fake_load="):
            # A library from outside the lane (as LD_PRELOAD or a planted plugin would bring one).
            import ctypes
            ctypes.CDLL(a.split("=", 1)[1])
    STATE = State(n_slots, mode)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True

    def on_sigint(signum, frame) -> None:
        log("I", "srv    operator(): operator(): cleaning up before exit...")
        sys.stdout.flush()
        os._exit(0)

    signal.signal(signal.SIGINT, on_sigint)
    log("I", f"srv    load_model: initializing, n_slots = {n_slots}")
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
