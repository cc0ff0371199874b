"""Crafted compute-sanitizer logs that once passed the gate's parser and verdict (tests/fixtures/sanitizer/README.md,
the `crafted-*` rows): a leak counted but not reported, lines that only start like a summary or like the program's
completion line, continuation lines with no report above them. Each gets its verdict; a clean control beside it
passes."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_sanitizer_parser import FIXTURES

from harness.results import Status
from harness.sanitizer.parser import parse
from harness.sanitizer.suppressions import Suppression, apply
from harness.sanitizer.verdict import RunFacts, completed, judge

COMPLETION = "RESULT status=ok"
DRIVER_LINE = "RESULT status=ok max_abs_err=0.00231421 nonfinite=0 ms_per_iter=3.459776 tflops=0.00 splits=1 ctas=4"


def text(name: str) -> str:
    return (FIXTURES / f"{name}.log").read_text()


def test_clean_control_passes() -> None:
    assert judge(parse(text("memcheck-clean"), "memcheck")).status is Status.PASS


def test_leak_summary_above_zero_without_a_report_fails() -> None:
    log = parse(text("crafted-leak-unreported"), "memcheck")
    assert (log.errors, log.leak_bytes, log.leak_allocations, log.findings) == (0, 1024, 1, ())
    j = judge(log)
    assert j.status is Status.FAIL and j.failing == 1
    assert "LEAK SUMMARY: 1024 bytes leaked in 1 allocations" in j.reason and "not suppressible" in j.reason


def test_leak_summary_beyond_its_printed_reports_fails_even_when_they_are_suppressed() -> None:
    leak = Suppression(tool="memcheck", kind="leak", justification="test", file="x")
    log = parse(text("memcheck-leak"), "memcheck")
    whole = [replace(f, suppressed=True, suppression="reviewed") for f in log.findings]
    assert judge(replace(log, findings=tuple(whole))).status is Status.PASS  # every byte reported and reviewed
    more = replace(log, findings=tuple(whole), leak_bytes=4096, leak_allocations=2)
    j = judge(more)
    assert j.status is Status.FAIL and "3072 bytes in 1 of them without a printed leak report" in j.reason
    assert apply(log, (leak,)).findings[0].suppressed is False  # a file pattern that matches nothing


def test_reported_leak_fails() -> None:
    j = judge(parse(text("memcheck-leak"), "memcheck"))
    assert j.status is Status.FAIL and "leak" in j.reason


@pytest.mark.parametrize(("name", "tool"), [("crafted-summary-prefix", "memcheck"),
                                            ("crafted-race-summary-prefix", "racecheck")])
def test_a_line_that_only_starts_like_a_summary_is_no_summary(name: str, tool: str) -> None:
    log = parse(text(name), tool)
    assert log.errors is None and log.unknown
    j = judge(log)
    assert j.status is Status.ERROR and "unrecognised sanitizer line" in j.reason


def test_orphan_continuation_lines_are_an_error_never_dropped() -> None:
    log = parse(text("crafted-orphan"), "memcheck")
    assert log.orphans == ("at oob_write(float *)+0x70 in planted.cu:22", "by thread (0,0,0) in block (0,0,0)")
    assert log.to_dict()["orphans"] == list(log.orphans)
    j = judge(log)
    assert j.status is Status.ERROR and "with no report above it" in j.reason


def test_a_line_that_only_starts_like_the_completion_line_is_not_completion() -> None:
    log_text = text("crafted-completion-prefix")
    assert COMPLETION in log_text  # the old substring test would have said it completed
    assert not completed(log_text, COMPLETION)
    j = judge(parse(log_text, "memcheck"), RunFacts(exit_code=0, completed=completed(log_text, COMPLETION),
                                                    completion=COMPLETION))
    assert j.status is Status.ERROR and "completion line" in j.reason


@pytest.mark.parametrize(("line", "whole"), [
    (DRIVER_LINE, True),
    (COMPLETION, True),
    (COMPLETION + "\r", True),
    ("planted clean: done", False),
    ("RESULT status=okay", False),
    ("RESULT status=ok, then it crashed", False),
    ("RESULT status=o", False),
    ("  echo RESULT status=ok", False),
    ("========= RESULT status=ok", False),  # the tool's line, not the program's
])
def test_completion_matches_a_whole_line(line: str, whole: bool) -> None:
    assert completed(f"========= COMPUTE-SANITIZER\n{line}\n========= ERROR SUMMARY: 0 errors\n", COMPLETION) is whole


def test_real_driver_logs_hold_a_whole_completion_line() -> None:
    for name in ("kernel-memcheck", "kernel-racecheck", "kernel-synccheck", "kernel-initcheck"):
        assert completed(text(name), COMPLETION), name
    assert completed(text("memcheck-clean"), "planted clean: done")
