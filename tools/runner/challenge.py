"""Per-run challenges: the prompts and seed of a run, drawn fresh from a fixed, digested prompt set.

With a fixed prompt and seed, a lane made of scripts that replay an earlier run's outputs passes
every check. So each run draws its parity prompt (PARITY_SENTENCES sentences in a random order) and
one prompt per concurrent request from challenge_prompts.txt with the OS's CSPRNG, and a fresh seed; the
draw is written to logs/challenge.json (digested into the report), so an auditor sees what was
asked and that it came from the set (by the set's sha256 and the line numbers).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import secrets

PROMPT_SET = pathlib.Path(__file__).resolve().parent / "challenge_prompts.txt"
FILE_NAME = "challenge.json"
PARITY_SENTENCES = 2
N_SERVER_PROMPTS = 4


class ChallengeError(ValueError):
    """The prompt set or a recorded challenge cannot be used; the message names the file."""


@dataclasses.dataclass(frozen=True)
class Challenge:
    prompt_set_sha256: str
    parity_lines: tuple[int, ...]  # 1-based line numbers in the prompt set
    parity_prompt: str
    server_lines: tuple[int, ...]
    server_prompts: tuple[str, ...]
    seed: int
    fixed: bool  # given on the command line (bring-up only): not a fresh draw

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True) + "\n"


def prompt_lines(path: pathlib.Path = PROMPT_SET) -> tuple[list[str], str]:
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ChallengeError(f"{path}: cannot read the prompt set ({err.strerror})") from err
    lines = data.decode("utf-8").splitlines()
    if len(set(lines)) != len(lines) or any(not line.strip() for line in lines):
        raise ChallengeError(f"{path}: every prompt must be a distinct, non-empty line")
    if len(lines) < PARITY_SENTENCES + N_SERVER_PROMPTS:
        raise ChallengeError(f"{path}: {len(lines)} prompts; need at least {PARITY_SENTENCES + N_SERVER_PROMPTS}")
    return lines, hashlib.sha256(data).hexdigest()


def draw(fixed_prompt: str = "", fixed_seed: int = -1, path: pathlib.Path = PROMPT_SET) -> Challenge:
    """A fresh challenge; a fixed prompt or seed (bring-up) replaces the drawn one and marks it fixed."""
    lines, digest = prompt_lines(path)
    rng = secrets.SystemRandom()
    picks = rng.sample(range(len(lines)), PARITY_SENTENCES + N_SERVER_PROMPTS)
    parity, server = picks[:PARITY_SENTENCES], picks[PARITY_SENTENCES:]
    prompt = " ".join(lines[i] for i in parity)
    seed = secrets.randbelow(2**31 - 1) + 1
    return Challenge(prompt_set_sha256=digest, parity_lines=tuple(i + 1 for i in parity),
                     parity_prompt=fixed_prompt or prompt, server_lines=tuple(i + 1 for i in server),
                     server_prompts=tuple(lines[i] for i in server), seed=seed if fixed_seed < 0 else fixed_seed,
                     fixed=bool(fixed_prompt) or fixed_seed >= 0)


def write(challenge: Challenge, logs_dir: pathlib.Path) -> pathlib.Path:
    path = logs_dir / FILE_NAME
    path.write_text(challenge.to_json())
    return path


def read(logs_dir: pathlib.Path) -> Challenge:
    path = pathlib.Path(logs_dir) / FILE_NAME
    try:
        raw = json.loads(path.read_text())
        return Challenge(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()})
    except (OSError, ValueError, TypeError) as err:
        raise ChallengeError(f"{path}: not a challenge record ({err})") from err


def problems(challenge: Challenge, path: pathlib.Path = PROMPT_SET) -> list[str]:
    """Why a recorded challenge is not a fresh draw from the prompt set (empty: it is)."""
    if challenge.fixed:
        return ["the prompt or seed was fixed on the command line, not drawn for this run"]
    lines, digest = prompt_lines(path)
    out = []
    if challenge.prompt_set_sha256 != digest:
        out.append(f"prompt set sha256 {challenge.prompt_set_sha256[:12]} is not {path.name}'s {digest[:12]}")
        return out
    picked = list(challenge.parity_lines) + list(challenge.server_lines)
    if len(set(picked)) != len(picked) or not all(1 <= n <= len(lines) for n in picked):
        out.append("the challenge's line numbers are not distinct lines of the prompt set")
        return out
    if challenge.parity_prompt != " ".join(lines[n - 1] for n in challenge.parity_lines):
        out.append("the parity prompt is not the set's lines it names")
    if tuple(challenge.server_prompts) != tuple(lines[n - 1] for n in challenge.server_lines):
        out.append("the server prompts are not the set's lines they name")
    return out
