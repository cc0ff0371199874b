"""flashcore.check_errors and the device error word's text (kernel/index_errors.h's codes), on the CPU: a word is
stood in for by a CPU tensor (on a GPU, flashcore/device_errors.py allocates one per device)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import flashcore
from flashcore import device_errors

REPO = Path(__file__).resolve().parent.parent


def test_the_codes_are_the_headers() -> None:
    header = (REPO / "kernel" / "index_errors.h").read_text()
    codes = {int(n): name for name, n in re.findall(r"kIndex(\w+) = (\d+),", header) if name != "None"}
    assert sorted(codes) == sorted(device_errors.TENSORS)
    for code, name in codes.items():  # kIndexCacheSeqlens <-> cache_seqlens
        assert device_errors.TENSORS[code][0].replace("_", "") == name.lower()


def test_a_recorded_word_raises_naming_tensor_element_and_value_then_clears(monkeypatch: pytest.MonkeyPatch) -> None:
    word = torch.tensor([1, 19, 55, 51], dtype=torch.int64)
    monkeypatch.setattr(device_errors, "_WORDS", {0: word})
    with pytest.raises(flashcore.FlashCoreError, match=r"page_table\[19\] = 55 \(bound 51"):
        flashcore.check_errors()
    assert word.tolist() == [0, 0, 0, 0]
    flashcore.check_errors()  # cleared: nothing to raise


def test_no_word_or_a_clean_word_raises_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_errors, "_WORDS", {})
    flashcore.check_errors()
    monkeypatch.setattr(device_errors, "_WORDS", {0: torch.zeros(4, dtype=torch.int64)})
    flashcore.check_errors()


def test_an_unknown_code_is_still_reported() -> None:
    assert "index tensor code 99" in device_errors.describe([99, 1, 2, 3])
