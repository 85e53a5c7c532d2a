"""ctest's raw log -> results and totals: every status, and logs that must be refused."""

import sys

import pytest

from tools.ctest import ctest_log

# Verbatim shape of CTest 3.25 with --output-on-failure -j2 (from a run of fake tests).
LOG = """Test project /tmp/work
    Start 1: t-pass
    Start 2: t-fail
1/6 Test #1: t-pass ...........................   Passed    0.50 sec
    Start 3: t-skip
2/6 Test #2: t-fail ...........................***Failed    0.25 sec
boom: expected 3 tokens, got 4

    Start 4: t-missing
Could not find executable /nonexistent/bin/x
3/6 Test #4: t-missing ........................***Not Run   0.00 sec
    Start 5: t-segv
4/6 Test #3: t-skip ...........................***Skipped   0.01 sec
    Start 6: t-timeout
5/6 Test #5: t-segv ...........................***Exception: SegFault  0.10 sec

6/6 Test #6: a-very-long-test-name-without-dots ...***Timeout   1.00 sec

33% tests passed, 4 tests failed out of 6

Total Test time (real) =   1.01 sec

The following tests FAILED:
\t  2 - t-fail (Failed)
"""
NAMES = ["t-pass", "t-fail", "t-skip", "t-missing", "t-segv", "a-very-long-test-name-without-dots", "t-excl", "t-absent"]


def test_every_status_is_read_and_only_passed_is_a_pass():
    log = ctest_log.parse(LOG)
    status = {n: r.status for n, r in log.results.items()}
    assert status == {
        "t-pass": "PASSED", "t-fail": "FAILED", "t-skip": "SKIPPED", "t-missing": "NOT_RUN",
        "t-segv": "FAILED", "a-very-long-test-name-without-dots": "FAILED",
    }
    assert log.results["t-fail"].output == "boom: expected 3 tokens, got 4"
    assert log.results["t-segv"].status_text == "***Exception: SegFault"
    assert log.wall_seconds == 1.01


def test_recompute_counts_excluded_and_absent_tests_never_as_passed():
    totals = ctest_log.recompute(LOG, NAMES, {"t-excl": "network"})
    assert (totals.total, totals.passed, totals.failed, totals.skipped, totals.excluded, totals.not_run) == (8, 1, 3, 1, 1, 2)
    assert totals.test_seconds == pytest.approx(1.86)


def test_a_truncated_log_is_refused():
    with pytest.raises(ctest_log.CTestLogError, match="did not finish"):
        ctest_log.parse(LOG.split("33% tests")[0], "x/ctest.log")


def test_summary_and_result_lines_must_agree():
    with pytest.raises(ctest_log.CTestLogError, match="summary says 3 failed"):
        ctest_log.parse(LOG.replace("4 tests failed out of 6", "3 tests failed out of 6"))
    with pytest.raises(ctest_log.CTestLogError, match="summary says 7 tests"):
        ctest_log.parse(LOG.replace("out of 6", "out of 7"))


def test_a_log_of_another_bundle_or_with_excluded_tests_run_is_refused():
    with pytest.raises(ctest_log.CTestLogError, match="not in the manifest: t-segv"):
        ctest_log.recompute(LOG, [n for n in NAMES if n != "t-segv"], {})
    with pytest.raises(ctest_log.CTestLogError, match="excluded tests ran: t-pass"):
        ctest_log.recompute(LOG, NAMES, {"t-pass": "network"})


def test_no_tests_is_refused():
    with pytest.raises(ctest_log.CTestLogError, match="found no tests"):
        ctest_log.parse("Test project /x\nNo tests were found!!!\n")


def test_ctest_4_summary_without_a_failed_count_is_read():
    # CTest 4.4.3 (the H200 host's) leaves out ", 0 tests failed" when every test passed.
    log = ctest_log.parse("""Test project /tmp/w
      Start 1: t-pass
1/1 Test #1: t-pass ...........................   Passed    0.50 sec

100% tests passed out of 1

Total Test time (real) =   0.51 sec
""")
    assert log.results["t-pass"].status == ctest_log.PASSED


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
