"""The benchmark suite (bench/) is GPU-only and out of `make test`; it holds one benchmark per (workload,
backend) of gates/bench.yaml; the repository's bench.yaml and perf gate params are consistent; selftest plants
a slow path and noise for the perf gate."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import REPO

from harness.bench.settings import BACKENDS, BASELINES, load_bench_settings
from harness.config import load_config
from harness.schema import ConfigError
from harness.selftest import CASES


def collect(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    return proc.stdout + proc.stderr


def test_make_test_does_not_collect_the_suite() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert config["tool"]["pytest"]["ini_options"]["testpaths"] == ["tests"]
    assert "bench/" not in collect("-m", "not gpu", "tests/test_bench_arithmetic.py")


def test_suite_is_one_gpu_benchmark_per_workload_and_backend() -> None:
    listed = [line for line in collect("bench").splitlines() if "::test_attention[" in line]
    settings = load_bench_settings(load_config(REPO / "gates"))
    expected = [f"{w.name}-{b}" for w in settings.suite_workloads for b in settings.suite.backends]
    assert [line.split("[", 1)[1].rstrip("]") for line in listed] == expected
    # perf set (12) + sweep points not in it (12) + fp8-bench (10) + serving-bench (2), x 6 backends
    assert len(expected) == 36 * 6
    out = collect("bench", "-m", "not gpu")
    assert "::test_attention[" not in out and f"{len(expected)} deselected" in out  # every item is marked gpu


def test_suite_selection_options() -> None:
    out = collect("bench", "--bench-workloads=decode,sweep", "--bench-backends=flashcore,fa3")
    ids = [line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "::test_attention[" in line]
    assert ids[:2] == ["decode-flashcore", "decode-fa3"] and len(ids) == 2 * 15
    assert "sweep-s32768-causal-fa3" in ids and "prefill-d128-causal-flashcore" in ids  # the sweep's S=8192 point
    assert "unknown backend" in collect("bench", "--bench-backends=fa9")


def test_repository_bench_settings(gates_dir: Path) -> None:
    config = load_config(gates_dir)
    s = load_bench_settings(config)
    assert (s.timing.flush_mib, s.timing.min_reps) == (256, 20)  # > 5x the 50 MB L2; a spread needs reps
    # sequential rounds: half the former budget first, the former budget (or more) as the cap
    t = s.timing
    assert (t.target_ms, t.max_reps) == (500, 50)
    assert (t.extend_target_ms, t.extend_min_reps, t.extend_max_reps) == (1600, 40, 150)
    assert 0 < t.extend_above < 1 and t.min_reps >= s.judged.min_rounds
    assert [w.batch * w.seqlen_q for w in s.sweep_workloads] == [max(s.sweep.tokens, w.seqlen_q)
                                                               for w in s.sweep_workloads]
    assert [w.batch for w in s.sweep_workloads if w.seqlen_q > s.sweep.tokens] == [1, 1, 1, 1]  # 64K, 128K x 2
    assert {w.name for w in s.sweep_workloads} >= {"prefill-d128", "prefill-d128-causal"}  # measured once
    anchor = s.anchor_for(config.workloads["prefill-d128"])
    assert anchor is not None and (anchor.fa2, anchor.cudnn, anchor.fa3) == (351, 591, 625)  # ROADMAP
    decode = s.anchor_for(config.workloads["decode"])
    assert decode is not None and decode.unit == "tbps" and decode.fa3 == 3.05
    assert s.stored_run.files.startswith("gates/")  # committed, not under the git-ignored reports/
    # the regression references: torch's kernels; cuDNN for memory-bound decode (FA2's decode is clock-bound)
    assert s.stored_run.reference_for(config.workloads["prefill-d128"]) == "fa2"
    assert s.stored_run.reference_for(config.workloads["decode"]) == "cudnn"
    # FP8 and serving layouts: SDPA runs neither, FA3 both
    assert s.stored_run.reference_for(config.workloads["fp8-s4k-d128"]) == "fa3"
    assert s.stored_run.reference_for(config.workloads["serve-varlen-prefill"]) == "fa3"
    groups = [[w.name for w in g] for g in s.pairing_groups(s.suite_workloads)]
    assert groups[0] == ["sweep-s2048", "sweep-s4096", "prefill-d128", "sweep-s16384", "sweep-s32768", "long-64k",
                         "long-128k"]
    # 10 perf workloads alone + 2 sweep modes + fp8-bench (10) + serving-bench (2)
    assert ["decode"] in groups and ["decode-b1-gqa"] in groups and len(groups) == 24
    for phase in config.phases:
        for g in phase.gates:
            if g.name.startswith("perf-"):
                assert set(g.params.gated) <= set(g.params.baselines) <= set(BASELINES)
                assert "fa3" in g.params.baselines  # the FA3 ratio is always reported
    phases = {g.name: g.phase for p in config.phases for g in p.gates}
    assert (phases["perf-fa2"], phases["perf-cudnn"], phases["perf-fa3"], phases["scaling"]) == (3, 4, 4, 6)


@pytest.mark.parametrize(("section", "edit", "key"), [
    ("timing", ("warmup: 5", "warmup: 0"), "timing.warmup"),
    ("timing", ("max_reps: 50", "max_reps: 10"), "timing.max_reps"),
    ("suite", ("backends: [flashcore,", "backends: [flashcor,"), "suite.backends[0]"),
    ("stored_run", ("reference_backend: fa2", "reference_backend: flashcore"), "stored_run.reference_backend"),
    ("timing", ("clock_probe_us: 300", "clock_probe_us: -1"), "timing.clock_probe_us"),
    ("timing", ("clock_probe_after_ms: 2 ", "clock_probe_after_ms: -5 "), "timing.clock_probe_after_ms"),
    ("suite", ("workloads: [perf,", "workloads: [nope,"), "suite.workloads[0]"),
    ("stored_run", ("files: gates/baselines/bench-*.json", "files: gates/baselines/bench-h100.json"),
     "stored_run.files"),
    ("judged", ("min_spread_groups: 5", "min_spread_groups: 1"), "judged.min_spread_groups"),
    ("judged", ("min_rounds: 20", "min_rounds: 60"), "judged.min_rounds"),
    ("sweep", ("tokens: 32768", "tokens: 30000"), "sweep.seqlens[0]"),
    ("sweep", ("tokens: 32768", "tokenz: 32768"), "sweep.tokenz"),
    ("anchors", ("fa3: 625}", "fa3: 625, fa4: 1}"), "anchors.b4-s8k-d128.fa4"),
])
def test_bad_bench_yaml_names_file_and_key(gates_dir: Path, section: str, edit: tuple[str, str], key: str) -> None:
    refused(gates_dir, edit, key)


def refused(gates_dir: Path, edit: tuple[str, str], key: str) -> ConfigError:
    """bench.yaml with one edit: the error it raises, which names the file and `key`."""
    path = gates_dir / "bench.yaml"
    text = path.read_text()
    assert edit[0] in text
    path.write_text(text.replace(edit[0], edit[1], 1))
    with pytest.raises(ConfigError) as e:
        load_bench_settings(load_config(gates_dir))
    assert e.value.file.endswith("bench.yaml") and e.value.key == key, str(e.value)
    return e.value


@pytest.mark.parametrize(("edit", "key", "value"), [
    (("extend_above: 0.6", "extend_above: 0"), "timing.extend_above", "0.0"),  # every ratio would extend
    (("extend_above: 0.6", "extend_above: 1.5"), "timing.extend_above", "1.5"),  # above the limit: never extends
    (("extend_above: 0.6", "extend_above: lots"), "timing.extend_above", "'lots'"),
    (("extend_above: 0.6", "extend_abov: 0.6"), "timing.extend_abov", "0.6"),
    (("  extend_above: 0.6\n", ""), "timing.extend_above", "(missing)"),
    (("extend_min_reps: 40", "extend_min_reps: 10"), "timing.extend_min_reps", "10"),  # a cap below the base
    (("extend_max_reps: 150", "extend_max_reps: 30"), "timing.extend_max_reps", "30"),
    (("extend_target_ms: 1600", "extend_target_ms: 200"), "timing.extend_target_ms", "200.0"),
    (("extend_min_reps: 40", "extend_min_reps: 160"), "timing.extend_max_reps", "150"),  # below extend_min_reps
    (("extend_min_reps: 40", "extend_min_reps: 4.5"), "timing.extend_min_reps", "4.5"),
])
def test_bad_sequential_rounds_settings_are_refused(gates_dir: Path, edit: tuple[str, str], key: str,
                                                    value: str) -> None:
    assert f"{key} = {value}:" in str(refused(gates_dir, edit, key))


def test_selftest_plants_a_slow_path_and_noise_for_the_perf_gate() -> None:
    by_name = {c.name: c for c in CASES}
    assert by_name["perf-slow"].must_fail == "perf-fa2/regression"
    assert by_name["perf-noisy"].must_fail == "perf-fa2/spread"
    assert by_name["perf-clean"].must_fail is None
    assert set(BACKENDS) == {"flashcore", *BASELINES}
