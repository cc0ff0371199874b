"""flashcore.attention input validation that needs no GPU: clear errors, nothing launched."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import flashcore  # noqa: E402


def test_cpu_tensors_are_refused_with_a_clear_error():
    q = torch.randn(1, 8, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(flashcore.FlashCoreError, match="needs CUDA tensors"):
        flashcore.attention(q, q, q)


def test_non_tensor_is_refused():
    with pytest.raises(flashcore.FlashCoreError, match="must be a torch.Tensor"):
        flashcore.attention([1, 2], None, None)  # type: ignore[arg-type]


def test_errors_are_value_errors():
    assert issubclass(flashcore.FlashCoreError, ValueError)
    assert issubclass(flashcore.UnsupportedDeviceError, flashcore.FlashCoreError)


def test_library_path_can_be_overridden(monkeypatch, tmp_path):
    monkeypatch.setenv("FLASHCORE_LIB", str(tmp_path / "lib.so"))
    assert flashcore.library_path() == tmp_path / "lib.so"
