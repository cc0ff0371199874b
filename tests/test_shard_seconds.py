"""The placement's estimates per host kind (gates/shard.yaml `seconds` for one GPU, `several_gpus_seconds` over them
for a run over several) and the command that prints them from measured runs (harness/shard_costs.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import MappingProxyType

import pytest
from test_shard_plan import FAKE, GATES, REPO

from harness import shard_costs
from harness.config import load_config
from harness.results import Check, GateResult, RunResult, Status
from harness.schema import ConfigError
from harness.shard_plan import Worker, load_shard_settings, stages


def test_several_gpus_seconds_win_only_on_a_run_over_several_gpus() -> None:
    s = dataclasses.replace(FAKE, several_gpus_seconds=MappingProxyType({"correctness": 3.0}))
    assert s.on_gpus(1) is s and s.on_gpus(1).seconds["correctness"] == 20.0
    assert s.on_gpus(2).seconds["correctness"] == 3.0
    assert s.on_gpus(2).seconds["sanitizer"] == 80.0  # not listed: its one-GPU estimate
    assert FAKE.on_gpus(2) is FAKE  # nothing listed: unchanged


def test_the_placement_over_several_gpus_reads_them() -> None:
    """correctness weighs 20 s on one GPU and 200 s over several: there sanitizer (80 s) goes to another worker."""
    heavy = dataclasses.replace(FAKE, workers_per_gpu=2, several_gpus_seconds=MappingProxyType({"correctness": 200.0}))

    def together(got: dict[Worker, list[str]]) -> bool:
        return any({"correctness", "sanitizer"} <= set(ts) for ts in got.values())

    assert not together(stages(GATES, [0, 1], heavy, {})[-1])
    assert together(stages(GATES, [0, 1], dataclasses.replace(heavy, several_gpus_seconds=MappingProxyType({})),
                           {})[-1])  # the control: the one-GPU estimate
    assert together(stages(GATES, [0, 1], heavy, {"correctness": 1.0})[-1])  # a time in the history wins over both


def test_the_repository_ships_estimates_for_several_gpus() -> None:
    s = load_shard_settings(REPO / "gates")
    gates = {g.name for phase in load_config(REPO / "gates").phases for g in phase.gates}
    assert set(s.several_gpus_seconds) <= gates and set(s.seconds) <= gates  # a misspelt gate would weigh nothing
    assert s.on_gpus(2).seconds["random-shapes"] < s.seconds["random-shapes"]  # measured 3-18 s on two H200s


def test_a_bad_several_gpus_estimate_names_its_key(gates_dir: Path) -> None:
    path = gates_dir / "shard.yaml"
    text = path.read_text()
    assert "several_gpus_seconds:\n  build: 1\n" in text
    path.write_text(text.replace("several_gpus_seconds:\n  build: 1\n", "several_gpus_seconds:\n  build: -1\n"))
    with pytest.raises(ConfigError, match="several_gpus_seconds.build"):
        load_shard_settings(gates_dir)


def _run(tmp_path: Path, name: str, seconds: dict[str, float]) -> Path:
    path = tmp_path / name
    check = Check(workload="w", metric="m", threshold=1.0, measured=0.5, status=Status.PASS)
    gates = tuple(GateResult(g, 1, Status.PASS, (check,), elapsed_s=t) for g, t in seconds.items())
    run = RunResult(name, 1, gates, {}, "2026-11-30T00:00:00Z", 1.0)
    path.write_text(json.dumps(run.to_dict()))
    return path


def test_shard_costs_takes_the_median_of_the_runs_and_prints_the_block_asked_for(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = [_run(tmp_path, f"r{i}.json", {"correctness": t, "determinism": 4.0}) for i, t in enumerate((30, 90, 40))]
    assert shard_costs.from_results(runs[:2]) == {"correctness": 60.0, "determinism": 4.0}  # not the last run's 90
    assert shard_costs.from_results(runs) == {"correctness": 40.0, "determinism": 4.0}
    assert shard_costs.main([*map(str, runs), "--several-gpus"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("several_gpus_seconds:\n") and "  correctness: 40\n" in out
