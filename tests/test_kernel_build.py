"""The kernel builds with nvcc for sm_90a here (no GPU needed) and the build gate judges the real ptxas report.

Zero spills passes; a planted register cap (-DFLASHCORE_PLANT_SPILL: 8 blocks per SM promised to ptxas)
makes ptxas spill and the gate fail."""

from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path

import pytest

from harness.config import load_config
from harness.gates.build import verdict_kernels
from harness.results import Status, combine
from harness.support.ptxas import parse_ptxas

pytestmark = pytest.mark.nvcc  # skipped, with the reason, on a machine without the CUDA compiler (conftest.py)
REPO = Path(__file__).resolve().parent.parent
TUNED_POINT = re.compile(r"^FC_POINT\(", re.MULTILINE)  # as kernel/kernel.mk's POINT_NAMES reads the file
PARAMS = dataclasses.replace(next(g for g in load_config(REPO / "gates").phase(1).gates if g.name == "build").params,
                             ptxas_log="", library="", timeout_s=600)


def build(tmp_path: Path, extra: str = "") -> str:
    build_dir = tmp_path / "build"
    # -j2: CI's two cores compile the two long objects (flashcore.cu, head_dims_apart.cu) side by side.
    cmd = ["make", "-s", "-j2", "-f", "kernel/kernel.mk", f"BUILD_DIR={build_dir}", f"{build_dir}/libflashcore.so"]
    if extra:
        cmd.append(f"NVCC_EXTRA={extra}")
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (build_dir / "libflashcore.so").is_file()
    return (build_dir / "ptxas.log").read_text()


def test_kernel_builds_for_sm90a_without_spills(tmp_path: Path) -> None:
    report = parse_ptxas(build(tmp_path))
    checks = verdict_kernels(report, PARAMS)
    # 16-bit: wgmma (non-split and split-KV) x (7 (hdim, BLOCK_N) tiles (kernel/tile_choice.h) + 5 soft-capping
    # copies of each head dim's short tile); split-KV combine x 5 head dims and phase-1 mma.sync x its 3; everything
    # x 2 dtypes. FP8: wgmma (non-split and split-KV) x hdim 64, 128 and 256 x V^T from the kernel's copy or
    # transposed in shared memory (their combine is bf16's); no V transpose pre-pass kernel. Each point that
    # kernel/tuned_points.inc names (make tune's table) is one more translation unit: its 16-bit wgmma kernel
    # (non-split and split-KV, 2 dtypes) and its head dim's combine kernels again (2 dtypes). The stream-K tail
    # (kernel/stream_tail.h): a kTail copy of each non-split wgmma kernel but soft-capping's and FP8's with V
    # transposed in shared memory (14 16-bit, 3 FP8; 2 more per point), and its combine kernel per head dim and output
    # dtype (FP8's is bf16's; 2 more per point). The launch's zero kernel (kernel/zero_words.cuh): one per translation
    # unit. The KV-cache append (kernel/append.cu): 2 dtypes x 16-byte or 2-element accesses. Left bounds (kLocal:
    # windows, chunks, left-padded pages): a copy of each head dim's short tile, non-split and split-KV, 2 dtypes (20).
    # The one-warpgroup decode point of hdim 64, 96 and 128 (BLOCK_M 64): non-split, split-KV and the tail's copy, 2
    # dtypes (18), and the tail's combine at 64-row tiles per head dim and dtype (6). FP8's decode points at hdim 64,
    # 128 and 256 (one consumer warpgroup, V^T in shared memory: no tail copy), non-split and split-KV (6); those of
    # 64 and 256 in kernel/fp8_decode.cu, a translation unit with its own zero kernel and split-KV combines (3).
    # Head dims 32, 160 and 224 in kernel/head_dims_apart.cu (one tile point each): per head dim and dtype the wgmma
    # kernel non-split and split-KV, their soft-capping and left-bound copies, the tail's copy, the split and tail
    # combines (9 x 3 x 2 = 54); 32's one-warpgroup decode point, non-split, split-KV and the tail's copy, and its
    # tail combine at 64-row tiles (4 x 2 = 8); the unit's zero kernel (63).
    points = len(TUNED_POINT.findall((REPO / "kernel" / "tuned_points.inc").read_text()))
    assert len(report.entries) == 224 + 11 * points
    assert sum("zero_words_kernel" in f.name for f in report.entries) == 3 + points
    assert sum("combine_tail_kernel" in f.name for f in report.entries) == 24 + 2 * points
    assert sum("attention_forward_wgmma_kernel" in f.name for f in report.entries) == 169 + 6 * points
    tail = "ELb1ELb0EEEvNS_12KernelParamsENS_9TmaParamsE"  # kTail true, kLocal false: the last two template arguments
    assert sum("attention_forward_wgmma_kernel" in f.name and f.name.endswith(tail) for f in report.entries) == \
        31 + 2 * points
    assert sum("E4m3" in f.name for f in report.entries) == 21
    assert not any("transpose_v_fp8_kernel" in f.name for f in report.entries)
    assert sum("combine_splits_kernel" in f.name for f in report.entries) == 18 + 2 * points
    assert {f.arch for f in report.entries} == {"sm_90a"}
    assert combine([c.status for c in checks]) is Status.PASS, [c for c in checks if c.status is not Status.PASS]


def test_planted_register_cap_spills_and_fails_the_gate(tmp_path: Path) -> None:
    report = parse_ptxas(build(tmp_path, "-DFLASHCORE_PLANT_SPILL"))
    checks = verdict_kernels(report, PARAMS)
    spilled = [c for c in checks if c.status is Status.FAIL]
    assert spilled, "a 51-register cap must make ptxas spill and the build gate fail"
    assert combine([c.status for c in checks]) is Status.FAIL
