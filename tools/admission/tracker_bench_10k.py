"""Benchmark (not a test): a record repository with 10,000 records; a Tracker refreshes over a
loopback HTTP server and decides a route. Prints wall times and the Tracker's peak RSS.

  bazel run //tools/admission:tracker_bench_10k -- [--records=10000] [--work_dir=/tmp/bench]

The Tracker runs in a fresh (spawned) process so its peak RSS is its own, not the publisher's.
Cold = first refresh (downloads every target); warm = the next refresh after one more record was
published (metadata and log re-verified, targets re-hashed from the local cache).
"""

from __future__ import annotations

import functools
import http.server
import multiprocessing
import pathlib
import resource
import shutil
import tempfile
import threading
import time

from absl import app, flags

from tools.admission import tracker_admission
from tools.admission.testing import routes
from tools.certify import records, sample_reports
from tools.policy import dsse, timestamps
from tools.publish import tracker
from tools.publish.testing import repo as testing_repo

FLAGS = flags.FLAGS
flags.DEFINE_integer("records", 10_000, "How many records the repository holds.")
flags.DEFINE_string("work_dir", "", "Where the repository and Tracker state go (default: a temp dir, removed).")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _record(fx, lane_id: str, now) -> tuple[str, bytes, object]:
    report = sample_reports.make_report(lane_id)
    rec = records.record_from_report(report, report.SerializeToString(), dsse.keyid_for(fx.issuer), now, 30, "bench")
    return f"{lane_id}.record.dsse.json", dsse.envelope_to_json(records.sign_record(rec, fx.issuer)).encode(), report


def _make_records(fx, n: int) -> tuple[list[tuple[str, bytes]], object]:
    now = timestamps.now()
    made = [_record(fx, f"lane-{i:05d}", now) for i in range(n)]
    return [(name, data) for name, data, _ in made], made[n // 2][2]


def _tracker_run(state_dir: str, url: str, root1: bytes, report_bytes: bytes, queue) -> None:
    """In a spawned process: refresh + decide, twice (cold, then warm after the parent publishes)."""
    from proto import runner_report_pb2
    report = runner_report_pb2.RunnerReport.FromString(report_bytes)
    t = tracker.Tracker(state_dir, url, bootstrap_root=root1)
    policy, route = testing_repo.policy(), routes.route_for(report)
    for phase in ("cold", "warm"):
        if phase == "warm":
            queue.get()  # wait for the parent's extra publish
        t0 = time.perf_counter()
        view = t.refresh()
        t1 = time.perf_counter()
        decision = tracker_admission.decide_from_view(view, policy, route)
        t2 = time.perf_counter()
        queue.put({"phase": phase, "refresh_s": t1 - t0, "decide_s": t2 - t1, "routable": decision.routable,
                   "reasons": list(decision.reasons)[:2], "records": len(view.records),
                   "log_size": view.checkpoint.tree_size, "targets_version": view.versions["targets"],
                   "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
        if phase == "cold":
            queue.put("ready")


def main(argv: list[str]) -> None:
    del argv
    work = pathlib.Path(FLAGS.work_dir) if FLAGS.work_dir else pathlib.Path(tempfile.mkdtemp(prefix="lanes-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        fx = testing_repo.make_repo(work)
        t0 = time.perf_counter()
        files, probe = _make_records(fx, FLAGS.records)
        t1 = time.perf_counter()
        version = fx.repo.publish(fx.signers, files)
        t2 = time.perf_counter()
        print(f"signed {len(files)} records in {t1 - t0:.2f}s; published them as targets v{version} in {t2 - t1:.2f}s")
        size = sum(p.stat().st_size for p in (fx.repo.dir).rglob("*") if p.is_file())
        print(f"repository: {size / 2**20:.1f} MiB; targets metadata "
              f"{(fx.repo.metadata_dir / f'{version}.targets.json').stat().st_size / 2**20:.2f} MiB")
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(fx.repo.dir)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}"
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        root1 = (fx.repo.metadata_dir / "1.root.json").read_bytes()
        proc = ctx.Process(target=_tracker_run, args=(str(work / "tracker"), url, root1, probe.SerializeToString(), queue))
        proc.start()
        cold = queue.get()
        assert queue.get() == "ready"
        name, data, _ = _record(fx, "lane-extra", timestamps.now())
        fx.repo.publish(fx.signers, [(name, data)])
        queue.put("go")
        warm = queue.get()
        proc.join()
        server.shutdown()
        for r in (cold, warm):
            print(f"{r['phase']:4}: refresh {r['refresh_s']:.2f}s + decide {r['decide_s']:.2f}s over {r['records']} records "
                  f"(log size {r['log_size']}, targets v{r['targets_version']}): routable={r['routable']} {r['reasons']}; "
                  f"Tracker peak RSS {r['peak_rss_mib']:.0f} MiB")
    finally:
        if not FLAGS.work_dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    app.run(main)
