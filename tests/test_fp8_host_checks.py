"""FP8 calls on packed rows or a contiguous cache check their index values on the host on every call (the FP8
kernels read them unchecked), and are refused by name under CUDA graph capture, where that sync cannot run; paged FP8
caches and 16-bit inputs follow the debug_checks flag (the kernels check their values on the device)."""

from __future__ import annotations

import pytest
import torch

from flashcore import check_serving
from flashcore.errors import UnsupportedArgument

FP8 = torch.float8_e4m3fn


def test_fp8_on_packed_rows_or_a_contiguous_cache_is_always_checked_on_the_host() -> None:
    q = torch.zeros(4, 2, 128).to(FP8)
    assert check_serving.host_checks(False, q) and check_serving.host_checks(None, q)


def test_fp8_paged_and_16_bit_calls_follow_the_debug_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLASHCORE_DEBUG_CHECKS", raising=False)
    table = torch.zeros(2, 2, dtype=torch.int32)
    q8, q16 = torch.zeros(4, 2, 128).to(FP8), torch.zeros(4, 2, 128, dtype=torch.bfloat16)
    assert not check_serving.host_checks(None, q8, table) and check_serving.host_checks(True, q8, table)
    assert not check_serving.host_checks(False, q16) and check_serving.host_checks(True, q16)


def test_fp8_host_check_under_graph_capture_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(UnsupportedArgument, match=r"^fp8 graph capture: .*paged cache"):
        check_serving.host_checks(None, torch.zeros(4, 2, 128).to(FP8))
    table = torch.zeros(2, 2, dtype=torch.int32)  # a paged FP8 cache is checked on the device: capturable
    assert not check_serving.host_checks(None, torch.zeros(4, 2, 128).to(FP8), table)
