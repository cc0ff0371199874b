"""Gates are found by their `@register`: every module of harness/gates is imported with the package, each one
registers at least one gate unless it is a named helper, and a new gate file registers itself with no list to edit.
Each gate file is read once per run: the run's Config keeps what a loader parsed (`Config.once`)."""

from __future__ import annotations

import pkgutil
import sys
from pathlib import Path

import pytest

import harness.gates
from harness.config import load_config
from harness.gates import registry
from harness.history.trends import HISTORY_FILE, load_history_settings
from harness.schema import ConfigError
from harness.shard import SHARD_FILE, load_shard_settings

REPO = Path(__file__).resolve().parent.parent


def test_every_gate_module_registers_a_gate_or_is_a_known_helper() -> None:
    on_disk = {m.name for m in pkgutil.iter_modules(harness.gates.__path__)}
    assert set(harness.gates.MODULES) == on_disk
    registering = {registry.module_of(n).rsplit(".", 1)[-1] for n in registry.names()}
    assert on_disk - set(harness.gates.HELPERS) <= registering, "a gate module registers no gate (list it in HELPERS?)"
    assert not registering & set(harness.gates.HELPERS)


def test_every_gate_in_phases_yaml_is_registered() -> None:
    config = load_config(REPO / "gates")
    assert {g.name for g in config.gates_through(7)} <= set(registry.names())


def test_a_new_gate_file_registers_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "more_gates"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "planted.py").write_text(
        "from harness.gates.base import Gate\nfrom harness.gates.registry import register\n\n\n"
        "@register('planted-new-gate')\nclass PlantedGate(Gate):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert registry.import_modules("more_gates", [str(package)]) == ("planted",)
        assert registry.get("planted-new-gate") is not None
        assert registry.module_of("planted-new-gate") == "more_gates.planted"
    finally:
        registry._REGISTRY.pop("planted-new-gate", None)
        for name in ("more_gates.planted", "more_gates"):
            sys.modules.pop(name, None)


def test_a_gate_module_that_fails_to_import_is_not_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "broken_gates"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "bad.py").write_text("raise RuntimeError('planted import error')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RuntimeError, match="planted import error"):
        registry.import_modules("broken_gates", [str(package)])
    sys.modules.pop("broken_gates", None)


def test_each_gate_file_is_parsed_once_per_run(gates_dir: Path) -> None:
    config = load_config(gates_dir)
    calls: list[Path] = []

    def counted(directory: Path) -> object:
        calls.append(directory)
        return load_shard_settings(directory)

    first = config.once(SHARD_FILE, counted)
    (gates_dir / SHARD_FILE).write_text("not: [the, same")  # a later read would fail: nothing reads it again
    assert config.once(SHARD_FILE, counted) is first and calls == [gates_dir]
    assert config.once(HISTORY_FILE, load_history_settings).file.endswith((".sqlite", ".db"))
    with pytest.raises(ConfigError):
        load_config(gates_dir).once(SHARD_FILE, load_shard_settings)


def test_a_file_that_fails_to_parse_is_not_kept(gates_dir: Path) -> None:
    config = load_config(gates_dir)
    (gates_dir / SHARD_FILE).write_text("first: 3\n")
    with pytest.raises(ConfigError):
        config.once(SHARD_FILE, load_shard_settings)
    with pytest.raises(ConfigError):
        config.once(SHARD_FILE, load_shard_settings)  # still an error, never a cached None
