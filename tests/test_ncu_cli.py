"""`python -m harness parse ncu FILE`: JSON per kernel on stdout (null for n/a), exit 2 with the reason otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import cli

FIXTURES = Path(__file__).parent / "fixtures" / "ncu"
DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"


def parse(name: str | Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(["parse", "ncu", str(FIXTURES / name)])
    out, err = capsys.readouterr()
    return code, out, err


def test_prints_each_kernel_with_its_launches_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = parse("all-kernels.csv", capsys)
    assert code == 0
    data = json.loads(out)
    assert data["launches"] == 5
    fill, attention = data["kernels"]
    assert (fill["name"], fill["launches"], fill["ids"]) == (
        "fill_random(unsigned short *, long, unsigned int, int)", 3, [0, 1, 2])
    assert attention["name"] == "void flashcore::attention_forward_kernel<64, flashcore::Fp16>(flashcore::KernelParams)"
    assert [x["metrics"][DRAM] for x in attention["per_launch"]] == [1.47, 1.45]
    assert attention["median"][DRAM] == pytest.approx(1.46)
    assert attention["median"]["launch__grid_size"] == 16 and fill["median"]["launch__thread_count"] == 262144
    assert (attention["grid"], attention["block"], attention["registers"]) == ("(4, 4, 1)", "(160, 1, 1)", 134)
    assert data["units"][DRAM] == "%" and data["device"]["device__attribute_display_name"] == "NVIDIA H100 80GB HBM3"
    assert data["device"]["device__attribute_max_warps_per_multiprocessor"] == 64


def test_na_cells_are_null(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = parse("na-and-noise.csv", capsys)
    assert code == 0
    ours, fill = json.loads(out)["kernels"]
    assert [x["metrics"][DRAM] for x in ours["per_launch"]] == [91.74, 91.77, None]
    assert fill["median"]["sm__throughput.avg.pct_of_peak_sustained_elapsed"] == 9.68
    assert "null" in out and "NaN" not in out


def test_permission_error_exits_2_with_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = parse("permission-error.txt", capsys)
    assert code == 2 and out == ""
    assert "ERR_NVGPUCTRPERM" in err and "NVreg_RestrictProfilingToAdminUsers=0" in err


def test_unreadable_and_empty_files_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = parse(tmp_path / "missing.csv", capsys)
    assert code == 2 and "cannot read" in err
    empty = tmp_path / "empty.csv"
    empty.write_text('"ID","Kernel Name","dram__throughput.avg.pct_of_peak_sustained_elapsed"\n"","","%"\n')
    code, _, err = parse(empty, capsys)
    assert code == 2 and "no kernel launch" in err
