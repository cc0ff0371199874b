"""Phase 5 on the CPU: gates/tune.yaml, the candidates of a bucket, the tuner's resume file and table merge, and the
autotune-table gate's verdicts, each of which must turn red on its planted fault (stale kernel, other GPU, invalid
entry, missing bucket, broken file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flashcore.points import Point
from flashcore.tuning import DEFAULT, Entry, Table, TableError, TileConfig, dump_tables, parse_tables
from harness.config import load_config
from harness.gates.autotune_table import Host, verdict_table
from harness.gates.base import GateContext
from harness.results import Check, Status
from harness.schema import ConfigError
from harness.tune import runner
from harness.tune.settings import Space, load_tune_settings
from harness.tune.space import bucket, candidates

TUNED_POINT = Point(128, 3, 2, True, False, 32)
HOST = Host("NVIDIA H100 80GB HBM3", 132, "k1", {64: (128,), 128: (128, 176), 256: (80,)},
            {128: (Point(128, 2, 2, True, False, 32), Point(176, 2, 2, True, False, 32), TUNED_POINT)})


def test_the_repository_tune_file_loads(gates_dir: Path) -> None:
    config = load_config(gates_dir)
    s = load_tune_settings(config)
    assert (s.space.block_n, s.space.schedule, s.space.l2_section_pct) == ("compiled", ("static", "dynamic"),
                                                                         (20, 33, 50))
    assert sorted(s.space.points) == [64, 128, 256]  # 32, 96, 160, 192, 224: no tune shape, defaults only
    # every head dim's default point is in its space (so the tuner's points are variations around it)
    assert Point(128, 2, 3, True, False, 32) in s.space.points[64]
    assert {Point(128, 2, 2, True, False, 32), Point(176, 2, 2, True, False, 32)} <= set(s.space.points[128])
    assert Point(80, 2, 2, True, False, 32) in s.space.points[256]
    assert s.space.decode_split_ctas_per_sm and {bucket(w).mode for w in s.workloads} == {"prefill", "decode"}
    assert s.adopt_min_speedup >= 1.0 and s.table == "flashcore/tuned.yaml"
    tuned = {bucket(w) for w in s.workloads}  # shapes sharing a bucket are weighed together (harness/tune/select.py)
    checks = [config.workloads[n] for n in config.sets["tune-check"]]
    assert {bucket(w) for w in checks} <= tuned, "autotune-gain shapes must fall in tuned buckets"
    shapes = {(w.batch, w.heads_q, w.heads_kv, w.seqlen_q, w.seqlen_k, w.head_dim, w.dtype, w.causal)
              for w in s.workloads}
    assert not any((w.batch, w.heads_q, w.heads_kv, w.seqlen_q, w.seqlen_k, w.head_dim, w.dtype, w.causal) in shapes
                   for w in checks), "autotune-gain must judge shapes the tuner never ran"
    phase5 = {g.name: g.params for g in config.phase(5).gates}
    assert phase5["autotune-gain"].min_ratio == 0.97 and phase5["autotune-gain"].min_geomean == 1.0
    assert phase5["autotune-gain"].gated == ("flashcore-default",)


@pytest.mark.parametrize("edit, key", [
    ("adopt_min_speedup: 0.9", "adopt_min_speedup"),
    ("table: flashcore/tuned.txt", "table"),
    ("workloads: [no-such-shape]", "workloads"),
])  # fmt: skip
def test_a_bad_tune_file_names_the_key(gates_dir: Path, edit: str, key: str) -> None:
    path = gates_dir / "tune.yaml"
    lines = path.read_text().splitlines()
    field = edit.split(":")[0]
    path.write_text("\n".join(edit if line.startswith(field + ":") else line for line in lines) + "\n")
    with pytest.raises(ConfigError, match=key):
        load_tune_settings(load_config(gates_dir))


def test_candidates_are_checked_before_they_are_run() -> None:
    valid, rejected = candidates(Space("compiled", ("static", "dynamic"), (20, 50)), (128, 176))
    assert TileConfig(176, "dynamic", 20) in valid and TileConfig(128, "static") in valid
    assert DEFAULT not in valid and len(valid) == 2 * 3 and not rejected
    valid, rejected = candidates(Space((128, 160), ("static",), (33,)), (128, 176))
    assert valid == [TileConfig(128, "static")]
    assert [(c.block_n, "not compiled" in why) for c, why in rejected] == [(160, True)]
    space = Space((128,), ("static",), (33,), decode_split_ctas_per_sm=(0.5, 0.75))
    assert candidates(space, (128, 176)) == ([TileConfig(128, "static")], [])  # prefill: no split targets
    valid, _ = candidates(space, (128, 176), decode=True)
    assert valid == [TileConfig(128, "static"), TileConfig(split_ctas_per_sm=0.5), TileConfig(split_ctas_per_sm=0.75)]


def test_resume_keeps_finished_shapes_and_drops_a_cut_line(tmp_path: Path) -> None:
    (tmp_path / runner.PROGRESS).write_text(json.dumps({"workload": "a", "x": 1}) + "\n" + '{"workload": "b", "x')
    assert list(runner.done_shapes(tmp_path)) == ["a"]
    assert runner.done_shapes(tmp_path / "nothing") == {}


def test_merge_replaces_this_gpus_table_and_keeps_the_others(tmp_path: Path) -> None:
    path = tmp_path / "tuned.yaml"
    path.write_text(dump_tables([Table("A", 132, "old"), Table("B", 114, "b")]))
    runner.merge_table(path, Table("A", 132, "new"))
    assert sorted((t.gpu, t.kernel_id) for t in parse_tables(path.read_text())) == [("A", "new"), ("B", "b")]


# ---- autotune-table verdicts ----------------------------------------------------------------------------------------


def _good_table(gates_dir: Path, **changes: object) -> str:
    config = load_config(gates_dir)
    t = Table(changes.get("gpu", HOST.gpu), changes.get("sms", HOST.sm_count),  # type: ignore[arg-type]
              changes.get("kid", HOST.kernel_id))  # type: ignore[arg-type]
    for w in load_tune_settings(config).workloads:
        t.entries[bucket(w)] = Entry(bucket(w), TileConfig(128, "dynamic") if w.head_dim == 128 else DEFAULT, 1.01)
    return dump_tables([t])


def _checks(gates_dir: Path, text: str | None) -> dict[str, Status]:
    config = load_config(gates_dir)
    wls = [config.workloads[n] for n in config.sets["tune-check"]]
    out: dict[str, Status] = {}
    for c in verdict_table("flashcore/tuned.yaml", text, HOST, wls):
        out[f"{c.workload}:{c.metric}"] = c.status
    return out


def test_a_good_table_passes(gates_dir: Path) -> None:
    got = _checks(gates_dir, _good_table(gates_dir))
    assert got and all(s is Status.PASS for s in got.values())


@pytest.mark.parametrize("fault, metric", [
    ({"kid": "k0"}, "(table):kernel_id"),
    ({"gpu": "NVIDIA H200"}, "(table):table_for_gpu"),
    ({"sms": 114}, "(table):table_for_gpu"),
])  # fmt: skip
def test_a_stale_or_foreign_table_fails(gates_dir: Path, fault: dict, metric: str) -> None:  # type: ignore[type-arg]
    got = _checks(gates_dir, _good_table(gates_dir, **fault))
    assert got[metric] is Status.FAIL


def test_an_invalid_entry_fails(gates_dir: Path) -> None:
    text = _good_table(gates_dir).replace("block_n: 128", "block_n: 96", 1)  # a wgmma width, but not compiled
    assert _checks(gates_dir, text)["(table):invalid_entries"] is Status.FAIL


@pytest.mark.parametrize("point, passes", [
    (TUNED_POINT.name, True),                  # compiled into this library
    ("n128-s2-w2-pp0-re0-r32", False),         # valid, but not compiled (kernel/tuned_points.inc lacks it)
    ("n176-s3-w2-pp1-re0-r32", False),         # breaks a rule: 297 KB of shared memory
])  # fmt: skip
def test_an_entry_point_must_be_valid_and_compiled(gates_dir: Path, point: str, passes: bool) -> None:
    tables = parse_tables(_good_table(gates_dir))
    key = next(k for k in tables[0].entries if k.head_dim == 128)
    tables[0].entries[key] = Entry(key, TileConfig(point=point), 1.03)
    if not passes and "s3" in point and "n176" in point:  # the parser itself refuses a point that breaks a rule
        with pytest.raises(TableError, match="shared memory"):
            parse_tables(dump_tables(tables))
        return
    status = _checks(gates_dir, dump_tables(tables))["(table):invalid_entries"]
    assert status is (Status.PASS if passes else Status.FAIL)


def test_a_missing_bucket_fails(gates_dir: Path) -> None:
    tables = parse_tables(_good_table(gates_dir))
    dropped = next(k for k in tables[0].entries if k.head_dim == 256)
    del tables[0].entries[dropped]
    got = _checks(gates_dir, dump_tables(tables))
    assert got["check-d256:bucket_entry"] is Status.FAIL
    assert got["check-d128:bucket_entry"] is Status.PASS


@pytest.mark.parametrize("text", [None, "version: 1\ntables: {}\n", "::"])
def test_a_missing_or_broken_file_fails(gates_dir: Path, text: str | None) -> None:
    got = _checks(gates_dir, text)
    assert list(got.values()) == [Status.FAIL]


def test_make_tune_arguments_reach_the_tuner_and_a_cpu_host_is_refused(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import torch

    from harness import cli

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli.main(["tune", "--out", str(tmp_path / "t"), "--resume", str(tmp_path / "t")]) == 1
    assert "no CUDA GPU" in capsys.readouterr().err


def test_tune_build_only_needs_no_gpu_but_the_default_library(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--build-only (make tune-build) runs the compile step on a host without a GPU, and stops there; without the
    default library (make build's) it says so and fails."""
    import torch

    from flashcore import _lib
    from harness import cli
    from harness.tune import runner
    from harness.tune.build import PointBuild

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(_lib, "library_path", lambda: tmp_path / "missing.so")
    assert cli.main(["tune", "--build-only"]) == 1
    assert "make build first" in capsys.readouterr().err
    lib = tmp_path / "libflashcore.so"
    lib.write_bytes(b"")
    monkeypatch.setattr(_lib, "library_path", lambda: lib)
    calls: list[int] = []

    def fake_build(config, settings) -> PointBuild:  # type: ignore[no-untyped-def]
        calls.append(1)
        return PointBuild(library=tmp_path / "tune.so")

    monkeypatch.setattr(runner, "_build_points", fake_build)
    assert cli.main(["tune", "--build-only"]) == 0
    assert calls == [1] and "--build-only: 0 points" in capsys.readouterr().out


def test_autotune_gain_judges_only_buckets_the_table_changes(gates_dir: Path) -> None:
    from harness.gates.autotune_gain import same_launch_check, split_same_launch

    config = load_config(gates_dir)
    wls = [config.workloads[n] for n in config.sets["tune-check"]]
    tuned = TileConfig(176, "dynamic", 50)

    def config_of(w):  # type: ignore[no-untyped-def]
        return tuned if w.name == "check-d128-causal" else DEFAULT

    judged, same = split_same_launch(wls, config_of, planted=False)
    assert [w.name for w in judged] == ["check-d128-causal"] and len(same) == len(wls) - 1
    assert same_launch_check(same[0]).status is Status.PASS
    # a planted (slow-kernel) fault makes every launch differ from the default: all are judged, so it turns red
    judged, same = split_same_launch(wls, config_of, planted=True)
    assert len(judged) == len(wls) and same == []


# ---- the table the library would use (flashcore.tuning's resolution, environment included) ---------------------


def _effect(gates_dir: Path, environ: dict[str, str], used_text: str | None, committed_text: str | None) -> Check:
    from harness.gates.autotune_table import in_effect

    return in_effect(environ, Path("/used.yaml"), used_text, Path("flashcore/tuned.yaml"), committed_text, HOST)


def test_the_committed_table_in_effect_passes(gates_dir: Path) -> None:
    good = _good_table(gates_dir)
    assert _effect(gates_dir, {}, good, good).status is Status.PASS


@pytest.mark.parametrize("attack, environ, used, why", [
    ("tuning-off", {"FLASHCORE_TUNE": "0"}, "good", "FLASHCORE_TUNE=0"),
    ("another-table", {"FLASHCORE_TUNE_TABLE": "/used.yaml"}, "other", "FLASHCORE_TUNE_TABLE"),
    ("table-missing", {}, None, "does not exist"),
    ("table-stale", {}, "stale", "measured on kernel k0"),
    ("table-foreign", {}, "foreign", "no table for NVIDIA H100"),
])  # fmt: skip
def test_a_table_not_in_effect_is_an_error(gates_dir: Path, attack: str, environ: dict[str, str],
                                           used: str | None, why: str) -> None:
    texts = {"good": _good_table(gates_dir), "other": _good_table(gates_dir, sms=114),
             "stale": _good_table(gates_dir, kid="k0"), "foreign": _good_table(gates_dir, gpu="NVIDIA H200")}
    used_text = texts[used] if used else None
    committed = used_text if attack in ("table-stale", "table-foreign") else texts["good"]
    check = _effect(gates_dir, environ, used_text, committed)
    assert check.status is Status.ERROR and why in check.message, attack


class _Props:
    name, multi_processor_count = HOST.gpu, HOST.sm_count


def _fake_fc() -> object:
    from types import SimpleNamespace

    api = SimpleNamespace(kernel_id=lambda: HOST.kernel_id, SUPPORTED_HEAD_DIMS=tuple(HOST.compiled),
                          block_n_options=lambda d: HOST.compiled[d], compiled_points=lambda d: HOST.points.get(d, ()))
    return SimpleNamespace(api=api)


@pytest.fixture
def library_table(gates_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repo root whose committed table is good for HOST, read by the library through FLASHCORE_TUNE_TABLE."""
    import torch

    root = tmp_path / "root"
    (root / "flashcore").mkdir(parents=True)
    (root / "flashcore/tuned.yaml").write_text(_good_table(gates_dir))
    monkeypatch.setenv("FLASHCORE_TUNE_TABLE", str(root / "flashcore/tuned.yaml"))
    monkeypatch.delenv("FLASHCORE_TUNE", raising=False)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda _: _Props())
    return root


def _gate_context(gates_dir: Path, root: Path, gate: str) -> GateContext:
    config = load_config(gates_dir)
    spec = next(g for g in config.phase(5).gates if g.name == gate)
    return GateContext(spec=spec, config=config, run_dir=root / "run", repo_root=root, seed=0)


def test_the_table_gate_judges_what_the_library_reads(gates_dir: Path, library_table: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.gates.autotune_table import AutotuneTableGate

    ctx = _gate_context(gates_dir, library_table, "autotune-table")
    assert AutotuneTableGate().measure(ctx, _fake_fc()).status is Status.PASS  # type: ignore[arg-type]
    monkeypatch.setenv("FLASHCORE_TUNE", "0")  # the file is still good; the library no longer reads it
    result = AutotuneTableGate().measure(ctx, _fake_fc())  # type: ignore[arg-type]
    assert result.status is Status.ERROR and "FLASHCORE_TUNE=0" in result.message


@pytest.mark.parametrize("attack", ["tuning-off", "stale-table"])
def test_autotune_gain_is_an_error_when_the_table_is_not_in_effect(gates_dir: Path, library_table: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   attack: str) -> None:
    """Not a pass on "same launch" checks: with tuning off every bucket is the default's launch."""
    from harness.gates import autotune_gain

    if attack == "tuning-off":
        monkeypatch.setenv("FLASHCORE_TUNE", "0")
    else:
        (library_table / "flashcore/tuned.yaml").write_text(_good_table(gates_dir, kid="k0"))
    monkeypatch.setattr(autotune_gain, "flashcore_for", lambda ctx: _fake_fc())
    result = autotune_gain.AutotuneGainGate().run(_gate_context(gates_dir, library_table, "autotune-gain"))
    assert result.status is Status.ERROR and [c.metric for c in result.checks] == ["table_in_effect"]


def test_the_run_records_every_flashcore_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness import env

    assert env.flashcore_variables({"FLASHCORE_TUNE": "0", "FLASHCORE_TUNE_TABLE": "/t.yaml", "PATH": "/bin"}) == {
        "FLASHCORE_TUNE": "0", "FLASHCORE_TUNE_TABLE": "/t.yaml"}
    assert env.flashcore_variables({"PATH": "/bin"}) == "none set"
    monkeypatch.setenv("FLASHCORE_TUNE", "0")
    collected = env.collect(Path("."))
    assert collected["flashcore_env"]["FLASHCORE_TUNE"] == "0"
    from harness.render.format import flat_environment

    assert ("flashcore_env.FLASHCORE_TUNE", "0") in flat_environment(collected)  # a line of the report's section
