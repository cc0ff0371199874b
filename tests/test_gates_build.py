"""Build gate: the ptxas parser on realistic reports, the pure verdicts, and the gate run with stand-in
`make` / `cuobjdump` scripts (the real build is the lead's test)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from conftest import make_context

from harness.config import load_config
from harness.gates import build
from harness.gates.build import BuildParams, verdict_kernels, verdict_library
from harness.results import Status, combine
from harness.support.ptxas import list_elf_archs, parse_ptxas

K128 = "_ZN9flashcore24attention_forward_kernelILi128ENS_4Bf16EEEvNS_12KernelParamsE"
K256 = "_ZN9flashcore24attention_forward_kernelILi256ENS_4Bf16EEEvNS_12KernelParamsE"

CLEAN = f"""\
nvcc -gencode=arch=compute_90a,code=sm_90a -lineinfo -Xptxas=--warn-on-spills -Xptxas=-v -c kernel/flashcore.cu
ptxas info    : 4 bytes gmem
ptxas info    : Compiling entry function '{K128}' for 'sm_90a'
ptxas info    : Function properties for {K128}
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 32768 bytes smem, 400 bytes cmem[0]
ptxas info    : Compile time = 92.210 ms
ptxas info    : Compiling entry function '{K256}' for 'sm_90a'
ptxas info    : Function properties for {K256}
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 65536 bytes smem, 400 bytes cmem[0]
ptxas info    : Compile time = 151.994 ms
"""

SPILL = CLEAN.replace(
    f"""Function properties for {K256}
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads""",
    f"""Function properties for {K256}
    40 bytes stack frame, 24 bytes spill stores, 16 bytes spill loads""",
).replace(
    "ptxas info    : Compile time = 151.994 ms",
    f"ptxas warning : Registers are spilled to local memory in function '{K256}', 24 bytes spill stores, "
    "16 bytes spill loads\nptxas info    : Compile time = 151.994 ms",
)

C7515 = CLEAN + (
    "ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non "
    "wgmma instructions defining accumulator registers of a wgmma between start and end of the pipeline stage in "
    f"the function '{K128}'\n"
)

DEVICE_FN_SPILL = CLEAN + (
    "ptxas info    : Function properties for _ZN9flashcore6helperEv\n"
    "    16 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n"
)

NO_KERNELS = "ptxas info    : 0 bytes gmem\n"

# The repository's phase-1 build params (serialization codes and all: the code has no defaults of its own).
PARAMS = dataclasses.replace(
    next(g for g in load_config(Path(__file__).resolve().parent.parent / "gates").phase(1).gates
         if g.name == "build").params, timeout_s=60)


def _by_metric(checks: list, metric: str) -> list:
    return [c for c in checks if c.metric == metric]


# ---- parser ---------------------------------------------------------------------------------------


def test_parser_reads_every_entry() -> None:
    report = parse_ptxas(CLEAN)
    assert [(f.name, f.arch, f.registers, f.barriers, f.smem_bytes, f.spill_bytes) for f in report.entries] == [
        (K128, "sm_90a", 168, 1, 32768, 0),
        (K256, "sm_90a", 255, 1, 65536, 0),
    ]
    assert report.diagnostics == []


def test_parser_reads_spills_per_kernel() -> None:
    k128, k256 = parse_ptxas(SPILL).entries
    assert (k128.spill_store_bytes, k128.spill_load_bytes) == (0, 0)
    assert (k256.spill_store_bytes, k256.spill_load_bytes, k256.stack_bytes) == (24, 16, 40)


def test_parser_keeps_device_functions_apart() -> None:
    report = parse_ptxas(DEVICE_FN_SPILL)
    assert len(report.entries) == 2
    helper = [f for f in report.functions if not f.entry]
    assert [(f.name, f.spill_bytes) for f in helper] == [("_ZN9flashcore6helperEv", 16)]


def test_parser_reads_diagnostic_codes() -> None:
    (diag,) = parse_ptxas(C7515).diagnostics
    assert (diag.code, diag.function) == ("C7515", K128)


def test_parser_handles_older_used_line_without_barriers() -> None:
    text = CLEAN.replace("Used 168 registers, used 1 barriers, 32768 bytes smem,", "Used 40 registers,")
    k128 = parse_ptxas(text).entries[0]
    assert (k128.registers, k128.barriers, k128.smem_bytes) == (40, None, None)


def test_list_elf_archs() -> None:
    listing = "ELF file    1: libflashcore.1.sm_90a.cubin\nELF file    2: libflashcore.2.sm_80.cubin\n"
    assert list_elf_archs(listing) == ["sm_90a", "sm_80"]
    assert list_elf_archs("") == []


# ---- verdicts -------------------------------------------------------------------------------------


def test_clean_build_passes() -> None:
    checks = verdict_kernels(parse_ptxas(CLEAN), PARAMS)
    assert combine([c.status for c in checks]) is Status.PASS
    assert len(_by_metric(checks, "arch")) == 2
    assert all(c.measured == 0 for c in _by_metric(checks, "spill_bytes"))


def test_spill_fails_only_the_spilling_kernel() -> None:
    checks = _by_metric(verdict_kernels(parse_ptxas(SPILL), PARAMS), "spill_bytes")
    assert [c.status for c in checks] == [Status.PASS, Status.FAIL]
    assert (checks[1].measured, checks[1].threshold, checks[1].margin) == (40, 0, -40)


def test_spill_at_the_threshold_passes() -> None:
    loose = BuildParams(**{**PARAMS.__dict__, "max_spill_bytes": 40})
    checks = _by_metric(verdict_kernels(parse_ptxas(SPILL), loose), "spill_bytes")
    assert [c.status for c in checks] == [Status.PASS, Status.PASS]
    tight = BuildParams(**{**PARAMS.__dict__, "max_spill_bytes": 39})
    assert _by_metric(verdict_kernels(parse_ptxas(SPILL), tight), "spill_bytes")[1].status is Status.FAIL


def test_spill_allowance_covers_only_its_function_up_to_its_bytes() -> None:
    at = BuildParams(**{**PARAMS.__dict__, "spill_allowances": ("ILi256ENS_4Bf16=40",)})
    checks = _by_metric(verdict_kernels(parse_ptxas(SPILL), at), "spill_bytes")
    assert [c.status for c in checks] == [Status.PASS, Status.PASS]
    assert checks[1].threshold == 40 and "allowance ILi256ENS_4Bf16=40" in checks[1].message
    below = BuildParams(**{**PARAMS.__dict__, "spill_allowances": ("ILi256ENS_4Bf16=39",)})
    assert _by_metric(verdict_kernels(parse_ptxas(SPILL), below), "spill_bytes")[1].status is Status.FAIL
    other = BuildParams(**{**PARAMS.__dict__, "spill_allowances": ("ILi128ENS_4Bf16=400",)})
    assert _by_metric(verdict_kernels(parse_ptxas(SPILL), other), "spill_bytes")[1].status is Status.FAIL


def test_malformed_spill_allowance_raises() -> None:
    bad = BuildParams(**{**PARAMS.__dict__, "spill_allowances": ("no-bytes",)})
    with pytest.raises(ValueError, match="SUBSTRING=BYTES"):
        verdict_kernels(parse_ptxas(SPILL), bad)


def test_device_function_spill_fails() -> None:
    checks = verdict_kernels(parse_ptxas(DEVICE_FN_SPILL), PARAMS)
    assert combine([c.status for c in checks]) is Status.FAIL


def test_serialization_warning_fails_when_forbidden() -> None:
    checks = verdict_kernels(parse_ptxas(C7515), PARAMS)
    (warn,) = _by_metric(checks, "serialization_warnings")
    assert (warn.status, warn.measured) == (Status.FAIL, 1)
    assert "C7515" in warn.message
    allowed = BuildParams(**{**PARAMS.__dict__, "forbid_serialization_warnings": False})
    assert combine([c.status for c in verdict_kernels(parse_ptxas(C7515), allowed)]) is Status.PASS


def test_wrong_arch_fails() -> None:
    checks = verdict_kernels(parse_ptxas(CLEAN.replace("for 'sm_90a'", "for 'sm_90'")), PARAMS)
    arch = _by_metric(checks, "arch")
    assert [c.status for c in arch] == [Status.FAIL, Status.FAIL]
    assert "expected sm_90a" in arch[0].message


def test_no_kernels_is_an_error_not_a_pass() -> None:
    checks = verdict_kernels(parse_ptxas(NO_KERNELS), PARAMS)
    assert combine([c.status for c in checks]) is Status.ERROR
    assert verdict_kernels(parse_ptxas(""), PARAMS)[0].status is Status.ERROR


def test_library_verdict() -> None:
    assert verdict_library(["sm_90a"], PARAMS).status is Status.PASS
    missing = verdict_library(["sm_80", "sm_90"], PARAMS)
    assert missing.status is Status.FAIL and "sm_90a missing" in missing.message
    assert verdict_library(None, PARAMS, "cuobjdump not found").status is Status.ERROR


# ---- the gate, with stand-in tools ----------------------------------------------------------------


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository root whose `make build` writes the CLEAN ptxas report and a library; cuobjdump lists sm_90a."""
    root, tools = tmp_path / "repo", tmp_path / "bin"
    root.mkdir()
    tools.mkdir()
    (root / "report.txt").write_text(CLEAN)
    _script(tools / "make", 'echo "make $*"; mkdir -p build; cp report.txt build/ptxas.log; '
            'echo ELF > build/libflashcore.so; exit ${MAKE_RC:-0}\n')
    _script(tools / "cuobjdump", 'echo "ELF file    1: libflashcore.1.sm_90a.cubin"\n')
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(build, "find_cuda_tool", lambda name: str(tools / name))
    return root


def _run(tmp_path: Path, repo: Path):
    run_dir = tmp_path / "run"
    return build.BuildGate().run(make_context(run_dir, "build", PARAMS, repo_root=repo)), run_dir


def test_gate_passes_on_a_clean_build(tmp_path: Path, repo: Path) -> None:
    result, run_dir = _run(tmp_path, repo)
    assert result.status is Status.PASS, result.message
    assert "make build" in (run_dir / "logs/build.log").read_text()
    assert (run_dir / "logs/ptxas.log").read_text() == CLEAN
    assert "logs/cuobjdump.log" in result.logs
    assert [f["registers"] for f in result.details["functions"]] == [168, 255]


def test_gate_fails_when_make_fails(tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAKE_RC", "2")
    result, _ = _run(tmp_path, repo)
    assert result.status is Status.FAIL
    assert "exit 2" in result.message


def test_gate_fails_on_spills(tmp_path: Path, repo: Path) -> None:
    (repo / "report.txt").write_text(SPILL)
    result, _ = _run(tmp_path, repo)
    assert result.status is Status.FAIL
    assert "spill_bytes" in result.message


def test_gate_errors_without_make(tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    result, _ = _run(tmp_path, repo)
    assert result.status is Status.ERROR
    assert "make" in result.message and not result.checks


def test_gate_errors_without_cuobjdump(tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "find_cuda_tool", lambda name: None)
    result, _ = _run(tmp_path, repo)
    assert result.status is Status.ERROR
    assert "cuobjdump not found" in result.message


def test_gate_errors_when_no_ptxas_report(tmp_path: Path, repo: Path) -> None:
    (repo / "report.txt").write_text(NO_KERNELS)
    result, _ = _run(tmp_path, repo)
    assert result.status is Status.ERROR
    assert "no kernel entry" in result.message


def test_the_c7511_serialization_of_session_4_fails_the_gate() -> None:
    """ptxas's message when part of an accumulator array fed a narrower wgmma (issue 12, step 4.11): the codes
    come from gates/phases.yaml alone, and that list has it."""
    text = CLEAN + ("ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized "
                    f"due to insufficient register resources for the wgmma pipeline in the function '{K128}'\n")
    (warn,) = _by_metric(verdict_kernels(parse_ptxas(text), PARAMS), "serialization_warnings")
    assert warn.status is Status.FAIL and "C7511" in warn.message
