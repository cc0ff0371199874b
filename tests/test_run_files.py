"""The run directory stays small: large raw logs (sanitizer logs, ncu reports) are xz-compressed once the run is
over, the report links the compressed files, and small logs stay plain (harness/run_files.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness import cli
from harness.gates import registry
from harness.gates.base import Gate, GateContext
from harness.render import render_html
from harness.results import Check, GateResult, RunResult, Status
from harness.run_files import RAW_PLAIN_BYTES, compress_logs
from harness.stored_file import stored_text

REPO = Path(__file__).resolve().parent.parent
FINDING = "========= Invalid __global__ write of size 4 bytes\n=========     at flashcore::attention_kernel+0x1a0\n"


def _sanitizer_log(path: Path, lines: int) -> str:
    text = "".join(f"{FINDING}=========     by thread ({i % 128},0,0) in block ({i % 132},0,0)\n"
                   for i in range(lines))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return text


def test_large_raw_logs_are_compressed_and_the_report_links_them(tmp_path: Path) -> None:
    big = _sanitizer_log(tmp_path / "logs/sanitizer/memcheck-prefill.log", 4000)
    rep = tmp_path / "logs/ncu-dram/decode.ncu-rep"
    rep.parent.mkdir(parents=True)
    rep.write_bytes(bytes(range(256)) * 1024)  # 256 KiB
    small = _sanitizer_log(tmp_path / "logs/sanitizer/racecheck-prefill.log", 3)
    logs = ("logs/sanitizer/memcheck-prefill.log", "logs/sanitizer/racecheck-prefill.log")
    run = RunResult("r", 7, (
        GateResult("sanitizer", 1, Status.PASS, (Check("w", "m", None, None, Status.PASS),), logs=logs),
        GateResult("ncu-dram", 2, Status.PASS, (Check("w", "m", None, None, Status.PASS),),
                   logs=("logs/ncu-dram/decode.ncu-rep", "logs/ncu-dram/absent.csv"))), {}, "", 1.0)
    before = sum(f.stat().st_size for f in tmp_path.rglob("*") if f.is_file())
    packed = compress_logs(run, tmp_path)
    assert packed.gates[0].logs == (logs[0] + ".xz", logs[1])  # the small log stays plain
    assert packed.gates[1].logs == ("logs/ncu-dram/decode.ncu-rep.xz", "logs/ncu-dram/absent.csv")
    assert not (tmp_path / logs[0]).exists() and (tmp_path / logs[1]).read_text() == small
    assert stored_text(tmp_path / (logs[0] + ".xz")) == big  # read back as it was written
    after = sum(f.stat().st_size for f in tmp_path.rglob("*") if f.is_file())
    assert after < before / 10 and len(big) > RAW_PLAIN_BYTES
    html = render_html(packed)
    assert f'href="{logs[0]}.xz"' in html and f'href="{logs[0]}"' not in html
    assert compress_logs(packed, tmp_path) == packed  # compressed once: a second pass changes nothing


def test_a_detail_naming_a_compressed_log_follows_it(tmp_path: Path) -> None:
    """A perf gate's measurements_file is one of its logs; once compressed, the report's link and the perf parts'
    join must name the .xz file, not a path that no longer exists."""
    _sanitizer_log(tmp_path / "logs/perf-fa3.bench.json", 4000)
    gate = GateResult("perf-fa3", 4, Status.PASS, (Check("w", "m", None, None, Status.PASS),),
                      logs=("logs/perf-fa3.bench.json",),
                      details={"measurements_file": "logs/perf-fa3.bench.json", "gated": ["fa3"]})
    packed = compress_logs(RunResult("r", 7, (gate,), {}, "", 1.0), tmp_path).gates[0]
    assert packed.details == {"measurements_file": "logs/perf-fa3.bench.json.xz", "gated": ["fa3"]}
    assert (tmp_path / packed.details["measurements_file"]).is_file()


def test_the_gate_command_compresses_its_large_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Noisy(Gate):
        Params = registry.get("build").Params  # type: ignore[union-attr]

        def run(self, ctx: GateContext) -> GateResult:
            _sanitizer_log(ctx.run_dir / "logs/build/raw.log", 4000)
            return ctx.result([Check("w", "m", None, None, Status.PASS)], logs=["logs/build/raw.log"])

    monkeypatch.chdir(REPO)
    monkeypatch.setitem(registry._REGISTRY, "build", Noisy)
    assert cli.main(["gate", "--phase", "1", "--only", "build", "--out", str(tmp_path), "--no-history"]) == 0
    build = json.loads((tmp_path / "results.json").read_text())["gates"][0]
    assert "logs/build/raw.log.xz" in build["logs"] and (tmp_path / "logs/build/raw.log.xz").is_file()
    assert not (tmp_path / "logs/build/raw.log").exists()
    assert 'href="logs/build/raw.log.xz"' in (tmp_path / "index.html").read_text()
    assert sum(os.path.getsize(f) for f in tmp_path.rglob("*") if f.is_file()) < 50_000_000
