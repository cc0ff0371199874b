"""The device error word (kernel/index_errors.h, flashcore/device_errors.py) on the CPU: fc_params' ctypes mirror
carries its pointer where kernel/flashcore.h has it, the codes name the header's tensors, the message names tensor,
element and value, check_errors raises once and clears the word, and debug checks raise right after the launch."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import flashcore
from flashcore import _lib, device_errors, launch, serving
from flashcore.errors import FlashCoreError

REPO = Path(__file__).resolve().parents[1]


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


def test_codes_match_the_header_enum() -> None:
    header = (REPO / "kernel" / "index_errors.h").read_text()
    enum = {int(code): name for name, code in re.findall(r"kIndex(\w+) = (\d+),", header) if name != "None"}
    assert set(enum) == set(device_errors.TENSORS)
    for code, name in enum.items():
        assert device_errors.TENSORS[code][0].replace("_", "").lower() == name.lower()


def test_describe_names_tensor_element_value_and_bound() -> None:
    text = device_errors.describe([1, 7, 99, 64])
    assert "page_table[7] = 99" in text and "bound 64" in text and "NaN" in text
    assert "index tensor code 42" in device_errors.describe([42, 0, 1, 2])


def test_check_errors_raises_once_and_clears_the_word(monkeypatch: pytest.MonkeyPatch) -> None:
    word = torch.tensor([2, 1, 5000, 4096], dtype=torch.int64)
    monkeypatch.setattr(device_errors, "_WORDS", {0: word})
    with pytest.raises(FlashCoreError, match=r"cache_seqlens\[1\] = 5000 \(bound 4096"):
        flashcore.check_errors()
    assert word.tolist() == [0, 0, 0, 0]
    flashcore.check_errors()  # cleared: nothing to raise


def test_check_errors_without_a_word_is_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_errors, "_WORDS", {})
    flashcore.check_errors()


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
