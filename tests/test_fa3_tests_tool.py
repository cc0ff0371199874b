"""tools/fa3_tests (FA3's own tests pointed at FlashCore): the runner's summary of pytest's output, the shim's test
selection, its apply_rotary_emb against flashcore.rotary's rotation, and a missing FA3 checkout named. The run itself
needs FA3's test files and a Hopper GPU (reports/evidence holds its results)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
TOOL = Path(__file__).resolve().parents[1] / "tools" / "fa3_tests"


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


run = _load("fa3_tests_run", TOOL / "run.py")
conftest = _load("fa3_tests_conftest", TOOL / "shim" / "conftest.py")
rotary_shim = _load("fa3_tests_rotary", TOOL / "shim" / "flash_attn" / "layers" / "rotary.py")

LOG = """\
PASSED test_flash_attn.py::test_flash_attn_kvcache[1-128-dtype0]
PASSED test_flash_attn.py::test_flash_attn_kvcache[1-128-dtype1]
FAILED test_flash_attn.py::test_flash_attn_output[1-1-64-dtype0] - flashcore.errors.FlashCoreError: bad
E           flashcore.errors.FlashCoreError: bad
E           flashcore.errors.FlashCoreError: bad
ERROR test_flash_attn.py::test_flash_attn_combine[2] - RuntimeError
2 failed, 2 passed in 1.0s
"""


def test_the_summary_counts_outcomes_per_test_function_and_failure_lines() -> None:
    by_test, errors = run.summary(LOG)
    assert by_test["test_flash_attn_kvcache"]["PASSED"] == 2
    assert by_test["test_flash_attn_output"]["FAILED"] == 1 and by_test["test_flash_attn_combine"]["ERROR"] == 1
    assert errors == [(2, "E           flashcore.errors.FlashCoreError: bad")]


def _item(name: str, dtype: str, nodeid: str) -> SimpleNamespace:
    return SimpleNamespace(name=f"{name}[x]", nodeid=nodeid, callspec=SimpleNamespace(params={"dtype": dtype}))


def test_the_selection_keeps_by_name_dtype_and_a_deterministic_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    items = [_item("test_flash_attn_kvcache", d, f"t::{i}-{d}") for i in range(200) for d in ("bf16", "float8")]
    items += [_item("test_flash_attn_race_condition", "bf16", "race")]
    monkeypatch.setenv("FA3_TEST", "test_flash_attn_")
    monkeypatch.setenv("FA3_DTYPE", "float8")
    monkeypatch.setenv("FA3_SAMPLE", "10")
    monkeypatch.setenv("FA3_SKIP_RACE", "1")
    kept = list(items)
    conftest.pytest_collection_modifyitems(None, kept)
    again = list(items)
    conftest.pytest_collection_modifyitems(None, again)
    assert kept == again and 5 < len(kept) < 40
    assert all(it.callspec.params["dtype"] == "float8" and "race" not in it.name for it in kept)


def test_the_shims_rotary_is_flashcores_rotation() -> None:
    from flashcore import rotary

    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 5, 3, 32, generator=g)
    cos, sin = torch.rand(16, 8, generator=g), torch.rand(16, 8, generator=g)
    offsets = torch.tensor([0, 7])
    for interleaved in (False, True):
        got = rotary_shim.apply_rotary_emb(x, cos, sin, interleaved=interleaved, seqlen_offsets=offsets)
        spec = rotary.Rotary(cos, sin, None, interleaved, True)
        positions = (offsets[:, None] + torch.arange(5)).reshape(-1)
        want = rotary.rotate(x.reshape(10, 3, 32), spec, positions).reshape(x.shape)
        torch.testing.assert_close(got, want)


def test_a_folder_without_fa3s_test_files_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run.main(["--hopper", str(tmp_path)]) == 2
    assert "test_flash_attn.py, padding.py, test_util.py missing" in capsys.readouterr().err
