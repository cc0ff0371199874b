"""harness/shard.py on the CPU: a phase spread over GPUs (make gate-phaseN GPUS=...). The placement keeps the
measurement-sharing gates in one worker and balances the rest by their last wall times; workers are stand-in
processes here (no GPU): their results merge into one run in the configuration's order, each gate tagged with its
GPU; a worker that dies makes its gates ERRORs naming its log, and the others still count."""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path

import pytest

from harness import cli, shard, shard_runners
from harness.config import load_config
from harness.gates import registry
from harness.results import GateResult, RunResult, Status
from harness.schema import ConfigError

REPO = Path(__file__).resolve().parent.parent
FAKE_WORKER = textwrap.dedent("""
    import json, os, sys
    args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
    if os.environ.get("FAKE_DIE") == os.environ["FLASHCORE_GPU_INDEX"] or \
            os.environ.get("FAKE_DIE_GATE") in args["--only"].split(","):
        print("Segmentation fault (simulated)"); sys.exit(139)
    gates = [{"name": g, "phase": 0, "status": "pass", "message": "ok", "elapsed_s": 1.0, "logs": [f"logs/{g}.log"],
              "details": {}, "checks": [{"workload": "w", "metric": "m", "threshold": None, "measured": None,
                                         "status": "pass", "comparison": "", "margin": None, "message": ""}]}
             for g in args["--only"].split(",")]
    os.makedirs(args["--out"], exist_ok=True)
    run = {"schema": "flashcore.run/1", "run_id": "w", "phase": 7, "status": "pass", "notice": "", "phase_names": {},
           "started_at": "", "elapsed_s": 1.0, "gates": gates,
           "environment": {"seed": args["--seed"], "workers": os.environ.get("FLASHCORE_WORKERS"),
                           "visible": os.environ["CUDA_VISIBLE_DEVICES"], "gates": args["--only"],
                           "own": os.environ["FLASHCORE_GPU_INDEX"],
                           "parts": os.environ.get("FLASHCORE_GATE_PARTS", "")}}
    open(os.path.join(args["--out"], "results.json"), "w").write(json.dumps(run))
""")


@pytest.fixture
def settings() -> shard.ShardSettings:
    return shard.load_shard_settings(REPO / "gates")


def test_the_repository_settings_name_real_gates(settings: shard.ShardSettings) -> None:
    names = {g.name for g in load_config(REPO / "gates").gates_through(7)}
    assert settings.first == ("build", "determinism-gpus") and set(settings.first) <= names
    assert all(set(g) <= names for g in settings.together)
    assert set(settings.every_gpu) <= names and set(settings.host_only) <= names
    assert {"perf-fa2", "perf-cudnn", "perf-fa3", "scaling"} <= set(settings.together[0])  # one shared measurement


def test_a_bad_shard_file_names_the_key(gates_dir: Path) -> None:
    path = gates_dir / "shard.yaml"
    path.write_text(path.read_text().replace("default_seconds: 30", "default_seconds: 0"))
    with pytest.raises(ConfigError, match="default_seconds"):
        shard.load_shard_settings(gates_dir)


def test_a_measuring_gate_may_not_see_every_gpu(gates_dir: Path) -> None:
    path = gates_dir / "shard.yaml"
    path.write_text(path.read_text().replace("every_gpu: [api]", "every_gpu: [api, ncu-dram]"))
    with pytest.raises(ConfigError, match="ncu-dram also in measures"):
        shard.load_shard_settings(gates_dir)


def test_a_worker_beside_a_measuring_one_never_sees_its_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """run_stage: an every_gpu gate in a worker beside the ncu worker of another GPU sees its own GPU only; in the
    ncu worker itself it sees the others after its own."""
    script = _fake(tmp_path)
    monkeypatch.setattr(shard, "worker_command", lambda phase, gates, out, seed, gates_dir: [
        sys.executable, str(script), "--only", ",".join(gates), "--out", str(out), "--seed", str(seed)])
    beside = {shard.Worker(0): ["ncu-dram"], shard.Worker(1, 1, 2): ["api"], shard.Worker(1, 2, 2): ["correctness"]}
    shard.run_stage(7, beside, 5, tmp_path, REPO / "gates", lambda w: f"a/{w.dir}", [0, 1], ["api"], ["ncu-dram"])
    assert json.loads((tmp_path / "a/gpu1-w1/results.json").read_text())["environment"]["visible"] == "1"
    inside = {shard.Worker(0): ["ncu-dram", "api"], shard.Worker(1): ["correctness"]}
    shard.run_stage(7, inside, 5, tmp_path, REPO / "gates", lambda w: f"b/{w.dir}", [0, 1], ["api"], ["ncu-dram"])
    assert json.loads((tmp_path / "b/gpu0/results.json").read_text())["environment"]["visible"] == "0,1"


def test_the_api_gates_worker_sees_the_other_gpus_after_its_own(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """run_worker with `others`: device 0 is the worker's GPU, the rest follow (physical ids of the parent's
    CUDA_VISIBLE_DEVICES); its own GPU index stays its own."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6,7")
    script = _fake(tmp_path)
    shard.run_worker([sys.executable, str(script), "--only", "api", "--out", str(tmp_path / "s/gpu1"),
                      "--seed", "5"], 1, tmp_path, "s/gpu1", ["api"], others=[0, 1, 2])
    env = json.loads((tmp_path / "s/gpu1/results.json").read_text())["environment"]
    assert env["visible"] == "6,4,7" and env["own"] == "6"
    shard.run_worker([sys.executable, str(script), "--only", "a", "--out", str(tmp_path / "s/gpu2"),
                      "--seed", "5"], 2, tmp_path, "s/gpu2", ["a"])
    assert json.loads((tmp_path / "s/gpu2/results.json").read_text())["environment"]["visible"] == "7"


@pytest.mark.parametrize("spec, count, expected", [
    ("all", 2, [0, 1]), ("0,2", 8, [0, 2]), ("1", 8, [1]),
    ("all", 0, "no GPU"), ("0,0", 2, "distinct"), ("x", 2, "indices"), (",", 2, "distinct"),
])  # fmt: skip
def test_gpu_lists(spec: str, count: int, expected: list[int] | str) -> None:
    if isinstance(expected, str):
        with pytest.raises(ValueError, match=expected):
            shard.gpu_list(spec, lambda: count)
    else:
        assert shard.gpu_list(spec, lambda: count) == expected


def test_the_placement_keeps_groups_whole_and_balances_by_wall_time(settings: shard.ShardSettings) -> None:
    names = [g.name for g in load_config(REPO / "gates").gates_through(7)]
    seconds = {"perf-fa2": 145.0, "perf-cudnn": 17.0, "sanitizer-all": 188.0, "correctness": 23.0}
    placed = shard.plan(names, [0, 1], settings, seconds)
    assert not set(settings.first) & {g for gs in placed.values() for g in gs}  # the parent runs them first
    assert sorted(g for gs in placed.values() for g in gs) == sorted(n for n in names if n not in settings.first)
    perf_gpu = next(i for i, gs in placed.items() if "perf-fa2" in gs)
    assert set(settings.together[0]) <= set(placed[perf_gpu])
    assert "sanitizer-all" not in placed[perf_gpu]  # the two longest units on different GPUs
    for gs in placed.values():
        assert gs == sorted(gs, key=names.index)  # phase order within a worker
    load = {i: sum(settings.weight(g, seconds) for g in gs) for i, gs in placed.items()}
    assert max(load.values()) < 0.6 * sum(load.values())
    assert shard.plan(names, [3], settings, {}) == {3: [n for n in names if n not in settings.first]}


def test_physical_ids_follow_the_parents_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,GPU-abc")
    assert (shard.physical_id(0), shard.physical_id(1)) == ("3", "GPU-abc")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert shard.physical_id(1) == "1"


def _fake(tmp_path: Path) -> Path:
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE_WORKER)
    return script


def test_a_dead_worker_is_an_error_for_its_gates_with_its_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = _fake(tmp_path)
    ok = shard.run_worker([sys.executable, str(script), "--only", "a,b", "--out", str(tmp_path / "s/gpu0"),
                           "--seed", "5"], 0, tmp_path, "s/gpu0", ["a", "b"])
    assert [(r.name, r.status, r.logs) for r in ok] == [("a", Status.PASS, ("s/gpu0/logs/a.log",)),
                                                        ("b", Status.PASS, ("s/gpu0/logs/b.log",))]
    monkeypatch.setenv("FAKE_DIE", "1")
    dead = shard.run_worker([sys.executable, str(script), "--only", "c", "--out", str(tmp_path / "s/gpu1"),
                             "--seed", "5"], 1, tmp_path, "s/gpu1", ["c"])
    assert [r.status for r in dead] == [Status.ERROR] and "exit code 139" in dead[0].message
    assert dead[0].logs == ("s/gpu1/worker.log",) and "Segmentation" in (tmp_path / "s/gpu1/worker.log").read_text()
    short = shard.run_worker([sys.executable, str(script), "--only", "a", "--out", str(tmp_path / "s/gpu2"),
                              "--seed", "5"], 2, tmp_path, "s/gpu2", ["a", "z"])
    assert [(r.name, r.status) for r in short] == [("a", Status.PASS), ("z", Status.ERROR)]
    assert "stopped before this gate" in short[1].message


def test_merge_orders_by_the_configuration_and_tags_each_gate_with_its_gpu() -> None:
    config = load_config(REPO / "gates")
    names = [g.name for g in config.gates_through(2)]
    first = [GateResult("build", 1, Status.PASS)]
    shards = {0: [GateResult(n, 0, Status.PASS) for n in names[2::2]],
              1: [GateResult(n, 0, Status.PASS, details={"gpu": {"index": "1", "uuid": "GPU-x"}}) for n in names[1::2]]}
    base = RunResult("r", 2, tuple(first), {}, "", 1.0)
    merged = shard.merge(config, 2, first, shards, base)
    assert [g.name for g in merged.gates] == names
    assert [g.phase for g in merged.gates] == [g.phase for g in config.gates_through(2)]
    tags = {g.name: g.details.get("gpu") for g in merged.gates}
    assert tags["build"] is None and tags[names[1]] == {"index": "1", "uuid": "GPU-x"}
    assert tags[names[2]] == {"index": 0}


def _stand_in_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand-ins for the gates the parent runs itself (gates/shard.yaml `first`)."""
    from harness.gates.base import Gate, GateContext
    from harness.results import Check

    for name in shard.load_shard_settings(REPO / "gates").first:
        real = registry.get(name)
        assert real is not None

        class First(Gate):
            Params = real.Params

            def run(self, ctx: GateContext) -> GateResult:
                return ctx.result([Check("(stand-in)", "ok", None, None, Status.PASS)])

        monkeypatch.setitem(registry._REGISTRY, name, First)


def _stand_in_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sharded run from the repository with stand-ins for the parent's gates and the fake worker for every worker;
    an empty history, so every gate weighs gates/shard.yaml's `seconds`."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("FLASHCORE_HISTORY", str(tmp_path / "empty-history.sqlite"))
    _stand_in_build(monkeypatch)
    script = _fake(tmp_path)
    monkeypatch.setattr(shard, "worker_command", lambda phase, gates, out, seed, gates_dir: [
        sys.executable, str(script), "--only", ",".join(gates), "--out", str(out), "--seed", str(seed)])


def test_gate_over_two_gpus_writes_one_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """make gate-phase7 GPUS=0,1 with stand-in workers: one merged results.json, each gate once, its GPU named;
    then GPU 1's worker dies: its gates are ERRORs (exit 1), GPU 0's results still count. The balance reads gate
    times from the history: an empty one here, so every gate weighs gates/shard.yaml's `seconds` (the session's
    throwaway history holds whatever gates earlier tests ran, which moved the units around)."""
    _stand_in_workers(tmp_path, monkeypatch)
    assert cli.main(["gate", "--phase", "7", "--gpus", "0,1", "--seed", "7", "--out", str(tmp_path / "run"),
                     "--no-history"]) == 0
    data = json.loads((tmp_path / "run/results.json").read_text())
    names = [g.name for g in load_config(REPO / "gates").gates_through(7)]
    assert [g["name"] for g in data["gates"]] == names and data["status"] == "pass"
    gpus = {g["name"]: g["details"].get("gpu", {}).get("index") for g in data["gates"]}
    # the ncu group in the one worker of GPU 0 (which the balance may fill after it), the others beside it on GPU 1
    # (gates/shard.yaml workers_per_gpu); the split sanitizer gates in one part per worker of GPU 1 (the first
    # part's GPU is the joined gate's)
    per = shard.load_shard_settings(REPO / "gates").workers_per_gpu
    assert gpus["build"] is None and gpus["ncu-dram"] == 0 and gpus["correctness"] in (0, 1)
    for split in ("sanitizer", "sanitizer-all"):
        parts = next(g for g in data["gates"] if g["name"] == split)["details"]["parts"]
        assert [p["gpu"] for p in parts] == [1] * per
    assert data["environment"]["gpus_used"] == [0, 1] and data["environment"]["workers_per_gpu"] == per
    workers = [tmp_path / "run/shards/gpu0"] + [tmp_path / f"run/shards/gpu1-w{k}" for k in range(1, per + 1)]
    envs = [json.loads((w / "results.json").read_text())["environment"] for w in workers]
    assert all(e["seed"] == "7" and e["workers"] == str(per + 1) for e in envs)  # the run's seed; every worker's
    # share of the cores: all of the stage's workers. Each sees its own GPU; the api gate (gates/shard.yaml
    # every_gpu) runs in the ncu worker after its ncu gates and sees GPU 1 after its own, where nothing measures
    assert "api" in envs[0]["gates"].split(",")
    assert [e["visible"] for e in envs] == ["0,1"] + ["1"] * per and [e["own"] for e in envs] == ["0"] + ["1"] * per
    monkeypatch.setenv("FAKE_DIE", "1")
    assert cli.main(["gate", "--phase", "7", "--gpus", "0,1", "--out", str(tmp_path / "dead"), "--no-history"]) == 1
    data = json.loads((tmp_path / "dead/results.json").read_text())
    status = {g["name"]: g["status"] for g in data["gates"]}
    dead = [n for n, s in status.items() if s == "error"]
    # GPU 1's perf part (its one worker of that stage; a joined gate names its part) and each worker beside ncu
    assert dead and all(re.search(rf"(the worker|worker \d/{per}) on GPU 1 ", g["message"])
                        for g in data["gates"] if g["name"] in dead)
    assert [n for n, s in status.items() if s == "pass"]  # GPU 0's share still reported
    out = capsys.readouterr().out
    assert re.search(rf"\[shard\] GPU 1 worker 1/{per} done in \d+ s: 0/", out)
    assert re.search(rf"\[shard\] critical path .*stage 2/2, {per} workers per GPU: GPU \d", out)


def test_one_gpu_runs_several_workers_and_one_dead_worker_fails_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """make gate-phase7 GPUS=0 with stand-in workers: the perf group, then the ncu group, each alone on the GPU (the
    host-only structure gates in a second worker beside ncu), then workers_per_gpu workers sharing it, each sanitizer
    gate in one part per worker; every gate once in the merged results. Then the worker running correctness dies:
    its gates are ERRORs naming it, the run fails, the other workers' gates still pass."""
    _stand_in_workers(tmp_path, monkeypatch)
    settings = shard.load_shard_settings(REPO / "gates")
    per = settings.workers_per_gpu
    assert cli.main(["gate", "--phase", "7", "--gpus", "0", "--out", str(tmp_path / "run"), "--no-history"]) == 0
    data = json.loads((tmp_path / "run/results.json").read_text())
    names = [g.name for g in load_config(REPO / "gates").gates_through(7)]
    assert [g["name"] for g in data["gates"]] == names and data["status"] == "pass"
    parts = next(g for g in data["gates"] if g["name"] == "sanitizer-all")["details"]["parts"]
    assert len(parts) == per and data["environment"]["workers_per_gpu"] == per
    stages = data["environment"]["stages"]
    measuring = ["GPU 0 worker 1/2", "GPU 0 worker 2/2"]
    assert [list(st) for st in stages] == [["GPU 0"], measuring, [f"GPU 0 worker {k}/{per}" for k in range(1, per + 1)]]
    assert set(stages[0]["GPU 0"]) == set(settings.isolated)
    assert set(stages[1][measuring[0]]) == set(settings.measures) - set(settings.isolated)
    assert set(stages[1][measuring[1]]) == set(settings.host_only)
    assert not set(settings.host_only) & {g for gs in stages[2].values() for g in gs}
    shards = tmp_path / "run/shards"
    alone = [json.loads((shards / d / "results.json").read_text())["environment"]
             for d in ("isolated-gpu0", "measures-gpu0-w1", "measures-gpu0-w2")]
    shared = [json.loads((shards / f"gpu0-w{k}/results.json").read_text())["environment"] for k in range(1, per + 1)]
    assert [e["workers"] for e in alone + shared] == ["1", "2", "2"] + [str(per)] * per  # their share of the cores
    held = sorted(part for e in shared for part in e["parts"].split(","))
    assert held == sorted(f"{g}={k}/{per}" for g in ("sanitizer", "sanitizer-all") for k in range(1, per + 1))
    assert all(len(e["parts"].split(",")) == 2 for e in shared)  # each worker one part of each
    text = data["environment"]["critical_path"]["text"]
    assert "isolated, alone on the host: GPU 0" in text and "measuring, alone on the GPU, host-only gates beside it: " \
        "GPU 0 worker" in text
    assert re.search(rf"stage 3/3, {per} workers per GPU: GPU 0 worker \d/{per} \d+ s \(", text)
    capsys.readouterr()
    monkeypatch.setenv("FAKE_DIE_GATE", "correctness")
    assert cli.main(["gate", "--phase", "7", "--gpus", "0", "--out", str(tmp_path / "dead"), "--no-history"]) == 1
    data = json.loads((tmp_path / "dead/results.json").read_text())
    assert [g["name"] for g in data["gates"]] == names and data["status"] != "pass"
    dead = [g for g in data["gates"] if g["status"] != "pass"]
    assert "correctness" in [g["name"] for g in dead]
    assert all(re.search(rf"worker \d/{per} on GPU 0 wrote no results", g["message"]) for g in dead)
    assert len(dead) < len(names) - per  # the other workers' gates still pass
    assert re.search(rf"\[shard\] GPU 0 worker \d/{per} done in \d+ s: 0/", capsys.readouterr().out)


def test_only_and_its_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(REPO)
    _stand_in_build(monkeypatch)
    assert cli.main(["gate", "--phase", "1", "--only", "build", "--out", str(tmp_path / "o"), "--no-history"]) == 0
    assert [g["name"] for g in json.loads((tmp_path / "o/results.json").read_text())["gates"]] == ["build"]
    assert cli.main(["gate", "--phase", "1", "--only", "perf-fa2", "--out", str(tmp_path / "p")]) == 2
    assert "not a gate of phases 1..1" in capsys.readouterr().err
    assert cli.main(["gate", "--phase", "1", "--gpus", "nope", "--out", str(tmp_path / "q")]) == 2
    assert cli.main(["gate", "--phase", "1", "--gpus", "0", "--only", "build", "--out", str(tmp_path / "q")]) == 2


def test_the_report_has_a_gpu_column_only_for_a_run_over_several_gpus() -> None:
    from harness.render import render_html

    gpu = {"index": "1", "name": "NVIDIA H200", "uuid": "GPU-1234", "sm_mhz": 1980.0, "power_w": 512.0}
    run = RunResult("r", 1, (GateResult("build", 1, Status.PASS),
                             GateResult("correctness", 1, Status.PASS, details={"gpu": gpu})), {}, "", 1.0)
    html = render_html(run)
    assert "<th>GPU</th>" in html and "1 · NVIDIA H200" in html and "uuid GPU-1234, sm_mhz 1980.0" in html
    assert "<th>GPU</th>" not in render_html(RunResult("r", 1, (GateResult("build", 1, Status.PASS),), {}, "", 1.0))


# ---- over runners ----------------------------------------------------------------------------------------------


def test_runner_shares_cover_the_phase_once_and_build_everywhere(settings: shard.ShardSettings) -> None:
    names = [g.name for g in load_config(REPO / "gates").gates_through(7)]
    shares = [shard_runners.shard_gates(names, i, 3, settings) for i in (1, 2, 3)]
    assert all(set(settings.first) <= set(s) for s in shares)
    rest = [g for s in shares for g in s if g not in settings.first]
    assert sorted(rest) == sorted(n for n in names if n not in settings.first)  # each other gate on one runner
    assert shares == [shard_runners.shard_gates(names, i, 3, settings) for i in (1, 2, 3)]  # all runners agree
    assert shard_runners.shard_gates(names, 1, 1, settings) == names
    for bad in ("3/2", "0/2", "a/b", "2"):
        with pytest.raises(ValueError, match="--shard"):
            shard_runners.parse_shard(bad)


def _stand_in_all(monkeypatch: pytest.MonkeyPatch, phase: int) -> None:
    from harness.gates.base import Gate, GateContext
    from harness.results import Check

    for spec in load_config(REPO / "gates").gates_through(phase):
        real = registry.get(spec.name)
        assert real is not None

        class StandIn(Gate):
            Params = real.Params

            def run(self, ctx: GateContext) -> GateResult:
                return ctx.result([Check("(stand-in)", "ok", None, None, Status.PASS)])

        monkeypatch.setitem(registry._REGISTRY, spec.name, StandIn)


def test_shards_run_by_two_runners_merge_into_one_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(REPO)
    _stand_in_all(monkeypatch, 7)
    for i in (1, 2):
        assert cli.main(["gate", "--phase", "7", "--shard", f"{i}/2", "--run-id", "ci-7", "--out",
                         str(tmp_path / f"s{i}"), "--no-history"]) == 0
    one, two = (json.loads((tmp_path / f"s{i}/results.json").read_text()) for i in (1, 2))
    assert one["environment"]["shard"] == "1/2" and len(one["gates"]) < 21
    assert (one["run_id"], two["run_id"]) == ("ci-7-1of2", "ci-7-2of2")  # one run, two shares, one seed
    assert one["environment"]["shard_run"] == "ci-7" and one["environment"]["seed"] == two["environment"]["seed"]
    files = [str(tmp_path / f"s{i}/results.json") for i in (1, 2)]
    assert cli.main(["merge", "--phase", "7", "--out", str(tmp_path / "m"), *files]) == 0
    merged = json.loads((tmp_path / "m/results.json").read_text())
    names = [g.name for g in load_config(REPO / "gates").gates_through(7)]
    assert [g["name"] for g in merged["gates"]] == names and merged["status"] == "pass"
    assert merged["run_id"] == "ci-7" and "shard" not in merged["environment"]
    build = merged["gates"][0]
    assert build["details"]["ran_on"] == 2 and {g["details"]["shard"] for g in merged["gates"]} == {"1/2", "2/2"}
    assert "<th>GPU</th>" in (tmp_path / "m/index.html").read_text()
    # one runner's report missing: its gates are ERRORs, the merge fails
    assert cli.main(["merge", "--phase", "7", "--out", str(tmp_path / "m1"), files[0]]) == 1
    lost = [g for g in json.loads((tmp_path / "m1/results.json").read_text())["gates"] if g["status"] == "error"]
    assert lost and all("no shard ran this gate" in g["message"] for g in lost)
    # a failing build on one runner is the merged build's verdict
    bad = json.loads(Path(files[1]).read_text())
    bad["gates"][0]["checks"][0]["status"] = bad["gates"][0]["status"] = bad["status"] = "fail"
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    assert cli.main(["merge", "--phase", "7", "--out", str(tmp_path / "m2"), files[0], str(tmp_path / "bad.json")]) == 1
    assert json.loads((tmp_path / "m2/results.json").read_text())["gates"][0]["status"] == "fail"
    capsys.readouterr()
    assert cli.main(["merge", "--phase", "6", "--out", str(tmp_path / "m3"), *files]) == 2
    assert "not a phase-6 run" in capsys.readouterr().err
    assert cli.main(["gate", "--phase", "7", "--shard", "1/2", "--only", "build", "--out", str(tmp_path / "x")]) == 2
    assert cli.main(["gate", "--phase", "7", "--shard", "1/2", "--gpus", "0", "--out", str(tmp_path / "x")]) == 2
    assert "choose one" in capsys.readouterr().err
    assert cli.main(["gate", "--phase", "7", "--shard", "1/2", "--out", str(tmp_path / "x")]) == 2
    assert "--shard needs --run-id" in capsys.readouterr().err
    assert cli.main(["gate", "--phase", "7", "--shard", "1/2", "--run-id", "../up", "--out", str(tmp_path / "x")]) == 2
    assert "letters, digits" in capsys.readouterr().err


def test_the_balance_reads_each_gates_latest_wall_time_from_the_history(tmp_path: Path) -> None:
    from harness.history import store

    db = store.open_db(tmp_path / "h.sqlite")
    for run_id, started, secs in (("r1", "2026-01-01T00:00:00Z", 50.0), ("r2", "2026-01-02T00:00:00Z", 40.0)):
        store.record(db, {"run_id": run_id, "started_at": started, "phase": 1, "status": "pass", "environment": {},
                          "gates": [{"name": "build", "phase": 1, "status": "pass", "elapsed_s": secs}]}, "x")
    db.close()
    assert shard.last_gate_seconds(tmp_path / "h.sqlite") == {"build": 40.0}
    assert shard.last_gate_seconds(tmp_path / "none.sqlite") == {}
    (tmp_path / "junk.sqlite").write_bytes(b"not sqlite" * 100)
    assert shard.last_gate_seconds(tmp_path / "junk.sqlite") == {}
