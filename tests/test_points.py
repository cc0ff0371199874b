"""Compile-time points (flashcore/points.py, kernel/tile_point.h): names and codes, the rules a point is checked
against before make tune builds it (and that they agree with the kernel's static_asserts), the points file's path
through the Makefile, and the compile step's verdicts (a point that fails to compile, spills or serializes wgmma
is dropped with its reason)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from flashcore.points import Point
from flashcore.tuning import parse_tables
from harness.tune import build as tune_build
from harness.tune.runner import table_points
from tests.conftest import build_host_program

REPO = Path(__file__).resolve().parent.parent
DEFAULTS = {32: Point(128, 2, 3, True, False, 32), 64: Point(128, 2, 3, True, False, 32),
            96: Point(176, 2, 2, True, False, 32), 128: Point(176, 2, 2, True, False, 32),
            160: Point(128, 2, 2, True, False, 32), 192: Point(112, 2, 2, True, False, 32),
            224: Point(96, 2, 2, True, False, 40), 256: Point(80, 2, 2, True, False, 32)}
# The one-warpgroup decode points (kernel/hopper_config.h HeadDimTraits::decode_point).
DECODE = {32: Point(128, 4, 1, False, False, 56), 64: Point(128, 4, 1, False, False, 56),
          128: Point(128, 3, 1, False, False, 56)}


def test_name_code_and_back() -> None:
    p = Point(128, 3, 2, True, False, 24)
    assert p.name == "n128-s3-w2-pp1-re0-r24"
    assert Point.parse(p.name) == p == Point.from_code(p.code)
    assert p.inc_line(128) == "FC_POINT(128, 128, 3, 2, 1, 0, 24)"
    with pytest.raises(ValueError, match="expected n<block_n>"):
        Point.parse("n128-s3")
    with pytest.raises(ValueError, match="not a point code"):
        Point.from_code(128)


def test_the_code_matches_kernel_tile_point_h(tmp_path: Path) -> None:
    pts = [Point(176, 2, 2, True, False, 32), Point(64, 8, 3, False, True, 248)]
    body = "".join(f'  std::printf("%d\\n", flashcore::point_code({p.block_n}, {p.stages}, {p.consumer_wgs}, '
                   f'{int(p.pingpong)}, {int(p.rescale_early)}, {p.producer_regs}));\n' for p in pts)
    exe = build_host_program(tmp_path, "t", f'#include <cstdio>\n#include "tile_point.h"\nint main() {{\n{body}}}\n')
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    assert [int(x) for x in out] == [p.code for p in pts]


def test_the_defaults_obey_the_rules() -> None:
    for hd, p in DEFAULTS.items():
        assert p.problems(hd) == [], (hd, p.name)
    assert DEFAULTS[128].smem_bytes(128)[1], "176-key tiles at hdim 128 stage O over V (kernel/hopper_config.h)"
    assert DEFAULTS[128].consumer_regs() == 232 and DEFAULTS[64].consumer_regs() == 160
    assert DEFAULTS[192].smem_bytes(192)[1], "112-key tiles at hdim 192 stage O over V (kernel/hopper_config.h)"
    assert Point(128, 2, 2, True, False, 24).consumer_regs() == 240


def test_one_consumer_warpgroup_without_ping_pong_is_a_valid_point() -> None:
    for hd, p in DECODE.items():
        assert p.problems(hd) == [], (hd, p.name)
        assert p.launch_regs() == 248, "256 threads: ptxas gives a thread at most 255 registers"
        assert p.consumer_regs() == 256 and not p.smem_bytes(hd)[1]
    assert Point(128, 3, 1, False, False, 32).problems(96) == []  # a padded head dim on the 128 kernel


@pytest.mark.parametrize("hd, point, rule", [
    (128, Point(120, 2, 2, True, False, 32), "wgmma N"),
    (128, Point(272, 2, 2, True, False, 32), "wgmma N"),
    (128, Point(128, 1, 2, True, False, 32), "2..8"),
    (128, Point(128, 2, 4, True, False, 32), "1 to 3"),
    (128, Point(128, 2, 0, False, False, 32), "1 to 3"),
    (128, Point(128, 3, 1, True, False, 56), "ping-pong needs 2 or more"),
    (64, Point(128, 4, 1, True, False, 32), "ping-pong needs 2 or more"),
    (128, Point(128, 2, 2, True, False, 28), "multiple of 8"),
    (128, Point(176, 3, 2, True, False, 32), "shared memory"),
    (128, Point(176, 2, 3, True, False, 32), "O staged over V"),
    (128, Point(128, 2, 3, True, False, 32), "registers"),
    (64, Point(192, 2, 3, True, False, 32), "registers"),
    (36, Point(128, 2, 2, True, False, 32), "head dim"),
    (112, Point(176, 3, 2, True, False, 32), "shared memory"),  # judged on the 128 kernel that runs it
    (192, Point(128, 2, 2, True, False, 32), "shared memory"),  # FA3's 128 keys need v 128 wide: ours is 192
    (152, Point(160, 2, 2, True, False, 32), "shared memory"),  # judged on the 160 kernel that runs it
])  # fmt: skip
def test_an_invalid_point_names_the_rule(hd: int, point: Point, rule: str) -> None:
    assert rule in " ".join(point.problems(hd))


def _compile_config(tmp_path: Path, name: str, configs: list[tuple[int, Point]]) -> subprocess.CompletedProcess[str]:
    inst = "".join(f"template struct flashcore::HopperTileConfig<{hd}, {p.code}>;\n" for hd, p in configs)
    return _nvcc_compile(tmp_path, name, f'#include "hopper_config.h"\n{inst}')


def _nvcc_compile(tmp_path: Path, name: str, text: str) -> subprocess.CompletedProcess[str]:
    src = tmp_path / f"{name}.cu"
    src.write_text(text)
    nvcc = os.environ.get("NVCC") or "nvcc"
    return subprocess.run([nvcc, "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", f"-I{REPO / 'kernel'}",
                           "-c", str(src), "-o", str(tmp_path / f"{name}.o")], capture_output=True, text=True)


@pytest.mark.nvcc
def test_the_rules_agree_with_the_kernels_static_asserts(tmp_path: Path) -> None:
    """Points the Python rules accept compile; one breaking each C++-checked rule fails on its static_assert (the
    register estimate is Python's alone: ptxas judges it after the build)."""
    valid = [(hd, p) for hd, p in DEFAULTS.items()] + [(128, Point(128, 3, 2, False, True, 24)),
                                                         (64, Point(192, 4, 2, True, False, 32)),
                                                         *DECODE.items()]
    assert all(not p.problems(hd) for hd, p in valid)
    ok = _compile_config(tmp_path, "valid", valid)
    assert ok.returncode == 0, ok.stderr
    for name, hd, p, text in [("smem", 128, Point(176, 3, 2, True, False, 32), "227 KB"),
                              ("alias", 128, Point(176, 2, 3, True, False, 32), "O staged over V"),
                              ("n", 128, Point(48, 2, 2, True, False, 32), "wgmma N"),
                              ("ring", 128, Point(128, 3, 1, True, False, 56), "ping-pong needs 2")]:
        assert p.problems(hd)
        bad = _compile_config(tmp_path, name, [(hd, p)])
        assert bad.returncode != 0 and text in bad.stderr, (name, bad.stderr[-500:])


@pytest.mark.nvcc
def test_the_decode_points_are_hopper_config_hs(tmp_path: Path) -> None:
    """HeadDimTraits::decode_point() of hdim 32, 64 and 128 is DECODE's; hdim 160, 224 and 256 have none."""
    asserts = "".join(f"static_assert(flashcore::HeadDimTraits<{hd}>::decode_point() == {p.code});\n"
                      for hd, p in DECODE.items())
    proc = _nvcc_compile(tmp_path, "decode", f'#include "hopper_config.h"\n{asserts}'
                         + "".join(f"static_assert(!flashcore::HeadDimTraits<{hd}>::kOneWgDecode);\n"
                                   for hd in (160, 224, 256)))
    assert proc.returncode == 0, proc.stderr


def test_the_makefile_builds_one_object_per_points_file_line(tmp_path: Path) -> None:
    pts = {128: [Point(128, 3, 2, True, False, 32)], 64: [Point(192, 2, 2, False, False, 32)]}
    points_file = tmp_path / "points.inc"
    tune_build.write_points_file(points_file, pts, "test")
    out = subprocess.run(["make", "-n", f"BUILD_DIR={tmp_path / 'b'}", f"POINTS_FILE={points_file}",
                          str(tmp_path / "b" / "libflashcore.so")], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout
    objs = sorted(re.findall(r"-o \S*/points/(p[\d_]+)\.o", out))
    assert objs == sorted(tune_build.object_stem(hd, p) for hd, ps in pts.items() for p in ps)
    assert "-DFC_POINT_HD=64 -DFC_POINT_BN=192" in out and "-DFC_POINT_STAGES=3" in out
    assert f"-DFLASHCORE_POINTS_FILE='\"{points_file}\"'" in out.replace("'\\\"", "'\"")


def test_an_unchanged_points_file_keeps_its_time_so_make_rebuilds_nothing(tmp_path: Path) -> None:
    """The library's dispatch object depends on the points file (a ~100 s nvcc run): writing the same text again must
    not touch the file, so a second make tune, or the relink after every candidate compiled clean, finds it current."""
    pts = {128: [Point(128, 3, 2, True, False, 32)]}
    path = tmp_path / "points.inc"
    tune_build.write_points_file(path, pts, tune_build.SURVIVORS_HEADER)
    os.utime(path, (1_000_000, 1_000_000))
    tune_build.write_points_file(path, pts, tune_build.SURVIVORS_HEADER)
    assert path.stat().st_mtime == 1_000_000
    tune_build.write_points_file(path, {128: []}, tune_build.SURVIVORS_HEADER)
    assert path.stat().st_mtime != 1_000_000 and "FC_POINT" not in path.read_text()


def test_every_point_the_table_names_is_in_the_tuned_points_file() -> None:
    used = table_points(parse_tables((REPO / "flashcore/tuned.yaml").read_text()))
    listed = (REPO / "kernel/tuned_points.inc").read_text()
    for hd, pts in used.items():
        for p in pts:
            assert p.inc_line(hd) in listed, f"{p.name} (hdim {hd}) is in the table but make build would not compile it"


CLEAN_LOG = """ptxas info    : Compiling entry function '_ZN9flashcore30attention_forward_wgmma_kernelI' for 'sm_90a'
ptxas info    : Function properties for _ZN9flashcore30attention_forward_wgmma_kernelI
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 16 barriers, 8 bytes smem
"""


def test_ptxas_verdicts() -> None:
    assert tune_build.ptxas_problems(CLEAN_LOG, ("C7511",)) == []
    spilled = CLEAN_LOG.replace("0 bytes spill stores", "16 bytes spill stores")
    assert "16 bytes spilled" in tune_build.ptxas_problems(spilled, ("C7511",))[0]
    serial = CLEAN_LOG + "ptxas info : (C7511) Potential Performance Loss: wgmma.mma_async instructions serialized\n"
    assert "C7511" in tune_build.ptxas_problems(serial, ("C7511",))[0]


def _fake_make(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: list[str]) -> None:
    """A `make` first on PATH: a shell script that reads BUILD_DIR= ($b) and POINTS_FILE= ($f) from its arguments,
    runs `body`, and touches the library."""
    tools = tmp_path / "bin"
    tools.mkdir()
    script = ["#!/bin/sh", 'for a in "$@"; do case $a in BUILD_DIR=*) b=${a#BUILD_DIR=};; POINTS_FILE=*) '
              'f=${a#POINTS_FILE=};; esac; done', 'mkdir -p "$b/points"', *body, 'touch "$b/libflashcore.so"']
    (tools / "make").write_text("\n".join(script) + "\n")
    (tools / "make").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")


def test_the_compile_step_drops_points_that_fail_spill_or_break_a_rule(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake make: per point object, a clean report, a spilling one, or no object (compile error)."""
    clean, spills, broken = (Point(128, 3, 2, True, False, 32), Point(128, 2, 2, True, False, 24),
                             Point(128, 2, 2, False, False, 32))
    fates = {tune_build.object_stem(128, clean): "clean", tune_build.object_stem(128, spills): "spill",
             tune_build.object_stem(128, broken): "error"}
    (tmp_path / "clean.log").write_text(CLEAN_LOG)
    (tmp_path / "spill.log").write_text(CLEAN_LOG.replace("0 bytes spill stores", "8 bytes spill stores"))
    _fake_make(tmp_path, monkeypatch, [
        f'if grep -q "{stem}" "$f.stems"; then echo "nvcc -o $b/points/{stem}.o"; '
        + (f'echo "error: boom" > "$b/points/{stem}.ptxas.log"; ' if fate == "error" else
           f'cp {tmp_path}/{fate}.log "$b/points/{stem}.ptxas.log"; touch "$b/points/{stem}.o"; ')
        + "fi" for stem, fate in fates.items()])
    real_write = tune_build.write_points_file

    def write(path: Path, pts, header: str) -> None:  # type: ignore[no-untyped-def]
        real_write(path, pts, header)  # and the stems the fake make reads
        Path(f"{path}.stems").write_text("\n".join(tune_build.object_stem(hd, p) for hd in pts for p in pts[hd]))

    monkeypatch.setattr(tune_build, "write_points_file", write)
    space = {128: (DEFAULTS[128], clean, spills, broken, Point(176, 3, 2, True, False, 32))}
    said: list[str] = []
    res = tune_build.build_points(tmp_path, space, {128: (DEFAULTS[128],)}, ("C7511",), said.append, jobs=2)
    assert res.built == {128: [clean]} and res.defaults == {128: [DEFAULTS[128]]}
    why = {p.name: w for _, p, w in res.rejected}
    assert "shared memory" in why["n176-s3-w2-pp1-re0-r32"]
    assert "8 bytes spilled" in why[spills.name] and "compile failed: error: boom" in why[broken.name]
    assert res.library == tmp_path / "build/tune/libflashcore.so"
    assert any("compiling p128_128_3_2_1_0_32" in s for s in said)
    assert (tmp_path / "build/tune/points.inc").read_text().count("FC_POINT(") == 1  # relinked without the failures


def test_when_every_candidate_compiles_clean_the_relink_keeps_the_points_file(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """An earlier run (make tune-build's) left the same survivors: the link step finds the points file untouched,
    so make compiles no dispatch object again. The fake make records each call's points file and its time."""
    clean = (Point(128, 3, 2, True, False, 32), Point(128, 2, 2, False, False, 32))
    (tmp_path / "clean.log").write_text(CLEAN_LOG)
    stems = [tune_build.object_stem(128, p) for p in clean]
    _fake_make(tmp_path, monkeypatch, [
        'targets=$(for a in "$@"; do case $a in *.o|*.so) printf "%s," "$(basename "$a")";; esac; done)',
        f'echo "$(basename "$f") $(stat -c %Y "$f") $targets" >> {tmp_path}/calls',
        *(f'cp {tmp_path}/clean.log "$b/points/{stem}.ptxas.log"; touch "$b/points/{stem}.o"' for stem in stems)])
    points_file = tmp_path / "build/tune/points.inc"
    points_file.parent.mkdir(parents=True)
    tune_build.write_points_file(points_file, {128: list(clean)}, tune_build.SURVIVORS_HEADER)
    os.utime(points_file, (1_000_000, 1_000_000))  # as an earlier make tune (or make tune-build) left it
    res = tune_build.build_points(tmp_path, {128: (DEFAULTS[128], *clean)}, {128: (DEFAULTS[128],)}, ("C7511",),
                                  lambda _: None, jobs=2)
    assert res.built == {128: list(clean)} and res.library == tmp_path / "build/tune/libflashcore.so"
    calls = [c.split() for c in (tmp_path / "calls").read_text().splitlines()]
    objects = sorted(f"{tune_build.object_stem(128, p)}.o" for p in clean)
    assert calls[0][0] == "candidates.inc" and sorted(calls[0][2].rstrip(",").split(",")) == objects
    assert calls[1] == ["points.inc", "1000000", "libflashcore.so,"]


def test_the_tuner_holds_only_same_tile_shapes_to_bit_identity() -> None:
    from harness.tune.runner import same_rows_and_keys

    d64 = (128, "n128-s2-w3-pp1-re0-r32", True, 4, 1)
    assert same_rows_and_keys(d64, (128, "n128-s4-w3-pp0-re0-r32", False, 1, 1))  # stages, ping-pong, order: same
    assert not same_rows_and_keys(d64, (128, "n128-s2-w2-pp1-re0-r32", True, 4, 1))  # 128-row tiles: tolerance
    assert not same_rows_and_keys(d64, (192, "n192-s2-w2-pp1-re0-r32", True, 4, 1))
    assert not same_rows_and_keys(d64, (128, "n128-s2-w3-pp1-re0-r32", True, 4, 8))  # 8 splits: another sum order
