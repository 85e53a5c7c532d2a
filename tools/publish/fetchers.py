"""Fetching repository files for python-tuf's ngclient from file:// as well as http(s)://.

ngclient's default fetcher (urllib3) speaks only HTTP; a Tracker reading the evidence directory or a
mounted mirror needs file://. ngclient decides what a missing file means (404: no newer root), so a
missing file is reported exactly as an HTTP 404.
"""

from __future__ import annotations

import urllib.parse
import urllib.request
from collections.abc import Iterator

from tuf.api import exceptions
from tuf.ngclient import FetcherInterface, Urllib3Fetcher

_CHUNK = 1 << 16


class FileFetcher(FetcherInterface):
    """file:///abs/path URLs, read in chunks (ngclient enforces the length limits)."""

    def _fetch(self, url: str) -> Iterator[bytes]:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
            raise exceptions.DownloadError(f"{url}: FileFetcher reads only file:/// URLs")
        path = urllib.request.url2pathname(parsed.path)
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed by the generator below
        except FileNotFoundError as err:
            raise exceptions.DownloadHTTPError(f"{url}: not found", 404) from err
        except OSError as err:
            raise exceptions.DownloadError(f"{url}: {err.strerror}") from err
        return self._chunks(f)

    @staticmethod
    def _chunks(f) -> Iterator[bytes]:
        with f:
            while chunk := f.read(_CHUNK):
                yield chunk


class AnyFetcher(FetcherInterface):
    """file:// through FileFetcher, everything else through ngclient's own urllib3 fetcher."""

    def __init__(self) -> None:
        self._file = FileFetcher()
        self._http = Urllib3Fetcher(app_user_agent="lanes-tracker")

    def _fetch(self, url: str) -> Iterator[bytes]:
        if url.startswith("file:"):
            return self._file._fetch(url)  # noqa: SLF001 - same interface, chosen by scheme
        return self._http._fetch(url)  # noqa: SLF001
