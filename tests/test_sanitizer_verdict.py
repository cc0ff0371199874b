"""Verdicts fail closed: every planted log FAILs, clean logs PASS, and a truncated log, a crash, a timeout, a
contradicting exit code or a missing completion line are ERRORs, never a pass. The log decides, not the exit code."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_sanitizer_parser import FIXTURES, load

from harness.results import Status
from harness.sanitizer.parser import parse
from harness.sanitizer.suppressions import Suppression, apply
from harness.sanitizer.verdict import Judgement, RunFacts, judge

EXIT = 86  # --error-exitcode used for the fixtures (tests/fixtures/sanitizer/README.md)
# name -> (tool, compute-sanitizer's exit code when captured, expected verdict)
FIXTURE_VERDICTS = {
    "memcheck-clean": ("memcheck", 0, Status.PASS),
    "memcheck-oob": ("memcheck", EXIT, Status.FAIL),
    "memcheck-leak": ("memcheck", EXIT, Status.FAIL),
    "memcheck-oob-nopadding": ("memcheck", 0, Status.PASS),  # the bug is missed: why padding is required
    "racecheck-clean": ("racecheck", 0, Status.PASS),
    "racecheck-race": ("racecheck", EXIT, Status.FAIL),
    "racecheck-race-exit0": ("racecheck", 0, Status.FAIL),
    "synccheck-clean": ("synccheck", 0, Status.PASS),
    "synccheck-divergent": ("synccheck", EXIT, Status.FAIL),
    "synccheck-mbar": ("synccheck", EXIT, Status.FAIL),
    "synccheck-barcount": ("synccheck", 3, Status.ERROR),
    "initcheck-clean": ("initcheck", 0, Status.PASS),
    "initcheck-uninit": ("initcheck", EXIT, Status.FAIL),
    "kernel-memcheck": ("memcheck", 0, Status.PASS),
    "kernel-racecheck": ("racecheck", 0, Status.PASS),
    "kernel-synccheck": ("synccheck", 0, Status.PASS),
    "kernel-initcheck": ("initcheck", 0, Status.PASS),
    "kernel-racecheck-old-race": ("racecheck", EXIT, Status.FAIL),
}


def load_text(name: str) -> str:
    return (FIXTURES / f"{name}.log").read_text()


def verdict(name: str, exit_code: int | None = None, **kw: object) -> Judgement:
    tool = FIXTURE_VERDICTS[name][0] if name in FIXTURE_VERDICTS else None
    return judge(load(name, tool), RunFacts(exit_code=exit_code, error_exitcode=EXIT, **kw))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", FIXTURE_VERDICTS)
def test_every_fixture_gets_its_verdict_with_and_without_its_exit_code(name: str) -> None:
    _, rc, expected = FIXTURE_VERDICTS[name]
    assert verdict(name, rc).status is expected, verdict(name, rc).reason
    assert verdict(name).status is expected  # offline (`parse sanitizer`): the log alone


def test_race_with_exit_code_0_still_fails() -> None:
    j = verdict("racecheck-race-exit0", 0)
    assert j.status is Status.FAIL and j.failing == 1
    assert "shared-memory race in smem_race at planted.cu:28" in j.reason and "exit code 0" in j.reason


def test_failing_counts_the_reports_not_printed() -> None:
    j = verdict("synccheck-mbar", EXIT)
    assert j.failing == 256 and "156 more counted but not printed" in j.reason


def test_truncated_log_is_an_error_even_with_findings() -> None:
    for rc in (None, EXIT, 0):
        j = verdict("memcheck-oob-truncated", rc)
        assert j.status is Status.ERROR and "no ERROR SUMMARY line" in j.reason


def test_crash_with_zero_errors_is_an_error() -> None:
    j = verdict("synccheck-barcount", 3)
    assert j.status is Status.ERROR and "exited with an error" in j.reason


@pytest.mark.parametrize("cut", [0, 30, 60])
def test_clean_log_cut_before_its_summary_is_an_error(cut: int) -> None:
    text = load_text("kernel-racecheck")[:cut]
    assert judge(parse(text, "racecheck"), RunFacts(exit_code=0)).status is Status.ERROR


def test_timeout_is_an_error_whatever_the_log() -> None:
    j = judge(load("kernel-memcheck"), RunFacts(exit_code=None, timed_out=True, timeout_s=300))
    assert j.status is Status.ERROR and "300 s timeout" in j.reason


def test_clean_log_with_an_unexpected_exit_code_is_an_error() -> None:
    for rc in (EXIT, 1, -9):
        assert verdict("kernel-memcheck", rc).status is Status.ERROR


def test_missing_completion_line_is_an_error() -> None:
    """A sanitizer can print a clean summary without running the program: require the program's last line."""
    text = load_text("kernel-memcheck").replace("RESULT status=ok", "RESULT status=error")
    facts = RunFacts(exit_code=0, completed="RESULT status=ok" in text, completion="RESULT status=ok")
    j = judge(parse(text, "memcheck"), facts)
    assert j.status is Status.ERROR and "completion line" in j.reason
    assert judge(load("kernel-memcheck"), replace(facts, completed=True)).status is Status.PASS


def test_no_banner_unknown_tool_tool_error_and_unknown_line_are_errors() -> None:
    assert judge(parse("", "memcheck")).reason.startswith("not a compute-sanitizer log")
    assert "--tool" in judge(load("synccheck-clean")).reason
    assert judge(load("racecheck-race", "memcheck")).status is Status.ERROR
    head = "========= COMPUTE-SANITIZER\n"
    j = judge(parse(head + "========= Error: No attachable process found.\n========= ERROR SUMMARY: 0 errors\n",
                    "memcheck"))
    assert j.status is Status.ERROR and "compute-sanitizer itself failed" in j.reason
    j = judge(parse(head + "========= A report this parser has never seen\n========= ERROR SUMMARY: 0 errors\n",
                    "memcheck"))
    assert j.status is Status.ERROR and "unrecognised sanitizer line" in j.reason


def test_reports_printed_but_not_counted_fail() -> None:
    text = load_text("racecheck-race").replace("1 hazard displayed (1 error, 0 warnings)",
                                               "0 hazards displayed (0 errors, 0 warnings)")
    j = judge(parse(text, "racecheck"))
    assert j.status is Status.FAIL and "summary counts 0" in j.reason


RACE_OK = Suppression(tool="racecheck", kind="shared-memory race", justification="reviewed: test entry",
                      file=r"^planted\.cu:28$")


def test_a_suppressed_race_passes_and_stays_visible() -> None:
    log = apply(load("racecheck-race"), (RACE_OK,))
    assert log.findings[0].suppressed and log.findings[0].suppression == "reviewed: test entry"
    j = judge(log, RunFacts(exit_code=EXIT, error_exitcode=EXIT))
    assert j.status is Status.PASS and "all 1 suppressed" in j.reason
    other = replace(RACE_OK, file=r"^loader\.h:")
    assert judge(apply(load("racecheck-race"), (other,))).status is Status.FAIL


def test_suppression_cannot_cover_unprinted_reports_or_a_failed_program() -> None:
    sync = Suppression(tool="synccheck", kind="divergent barrier", justification="test")
    assert judge(apply(load("synccheck-divergent"), (sync,))).status is Status.FAIL  # 28 not printed
    oob_all = tuple(Suppression(tool="memcheck", kind=k, justification="test")
                    for k in ("invalid global write", "cuda api error", "leak"))
    j = judge(apply(load("memcheck-oob"), oob_all), RunFacts(exit_code=EXIT, error_exitcode=EXIT))
    assert j.status is Status.ERROR and "suppressed reports cannot make a failed run pass" in j.reason


def test_warnings_fail_unless_configured_not_to() -> None:
    text = load_text("racecheck-race").replace("Error: Race", "Warning: Race").replace(
        "(1 error, 0 warnings)", "(0 errors, 1 warning)")
    log = parse(text, "racecheck")
    assert log.findings[0].severity == "warning"
    assert judge(log).status is Status.FAIL
    j = judge(log, RunFacts(exit_code=0, error_exitcode=EXIT), fail_on_warnings=False)
    assert j.status is Status.PASS and "1 warning not failing" in j.reason
