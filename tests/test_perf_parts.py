"""The perf group of a run over several GPUs in parts (gates/shard.yaml isolated_parts; harness/shard_perf.py,
shard_join.py, shard_plan.py stages): the plan for 1, 2 and 4 GPUs, every workload of every perf gate in exactly
one part, the parts judged as one gate (the geometric mean over the union), the switch back to one part, and the
pairs a gate run leaves untimed (harness/bench/selection.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from perf_stand_in import Rate, config, context, fa3_rate, gpu_stand_in, html  # noqa: F401 - fixtures

from harness import run_files, shard, shard_join, shard_perf
from harness.bench import runner, selection
from harness.bench.settings import OURS
from harness.config import load_config
from harness.gates import perf, scaling
from harness.results import Check, GateResult, Status
from harness.schema import Config, ConfigError
from harness.shard_plan import PARTS_ENV, Worker, critical_path, load_shard_settings, stage_names, stages

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def repo_config() -> Config:
    return load_config(REPO / "gates")


def placement(cfg: Config, gpus: list[int]) -> list[dict[Worker, list[str]]]:
    settings = cfg.once("shard.yaml", load_shard_settings)
    names = [g.name for g in cfg.gates_through(7)]
    return stages(names, gpus, settings, {}, shard_perf.holds(cfg))


@pytest.mark.parametrize("gpus", [[0], [0, 1], [0, 1, 2, 3]])
def test_plan_runs_the_perf_parts_at_once_and_alone(repo_config: Config, gpus: list[int]) -> None:
    settings = repo_config.once("shard.yaml", load_shard_settings)
    got = placement(repo_config, gpus)
    if len(gpus) == 1:  # one GPU: the perf gates whole, alone on it, before the workers that share it
        assert list(got[0]) == [Worker(0)] and set(got[0][Worker(0)]) == set(settings.isolated)
        return
    first, rest = got
    perf_tokens = [t for ts in first.values() for t in ts]
    assert [w.gpu for w in first] == gpus  # every GPU runs a perf part, all in the same stage
    assert all(shard.gate_of(t) in settings.isolated and t.endswith(f"/{len(gpus)}") for t in perf_tokens)
    assert not any(shard.gate_of(t) in settings.isolated for ts in rest.values() for t in ts)  # no other work beside
    assert {shard.gate_of(t) for t in perf_tokens} == set(settings.isolated)
    assert stage_names(got, settings)[0] == f"isolated in {len(gpus)} parts at once"


@pytest.mark.parametrize("parts", [1, 2, 3, 4, 8])
def test_every_workload_of_every_perf_gate_is_in_exactly_one_part(repo_config: Config, parts: int) -> None:
    settings = shard_perf.bench_settings(repo_config)
    for spec in shard_perf.group_specs(repo_config):
        whole = [w.name for w in spec.params.measured(repo_config, settings)]
        shares = shard_perf.coverage(repo_config, parts)[spec.name]
        assert sorted(w for s in shares for w in s) == sorted(whole), spec.name
    where = shard_perf.assignment(repo_config, parts)
    for group in settings.pairing_groups(shard_perf.group_workloads(repo_config)):  # a sweep is never cut
        assert len({where[w.name] for w in group}) == 1


def test_two_parts_balance_by_the_measured_workload_seconds(repo_config: Config) -> None:
    shard_settings = repo_config.once("shard.yaml", load_shard_settings)
    where = shard_perf.assignment(repo_config, 2)
    loads = [sum(shard_settings.workload_weight(w) for w, i in where.items() if i == k) for k in (1, 2)]
    assert max(loads) <= 0.55 * sum(loads)
    sweep = {w.name for w in shard_perf.bench_settings(repo_config).sweep_workloads}
    assert len({where[w] for w in sweep}) == 2  # the two sweeps, the costliest units, on different GPUs


def test_a_gate_with_nothing_in_any_part_still_runs_once(repo_config: Config) -> None:
    settings = repo_config.once("shard.yaml", load_shard_settings)
    names = [g.name for g in repo_config.gates_through(7)]
    first = stages(names, [0, 1], settings, {}, lambda g, i, n: g != "perf-serving")[0]
    assert [t for ts in first.values() for t in ts if t.startswith("perf-serving")] == ["perf-serving@1/2"]


def test_switch_back_to_one_isolated_part(gates_dir: Path) -> None:
    path = gates_dir / "shard.yaml"
    path.write_text(path.read_text().replace("isolated_parts: true", "isolated_parts: false"))
    cfg = load_config(gates_dir)
    first = placement(cfg, [0, 1])[0]
    assert list(first) == [Worker(0)] and not any("@" in t for t in first[Worker(0)])  # whole, on the first GPU
    assert stage_names(placement(cfg, [0, 1]), cfg.once("shard.yaml", load_shard_settings))[0] == \
        "isolated, alone on the host"
    path.write_text(path.read_text().replace("isolated_parts: false", "isolated_parts: 2"))
    with pytest.raises(ConfigError, match="isolated_parts"):
        load_shard_settings(gates_dir)


def test_critical_path_names_the_perf_parts_stage() -> None:
    path = critical_path(["build"], 18.0, [{0: (["perf-fa2@1/2"], 70.0), 1: (["perf-fa2@2/2", "scaling@2/2"], 75.0)},
                                           {0: (["api"], 150.0), 1: (["sanitizer-all@2/2"], 160.0)}],
                         names=["isolated in 2 parts at once", "stage 2/2"])
    assert path["seconds"] == 253.0
    assert "isolated in 2 parts at once: GPU 1 75 s (perf-fa2@2/2, scaling@2/2)" in path["text"]
    assert "stage 2/2: GPU 1 160 s (sanitizer-all@2/2)" in path["text"]


# ---- parts judged as one gate --------------------------------------------------------------------------------


def run_parts(cfg: Config, gate: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
              run: Callable[..., GateResult] = perf.run_perf, n: int = 2) -> list[tuple[int, GateResult]]:
    """The gate run as each of its n parts, in its own directory (as each GPU's worker), logs re-rooted at tmp_path."""
    out = []
    for i in range(1, n + 1):
        monkeypatch.setenv(PARTS_ENV, f"{gate}={i}/{n}")
        r = run(context(cfg, gate, tmp_path / f"part{i}"))
        out.append((i - 1, dataclasses.replace(r, logs=tuple(f"part{i}/{x}" for x in r.logs))))
    monkeypatch.delenv(PARTS_ENV)
    return out


def joined(cfg: Config, tmp_path: Path, parts: list[tuple[int, GateResult]]) -> GateResult:
    return shard_join.join(cfg, tmp_path, shard.joined(parts), parts)


def key(c: Check) -> tuple[object, ...]:
    """A check's verdict and value; the value to 5 digits (the join reads the times back from the measurements
    file, which keeps them to the nanosecond)."""
    return (c.workload, c.metric, c.status, None if c.measured is None else round(c.measured, 5))


@pytest.mark.parametrize(("ratio", "status"), [(1.0, Status.PASS), (0.94, Status.FAIL)])
def test_perf_fa3_in_parts_judges_as_one_run(config: Config, tmp_path: Path,  # noqa: F811 - fixture
                                             gpu_stand_in: Callable[[Rate], None],  # noqa: F811 - fixture
                                             monkeypatch: pytest.MonkeyPatch, ratio: float, status: Status) -> None:
    """0.94x on every workload: each passes its 0.90 floor, the geometric mean fails 0.955 only over the union."""
    gpu_stand_in(fa3_rate(ratio))
    whole = perf.run_perf(context(config, "perf-fa3", tmp_path / "whole"))
    parts = run_parts(config, "perf-fa3", tmp_path, monkeypatch)
    assert all(not any(c.metric.startswith("geomean") for c in r.checks) for _, r in parts)  # judged once, after
    got = joined(config, tmp_path, parts)
    assert got.status is whole.status is status, got.message
    assert sorted(map(key, got.checks)) == sorted(map(key, whole.checks))  # the same checks, the same values
    geo = [c for c in got.checks if c.metric == "geomean_speed_vs_fa3"]
    assert len(geo) == 1 and geo[0].workload == next(c.workload for c in whole.checks if c.metric.startswith("geo"))
    assert [w["name"] for w in got.details["workloads"]] == [w["name"] for w in whole.details["workloads"]]
    assert got.details["timing"] == whole.details["timing"]  # settings taken once, never summed
    assert got.details["gated"] == whole.details["gated"] == ["fa3"]  # nor repeated (README's numbers read it)
    assert got.details["plots"]["ratio_svg"] or got.details["plots"]["ratio_note"]
    page = html(got)
    assert all(w["name"] in page for w in whole.details["workloads"])  # one report section over both parts


def test_a_slow_workload_in_one_part_fails_the_geometric_mean_over_the_union(
        config: Config, tmp_path: Path, gpu_stand_in: Callable[[Rate], None],  # noqa: F811 - fixtures
        monkeypatch: pytest.MonkeyPatch) -> None:
    gpu_stand_in(fa3_rate(0.955, "prefill-d256", 0.92))  # passes its floor; drags the union's mean to 0.951
    parts = run_parts(config, "perf-fa3", tmp_path, monkeypatch)
    got = joined(config, tmp_path, parts)
    geo = next(c for c in got.checks if c.metric == "geomean_speed_vs_fa3")
    assert geo.status is Status.FAIL and "worst prefill-d256" in geo.message
    assert all(c.status is Status.PASS for c in got.checks if c.metric == "speed_vs_fa3")


def test_a_part_that_could_not_run_makes_the_geometric_mean_an_error(
        config: Config, tmp_path: Path, gpu_stand_in: Callable[[Rate], None],  # noqa: F811 - fixtures
        monkeypatch: pytest.MonkeyPatch) -> None:
    gpu_stand_in(fa3_rate(1.0))
    (gpu, first), _ = run_parts(config, "perf-fa3", tmp_path, monkeypatch)
    lost = GateResult("perf-fa3", 4, Status.ERROR, message="the worker on GPU 1 stopped before this gate")
    got = joined(config, tmp_path, [(gpu, first), (1, lost)])
    geo = next(c for c in got.checks if c.metric == "geomean_speed_vs_fa3")
    assert got.status is Status.ERROR and geo.status is Status.ERROR and "GPU 1" in geo.message


def test_a_lost_measurements_file_makes_the_geometric_mean_an_error(
        config: Config, tmp_path: Path, gpu_stand_in: Callable[[Rate], None],  # noqa: F811 - fixtures
        monkeypatch: pytest.MonkeyPatch) -> None:
    gpu_stand_in(fa3_rate(1.0))
    parts = run_parts(config, "perf-fa3", tmp_path, monkeypatch)
    (tmp_path / "part2/logs/perf-fa3.bench.json").unlink()
    geo = next(c for c in joined(config, tmp_path, parts).checks if c.metric == "geomean_speed_vs_fa3")
    assert geo.status is Status.ERROR and "part 2 of 2" in geo.message


def test_parts_whose_logs_were_compressed_still_join(
        config: Config, tmp_path: Path, gpu_stand_in: Callable[[Rate], None],  # noqa: F811 - fixtures
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each worker compresses its large logs when it finishes (run_files.compress_logs): on the H200 a part's
    bench.json went .xz and the join called it lost. The compressed file must join as the plain one does."""
    gpu_stand_in(fa3_rate(1.0))
    parts = run_parts(config, "perf-fa3", tmp_path, monkeypatch)
    plain = joined(config, tmp_path, parts)
    packed = []
    for gpu, r in parts:
        path = tmp_path / next(x for x in r.logs if x.endswith(".bench.json"))
        run_files.compress_file(path)
        packed.append((gpu, dataclasses.replace(r, logs=tuple(x + ".xz" if x.endswith(".bench.json") else x
                                                              for x in r.logs))))
    got = joined(config, tmp_path, packed)
    assert got.status is plain.status is Status.PASS, got.message
    assert sorted(map(key, got.checks)) == sorted(map(key, plain.checks))


def test_scaling_in_parts_judges_each_causal_mode_once(
        config: Config, tmp_path: Path, gpu_stand_in: Callable[[Rate], None],  # noqa: F811 - fixtures
        monkeypatch: pytest.MonkeyPatch) -> None:
    gpu_stand_in(fa3_rate(1.0))
    whole = scaling.ScalingGate().run(context(config, "scaling", tmp_path / "whole"))
    parts = run_parts(config, "scaling", tmp_path, monkeypatch, run=scaling.ScalingGate().run)
    assert all(r.checks for _, r in parts)  # the two sweeps went to different parts
    got = joined(config, tmp_path, parts)
    assert sorted(map(key, got.checks)) == sorted(map(key, whole.checks))
    assert got.details["plots"]["seqlen_svg"] or got.details["plots"]["seqlen_note"]


def test_merge_treats_the_parts_as_one_gate(config: Config) -> None:  # noqa: F811 - fixture
    """Several perf gates in parts on two GPUs: one result per gate, under its first part's GPU, each part named."""
    def part(name: str, w: str) -> GateResult:
        return GateResult(name, 4, Status.PASS, (Check(w, "speed_vs_fa2", 1.0, 1.1, Status.PASS, ">="),), "ok", 5.0)

    results = [(0, part("perf-fa2", "a")), (1, part("perf-fa2", "b")), (1, part("perf-serving", "c"))]
    seen: list[str] = []

    def finish(whole: GateResult, parts: object) -> GateResult:
        seen.append(whole.name)
        return whole

    shards = shard.join_parts(results, {"perf-fa2", "perf-serving"}, finish)
    assert [r.name for r in shards[0]] == ["perf-fa2"] and [r.name for r in shards[1]] == ["perf-serving"]
    assert [c.workload for c in shards[0][0].checks] == ["a", "b"] and len(shards[0][0].details["parts"]) == 2
    assert seen == ["perf-fa2", "perf-serving"]  # a gate with its one part is still judged over its parts


# ---- pairs no check reads ------------------------------------------------------------------------------------


def test_untimed_pairs_are_only_the_unread_baselines_of_the_long_points(repo_config: Config) -> None:
    settings = shard_perf.bench_settings(repo_config)
    skipped = selection.untimed(repo_config, settings)
    read = selection.read_pairs(repo_config, settings)
    assert not skipped & read  # a pair a check reads is always timed
    long = set(repo_config.sets["long-context"])
    assert {w for w, _ in skipped} == long and not any(b == OURS for _, b in skipped)
    assert {(w, b) for w in long for b in ("cudnn", "fa3")} <= skipped
    assert {(w, "fa2") for w in long} <= read  # perf-fa2 judges FA2 there (ratio and regression)
    assert not any((w, "cudnn") in skipped for w in ("sweep-s32768", "prefill-d128"))  # perf-cudnn judges these


def test_a_check_that_starts_reading_a_pair_gets_it_timed(gates_dir: Path) -> None:
    path = gates_dir / "phases.yaml"
    text = path.read_text()
    old = ("        report_workloads: [long-context]   # S = 64K and 128K at batch 1, shown with their ratios, not "
           "judged\n")
    assert old in text
    path.write_text(text.replace(old, "").replace(
        "        workloads: [prefill-bf16]     # the prefill workloads FA3 runs here (the wheel has no fp16)",
        "        workloads: [prefill-bf16, long-context]"))
    cfg = load_config(gates_dir)
    skipped = selection.untimed(cfg, shard_perf.bench_settings(cfg))
    assert not any(b == "fa3" for _, b in skipped) and ("long-64k", "cudnn") in skipped


def test_the_measurer_times_no_untimed_pair(repo_config: Config) -> None:
    wl = repo_config.workloads["long-128k"]
    m = runner.Measurer(runner.Options(shard_perf.bench_settings(repo_config).timing, 1, device="cpu",
                                       untimed=frozenset({("long-128k", "cudnn")})))
    got = m.prepare(wl, "cudnn")  # answered before any input is made or backend probed
    assert not isinstance(got, runner.backends.Prepared) and not got.available and got.why == selection.UNTIMED
    assert not m._inputs


def test_shipped_workload_seconds_are_the_evidence_run_less_the_untimed_pairs(
        capsys: pytest.CaptureFixture[str]) -> None:
    from harness import shard_costs

    assert shard_costs.main(["--workloads", str(REPO / "reports/evidence/phase7-h200x2-14cf125.json.xz")]) == 0
    printed = capsys.readouterr().out
    shipped = load_shard_settings(REPO / "gates").workload_seconds
    assert printed.startswith("workload_seconds:\n") and len(printed.splitlines()) == len(shipped) + 1
    assert all(f"  {w}: {int(s)}\n" in printed for w, s in shipped.items())
    assert shipped["long-128k"] < 40  # 50 s with cuDNN and FA3 timed there (their 43 rounds of 229 + 217 ms)


@pytest.mark.parametrize(("device", "expected"), [("1", ("index", 1)), ("GPU-8f2c", ("uuid", "GPU-8f2c")),
                                                  ("", ("index", 0))])
def test_a_perf_part_reads_the_clocks_of_its_own_gpu(monkeypatch: pytest.MonkeyPatch, device: str,
                                                     expected: tuple[str, object]) -> None:
    """NVML numbers GPUs physically: the part on GPU 1 must not record GPU 0's clocks and power."""
    from harness.bench import clocks

    class FakeNvml:
        def nvmlDeviceGetHandleByIndex(self, i: int) -> tuple[str, object]:  # noqa: N802 - NVML's name
            return ("index", i)

        def nvmlDeviceGetHandleByUUID(self, u: str) -> tuple[str, object]:  # noqa: N802 - NVML's name
            return ("uuid", u)

    monkeypatch.setenv(shard.GPU_INDEX_ENV, device)
    assert clocks._handle(FakeNvml()) == expected


def test_perf_fp8_parts_keep_every_workloads_ceiling_fraction(config: Config, tmp_path: Path) -> None:  # noqa: F811
    def part(w: str, fraction: float) -> GateResult:
        return GateResult("perf-fp8", 7, Status.PASS, (Check(w, "speed_vs_fa3", 0.89, 1.0, Status.PASS, ">="),),
                          details={"gated": ["fa3"], "timing": {"warmup": 5},
                                   "ceiling": {"kind": "fp8-matmul", "tflops": 1265.0, "fraction": {w: fraction}}})

    parts = [(0, part("fp8-s4k-d128", 0.72)), (1, part("fp8-s8k-d256", 0.97))]
    got = shard_join.joined_details(shard.joined(parts), parts)
    assert got["ceiling"]["fraction"] == {"fp8-s4k-d128": 0.72, "fp8-s8k-d256": 0.97}
    assert got["ceiling"]["tflops"] == 1265.0 and got["timing"] == {"warmup": 5} and got["gated"] == ["fa3"]


def test_a_bad_skip_unread_names_the_key(gates_dir: Path) -> None:
    from harness.bench.settings import load_bench_settings

    path = gates_dir / "bench.yaml"
    path.write_text(path.read_text().replace("  - long-context\n", "  - long-context\n  - no-such-workload\n"))
    with pytest.raises(ConfigError, match=r"skip_unread\[1\]"):
        load_bench_settings(load_config(gates_dir))
