"""Structure gates on real compiler output: the wgmma kernel passes phase 2 and 3; the phase-1 kernel
(mma.sync, cp.async) claimed as the prefill kernel fails both, so the gate can fail."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness.gates.structure import opcode_summary, verdict_structure
from harness.results import GateResult, Status, combine
from harness.support.disasm import has_instruction, ptx_instructions, sass_opcodes

REPO = Path(__file__).resolve().parent.parent
SASS = """
\tcode for sm_90a
\t\tFunction : _ZN9flashcore30attention_forward_wgmma_kernelILi64ENS_4Bf16EEEvNS_12KernelParamsENS_9TmaParamsE
        /*0000*/                   LDC R1, c[0x0][0x28] ;           /* 0x00000a00ff017b82 */
        /*0a70*/              @!P0 UTMALDG.4D [UR8], [UR4] ;        /* 0x0000000804007fb4 */
        /*0b80*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR12], RZ, !UPT ;
\t\tFunction : _ZN9flashcore24attention_forward_kernelILi64ENS_4Bf16EEEvNS_12KernelParamsE
        /*0000*/                   LDGSTS.E.BYPASS.128 [R3], desc[UR6][R4.64], P0 ;
        /*0010*/                   HMMA.16816.F32.BF16 R8, R12, R16, R8 ;
"""


def test_sass_parser_reads_opcodes_per_kernel() -> None:
    kernels = sass_opcodes(SASS)
    wgmma = next(v for k, v in kernels.items() if "wgmma" in k)
    assert {"UTMALDG", "HGMMA", "LDC"} <= wgmma and "HMMA" not in wgmma
    checks = verdict_structure(kernels, "attention_forward_wgmma_kernel", ("HGMMA",), ("HMMA",), "SASS")
    assert combine([c.status for c in checks]) is Status.PASS
    checks = verdict_structure(kernels, "attention_forward_kernel", ("HGMMA",), ("HMMA",), "SASS")
    assert combine([c.status for c in checks]) is Status.FAIL


def test_the_log_holds_each_kernels_opcodes_not_the_listing() -> None:
    text = opcode_summary(sass_opcodes(SASS), "build/libflashcore.so")
    lines = text.splitlines()
    assert lines[0].startswith("# SASS opcodes per kernel of build/libflashcore.so") and len(lines) == 3
    wgmma = next(line for line in lines if "wgmma" in line)
    assert wgmma.endswith(": HGMMA LDC UTMALDG") and "HMMA.16816" not in text and "/*0000*/" not in text


def test_no_matching_kernel_is_an_error() -> None:
    checks = verdict_structure(sass_opcodes(SASS), "nothing_like_this", ("HGMMA",), (), "SASS")
    assert [c.status for c in checks] == [Status.ERROR]


@pytest.fixture(scope="module")
def real_ptx(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    build = tmp_path_factory.mktemp("ptx")
    # -j2: CI's two cores compile flashcore.cu's and head_dims_apart.cu's PTX side by side.
    proc = subprocess.run(["make", "-s", "-j2", "-f", "kernel/kernel.mk", f"BUILD_DIR={build}", "ptx"], cwd=REPO,
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr
    return ptx_instructions((build / "flashcore.ptx").read_text())


@pytest.mark.nvcc
def test_real_wgmma_kernel_has_tma_and_wgmma_and_no_mma_sync(real_ptx: dict[str, set[str]]) -> None:
    tma = verdict_structure(real_ptx, "attention_forward_wgmma_kernel", ("cp.async.bulk.tensor",), (), "PTX")
    wgmma = verdict_structure(real_ptx, "attention_forward_wgmma_kernel", ("wgmma.mma_async",), ("mma.sync",), "PTX")
    # (hdim, BLOCK_N) 64/128, 96/128, 96/176, 128/128, 128/176, 192/112, 256/80, and soft-capping at 64/128, 96/128,
    # 128/128, 192/112, 256/80, x 2 dtypes x split-KV or not; FP8 at hdim 64, 128 and 256, V^T from the kernel's copy
    # or in shared memory, split-KV or not;
    # the stream-K tail's copy (kTail) of the non-split kernels but soft-capping's and FP8's with V^T in shared memory;
    # the left-bound copy (kLocal) of each head dim's short tile, x 2 dtypes x split-KV or not; the one-warpgroup
    # decode point of hdim 64, 96 and 128, x 2 dtypes x split-KV or not or the tail's copy; FP8's decode points at
    # hdim 64, 128 and 256, split-KV or not. kernel/head_dims_apart.cu: 32/128, 160/128 and 224/96, each split-KV or
    # not, soft-capping and left-bound copies of both, the tail's copy (7 x 3 x 2 dtypes), and hdim 32's decode point
    # (3 x 2 dtypes).
    assert sum("attention_forward_wgmma_kernel" in name for name in real_ptx) == 60 + 14 + 3 + 20 + 18 + 6 + 42 + 6
    assert combine([c.status for c in tma + wgmma]) is Status.PASS


@pytest.mark.nvcc
def test_phase1_kernel_claimed_as_phase3_fails(real_ptx: dict[str, set[str]]) -> None:
    decode = {k: v for k, v in real_ptx.items() if "attention_forward_kernel" in k}  # the phase-1 kernel
    assert len(decode) == 6
    assert all(has_instruction(ops, "mma.sync") for ops in decode.values())
    checks = verdict_structure(decode, "attention_forward_kernel", ("wgmma.mma_async",), ("mma.sync",), "PTX")
    assert combine([c.status for c in checks]) is Status.FAIL


def test_one_of_several_instructions_and_labels_that_tell_instantiations_apart() -> None:
    """FP8 kernels run QGMMA (HGMMA is 16-bit only): "HGMMA|QGMMA" passes either, fails neither; the labels keep the
    template arguments (E4m3, point) that the old 57-character cut dropped."""
    base = "_ZN9flashcore30attention_forward_wgmma_kernelILi256ELi17220736EN"
    kernels = {base + "S_4E4m3ELb0ELb0EEEvNS_12KernelParamsENS_9TmaParamsE": {"QGMMA", "UTMALDG"},
               base + "S_4Bf16ELb0ELb0EEEvNS_12KernelParamsENS_9TmaParamsE": {"HGMMA"},
               base + "S_4Fp16ELb0ELb0EEEvNS_12KernelParamsENS_9TmaParamsE": {"HMMA"}}
    checks = verdict_structure(kernels, "attention_forward_wgmma_kernel", ("HGMMA|QGMMA",), ("HMMA",), "SASS")
    has = {c.workload: c for c in checks if c.metric == "has HGMMA|QGMMA"}
    assert len(has) == 3  # three distinct labels
    by_type = {next(t for t in ("E4m3", "Bf16", "Fp16") if t in label): c for label, c in has.items()}
    assert by_type["E4m3"].status is Status.PASS and "QGMMA present" in by_type["E4m3"].message
    assert by_type["Bf16"].status is Status.PASS
    assert by_type["Fp16"].status is Status.FAIL and "MISSING" in by_type["Fp16"].message


def _fake_cuobjdump(tmp_path: Path) -> tuple[Path, Path]:
    """A cuobjdump that prints SASS above and counts its calls in calls.txt."""
    calls = tmp_path / "calls.txt"
    tool = tmp_path / "bin" / "cuobjdump"
    tool.parent.mkdir()
    tool.write_text(f"#!/bin/sh\necho x >> {calls}\ncat <<'END'\n{SASS}\nEND\n")
    tool.chmod(0o755)
    return tool, calls


def test_the_second_structure_gate_reads_the_first_ones_disassembly(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.gates.structure import StructureGate, StructureParams, StructureTmaGate, StructureWgmmaGate
    from tests.conftest import make_context

    tool, calls = _fake_cuobjdump(tmp_path)
    monkeypatch.setenv("PATH", f"{tool.parent}:/usr/bin:/bin")
    (tmp_path / "build").mkdir()
    library = tmp_path / "build" / "lib.so"
    library.write_bytes(b"one build")
    params = StructureParams(library="build/lib.so", ptx="build/x.ptx", kernel_pattern="attention_forward_wgmma",
                             sass_required=("HGMMA",), ptx_required=(), timeout_s=30, sass_forbidden=("HMMA",))

    def run(gate: type[StructureGate], run_dir: str) -> GateResult:
        (tmp_path / run_dir).mkdir(exist_ok=True)
        return gate().run(make_context(tmp_path / run_dir, gate.__name__, params, repo_root=tmp_path))

    first = run(StructureTmaGate, "run")
    second = run(StructureWgmmaGate, "run")
    assert first.status is second.status is Status.PASS
    assert calls.read_text().count("x") == 1  # one disassembly for the two gates of one run
    assert "earlier disassembly" in second.checks[0].message
    library.write_bytes(b"another build")  # other bytes: disassembled again, never the stale opcodes
    assert run(StructureWgmmaGate, "run").status is Status.PASS and calls.read_text().count("x") == 2
    run(StructureWgmmaGate, "other-run")  # another run's directory has its own
    assert calls.read_text().count("x") == 3
