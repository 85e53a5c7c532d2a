"""Serving-time probes: a Tracker challenges a node's llama-server and compares it with a reference.

A certification record proves what a lane served when it was certified; a probe checks what the node
routed to serves now. Each probe is a fresh challenge (draw_challenge): one line of the runner's
digested prompt set followed by random token ids, both drawn with the OS's CSPRNG, so no answer
cached from an earlier probe fits it. The node and the reference (a certified CPU lane the Tracker
runs, or a designated reference node) each get the same greedy /completion request with top-k
log-probabilities; judge() compares the continuations (greedy prefix, top-1 agreement, the largest
|delta log-prob| of the reference's top tokens) and the node's generation speed, measured on the
Tracker's clock, with the speed its certification record states.

Every byte a node sends is untrusted: query() reads one bounded HTTP response before a deadline
over a raw socket (a node that hangs, trickles bytes or sends too much is cut off and named), and
parse_completion() refuses JSON that is not a completion of the challenge.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import pathlib
import re
import secrets
import socket
import time
import urllib.parse

from tools.runner import challenge as run_challenge

PROMPT_SET = run_challenge.PROMPT_SET
MAX_RESPONSE_BYTES = 1 << 20  # a 16-token completion with 5 candidates a token is ~10 KB
N_PREDICT = 16
N_PROBS = 5
NONCE_TOKENS = 4
# Token ids below this are the control and byte tokens of common vocabularies: the nonce avoids them.
_FIRST_NONCE_ID = 300
_DIGITS = re.compile(r"[0-9]{1,12}")  # ASCII only: str.isdigit() also accepts "²"
_HEX = re.compile(rb"[0-9a-fA-F]{1,8}")


class ProbeError(Exception):
    """A node's answer that cannot be judged (no answer in time, not HTTP, not a completion of the
    challenge); the message says which and why."""


@dataclasses.dataclass(frozen=True)
class Challenge:
    prompt_set_sha256: str
    line: int  # 1-based line of the prompt set
    text: str
    nonce: tuple[int, ...]  # random token ids after the text
    n_predict: int = N_PREDICT
    n_probs: int = N_PROBS

    def request(self) -> dict:
        # llama-server tokenizes a mixed prompt array: the text, then the ids as they are.
        return {"prompt": [self.text, *self.nonce], "n_predict": self.n_predict, "temperature": 0, "seed": 1,
                "cache_prompt": False, "ignore_eos": True, "return_tokens": True, "n_probs": self.n_probs,
                "stream": False}

    def digest(self) -> str:
        canonical = json.dumps(dataclasses.asdict(self), sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def draw_challenge(vocab_size: int, prompt_set: pathlib.Path = PROMPT_SET) -> Challenge:
    """A fresh challenge: a line of the prompt set and NONCE_TOKENS token ids, all from the CSPRNG."""
    if vocab_size <= _FIRST_NONCE_ID + NONCE_TOKENS:
        raise ProbeError(f"vocabulary of {vocab_size} tokens: too small for a random token nonce")
    lines, digest = run_challenge.prompt_lines(prompt_set)
    rng = secrets.SystemRandom()
    line = rng.randrange(len(lines))
    nonce = tuple(_FIRST_NONCE_ID + rng.randrange(vocab_size - _FIRST_NONCE_ID) for _ in range(NONCE_TOKENS))
    return Challenge(prompt_set_sha256=digest, line=line + 1, text=lines[line], nonce=nonce)


@dataclasses.dataclass(frozen=True)
class Answer:
    tokens: tuple[int, ...]
    # Per generated token: {candidate id: log-prob} of the top n_probs, as the server reported them.
    top_logprobs: tuple[dict[int, float], ...]
    model: str
    seconds: float  # request sent to the last byte, on the Tracker's clock
    digest: str  # sha256 of the response body as received

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / self.seconds if self.seconds > 0 else math.inf


def query(url: str, challenge: Challenge, deadline: float, max_bytes: int = MAX_RESPONSE_BYTES) -> Answer:
    """POST the challenge to `url`/completion and read one response before `deadline` (a
    time.monotonic() value), at most max_bytes of it."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or not parts.port:
        raise ProbeError(f"node url {url!r}: give http://HOST:PORT")
    body = json.dumps(challenge.request()).encode()
    head = (f"POST /completion HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    started = time.monotonic()
    raw = _exchange(parts.hostname, parts.port, head + body, deadline, max_bytes)
    seconds = time.monotonic() - started
    try:
        status, headers, payload = _split_http(raw)
        if status != 200:
            raise ProbeError(f"HTTP status {status} from {url}")
        if headers.get("transfer-encoding", "").lower() == "chunked":
            payload = _unchunk(payload)
        return parse_completion(payload, challenge, seconds)
    except ProbeError:
        raise
    except (ValueError, TypeError, KeyError, RecursionError, OverflowError) as err:
        # Whatever else a hostile answer makes the parser raise is the node's failure, never the Tracker's.
        raise ProbeError(f"the answer cannot be read ({type(err).__name__}: {err})"[:300]) from None


def _exchange(host: str, port: int, request: bytes, deadline: float, max_bytes: int) -> bytes:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise ProbeError("the probe's deadline passed before the request was sent")
    try:
        sock = socket.create_connection((host, port), timeout=remaining)
    except OSError as err:
        raise ProbeError(f"cannot connect to {host}:{port} ({err})") from err
    chunks, size = [], 0
    try:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        sock.sendall(request)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ProbeError(f"no complete answer within the deadline ({size} bytes by then)")
            sock.settimeout(remaining)
            data = sock.recv(65536)
            if not data:
                return b"".join(chunks)
            size += len(data)
            if size > max_bytes:
                raise ProbeError(f"answer larger than {max_bytes} bytes: cut off")
            chunks.append(data)
    except TimeoutError as err:
        raise ProbeError(f"no complete answer within the deadline ({size} bytes by then)") from err
    except OSError as err:
        raise ProbeError(f"connection to {host}:{port} failed ({err})") from err
    finally:
        sock.close()


def _split_http(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, sep, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status_line = lines[0].split(" ", 2) if lines and sep else []
    if len(status_line) < 2 or not status_line[0].startswith("HTTP/1.") or not _DIGITS.fullmatch(status_line[1]):
        raise ProbeError("the answer is not an HTTP/1.x response")
    headers = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        if not _DIGITS.fullmatch(headers["content-length"]) or int(headers["content-length"]) != len(body):
            raise ProbeError(f"body of {len(body)} bytes, Content-Length says {headers['content-length']!r}")
    return int(status_line[1]), headers, body


def _unchunk(body: bytes) -> bytes:
    out, pos = [], 0
    while True:
        line_end = body.find(b"\r\n", pos)
        if line_end < 0:
            raise ProbeError("malformed chunked body")
        size_text = body[pos:line_end].split(b";")[0].strip()
        if not _HEX.fullmatch(size_text):  # hex digits only: int() would take "-6" and loop back
            raise ProbeError("malformed chunked body")
        size = int(size_text, 16)
        if size == 0:
            return b"".join(out)
        start = line_end + 2
        if start + size + 2 > len(body):
            raise ProbeError("truncated chunked body")
        out.append(body[start:start + size])
        pos = start + size + 2


def parse_completion(payload: bytes, challenge: Challenge, seconds: float) -> Answer:
    """The completion of `challenge` in a /completion response body, or ProbeError naming what is wrong."""
    try:
        doc = json.loads(payload)
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ProbeError(f"the answer is not JSON ({type(err).__name__})") from None
    if not isinstance(doc, dict):
        raise ProbeError("the answer is not a JSON object")
    tokens = doc.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise ProbeError("the answer has no token id list ('tokens')")
    if len(tokens) != challenge.n_predict:
        raise ProbeError(f"{len(tokens)} tokens generated; the challenge asked for exactly {challenge.n_predict}")
    probs = doc.get("completion_probabilities")
    if not isinstance(probs, list) or len(probs) > len(tokens):
        raise ProbeError("the answer's completion_probabilities are missing or longer than its tokens")
    tops: list[dict[int, float]] = []
    j = 0
    # Entries are matched by id: the server leaves out tokens that end inside a UTF-8 sequence.
    for token in tokens:
        entry = probs[j] if j < len(probs) else None
        if not isinstance(entry, dict) or entry.get("id") != token:
            tops.append({})
            continue
        j += 1
        top = entry.get("top_logprobs")
        if not isinstance(top, list) or not 0 < len(top) <= challenge.n_probs:
            raise ProbeError(f"token {len(tops)}: top_logprobs missing or more than the {challenge.n_probs} asked for")
        candidates: dict[int, float] = {}
        for cand in top:
            cid, logprob = (cand.get("id"), cand.get("logprob")) if isinstance(cand, dict) else (None, None)
            if (not isinstance(cid, int) or isinstance(cid, bool) or not isinstance(logprob, float)
                    or not -1e4 <= logprob <= 0 or cid in candidates):
                raise ProbeError(f"token {len(tops)}: a top_logprobs entry is not a distinct id with a log-prob "
                                 "in [-1e4, 0]")
            candidates[cid] = logprob
        tops.append(candidates)
    if j != len(probs):
        raise ProbeError("completion_probabilities name tokens the completion does not contain")
    model = doc.get("model", "")
    if not isinstance(model, str):
        raise ProbeError("the answer's model is not a string")
    return Answer(tokens=tuple(tokens), top_logprobs=tuple(tops), model=model, seconds=seconds,
                  digest="sha256:" + hashlib.sha256(payload).hexdigest())


@dataclasses.dataclass(frozen=True)
class Tolerances:
    """What a node's answer may differ from the reference's by. Defaults fit a node of the same
    lane as the reference (the CPU lane serving the certified file): its answers are the reference's."""

    max_abs_delta_logprob: float = 0.05
    min_top1_agreement: float = 1.0
    min_greedy_prefix: float = 1.0  # fraction of the continuation identical from its start
    min_speed_fraction: float = 0.25  # of the certified generation speed, on the Tracker's clock


@dataclasses.dataclass(frozen=True)
class Figures:
    greedy_prefix: int  # leading tokens identical to the reference's
    compared: int  # positions compared (inside the identical prefix, where both gave log-probs)
    # Positions of that range where the reference listed candidates and the node listed none or fewer:
    # a node that leaves out what it is unsure of would make the comparison vacuous.
    withheld: int
    top1_agreement: float
    max_abs_delta_logprob: float
    tokens_per_s: float
    certified_tokens_per_s: float

    @property
    def speed_fraction(self) -> float:
        return self.tokens_per_s / self.certified_tokens_per_s if self.certified_tokens_per_s > 0 else math.nan


def figures(node: Answer, reference: Answer, certified_tokens_per_s: float) -> Figures:
    prefix = 0
    for a, b in zip(node.tokens, reference.tokens):
        if a != b:
            break
        prefix += 1
    compared, agree, worst, withheld = 0, 0, 0.0, 0
    # Positions up to and including the first divergence: there the two saw the same context.
    for i in range(min(prefix + 1, len(node.tokens), len(reference.tokens))):
        ours, theirs = node.top_logprobs[i], reference.top_logprobs[i]
        if theirs and len(ours) < len(theirs):
            withheld += 1
        if not ours or not theirs:
            continue
        compared += 1
        agree += max(ours, key=ours.get) == max(theirs, key=theirs.get)
        for cid, ref_logprob in theirs.items():
            if cid in ours:
                worst = max(worst, abs(ours[cid] - ref_logprob))
            else:  # the node ranks it below its last listed candidate: at least this far off
                worst = max(worst, ref_logprob - min(ours.values()))
    return Figures(greedy_prefix=prefix, compared=compared, withheld=withheld,
                   top1_agreement=agree / compared if compared else math.nan,
                   max_abs_delta_logprob=worst if compared else math.nan, tokens_per_s=node.tokens_per_s,
                   certified_tokens_per_s=certified_tokens_per_s)


PASS, FAILED, SPEED = "pass", "probe-failed", "probe-speed"


def judge(f: Figures, n_predict: int, tol: Tolerances, expected_model: str = "", model: str = "") -> tuple[str, list[str]]:
    """(verdict, reasons): FAILED when the answers differ beyond the tolerances (or the model name is
    not the one served), SPEED when they agree but the node is far below its certified speed."""
    reasons = []
    if expected_model and model != expected_model:
        reasons.append(f"the node answers as model {model!r}, not {expected_model!r}")
    if not f.greedy_prefix >= math.ceil(tol.min_greedy_prefix * n_predict):
        reasons.append(f"greedy continuation identical for {f.greedy_prefix} of {n_predict} tokens "
                       f"(need {math.ceil(tol.min_greedy_prefix * n_predict)})")
    if not f.compared:
        reasons.append("no position with log-probabilities from both to compare")
    if f.withheld:
        reasons.append(f"the node listed fewer log-probabilities than the reference at {f.withheld} position(s)")
    # `not (x >= bound)` also fails NaN.
    if not f.top1_agreement >= tol.min_top1_agreement:
        reasons.append(f"top-1 agreement {f.top1_agreement:.3f} < {tol.min_top1_agreement:g}")
    if not f.max_abs_delta_logprob <= tol.max_abs_delta_logprob:
        reasons.append(f"max |delta log-prob| {f.max_abs_delta_logprob:.4g} > {tol.max_abs_delta_logprob:g}")
    if reasons:
        return FAILED, reasons
    if not f.speed_fraction >= tol.min_speed_fraction:
        return SPEED, [f"{f.tokens_per_s:.1f} tok/s is {f.speed_fraction:.3f} of the certified "
                       f"{f.certified_tokens_per_s:.1f} tok/s (< {tol.min_speed_fraction:g})"]
    return PASS, []


@dataclasses.dataclass(frozen=True)
class Result:
    tolerances: Tolerances
    challenge: Challenge
    verdict: str
    reasons: tuple[str, ...]
    figures: Figures | None
    node_digest: str
    reference_digest: str
    seconds: float  # challenge drawn to verdict


def probe(node_url: str, reference_url: str, vocab_size: int, certified_tokens_per_s: float,
          tol: Tolerances = Tolerances(), deadline_s: float = 30.0, expected_model: str = "",
          challenge: Challenge | None = None) -> Result:
    """One probe of a node: a fresh challenge to the reference, then to the node (its deadline its
    own), the figures and the verdict. A node that cannot be judged fails with the reason; a
    reference that cannot answer is an error of the Tracker (ProbeError), never the node's verdict."""
    started = time.monotonic()
    challenge = challenge or draw_challenge(vocab_size)
    reference = query(reference_url, challenge, time.monotonic() + deadline_s)
    try:
        node = query(node_url, challenge, time.monotonic() + deadline_s)
    except ProbeError as err:
        return Result(tol, challenge, FAILED, (str(err),), None, "", reference.digest, time.monotonic() - started)
    f = figures(node, reference, certified_tokens_per_s)
    verdict, reasons = judge(f, challenge.n_predict, tol, expected_model, node.model)
    return Result(tol, challenge, verdict, tuple(reasons), f, node.digest, reference.digest, time.monotonic() - started)
