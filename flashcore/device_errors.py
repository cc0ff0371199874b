"""Bad index data found on the device (kernel/index_errors.h): page ids, lengths, slots and offsets live in device
memory, so the kernels check each value where they read it and record the first bad one in a four-int64 word per
device; the rows it touches are NaN. check_errors() reads and clears the word (one device sync) and raises a
FlashCoreError that names the tensor, the element and the value. Calls with debug checks call it at once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flashcore.errors import FlashCoreError

if TYPE_CHECKING:
    import torch

# kernel/index_errors.h's IndexTensor codes and what a value must be.
TENSORS = {
    1: ("page_table", "a page id in [0, pages)"),
    2: ("cache_seqlens", "a length in [0, capacity] (with the appended tokens)"),
    3: ("cache_batch_idx", "a slot in [0, cache batch)"),
    4: ("cache_leftpad", "a left pad in [0, cache_seqlens]"),
    5: ("cu_seqlens_q", "non-decreasing offsets within the packed query rows"),
    6: ("cu_seqlens_k", "non-decreasing offsets within the packed key rows"),
    7: ("seqused_q", "at most its sequence's query count, >= 0"),
    8: ("seqused_k", "at most its sequence's key count, >= 0"),
    9: ("cu_seqlens_k_new", "non-decreasing offsets within the packed new keys"),
    10: ("rotary_seqlens", "a position within the rotary cos/sin table"),
}

_WORDS: dict[int, torch.Tensor] = {}


def words(device: Any) -> torch.Tensor:
    """The error word of `device` (int64 [4], zeroed once and then only by check_errors): its address never changes,
    so calls captured in a CUDA graph record into it too."""
    import torch

    index = _index(device)
    word = _WORDS.get(index)
    if word is None:
        word = _WORDS[index] = torch.zeros(4, dtype=torch.int64, device=torch.device("cuda", index))
    return word


def _index(device: Any) -> int:
    """The CUDA device index of `device` ("cuda" alone: the current device)."""
    import torch

    index = torch.device(device).index
    return torch.cuda.current_device() if index is None else index


def describe(values: list[int]) -> str:
    """The message for a recorded word [code, index, value, bound]."""
    code, index, value, bound = values
    name, rule = TENSORS.get(code, (f"index tensor code {code}", "a value in range"))
    return (f"bad index data on the device: {name}[{index}] = {value} (bound {bound}; expected {rule}); "
            "the rows that read it are NaN")


def check_errors(device: Any = None) -> None:
    """Raise FlashCoreError for the first bad index value any FlashCore call on `device` (default: every device used)
    recorded since the last check, and clear it. Waits for the device's queued work (one sync)."""
    devices = list(_WORDS) if device is None else [_index(device)]
    for index in devices:
        word = _WORDS.get(index)
        if word is None:
            continue
        values = [int(x) for x in word.tolist()]
        if values[0] != 0:
            word.zero_()
            raise FlashCoreError(describe(values))
