"""flashcore.check_errors and the device error word's text (kernel/index_errors.h's codes), on the CPU: a word is
stood in for by a CPU tensor (on a GPU, flashcore/device_errors.py allocates one per device)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import flashcore
from flashcore import _lib, device_errors, launch, serving

REPO = Path(__file__).resolve().parent.parent


def header_fields() -> list[str]:
    """fc_params' field names in kernel/flashcore.h's order (comma lists and arrays included)."""
    header = (REPO / "kernel" / "flashcore.h").read_text()
    body = header[header.index("typedef struct fc_params {") + len("typedef struct fc_params {"):
                  header.index("} fc_params;")]
    code = "\n".join(line.split("//")[0] for line in body.splitlines())
    names = []
    for decl in code.split(";"):
        decl = decl.strip()
        if not decl:
            continue
        first, *rest = decl.split(",")
        names.append(re.sub(r"\[\d+\]$", "", first.split()[-1].lstrip("*")))
        names.extend(re.sub(r"\[\d+\]$", "", r.strip().lstrip("*")) for r in rest)
    return names


def test_ctypes_mirror_matches_every_field_of_flashcore_h() -> None:
    assert [f[0] for f in _lib.FcParams._fields_] == header_fields()
    assert header_fields()[-1] == "errors"


def test_errors_pointer_is_no_part_of_the_plan_key() -> None:
    a, b = _lib.FcParams(), _lib.FcParams()
    b.errors = 0x1000
    assert launch.plan_key(a, 0) == launch.plan_key(b, 0)


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


class FakeQ:
    is_cuda = True
    device = "cuda:0"


def test_debug_checks_check_the_word_after_the_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[object] = []
    monkeypatch.setattr(device_errors, "check_errors", seen.append)
    result = (torch.zeros(1), torch.zeros(1))
    assert serving.checked(result, FakeQ(), True) is result  # type: ignore[arg-type]
    assert seen == ["cuda:0"]
    serving.checked(result, FakeQ(), False)  # type: ignore[arg-type]
    assert seen == ["cuda:0"]
