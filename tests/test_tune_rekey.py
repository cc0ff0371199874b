"""harness/tune/sass.py (the SASS of two builds paired by kernel) and harness/tune/rekey.py (a tuned table carried to
a new kernel id only when that SASS is identical), on crafted cuobjdump listings and table files. CPU only; the
comparison of real libraries is the last test, which needs cuobjdump and two builds (skipped without them)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flashcore.tuning import dump_tables, parse_tables
from harness.tune import rekey as rk
from harness.tune import sass

LISTING = """
Fatbin elf code:
================
arch = sm_90a

	code for sm_90a
		Function : _ZN9flashcore6kernelILi64EEEvv
	.headerflags	@"EF_CUDA_SM90"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                 /* 0x00000a00ff017b82 */
                                                                          /* 0x000fe20000000800 */
        /*0010*/                   {OP} ;                                 /* 0x000000000000794d */
		..........


		Function : _ZN9flashcore17zero_words_kernelEPii
        /*0000*/                   EXIT ;                                 /* 0x000000000000794d */
		..........

Fatbin elf code:
================
	code for sm_90a
		Function : _ZN9flashcore17zero_words_kernelEPii
        /*0000*/                   EXIT ;                                 /* 0x000000000000794d */
"""


def listing(op: str = "EXIT", shift: int = 0) -> str:
    """The listing, its instructions at addresses moved by `shift` (a kernel laid out elsewhere in the binary)."""
    text = LISTING.replace("{OP}", op)
    return text.replace("/*0010*/", f"/*{0x10 + shift:04x}*/")


def test_addresses_and_spacing_are_not_differences() -> None:
    a, b = sass.parse_sass(listing()), sass.parse_sass(listing(shift=0x400).replace("    EXIT", "EXIT"))
    assert set(a) == {"_ZN9flashcore6kernelILi64EEEvv", "_ZN9flashcore17zero_words_kernelEPii",
                      "_ZN9flashcore17zero_words_kernelEPii#2"}
    result = sass.compare_kernels(a, b)
    assert result.same and len(result.identical) == 3 and result.old_digest == result.new_digest


def test_a_changed_instruction_names_its_kernel() -> None:
    result = sass.compare_kernels(sass.parse_sass(listing()), sass.parse_sass(listing("BRA 0x10")))
    assert not result.same and result.changed == ("_ZN9flashcore6kernelILi64EEEvv",)
    assert "1 changed" in result.summary() and "changed:" in "\n".join(result.lines())


def test_a_changed_encoding_word_is_a_difference() -> None:
    """Same mnemonic, other control bits (stall count, barrier): the machine code differs."""
    other = listing().replace("0x000fe20000000800", "0x000fe40000000800")
    assert sass.compare_kernels(sass.parse_sass(listing()), sass.parse_sass(other)).changed


def test_a_kernel_in_one_library_only_is_a_difference() -> None:
    fewer = listing().split("Fatbin elf code:")[1]
    result = sass.compare_kernels(sass.parse_sass(listing()), sass.parse_sass("Fatbin elf code:" + fewer))
    assert not result.same and result.only_old == ("_ZN9flashcore17zero_words_kernelEPii#2",)


TABLE = """# Written by `make tune` (harness/tune); read by flashcore.attention (flashcore/tuning.py).
version: 2
tables:
- gpu: GPU X
  sm_count: 132
  kernel_id: aaaa000000000001
  tuned_at: '2026-11-27T13:15:40Z'
  commit: abc
  entries:
  - head_dim: 64
    dtype: bf16
    causal: false
    mode: prefill
    group: 1
    seqlen: 8192
    block_n: 0
    schedule: default
    l2_section_pct: 0
    speedup: 1.0
- gpu: GPU Y
  sm_count: 114
  kernel_id: ffff000000000009
  tuned_at: ''
  commit: ''
  entries: []
"""


def same() -> sass.SassComparison:
    return sass.compare_kernels(sass.parse_sass(listing()), sass.parse_sass(listing(shift=0x40)))


def test_identical_sass_rekeys_only_the_old_kernels_tables() -> None:
    text, count = rk.rekey_text(TABLE, "aaaa000000000001", "bbbb000000000002", same())
    assert count == 1
    tables = parse_tables(text)
    assert [t.kernel_id for t in tables] == ["bbbb000000000002", "ffff000000000009"]
    assert "  rekeyed_from:\n    kernel_id: aaaa000000000001\n    sass_sha256: " in text
    assert len(tables[0].entries) == 1


def test_a_second_rekey_replaces_the_record() -> None:
    once, _ = rk.rekey_text(TABLE, "aaaa000000000001", "bbbb000000000002", same())
    twice, count = rk.rekey_text(once, "bbbb000000000002", "cccc000000000003", same())
    assert count == 1 and twice.count("rekeyed_from:") == 1
    assert "kernel_id: bbbb000000000002" in twice and "kernel_id: cccc000000000003" in twice
    assert [t.kernel_id for t in parse_tables(twice)] == ["cccc000000000003", "ffff000000000009"]


def test_different_sass_is_refused_naming_the_kernel() -> None:
    differ = sass.compare_kernels(sass.parse_sass(listing()), sass.parse_sass(listing("BRA 0x10")))
    with pytest.raises(rk.RekeyError, match="kernel<64>"):
        rk.rekey_text(TABLE, "aaaa000000000001", "bbbb000000000002", differ)


def with_kernel(text: str, mangled: str) -> str:
    """The listing with one more kernel, of one instruction."""
    return text + f"\t\tFunction : {mangled}\n        /*0000*/                   EXIT ;    /* 0x000000000000794d */\n"


FP8_KERNEL = "_ZN9flashcore30attention_forward_wgmma_kernelILi128ELi4221056ENS_4E4m3ELb0ELb0ELb0ELb0EEEvv"
BF16_KERNEL = "_ZN9flashcore30attention_forward_wgmma_kernelILi128ELi4221056ENS_4Bf16ELb0ELb0ELb0ELb0EEEvv"


def test_an_anonymous_namespace_built_elsewhere_pairs_with_its_kernel() -> None:
    """nvcc's anonymous-namespace names carry a hash of the build directory: another checkout, the same kernel."""
    name = "_ZN9flashcore41_GLOBAL__N__{}_9_append_cu_a443ce5e13append_kernelI6__halfLi2EEEv16fc_append_paramsi"
    here = sass.parse_sass(with_kernel(listing(), name.format("3bd0f406")))
    there = sass.parse_sass(with_kernel(listing(), name.format("5bb7facd")))
    assert sass.compare_kernels(here, there).same


def test_an_added_fp8_kernel_keeps_the_tables_and_is_recorded() -> None:
    """The tables hold bf16 and fp16 buckets only: a new FP8 kernel beside unchanged ones changes none of them."""
    added = sass.compare_kernels(sass.parse_sass(listing()), sass.parse_sass(with_kernel(listing(), FP8_KERNEL)))
    assert not added.same and added.tables_hold and added.only_new == (FP8_KERNEL,)
    text, count = rk.rekey_text(TABLE, "aaaa000000000001", "bbbb000000000002", added)
    assert count == 1 and "    kernels: 4\n    added_fp8: 1\n" in text
    assert [t.kernel_id for t in parse_tables(text)] == ["bbbb000000000002", "ffff000000000009"]


@pytest.mark.parametrize("mangled", [BF16_KERNEL, "_ZN9flashcore13combine_splitEv"])
def test_an_added_16_bit_or_other_kernel_is_refused(mangled: str) -> None:
    """A new 16-bit attention kernel of a head dim the old library compiled is a point a table could name; a new
    kernel of another kind is not explained."""
    old = with_kernel(listing(), FP8_KERNEL)  # the old library has head dim 128's kernels
    added = sass.compare_kernels(sass.parse_sass(old), sass.parse_sass(with_kernel(old, mangled)))
    assert not added.tables_hold and added.added_head_dims == ()
    with pytest.raises(rk.RekeyError, match="SASS differs"):
        rk.rekey_text(TABLE, "aaaa000000000001", "bbbb000000000002", added)


COMBINE = "_ZN9flashcore21combine_splits_kernelILi64ENS_4Bf16EEEvNS_12KernelParamsE"
NEW_HD_KERNELS = ("_ZN9flashcore30attention_forward_wgmma_kernelILi160ELi1ENS_4Bf16ELb0ELb0ELb0ELb0EEEvv",
                  "_ZN9flashcore21combine_splits_kernelILi160ENS_4Bf16EEEvNS_12KernelParamsE")


def test_a_new_kernel_head_dim_keeps_the_tables_unless_they_name_it(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernels of a head dim the old library had none of (160 beside 64) are no point a table of the old kernel
    measured: recorded, the tables kept; a table whose entries run on that head dim now is refused."""
    new = listing()
    for name in NEW_HD_KERNELS:
        new = with_kernel(new, name)
    added = sass.compare_kernels(sass.parse_sass(listing()), sass.parse_sass(new))
    assert added.added_head_dims == (160,) and set(added.added_head_dim_kernels) == set(NEW_HD_KERNELS)
    assert added.tables_hold
    text, count = rk.rekey_text(TABLE, "aaaa000000000001", "bbbb000000000002", added)
    assert count == 1 and "    added_head_dims:\n    - 160\n" in text and "added_fp8" not in text
    assert dump_tables(parse_tables(text)) == text  # the form make tune writes back
    ids = {"old.so": "aaaa000000000001", "new.so": "bbbb000000000002"}
    monkeypatch.setattr(rk, "library_kernel_id", lambda lib: ids[lib.name])
    monkeypatch.setattr(rk, "compare_libraries", lambda old, new: added)
    table = tmp_path / "tuned.yaml"
    for head_dim, refused in ((64, False), (152, True)):  # 152 runs on the 160 kernel now
        table.write_text(TABLE.replace("head_dim: 64", f"head_dim: {head_dim}"))
        if refused:
            with pytest.raises(rk.RekeyError, match="head dims 152, which now run on a kernel"):
                rk.rekey(table, tmp_path / "old.so", tmp_path / "new.so", say=lambda _: None)
            assert "aaaa000000000001" in table.read_text()
        else:
            assert rk.rekey(table, tmp_path / "old.so", tmp_path / "new.so", say=lambda _: None) == 1


def test_kernels_of_a_head_dim_python_does_not_list_are_refused(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A new first template argument that is no kernel head dim flashcore/head_dims.py knows (a tile size, say) is
    not explained by an added head dim; and kernels of other kinds never count as one."""
    odd = [n.replace("ILi160E", "ILi48E") for n in NEW_HD_KERNELS]
    new = listing()
    for name in odd:
        new = with_kernel(new, name)
    added = sass.compare_kernels(sass.parse_sass(listing()), sass.parse_sass(new))
    assert added.added_head_dims == (48,)
    ids = {"old.so": "aaaa000000000001", "new.so": "bbbb000000000002"}
    monkeypatch.setattr(rk, "library_kernel_id", lambda lib: ids[lib.name])
    monkeypatch.setattr(rk, "compare_libraries", lambda old, new: added)
    table = tmp_path / "tuned.yaml"
    table.write_text(TABLE)
    with pytest.raises(rk.RekeyError, match="head dims 48 are new, but flashcore/head_dims.py KERNEL_HEAD_DIMS"):
        rk.rekey(table, tmp_path / "old.so", tmp_path / "new.so", say=lambda _: None)
    assert table.read_text() == TABLE
    assert sass.head_dim_of("_ZN9flashcore13other_kernelILi160EEEvv") is None


def test_another_objects_copy_of_an_unchanged_kernel_keeps_the_tables() -> None:
    """A second object instantiating the same template lists the kernel twice (`#2`): the same SASS as the unchanged
    first copy holds the tables, and is recorded; a copy whose code differs from its first does not."""
    old = with_kernel(listing(), COMBINE)
    copied = sass.compare_kernels(sass.parse_sass(old), sass.parse_sass(with_kernel(with_kernel(old, COMBINE),
                                                                                    FP8_KERNEL)))
    assert copied.copies == (f"{COMBINE}#2",) and copied.tables_hold
    text, count = rk.rekey_text(TABLE, "aaaa000000000001", "bbbb000000000002", copied)
    assert count == 1 and "    added_fp8: 1\n    added_copies: 1\n" in text
    differs = old + f"\t\tFunction : {COMBINE}\n        /*0000*/                   BRA 0x10 ;    /* 0x0 */\n"
    bad = sass.compare_kernels(sass.parse_sass(old), sass.parse_sass(differs))
    assert bad.copies == () and not bad.tables_hold


def test_a_changed_fp8_kernel_keeps_the_tables_and_is_recorded() -> None:
    """An FP8 kernel's new code changes no table (they hold bf16 and fp16 buckets); a gone one would refuse."""
    old = with_kernel(listing(), FP8_KERNEL)
    new = listing() + f"\t\tFunction : {FP8_KERNEL}\n        /*0000*/                   BRA 0x10 ;    /* 0x0 */\n"
    changed = sass.compare_kernels(sass.parse_sass(old), sass.parse_sass(new))
    assert changed.changed == (FP8_KERNEL,) and changed.tables_hold
    text, count = rk.rekey_text(TABLE, "aaaa000000000001", "bbbb000000000002", changed)
    assert count == 1 and "    changed_fp8: 1\n" in text
    assert not sass.compare_kernels(sass.parse_sass(old), sass.parse_sass(listing())).tables_hold


def test_an_added_fp8_kernel_does_not_excuse_a_changed_one() -> None:
    old = listing()
    new = with_kernel(listing("BRA 0x10"), FP8_KERNEL)
    assert not sass.compare_kernels(sass.parse_sass(old), sass.parse_sass(new)).tables_hold


def test_rekey_refuses_when_no_table_has_the_old_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = tmp_path / "tuned.yaml"
    table.write_text(TABLE)
    ids = {"old.so": "1234000000000000", "new.so": "5678000000000000"}
    monkeypatch.setattr(rk, "library_kernel_id", lambda lib: ids[lib.name])
    with pytest.raises(rk.RekeyError, match="no table is keyed by the old library's kernel 1234000000000000"):
        rk.rekey(table, tmp_path / "old.so", tmp_path / "new.so", say=lambda _: None)
    assert table.read_text() == TABLE


def test_rekey_writes_the_file_only_when_identical(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = tmp_path / "tuned.yaml"
    table.write_text(TABLE)
    ids = {"old.so": "aaaa000000000001", "new.so": "bbbb000000000002"}
    monkeypatch.setattr(rk, "library_kernel_id", lambda lib: ids[lib.name])
    monkeypatch.setattr(rk, "compare_libraries", lambda old, new: sass.compare_kernels(
        sass.parse_sass(listing()), sass.parse_sass(listing("BRA 0x10"))))
    assert rk.main(["--old-lib", str(tmp_path / "old.so"), "--new-lib", str(tmp_path / "new.so"),
                    "--table", str(table)]) == 1
    assert table.read_text() == TABLE
    monkeypatch.setattr(rk, "compare_libraries", lambda old, new: same())
    assert rk.main(["--old-lib", str(tmp_path / "old.so"), "--new-lib", str(tmp_path / "new.so"),
                    "--table", str(table)]) == 0
    assert [t.kernel_id for t in parse_tables(table.read_text())] == ["bbbb000000000002", "ffff000000000009"]


@pytest.mark.skipif(not os.environ.get("FLASHCORE_SASS_BASE"), reason="set FLASHCORE_SASS_BASE to a baseline build")
def test_real_libraries_compare(tmp_path: Path) -> None:
    """FLASHCORE_SASS_BASE=a copy of a build's libflashcore.so: it against itself is identical, kernel by kernel."""
    base = Path(os.environ["FLASHCORE_SASS_BASE"])
    result = sass.compare_libraries(base, base)
    assert result.same and result.total > 0


def test_a_rewrite_of_the_table_file_keeps_each_tables_rekeyed_from() -> None:
    shipped = (Path(__file__).resolve().parent.parent / "flashcore" / "tuned.yaml").read_text()
    tables = parse_tables(shipped)
    assert any(t.rekeyed_from for t in tables)  # the H100 table was carried over identical SASS
    assert dump_tables(tables) == shipped  # make tune on another GPU rewrites the file: nothing else may change
