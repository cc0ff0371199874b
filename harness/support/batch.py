"""One draw of a workload's inputs on the device (dense, varlen, kvcache, paged; FP8 with its descales), and the
calls that run it: shared by harness/support/serving.py and harness/support/fp8.py, which make the draws."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from harness.schema import Workload

if TYPE_CHECKING:
    import torch


@dataclass
class Batch:
    """One draw of a serving workload's inputs, on the device."""

    wl: Workload
    q: torch.Tensor  # varlen [total_q, Hq, D]; else [B, Sq, Hq, D]
    k: torch.Tensor  # varlen [total_k, Hkv, D]; kvcache [B, Sk, Hkv, D]; paged [pages, page_size, Hkv, D]
    v: torch.Tensor
    cu_q: torch.Tensor | None = None  # varlen offsets, int32
    cu_k: torch.Tensor | None = None
    lengths: torch.Tensor | None = None  # kvcache / paged: cache_seqlens, int32
    page_table: torch.Tensor | None = None  # paged: int32 [B, seqlen_k // page_size]
    descales: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # FP8: q, k, v float32 [B, Hkv]

    def options(self) -> dict[str, Any]:
        wl = self.wl
        if self.descales is not None:  # FP8 (harness/support/fp8.py): dense, no window or softcap
            return {"causal": wl.causal, **dict(zip(("q_descale", "k_descale", "v_descale"), self.descales,
                                                     strict=True))}
        return {"causal": wl.causal, "window_size": wl.window, "softcap": wl.softcap}

    def flashcore(self, fc: ModuleType, out: torch.Tensor, lse: torch.Tensor,
                  **options: Any) -> Callable[[], object]:
        """The flashcore.serving call writing into out and lse (not run)."""
        wl, kw = self.wl, {**self.options(), "out": out, "lse": lse, **options}
        if wl.layout == "varlen":
            return lambda: fc.serving.varlen(self.q, self.k, self.v, self.cu_q, self.cu_k, wl.seqlen_q, wl.seqlen_k,
                                             **kw)
        if self.descales is not None:
            return lambda: fc.attention_fp8(self.q, self.k, self.v, **kw)
        if wl.layout == "dense":
            return lambda: fc.serving.dense(self.q, self.k, self.v, **kw)
        return lambda: fc.serving.kvcache(self.q, self.k, self.v, self.lengths, page_table=self.page_table, **kw)

    def fa3(self, module: ModuleType) -> Callable[[], object]:
        """The same call through FA3's interface module (not run; a call it cannot make raises when run)."""
        wl, kw = self.wl, self.options()
        if wl.layout == "varlen":
            return lambda: module.flash_attn_varlen_func(self.q, self.k, self.v, self.cu_q, self.cu_k, wl.seqlen_q,
                                                         wl.seqlen_k, **kw)
        if wl.layout == "dense":
            return lambda: module.flash_attn_func(self.q, self.k, self.v, **kw)
        return lambda: module.flash_attn_with_kvcache(self.q, self.k, self.v, cache_seqlens=self.lengths,
                                                      page_table=self.page_table, **kw)

    def sequences(self) -> Iterator[tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]]:
        """(where in out, q, k, v) of each sequence: where indexes out's first dim (a row range or a batch entry)."""
        wl = self.wl
        row = start = 0
        for b, (sq, sk) in enumerate(wl.sequences):
            if wl.layout == "varlen":
                yield slice(row, row + sq), self.q[row:row + sq], self.k[start:start + sk], self.v[start:start + sk]
                row, start = row + sq, start + sk
            elif wl.layout == "paged":
                assert self.page_table is not None
                pages = self.page_table[b, :-(-sk // wl.page_size)].long()
                k = self.k[pages].flatten(0, 1)[:sk]
                v = self.v[pages].flatten(0, 1)[:sk]
                yield b, self.q[b], k, v
            else:
                yield b, self.q[b], self.k[b, :sk], self.v[b, :sk]
