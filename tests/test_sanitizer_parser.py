"""The sanitizer log parser on real H100 logs (tests/fixtures/sanitizer/README.md): each planted bug gives its
tool, summary numbers and findings (kind, kernel, file:line, thread/block, size, repeats); clean logs give none."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.sanitizer.model import SanitizerLog
from harness.sanitizer.parser import parse, where

FIXTURES = Path(__file__).parent / "fixtures" / "sanitizer"


def load(name: str, tool: str | None = None) -> SanitizerLog:
    return parse((FIXTURES / f"{name}.log").read_text(), tool)


@pytest.mark.parametrize(("name", "tool"), [
    ("memcheck-leak", "memcheck"), ("memcheck-oob", "memcheck"), ("memcheck-clean", "memcheck"),
    ("racecheck-race", "racecheck"), ("racecheck-clean", "racecheck"), ("kernel-racecheck", "racecheck"),
    ("synccheck-divergent", "synccheck"), ("synccheck-mbar", "synccheck"), ("initcheck-uninit", "initcheck"),
])
def test_tool_is_inferred_from_the_log(name: str, tool: str) -> None:
    log = load(name)
    assert (log.tool, log.tool_note) == (tool, "")


@pytest.mark.parametrize("name", ["synccheck-clean", "initcheck-clean", "memcheck-oob-nopadding", "synccheck-barcount"])
def test_a_log_that_does_not_name_its_tool_needs_tool(name: str) -> None:
    log = load(name)
    assert log.tool is None and "--tool" in log.tool_note
    assert load(name, name.split("-")[0]).tool == name.split("-")[0]


def test_a_log_contradicting_tool_is_refused() -> None:
    log = load("racecheck-race", "memcheck")
    assert log.tool is None and log.tool_note == "the log was written by racecheck, not memcheck"
    with pytest.raises(ValueError, match="unknown sanitizer tool"):
        parse("", "nocheck")


def test_memcheck_oob_write() -> None:
    log = load("memcheck-oob")
    assert (log.errors, log.warnings, log.leak_bytes, log.leak_allocations, log.app_failed) == (4, 0, 2048, 2, True)
    oob, api, leak = log.findings
    assert (oob.kind, oob.kernel, oob.location, oob.thread, oob.block, oob.size, oob.count) == (
        "invalid global write", "oob_write(float *, int, int)", "planted.cu:23", "(255,0,0)", "(0,0,0)", 4, 1)
    assert "1 bytes after the nearest allocation" in oob.detail
    assert (api.kind, api.detail) == ("cuda api error", "cudaDeviceSynchronize: cudaErrorLaunchFailure "
                                      "(unspecified launch failure)")
    assert (leak.kind, leak.size, leak.count) == ("leak", 1024, 2)  # the two buffers the crash left behind
    assert log.printed == log.errors


def test_memcheck_leak() -> None:
    log = load("memcheck-leak")
    assert (log.errors, log.leak_bytes, log.app_failed) == (1, 1024, False)
    assert [(f.kind, f.size, f.count) for f in log.findings] == [("leak", 1024, 1)]
    # where it was allocated: the first host frame past cudaMalloc and its template wrapper
    assert log.findings[0].location == "main in planted"


def test_memcheck_without_padding_misses_the_overrun() -> None:
    """The same one-past-the-end write as memcheck-oob, run without --padding: it lands inside the next
    cudaMalloc allocation (allocations are packed), so memcheck sees a valid address and reports nothing.
    This is why the gate always passes `--padding` (phases.yaml `padding`, which must be > 0)."""
    log = load("memcheck-oob-nopadding", "memcheck")
    assert (log.errors, log.findings, log.app_failed) == (0, (), False)


def test_racecheck_planted_race() -> None:
    for name in ("racecheck-race", "racecheck-race-exit0"):
        log = load(name)
        assert (log.errors, log.warnings) == (1, 0)
        (race,) = log.findings
        assert (race.kind, race.severity, race.kernel, race.location, race.hazard, race.hazards, race.detail) == (
            "shared-memory race", "error", "smem_race(float *, int)", "planted.cu:28", "write vs read", 1024,
            "Read at planted.cu:30")


def test_racecheck_real_kernel_race_merges_reports_by_source_line() -> None:
    """16 reports (one per cp.async write PC) collapse into two findings by file:line of both sides."""
    log = load("kernel-racecheck-old-race")
    assert (log.errors, log.warnings, log.printed) == (16, 0, 16)
    assert [(f.location, f.detail, f.count) for f in log.findings] == [
        ("loader.h:13", "Read at mma.h:34", 8), ("loader.h:13", "Read at mma.h:41", 8)]
    assert all(f.kernel == "flashcore::cp_async_16(unsigned int, const void *, bool)" for f in log.findings)
    assert sum(f.hazards or 0 for f in log.findings) > 16


def test_racecheck_hazard_report_mode_gives_the_hazard_type() -> None:
    log = load("kernel-racecheck-hazard-mode")
    assert (log.errors, log.printed) == (190464, 20)
    (f,) = log.findings
    assert (f.hazard, f.location, f.detail, f.thread, f.block, f.count) == (
        "WAR", "mma.h:34", "Write at loader.h:13", "(136,0,0)", "(0,0,0)", 20)


@pytest.mark.parametrize(("name", "kind", "kernel", "location", "errors", "not_printed"), [
    ("synccheck-divergent", "divergent barrier", "divergent_barrier(float *, int)", "planted.cu:36", 128, 28),
    ("synccheck-mbar", "missing mbarrier init", "mbarrier_uninit(float *)", "planted.cu:51", 256, 156),
    ("initcheck-uninit", "uninitialized global read", "copy(const float *, float *)", "planted.cu:56", 256, 156),
])
def test_print_limited_reports_merge_into_one_finding(name: str, kind: str, kernel: str, location: str,
                                                      errors: int, not_printed: int) -> None:
    log = load(name)
    (f,) = log.findings
    assert (f.kind, f.kernel, f.location, f.count) == (kind, kernel, location, 100)  # --print-limit 100
    assert (log.errors, log.not_printed, log.printed + log.not_printed) == (errors, not_printed, errors)


def test_barcount_crash_has_a_clean_summary_and_a_failed_program() -> None:
    log = load("synccheck-barcount", "synccheck")
    assert (log.errors, log.findings, log.app_failed) == (0, (), True)


@pytest.mark.parametrize("name", ["memcheck-clean", "kernel-memcheck"])
def test_clean_memcheck_logs(name: str) -> None:
    log = load(name)
    assert (log.errors, log.leak_bytes, log.findings, log.app_failed, log.unknown) == (0, 0, (), False, ())


def test_truncated_log_has_findings_but_no_summary() -> None:
    log = load("memcheck-oob-truncated")
    assert log.tool == "memcheck" and log.errors is None and log.leak_bytes is None
    assert log.findings[0].kind == "invalid global write"


def test_unknown_and_tool_error_lines_are_kept() -> None:
    text = ("========= COMPUTE-SANITIZER\n========= Error: Target application terminated before first "
            "instrumented API call\n========= Some new report kind\n=========     at k()+0x10 in a.cu:1\n"
            "========= ERROR SUMMARY: 0 errors\n")
    log = parse(text, "memcheck")
    assert log.tool_errors == ("Error: Target application terminated before first instrumented API call",)
    assert log.unknown == ("Some new report kind",)


def test_where_reads_both_position_formats() -> None:
    assert where("oob_write(float *, int, int)+0x80 in planted.cu:22") == ("oob_write(float *, int, int)",
                                                                           "planted.cu:22")
    assert where("0x6360 in /src/conv.cu:123:convolution(pixel const*, int) [1088 hazards]") == (
        "convolution(pixel const*, int)", "/src/conv.cu:123")
    assert where("k(int)+0x80") == ("k(int)", None)


def test_older_racecheck_analysis_format() -> None:
    """compute-sanitizer before 2023 printed `ERROR: Race reported ... at 0xPC in file:line:function`."""
    text = ("========= COMPUTE-SANITIZER\n"
            "========= ERROR: Race reported between Read access at 0x6360 in conv.cu:123:convolution(pixel const*)\n"
            "=========     and Write access at 0x1fe0 in conv.cu:63:convolution(pixel const*) [1088 hazards]\n"
            "=========     and Write access at 0x26d0 in conv.cu:68:convolution(pixel const*) [64 hazards]\n"
            "========= \n"
            "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n")
    (f,) = parse(text).findings
    assert (f.severity, f.kernel, f.location, f.hazard, f.hazards, f.detail) == (
        "error", "convolution(pixel const*)", "conv.cu:123", "read vs write", 1152,
        "Write at conv.cu:63; Write at conv.cu:68")


def test_inlined_device_frames_name_the_kernel() -> None:
    text = ("========= COMPUTE-SANITIZER\n"
            "========= Invalid __shared__ read of size 16 bytes\n"
            "=========     at flashcore::ldmatrix_x4(unsigned int (&)[4], unsigned int)+0x7c0 in mma.h:34\n"
            "=========     by thread (136,0,0) in block (3,1,0)\n"
            "=========     Address 0x2410 is out of bounds\n"
            "=========     Device Frame: flashcore::consume(Params const&) in consumer.h:88\n"
            "=========     Device Frame: attention_forward_kernel<128, Bf16>(KernelParams)+0x1f0 in flashcore.cu:120\n"
            "========= \n"
            "========= ERROR SUMMARY: 1 error\n")
    (f,) = parse(text).findings
    assert (f.tool, f.kind, f.kernel, f.location, f.size, f.block) == (
        "memcheck", "invalid shared read", "attention_forward_kernel<128, Bf16>(KernelParams)", "mma.h:34", 16,
        "(3,1,0)")
    assert f.detail == "in flashcore::ldmatrix_x4(unsigned int (&)[4], unsigned int); Address 0x2410 is out of bounds"
    assert where("flashcore::consume(Params const&) in consumer.h:88") == ("flashcore::consume(Params const&)",
                                                                          "consumer.h:88")
