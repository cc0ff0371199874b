"""flashcore/tuning.py: tile-configuration points and their rules, shape buckets, the table file, and the lookup a
call makes (fallback to the defaults, said once); the C mirror and the kernel id the table is keyed by."""

from __future__ import annotations

import ctypes
import hashlib
import re
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from flashcore import _lib, tuning
from flashcore.tuning import DEFAULT, Entry, ShapeKey, Table, TableError, TileConfig, dump_tables, parse_tables

REPO = Path(__file__).resolve().parent.parent
KEY = ShapeKey(128, "bf16", True, "prefill", 1, 2048)


@pytest.mark.parametrize("config, rule", [
    (TileConfig(block_n=160), "not compiled"),
    (TileConfig(block_n=-1), ">= 0"),
    (TileConfig(schedule="fastest"), "schedule"),
    (TileConfig(l2_section_pct=101), "0..100"),
    (TileConfig(schedule="static", l2_section_pct=20), "dynamic order only"),
    (TileConfig(num_splits=129), "0..128"),
    (TileConfig(num_splits=True), "num_splits"),  # type: ignore[arg-type]
    (TileConfig(split_ctas_per_sm=-0.5), ">= 0"),
    (TileConfig(split_ctas_per_sm=float("nan")), ">= 0"),
    (TileConfig(split_ctas_per_sm=True), "split_ctas_per_sm"),  # type: ignore[arg-type]
    (TileConfig(num_splits=8, split_ctas_per_sm=0.5), "set one"),
])  # fmt: skip
def test_an_invalid_point_names_the_rule_it_breaks(config: TileConfig, rule: str) -> None:
    problems = config.problems((128, 176))
    assert problems and rule in " ".join(problems)


def test_valid_points_and_their_c_fields() -> None:
    assert TileConfig(176, "dynamic", 20).problems((128, 176)) == []
    assert DEFAULT.is_default and DEFAULT.label == "default"
    assert TileConfig(128, "static").c_fields() == {"block_n": 128, "schedule": 1, "l2_section_pct": 0, "point": 0}
    assert TileConfig(0, "dynamic", 50).label == "dynamic/l2 50%"
    assert TileConfig(num_splits=8).label == "splits 8" and "num_splits" not in TileConfig(num_splits=8).c_fields()


DECODE = ShapeKey(128, "bf16", False, "decode", 4, 65536)


def test_a_split_target_entry_survives_dump_and_parse_and_zero_is_not_written() -> None:
    t = _table()
    t.entries[DECODE] = Entry(DECODE, TileConfig(split_ctas_per_sm=96 / 132), 1.05)
    text = dump_tables([t])
    assert text.count("split_ctas_per_sm") == 1 and "num_splits" not in text  # the prefill entry: the rule
    back = parse_tables(text)[0]
    assert back.entries[DECODE].config == TileConfig(split_ctas_per_sm=96 / 132)  # exact: the float's repr
    assert back.entries[KEY].config.split_ctas_per_sm == 0


def test_a_split_count_in_a_table_entry_is_refused_with_the_way_out() -> None:
    t = _table()
    t.entries[DECODE] = Entry(DECODE, TileConfig(num_splits=12), 1.05)
    with pytest.raises(TableError, match=r"entries\[0\]\.num_splits = 12: .*split_ctas_per_sm.*make tune"):
        parse_tables(dump_tables([t]), "t.yaml")


def test_a_split_target_on_a_prefill_bucket_is_refused() -> None:
    t = _table(split_ctas_per_sm=0.5)
    with pytest.raises(TableError, match=r"split_ctas_per_sm = 0.5: decode buckets only"):
        parse_tables(dump_tables([t]), "t.yaml")


def test_shape_buckets() -> None:
    assert tuning.shape_key(128, "bf16", True, 32, 8, 4096, 4096) == ShapeKey(128, "bf16", True, "prefill", 4, 4096)
    assert tuning.shape_key(64, "fp16", False, 8, 8, 1, 5000).mode == "decode"
    assert tuning.seqlen_bucket(1) == 1024 and tuning.seqlen_bucket(2049) == 4096
    assert tuning.seqlen_bucket(10**6) == 131072  # the last bucket holds every longer length


def _table(gpu: str = "GPU X", sms: int = 132, kid: str = "abc", **cfg: object) -> Table:
    t = Table(gpu, sms, kid, "2026-11-23T00:00:00Z", "deadbeef")
    t.entries[KEY] = Entry(KEY, TileConfig(**cfg) if cfg else TileConfig(128, "dynamic", 20), 1.031)  # type: ignore
    return t


def test_a_table_survives_dump_and_parse() -> None:
    tables = [_table(), _table("GPU Y", 114, "def", block_n=0, schedule="static")]
    back = parse_tables(dump_tables(tables), "t.yaml")
    assert [(t.gpu, t.sm_count, t.kernel_id) for t in back] == [("GPU X", 132, "abc"), ("GPU Y", 114, "def")]
    assert back[0].entries[KEY].config == TileConfig(128, "dynamic", 20) and back[0].entries[KEY].speedup == 1.031


@pytest.mark.parametrize("edit, key", [
    (lambda t: t.replace("version: 2", "version: 3"), "version"),
    (lambda t: t.replace("kernel_id: abc", "kernel_id: 7"), "kernel_id"),
    (lambda t: t.replace("  block_n: 128", "  block_n: 128\n    colour: red"), "colour"),
    (lambda t: t.replace("schedule: dynamic", "schedule: sideways"), "entries[0]"),
    (lambda t: t.replace("seqlen: 2048", "seqlen: 3000"), "entries[0]"),
    (lambda t: t + t[t.index("  - head_dim"):], "a second entry"),
    (lambda t: "tables: [", "not YAML"),
])  # fmt: skip
def test_a_bad_table_names_the_key(edit, key: str) -> None:  # type: ignore[no-untyped-def]
    text = dump_tables([_table()])
    with pytest.raises(TableError, match=re.escape(key)):
        parse_tables(edit(text), "t.yaml")


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A clean lookup state and a table path of our own."""
    tuning._warned.clear()
    tuning._load.cache_clear()
    path = tmp_path / "tuned.yaml"
    monkeypatch.setenv("FLASHCORE_TUNE_TABLE", str(path))
    monkeypatch.delenv("FLASHCORE_TUNE", raising=False)
    return path


def _lookup(key: ShapeKey = KEY, gpu: str = "GPU X", sms: int = 132, kid: str = "abc") -> tuple[TileConfig, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = tuning.config_for(key, gpu, sms, kid)
    return got, [str(w.message) for w in caught if issubclass(w.category, tuning.TuningWarning)]


def test_lookup_finds_the_entry_for_this_gpu_and_kernel(fresh: Path) -> None:
    fresh.write_text(dump_tables([_table()]))
    assert _lookup() == (TileConfig(128, "dynamic", 20), [])


@pytest.mark.parametrize("setup, call, says", [
    (None, {}, "no tuned table"),
    ("table", {"gpu": "GPU Z"}, "no entry for GPU Z with 132 SMs"),
    ("table", {"sms": 114}, "with 114 SMs"),
    ("table", {"kid": "new"}, "measured on kernel abc, this library is kernel new"),
    ("table", {"key": ShapeKey(64, "bf16", False, "prefill", 1, 8192)}, "no tuned entry for that bucket"),
    ("broken", {}, "does not parse"),
])  # fmt: skip
def test_every_fallback_runs_the_defaults_and_says_so_once(fresh: Path, setup: str | None, call: dict,  # type: ignore
                                                            says: str) -> None:
    if setup == "table":
        fresh.write_text(dump_tables([_table()]))
    elif setup == "broken":
        fresh.write_text("version: 1\ntables: nope\n")
    got, said = _lookup(**call)
    assert got == DEFAULT and len(said) == 1 and says in said[0]
    again, said_again = _lookup(**call)
    assert again == DEFAULT and said_again == []  # once per process


def test_a_version_1_table_runs_the_defaults_and_says_to_retune(fresh: Path) -> None:
    """A table of split counts (the format before split targets) is not an error in a call: the defaults run and
    the warning says why and what to run."""
    fresh.write_text(dump_tables([_table()]).replace("version: 2", "version: 1"))
    got, said = _lookup()
    assert got == DEFAULT and len(said) == 1
    assert "version-1 table stores a split-KV count per decode bucket" in said[0] and "make tune" in said[0]


def test_flashcore_tune_0_means_defaults_silently(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fresh.write_text(dump_tables([_table()]))
    monkeypatch.setenv("FLASHCORE_TUNE", "0")
    assert _lookup() == (DEFAULT, [])


def test_the_packaged_table_parses_when_present() -> None:
    if tuning.PACKAGED_TABLE.is_file():
        assert parse_tables(tuning.PACKAGED_TABLE.read_text(), str(tuning.PACKAGED_TABLE))


# ---- the C side ----------------------------------------------------------------------------------------------------


def _c_struct_fields(header: str, name: str) -> list[str]:
    body = re.search(r"typedef struct " + name + r" \{(.*?)\} " + name + ";", header, re.S)
    assert body, name
    fields = []
    for line in body.group(1).splitlines():
        code = line.split("//")[0].strip()
        if m := re.match(r"(?:const\s+)?\w+\s*\*?\s*(.+);$", code):  # type a, b[3], *c;
            fields += [re.sub(r"[\s\*]|\[\d+\]", "", d) for d in m.group(1).split(",")]
    return fields


def test_ctypes_mirrors_match_the_header() -> None:
    header = (REPO / "kernel/flashcore.h").read_text()
    assert _c_struct_fields(header, "fc_params") == [f[0] for f in _lib.FcParams._fields_]
    assert _c_struct_fields(header, "fc_plan_info") == [f[0] for f in _lib.FcPlanInfo._fields_]
    assert _c_struct_fields(header, "fc_append_params") == [f[0] for f in _lib.FcAppendParams._fields_]
    assert ctypes.sizeof(_lib.FcParams) % 8 == 0


def test_make_kernel_id_hashes_the_kernel_sources() -> None:
    got = subprocess.run(["make", "-s", "kernel-id"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    sources = [p for ext in ("*.h", "*.cuh", "*.cu") for p in (REPO / "kernel").glob(ext)
               if p.name not in {"driver.cu", "naive.cu", "naive.h"}]  # not in the library (kernel/kernel.mk)
    sources += list((REPO / "kernel" / "phase1").glob("*"))  # the phase-1 reference kernel
    sources = sorted(sources, key=lambda p: str(p.relative_to(REPO)).encode())  # make's sort: by path, bytewise
    want = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:16]
    assert got.strip() == want


@pytest.fixture
def table_gpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """launch's view of a pretend GPU whose tuned table answers TileConfig(block_n=176, num_splits=12) for every
    bucket; its answers leave launch's cache with the test."""
    from flashcore import launch

    monkeypatch.setattr(tuning, "config_for", lambda key, gpu, sms, kid: TileConfig(block_n=176, num_splits=12))
    monkeypatch.setattr(launch, "sm_count", lambda index: 132)
    monkeypatch.setattr(launch, "kernel_id", lambda: "k")
    monkeypatch.setattr(launch, "device_info", lambda index: ((9, 0), "GPU X"))
    launch._table_config.cache_clear()
    yield
    launch._table_config.cache_clear()


def test_a_tables_split_count_yields_to_the_caller_and_to_deterministic_mode(table_gpu: None) -> None:
    """launch.tile_config / launch.params on CPU tensors (nothing launched): the table's num_splits reaches fc_params
    unless the caller passes num_splits, and deterministic mode never takes it (nor block_n or a point)."""
    import torch

    from flashcore import check, launch

    q, k = torch.randn(1, 1, 32, 128, dtype=torch.bfloat16), torch.randn(1, 4096, 8, 128, dtype=torch.bfloat16)

    def fields(**kw: object) -> tuple[int, int]:
        call = check.dense(q, k, k.clone(), device_type="cpu", **kw)  # type: ignore[arg-type]
        config = launch.tile_config(call, 0)
        p = launch.params(call, q, None, config)
        return p.num_splits, p.block_n

    assert fields() == (12, 176)
    assert fields(num_splits=3) == (3, 176)  # the caller's count wins
    assert fields(deterministic=True) == (0, 0)  # the kernel's rule, the default tile


@pytest.mark.parametrize("modifier", [{"window": (64, 0)}, {"attention_chunk": 512}, {"softcap": 30.0}])
def test_left_bounds_and_softcap_take_the_tables_order_but_never_its_tile(table_gpu: None, modifier: dict) -> None:
    """The kernel compiles windows, chunks and soft-capping for each head dim's short default point only: a call
    with one leaves the table's block_n and point to the kernel (which would refuse them) and keeps its split."""
    import dataclasses

    import torch

    from flashcore import check, launch

    q, k = torch.randn(1, 1, 32, 128, dtype=torch.bfloat16), torch.randn(1, 4096, 8, 128, dtype=torch.bfloat16)
    call = check.dense(q, k, k.clone(), causal=True, device_type="cpu")
    assert launch.tile_config(call, 0).block_n == 176  # the control: a plain causal call takes the table's tile
    config = launch.tile_config(dataclasses.replace(call, **modifier), 0)
    assert (config.block_n, config.point, config.num_splits) == (0, "", 12)
