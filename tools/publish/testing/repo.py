"""Test fixtures (testonly): a record repository with throwaway keys, records issued now, a Tracker.

A route to decide with is admission's: tools/admission/testing/routes.py."""

from __future__ import annotations

import dataclasses
import datetime as dt
import pathlib

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tools.certify import records, sample_reports
from tools.policy import dsse, timestamps
from tools.publish import repository, tracker

GPU_DEVICE = dict(backend="cuda", vendor="NVIDIA", device_name="NVIDIA H200", compute_capability="9.0",
                  driver_major="580")


@dataclasses.dataclass
class Fixture:
    dir: pathlib.Path
    repo: repository.RecordRepository
    root_keys: list
    issuer: Ed25519PrivateKey
    snapshot: Ed25519PrivateKey
    timestamp: Ed25519PrivateKey

    @property
    def signers(self) -> repository.Signers:
        return repository.Signers(root=self.root_keys[:2], targets=[self.issuer], snapshot=[self.snapshot],
                                  timestamp=[self.timestamp])

    @property
    def url(self) -> str:
        return self.repo.dir.resolve().as_uri()

    def tracker(self, name: str = "tracker", url: str | None = None) -> tracker.Tracker:
        root1 = (self.repo.metadata_dir / "1.root.json").read_bytes()
        return tracker.Tracker(self.dir / name, url or self.url, bootstrap_root=root1)


def make_repo(tmp: pathlib.Path, now: dt.datetime | None = None) -> Fixture:
    keys = [Ed25519PrivateKey.generate() for _ in range(6)]
    repo = repository.RecordRepository(tmp / "repo")
    repo.init(keys[:3], 2, [keys[3]], keys[4], keys[5], now)
    return Fixture(tmp, repo, keys[:3], keys[3], keys[4], keys[5])


def record_file(key: Ed25519PrivateKey, lane_id: str = "linux-x86_64-cpu", issued_at: dt.datetime | None = None,
                days: int = 30, **device) -> tuple[str, bytes, object]:
    """(file name, envelope bytes, report) of a record issued `issued_at` (default now)."""
    report = sample_reports.make_report(lane_id, **device)
    rec = records.record_from_report(report, report.SerializeToString(), dsse.keyid_for(key),
                                      issued_at or timestamps.now(), days, "test-policy")
    data = dsse.envelope_to_json(records.sign_record(rec, key)).encode()
    return records.record_file_name(rec), data, report


def policy():
    return sample_reports.make_policy()
