"""Fetching repository files for python-tuf's ngclient from file:// and http(s)://, bounded in time.

ngclient enforces the length of every file it downloads (the signed length, or its size cap); what
it cannot enforce is time. Here every fetch has:
- file://: the bounded reader (tools/policy/safe_io.open_regular_file): a regular file only, opened
  without blocking, so a FIFO or a link to /dev/zero on a mirror is refused before a byte is read;
  a missing file is reported exactly as an HTTP 404 (ngclient decides what that means: no newer root).
- http(s)://: ngclient's own urllib3 fetcher, read with read1() (each read returns what arrived)
  on a worker thread, while the calling thread holds a deadline per file, a minimum average rate
  after a short grace period, and a deadline for every fetch of one refresh together. A server
  that drips one byte every few seconds, in its headers or its body, is refused as slow retrieval.
- metadata (download_bytes, which ngclient uses for metadata only): strict JSON, so a duplicate key
  (python-tuf keeps the last value) is refused before python-tuf parses it.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator

import urllib3
from tuf.api import exceptions
from tuf.ngclient import FetcherInterface, Urllib3Fetcher

from tools.policy import dsse, safe_io
from tools.policy.errors import TrustError

_CHUNK = 1 << 16
_POLL_S = 0.25


class MalformedMetadataJsonError(exceptions.RepositoryError):
    """Metadata bytes that are not strict JSON (a duplicate key, bad UTF-8, deep nesting)."""


@dataclasses.dataclass(frozen=True)
class FetchLimits:
    """Time bounds of a refresh's downloads (sizes are ngclient's: signed lengths and caps)."""

    socket_timeout_s: float = 10.0  # connect, and the longest silence the worker waits through
    grace_s: float = 5.0  # before the rate is judged (connection set-up, a slow first byte)
    min_rate_bytes_per_s: float = 1024.0  # average since the fetch began, judged after grace_s
    file_deadline_s: float = 120.0  # one file, complete
    refresh_deadline_s: float = 600.0  # every fetch of one refresh (one fetcher) together


class _Clock:
    """The deadlines of one fetch: its own and what is left of the refresh's."""

    def __init__(self, limits: FetchLimits, refresh_end: float, url: str):
        self.limits, self.url = limits, url
        self.start = time.monotonic()
        self.end = min(self.start + limits.file_deadline_s, refresh_end)
        self.received = 0

    def check(self) -> None:
        now = time.monotonic()
        elapsed = now - self.start
        if now >= self.end:
            raise exceptions.SlowRetrievalError(
                f"{self.url}: {self.received} bytes in {elapsed:.1f} s, not complete within the deadline "
                f"({self.limits.file_deadline_s:g} s a file, {self.limits.refresh_deadline_s:g} s a refresh)")
        if elapsed > self.limits.grace_s and self.received < self.limits.min_rate_bytes_per_s * elapsed:
            raise exceptions.SlowRetrievalError(
                f"{self.url}: {self.received} bytes in {elapsed:.1f} s, below the minimum rate of "
                f"{self.limits.min_rate_bytes_per_s:g} bytes/s")


class _Urllib3ReadFetcher(Urllib3Fetcher):
    """ngclient's urllib3 fetcher (request, proxies, HTTP errors), its body read with read1() so
    that each read returns as soon as bytes arrive, and its response handed to the caller's
    thread so that an abandoned download can be shut down."""

    def __init__(self, limits: FetchLimits):
        super().__init__(socket_timeout=limits.socket_timeout_s, chunk_size=_CHUNK, app_user_agent="lanes-tracker")
        self._local = threading.local()

    def _chunks(self, response: urllib3.response.BaseHTTPResponse) -> Iterator[bytes]:
        holder = getattr(self._local, "holder", None)
        if holder is not None:
            holder.append(response)
        try:
            while data := response.read1(self.chunk_size):
                yield data
        except urllib3.exceptions.TimeoutError as err:
            raise exceptions.SlowRetrievalError(f"no data for {self.socket_timeout} s") from err
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise exceptions.DownloadError(f"download failed ({type(err).__name__}: {err})") from err
        finally:
            response.release_conn()


def _pump(fetcher: _Urllib3ReadFetcher, url: str, out: queue.Queue, cancel: threading.Event, holder: list) -> None:
    """Worker thread: the download's chunks into `out`, then ("end", None) or ("error", exception)."""

    def put(item) -> bool:
        while not cancel.is_set():
            try:
                out.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    fetcher._local.holder = holder  # noqa: SLF001 - this thread's response goes to the caller
    try:
        for chunk in fetcher.fetch(url):
            if not put(("data", chunk)):
                return
        put(("end", None))
    except BaseException as err:  # noqa: BLE001 - handed to the calling thread, which raises it
        put(("error", err))


class BoundedFetcher(FetcherInterface):
    """file:// through the bounded reader, http(s):// through urllib3 under FetchLimits. One
    fetcher serves one refresh: its refresh deadline runs from its first fetch."""

    def __init__(self, limits: FetchLimits | None = None):
        self.limits = limits or FetchLimits()
        self._http = _Urllib3ReadFetcher(self.limits)
        self._refresh_end: float | None = None

    def _clock(self, url: str) -> _Clock:
        if self._refresh_end is None:
            self._refresh_end = time.monotonic() + self.limits.refresh_deadline_s
        return _Clock(self.limits, self._refresh_end, url)

    def _fetch(self, url: str) -> Iterator[bytes]:
        clock = self._clock(url)
        clock.check()
        if url.startswith("file:"):
            return self._file(url, clock)
        if url.startswith(("http://", "https://")):
            return self._remote(url, clock)
        raise exceptions.DownloadError(f"{url}: only file://, http:// and https:// repositories are read")

    @staticmethod
    def _file(url: str, clock: _Clock) -> Iterator[bytes]:
        parsed = urllib.parse.urlparse(url)
        if parsed.netloc not in ("", "localhost"):
            raise exceptions.DownloadError(f"{url}: file:// URLs name a local path (file:///...)")
        path = urllib.request.url2pathname(parsed.path)
        try:
            os.stat(path)
        except FileNotFoundError as err:
            raise exceptions.DownloadHTTPError(f"{url}: not found", 404) from err
        except OSError as err:
            raise exceptions.DownloadError(f"{url}: {err.strerror or err}") from err
        try:
            chunks = safe_io.iter_regular_file(path, limit=None, chunk=_CHUNK)
        except TrustError as err:
            raise exceptions.DownloadError(f"{url}: {err}") from err
        return BoundedFetcher._timed(chunks, clock, url)

    @staticmethod
    def _timed(chunks: Iterator[bytes], clock: _Clock, url: str) -> Iterator[bytes]:
        try:
            for chunk in chunks:
                clock.received += len(chunk)
                clock.check()
                yield chunk
        except TrustError as err:
            raise exceptions.DownloadError(f"{url}: {err}") from err

    def _remote(self, url: str, clock: _Clock) -> Iterator[bytes]:
        out: queue.Queue = queue.Queue(maxsize=8)
        cancel = threading.Event()
        holder: list = []
        threading.Thread(target=_pump, args=(self._http, url, out, cancel, holder), daemon=True,
                         name="lanes-tracker-fetch").start()
        return self._drain(out, cancel, holder, clock)

    @staticmethod
    def _drain(out: queue.Queue, cancel: threading.Event, holder: list, clock: _Clock) -> Iterator[bytes]:
        try:
            while True:
                clock.check()
                try:
                    kind, value = out.get(timeout=_POLL_S)
                except queue.Empty:
                    continue
                if kind == "end":
                    return
                if kind == "error":
                    raise value
                clock.received += len(value)
                clock.check()
                yield value
        finally:
            cancel.set()
            for response in holder:  # unblocks the worker's read; it then sees `cancel` and stops
                try:
                    response.shutdown()
                except (ValueError, RuntimeError, OSError):
                    pass
                try:
                    response.close()
                except (ValueError, RuntimeError, OSError):
                    pass

    def download_bytes(self, url: str, max_length: int) -> bytes:
        """ngclient downloads metadata with this: the bytes must also be strict JSON."""
        data = super().download_bytes(url, max_length)
        try:
            dsse.loads_strict(data)
        except TrustError as err:
            raise MalformedMetadataJsonError(f"{url}: {err}") from err
        return data
