"""The ncu raw-CSV parser on real captures from the lent H100 (tests/fixtures/ncu) and on the edge cases."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.ncu.diagnose import explain, no_kernels_profiled, profiler_errors
from harness.ncu.parse import NcuParseError, group_kernels, parse_csv, to_number

FIXTURES = Path(__file__).parent / "fixtures" / "ncu"
DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


@pytest.mark.parametrize(("cell", "value"), [
    ("91.74", 91.74), ("0", 0.0), ("3,731,328", 3731328.0), ("1,024", 1024.0), ("2,794,272.5", 2794272.5),
    ("-1.5", -1.5), ("1e3", 1000.0), (" 7 ", 7.0),
    ("n/a", None), ("", None), ("-", None), ("(160, 1, 1)", None), ("PolicySpread", None), ("1,02", None),
    ("nan", None), ("inf", None), ("12,34,567", None),
])
def test_cells_become_numbers_or_none(cell: str, value: float | None) -> None:
    assert to_number(cell) == value


def test_real_decode_capture_with_preamble_and_units() -> None:
    csv = parse_csv(fixture("ours-decode.csv"))
    assert any(line.startswith("RESULT status=ok") for line in csv.preamble)  # the driver's stdout, not a row
    assert csv.preamble[0].startswith("==WARNING==") and not csv.errors
    assert [launch.id for launch in csv.launches] == [0, 1]
    assert csv.units[DRAM] == "%" and csv.units["launch__shared_mem_per_block"] == "byte/block"
    (kernel,) = group_kernels(csv.launches)
    assert kernel.name == "void attention_forward_kernel<128, Bf16>(KernelParams)"  # quoted: holds a comma
    assert kernel.values(DRAM) == [91.74, 91.77] and kernel.median(DRAM) == pytest.approx(91.755)
    facts = kernel.facts()
    assert (facts["grid"], facts["block"], facts["registers"]) == ("(1, 32, 64)", "(160, 1, 1)", 166)
    assert facts["smem_per_block"] == 82984  # "82,984": thousands separator
    assert csv.device()["device__attribute_display_name"] == "NVIDIA H100 80GB HBM3"
    assert DRAM in csv.metric_columns and not any(c.startswith("device__") for c in csv.metric_columns)


def test_several_kernels_and_launches_keep_every_launch() -> None:
    csv = parse_csv(fixture("all-kernels.csv"))
    kernels = group_kernels(csv.launches)
    assert [(k.name.split("(")[0], len(k.launches)) for k in kernels] == [
        ("fill_random", 3), ("void flashcore::attention_forward_kernel<64, flashcore::Fp16>", 2)]
    fill, attention = kernels
    assert fill.values(SM) == [9.68, 9.15, 10.00] and fill.median(SM) == 9.68
    assert attention.values(DRAM) == [1.47, 1.45] and attention.median(DRAM) == pytest.approx(1.46)
    assert fill.launches[0].metrics["launch__thread_count"] == 262144  # "262,144"
    assert fill.launches[0].metrics["launch__cluster_scheduling_policy"] is None  # "PolicySpread"
    assert fill.launches[0].text("launch__cluster_scheduling_policy") == "PolicySpread"


@pytest.mark.parametrize(("name", "metric", "expected"), [
    ("ours-prefill.csv", SM, 44.935), ("ours-decode.csv", DRAM, 91.755),
    ("sdpa-flash-prefill.csv", SM, 55.77), ("sdpa-flash-decode.csv", DRAM, 82.79),
    ("sdpa-cudnn-prefill.csv", SM, 75.62), ("sdpa-cudnn-decode.csv", DRAM, 92.41),
])
def test_every_real_capture_parses_to_its_measured_median(name: str, metric: str, expected: float) -> None:
    (kernel,) = group_kernels(parse_csv(fixture(name)).launches)
    assert kernel.median(metric) == pytest.approx(expected)


def test_sdpa_template_names_with_commas_stay_one_cell() -> None:
    (kernel,) = group_kernels(parse_csv(fixture("sdpa-flash-prefill.csv")).launches)
    assert kernel.name.startswith("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, 0, 0, bfloat16_t")
    assert kernel.name.endswith(">(Flash_fwd_params)")
    assert kernel.facts()["registers"] == 255


def test_na_cells_quotes_and_program_output_between_rows() -> None:
    csv = parse_csv(fixture("na-and-noise.csv"))
    assert [launch.id for launch in csv.launches] == [0, 1, 2, 3, 4]
    assert csv.skipped == ("RESULT status=ok max_abs_err=0 nonfinite=0",)
    ours, fill = group_kernels(csv.launches)
    assert ours.values(DRAM) == [91.74, 91.77, None]
    assert ours.median(DRAM) == pytest.approx(91.755)  # the median of the numbers only
    assert fill.name == 'void fill<"odd, name">(int, float)'
    assert fill.values(SM) == [9.68, None]
    assert fill.launches[1].metrics[DRAM] is None and fill.median("gpu__time_duration.sum") == 2944.0


def test_metric_missing_everywhere_has_no_median() -> None:
    csv = parse_csv(fixture("na-and-noise.csv"))
    _, fill = group_kernels(csv.launches)
    assert not csv.has("sm__warps_active.avg.pct_of_peak_sustained_active")
    assert fill.median("sm__warps_active.avg.pct_of_peak_sustained_active") is None


def test_permission_error_is_a_parse_error_that_says_how_to_fix_it() -> None:
    text = fixture("permission-error.txt")
    with pytest.raises(NcuParseError) as info:
        parse_csv(text)
    message = str(info.value)
    assert "ERR_NVGPUCTRPERM" in message and "NVreg_RestrictProfilingToAdminUsers=0" in message
    assert "root" in message and "ci/README.md" in message
    assert no_kernels_profiled(text)


def test_text_without_a_header_is_a_parse_error() -> None:
    with pytest.raises(NcuParseError, match="no ncu CSV header"):
        parse_csv("==PROF== Connected to process 1\nRESULT status=ok\n")


def test_a_truncated_launch_row_is_a_parse_error() -> None:
    lines = fixture("na-and-noise.csv").splitlines()
    lines[-1] = lines[-1].rsplit(",", 3)[0]
    with pytest.raises(NcuParseError, match=r"line 16: launch 4 has [0-8] cells, the header 9"):
        parse_csv("\n".join(lines))


def test_header_without_launches_parses_to_nothing() -> None:
    header = '"ID","Kernel Name","dram__throughput.avg.pct_of_peak_sustained_elapsed"\n"","","%"\n'
    csv = parse_csv("==WARNING== No kernels were profiled.\n" + header)
    assert csv.launches == () and csv.units == {"dram__throughput.avg.pct_of_peak_sustained_elapsed": "%"}


def test_profiler_errors_are_collected_and_explained() -> None:
    lines = ["==PROF== Connected", "==ERROR== Failed to find metric dram__throughput.avg.pct_of_peak_bogus", "ok"]
    errors = profiler_errors(lines)
    assert errors == ["==ERROR== Failed to find metric dram__throughput.avg.pct_of_peak_bogus"]
    assert "ncu --query-metrics" in explain(errors) and "ERR_NVGPUCTRPERM" not in explain(errors)
    assert explain(["==ERROR== something new"]) == "ncu reported: ==ERROR== something new"
