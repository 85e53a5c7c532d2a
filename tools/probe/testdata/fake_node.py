"""A node's llama-server /completion, faked for probe tests: `fake_node.py PORT MODE [SECONDS_PER_TOKEN]`.

honest: the continuation is a function of the whole request's prompt (as a model's would be), with
  top-5 log-probabilities; "model" is "m.gguf".
replay: answers every request with the answer to the first one it saw (a cache of earlier challenges).
perturbed: as honest, with every log-prob moved by 0.3 nats (a model with other weights).
slow: honest, SECONDS_PER_TOKEN per generated token.
hang: reads the request and never answers.   trickle: sends one byte a second, forever.
huge: an endless body.   malformed: not JSON.   too_many: one token more than asked.
wrong_model: honest figures under another model name.
withhold: honest tokens, log-probabilities for one position only (a single candidate at 0.0).
negative_chunk: a chunked body whose first chunk size is "-6".   deep_json: 200000 nested arrays.
huge_logprob: a log-prob of -10**400.   unicode_length: a Content-Length of "²".
Prints "listening" once it accepts connections.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import sys
import time

MODE = sys.argv[2]
PER_TOKEN_S = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
FIRST: dict = {}


def answer(request: dict) -> dict:
    seed = hashlib.sha256(json.dumps(request["prompt"]).encode()).digest()
    n = int(request["n_predict"]) + (1 if MODE == "too_many" else 0)
    shift = 0.3 if MODE == "perturbed" else 0.0
    tokens, probs = [], []
    for i in range(n):
        tok = 1000 + seed[i % 32] + 256 * (i % 3)
        top = [{"id": tok, "token": "x", "logprob": -0.2 - shift}]
        top += [{"id": tok + k, "token": "y", "logprob": -2.0 - k - shift} for k in range(1, int(request["n_probs"]))]
        tokens.append(tok)
        if MODE == "withhold":
            if i == 7:
                probs.append({"id": tok, "logprob": 0.0, "top_logprobs": [{"id": tok, "logprob": 0.0}]})
            continue
        probs.append(dict(top[0], top_logprobs=top))
    return {"content": "x" * n, "tokens": tokens, "completion_probabilities": probs,
            "model": "other.gguf" if MODE == "wrong_model" else "m.gguf", "stop": True}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if MODE == "hang":
            time.sleep(3600)
        if MODE == "trickle":
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            while True:
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(1.0)
        if MODE == "replay":
            FIRST.setdefault("answer", answer(request))
            body = json.dumps(FIRST["answer"]).encode()
        elif MODE == "malformed":
            body = b'{"tokens": [1, 2'
        elif MODE == "deep_json":
            body = b"[" * 200000
        elif MODE == "huge_logprob":
            doc = answer(request)
            doc["completion_probabilities"][0]["top_logprobs"][0]["logprob"] = 10 ** 400
            body = json.dumps(doc).encode().replace(str(10 ** 400).encode(), b"-" + str(10 ** 400).encode())
        elif MODE == "negative_chunk":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-6\r\nabcdef\r\n0\r\n\r\n")
            self.close_connection = True
            return
        elif MODE == "unicode_length":
            self.wfile.write("HTTP/1.1 200 OK\r\nContent-Length: \u00b2\r\n\r\n{}".encode())
            self.close_connection = True
            return
        else:
            time.sleep(PER_TOKEN_S * int(request["n_predict"]))
            body = json.dumps(answer(request)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if MODE == "huge":
            self.end_headers()
            while True:
                self.wfile.write(b" " * 65536)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


if __name__ == "__main__":
    server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    server.daemon_threads = True
    print("listening", flush=True)
    server.serve_forever()
