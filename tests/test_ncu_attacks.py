"""Crafted ncu CSVs that once passed the ncu gates: a wrong unit, an impossible percentage, a kernel the filter does not
name, launches that are `n/a` or missing. Each must be an ERROR naming what is wrong; the clean control beside them
(the same CSV, sound) passes."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import make_context
from test_ncu_gates import DECODE, PREFILL, fake_ncu
from test_ncu_stalls import TENSOR, params, stalls_csv

from harness.gates.ncu import verdict_profile
from harness.gates.ncu_stalls import NcuStallsGate, verdict_stalls
from harness.ncu.checks import function_name, named_by
from harness.ncu.parse import parse_csv
from harness.ncu.units import expected_unit, not_percent, unknown_metric
from harness.results import Status

DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
TIME = "gpu__time_duration.sum"
OURS = "void attention_forward_kernel<128, Bf16>(KernelParams)"


def crafted(rows: list[tuple[str, str, str]], dram_unit: str = "%") -> str:
    """A raw-page CSV: one row per (kernel, DRAM cell, time cell)."""
    lines = [f'"ID","Kernel Name","{DRAM}","{TIME}"', f'"","","{dram_unit}","ns"']
    lines += [f'"{i}","{kernel}","{dram}","{time}"' for i, (kernel, dram, time) in enumerate(rows)]
    return "\n".join(lines) + "\n"


def judge(text: str, launch_count: int = 3) -> list:
    return verdict_profile("decode", parse_csv(text), (DRAM, TIME), DRAM, 85.0, "attention_forward", launch_count)


CLEAN = [(OURS, "91.7", "2,794,272"), (OURS, "91.8", "2,793,376"), (OURS, "91.6", "2,795,000")]


def test_clean_control_passes() -> None:
    (check,) = judge(crafted(CLEAN))
    assert check.status is Status.PASS and check.measured == pytest.approx(91.7)


def test_dram_metric_in_kbyte_per_second_is_an_error() -> None:
    (check,) = judge(crafted(CLEAN, dram_unit="Kbyte/second"))
    assert check.status is Status.ERROR
    assert DRAM in check.message and "'Kbyte/second'" in check.message and "'%'" in check.message


def test_a_percentage_of_1e9_is_an_error() -> None:
    rows = [(OURS, "1e9", "2,794,272"), *CLEAN[1:]]
    (check,) = judge(crafted(rows))
    assert check.status is Status.ERROR and "1e+09 %" in check.message and "0..100" in check.message


def test_a_negative_percentage_is_an_error() -> None:
    (check,) = judge(crafted([(OURS, "-5", "2,794,272"), *CLEAN[1:]]))
    assert check.status is Status.ERROR and "0..100" in check.message


def test_a_kernel_the_filter_does_not_name_is_an_error() -> None:
    rows = [*CLEAN, ("void fill_random(unsigned short *, long)", "99.0", "2,944")]
    checks = judge(crafted(rows))
    foreign = [c for c in checks if c.metric == "kernel_filter"]
    assert [c.status for c in foreign] == [Status.ERROR]
    assert "fill_random" in foreign[0].message and "regex:attention_forward does not name" in foreign[0].message


def test_only_a_foreign_kernel_is_an_error_not_a_pass() -> None:
    (check,) = judge(crafted([("void other_kernel(int)", "99.0", "1")] * 3))
    assert check.status is Status.ERROR and "other_kernel" in check.message


def test_two_of_three_launches_na_is_an_error() -> None:
    rows = [CLEAN[0], (OURS, "n/a", "2,793,376"), (OURS, "n/a", "2,795,000")]
    (check,) = judge(crafted(rows))
    assert check.status is Status.ERROR and "a number in 1 of 3 launches (91.7, n/a, n/a)" in check.message


def test_one_launch_where_three_are_configured_is_an_error() -> None:
    (check,) = judge(crafted(CLEAN[:1]))
    assert check.status is Status.ERROR and "1 launch profiled, launch_count is 3" in check.message
    (more,) = judge(crafted(CLEAN), launch_count=2)
    assert more.status is Status.ERROR and "3 launches profiled, launch_count is 2" in more.message


def test_a_shown_metric_in_the_wrong_unit_is_an_error() -> None:
    text = crafted(CLEAN).replace('"ns"', '"msecond"')
    (check,) = judge(text)
    assert check.status is Status.ERROR and TIME in check.message and "'msecond'" in check.message


def test_the_filter_is_matched_on_the_function_name_as_ncu_does() -> None:
    assert function_name("void flashcore::attention_forward_kernel<64, flashcore::Fp16>(flashcore::KernelParams)") \
        == "attention_forward_kernel"
    assert function_name('void fill<"odd, name">(int, float)') == "fill"
    assert function_name("fill_random(unsigned short *, long, unsigned int, int)") == "fill_random"
    assert not named_by("void fill<attention_forward_tag>(int)", "attention_forward")  # a template argument


def test_units_are_known_for_every_metric_the_gates_name() -> None:
    assert expected_unit(DRAM) == "%" and expected_unit(TIME) == "ns"
    assert not_percent(TIME) and not_percent(DRAM) is None
    assert unknown_metric("dram__bytes_read.sum.per_second") is None
    assert unknown_metric("made__up.metric") and "harness/ncu/units.py" in (unknown_metric("made__up.metric") or "")


# ---- ncu-stalls, end to end with a stand-in ncu ------------------------------------------------------


def _stalls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, csv: Path, name: str, **changes: object) -> list:
    ncu = fake_ncu(tmp_path, monkeypatch, {8192: csv})
    ctx = make_context(tmp_path / name, "ncu-stalls", params(ncu, **changes), (DECODE, PREFILL), repo_root=tmp_path)
    return list(NcuStallsGate().run(ctx).checks)


def test_stalls_clean_control_and_a_tensor_metric_in_the_wrong_unit(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    clean = _stalls(tmp_path, monkeypatch, stalls_csv(tmp_path), "clean")
    assert {c.status for c in clean} == {Status.PASS}
    text = stalls_csv(tmp_path).read_text()
    bad = tmp_path / "bad.csv"
    bad.write_text(text.replace(',"%"\n', ',"inst"\n', 1))  # the added tensor column's unit, last on the units row
    checks = _stalls(tmp_path, monkeypatch, bad, "bad")
    wrong = [c for c in checks if c.status is Status.ERROR]
    assert wrong and TENSOR in wrong[0].message and "'inst'" in wrong[0].message


def test_stalls_with_more_launches_than_configured_is_an_error(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    checks = _stalls(tmp_path, monkeypatch, stalls_csv(tmp_path), "two", launch_count=2)
    errors = [c for c in checks if c.status is Status.ERROR]
    assert errors and "1 launch profiled, launch_count is 2" in errors[0].message


def test_stalls_profile_with_a_foreign_kernel_is_an_error(tmp_path: Path) -> None:
    lines = stalls_csv(tmp_path).read_text().splitlines()
    row = lines[2]
    foreign = row.replace('"0",', '"9",', 1).replace("attention_forward_kernel", "fill_random")
    csv = parse_csv("\n".join([*lines, foreign]) + "\n")
    clean_checks, _ = verdict_stalls("prefill-d128", parse_csv("\n".join(lines) + "\n"), params(Path("ncu")), None)
    assert {c.status for c in clean_checks} == {Status.PASS}
    checks, data = verdict_stalls("prefill-d128", csv, params(Path("ncu")), None)
    errors = [c for c in checks if c.status is Status.ERROR]
    assert [c.metric for c in errors] == ["kernel_filter"] and "fill_random" in errors[0].message
    assert "attention_forward_kernel" in data["kernel"]["name"]  # the table is still the named kernel's
