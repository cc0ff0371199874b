"""flashcore/head_dims.py: the one head-dim list, kernel/flashcore.h's FC_HEAD_DIM_TABLE, read from the header or from
the loaded library's fc_head_dims(), and what the Python checks and the harness schema take from it."""

from __future__ import annotations

import ctypes
import re

import pytest

from flashcore import head_dims
from flashcore.head_dims import HeadDim
from tests.conftest import REPO


def test_todays_table_from_the_header() -> None:
    table = head_dims.parse_header((REPO / "kernel" / "flashcore.h").read_text())
    assert table == head_dims.TABLE
    assert head_dims.SUPPORTED == tuple(range(8, 257, 8))  # FA3's rule: multiples of 8 up to 256
    assert head_dims.FP8 == (64, 128, 256)
    pairs = {d: (d, 128, 120, 112, 104) for d in range(136, 193, 8)}  # FA3: q/k in (128, 192], v in (96, 128]
    assert head_dims.HEAD_DIM_V == {d: pairs.get(d, (d,)) for d in head_dims.SUPPORTED}
    assert set(head_dims.KERNEL_HEAD_DIMS) <= set(head_dims.SUPPORTED)
    assert head_dims.RULE == "head dims that are multiples of 8 up to 256"


def test_each_head_dim_runs_on_the_smallest_kernel_that_holds_it() -> None:
    dims = (8, 24, 32, 40, 56, 64, 72, 96, 104, 128, 136, 152, 160, 168, 184, 192, 200, 216, 224, 232, 248, 256)
    assert [head_dims.kernel_head_dim(d) for d in dims] == \
        [32, 32, 32, 64, 64, 64, 96, 96, 128, 128, 160, 160, 160, 192, 192, 192, 224, 224, 224, 256, 256, 256]
    assert [head_dims.kernel_head_dim(d) for d in (4, 36, 260, 512)] == [None] * 4


def test_hdim_192_runs_on_its_own_kernel_as_python_and_the_kernel_read_it() -> None:
    """192 (and DeepSeek's 192 / 128) runs on the 192 kernel, not padded onto 256; Python's kernel list is the
    kernel's KernelHeadDims (kernel/head_dims.h), so the two cannot drift apart."""
    assert all(head_dims.kernel_head_dim(d) == d for d in (32, 96, 160, 192, 224))
    assert 128 in head_dims.HEAD_DIM_V[192]
    text = (REPO / "kernel" / "head_dims.h").read_text()
    m = re.search(r"using KernelHeadDims = std::integer_sequence<int, ([\d, ]+)>;", text)
    assert m, "kernel/head_dims.h: no KernelHeadDims line"
    assert head_dims.KERNEL_HEAD_DIMS == tuple(int(d) for d in m.group(1).split(","))


def test_describe_states_a_rule_only_for_every_multiple() -> None:
    assert head_dims.describe((8, 16, 24, 32)) == "head dims that are multiples of 8 up to 32"
    assert head_dims.describe((64, 128, 256)) == "head dims 64, 128 and 256"
    assert head_dims.describe((8, 16, 32, 40)) == "head dims 8, 16, 32 and 40"  # 24 missing: a list
    assert head_dims.describe((64,)) == "head dim 64"


def test_a_header_without_the_table_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match="x.h: no FC_HEAD_DIM_TABLE"):
        head_dims.parse_header("#define OTHER(X) X(64, 64, 1)\n", "x.h")
    text = "#define FC_HEAD_DIM_TABLE(X) \\\n  X(32, 32, 0) \\\n  X(48, 64, 1)\nint x;  X(99, 99, 1)\n"
    assert head_dims.parse_header(text) == (HeadDim(32, 32, False), HeadDim(48, 64, True))  # the macro's lines only


class FakeHeadDims:
    """fc_head_dims(out, capacity) as kernel/flashcore.h declares it: writes up to capacity triples, returns the
    total count (argtypes and restype may be set on it, as on a CDLL function)."""

    def __init__(self, triples: list[tuple[int, int, int]]) -> None:
        self.triples = triples

    def __call__(self, out: ctypes.Array[ctypes.c_int32], capacity: int) -> int:
        for i, t in enumerate(self.triples[:capacity]):
            out[3 * i: 3 * i + 3] = list(t)
        return len(self.triples)


def test_the_loaded_librarys_table_is_read_through_fc_head_dims() -> None:
    lib = type("Lib", (), {})()
    lib.fc_head_dims = FakeHeadDims([(64, 64, 1), (192, 128, 0)])
    assert head_dims.from_library(lib) == (HeadDim(64, 64, True), HeadDim(192, 128, False))
    assert head_dims.from_library(object()) is None  # type: ignore[arg-type]  # a library built before the export


def test_the_checks_and_the_schema_take_the_table() -> None:
    from flashcore import api
    from harness import schema

    assert api.SUPPORTED_HEAD_DIMS == schema.WORKLOAD_HEAD_DIMS == head_dims.SUPPORTED
    assert api.FP8_HEAD_DIMS == schema.FP8_HEAD_DIMS == head_dims.FP8
