"""One attention call, described: what the public functions check their arguments into and what
flashcore.forward.forward plans and launches. Every optional feature has a field here, so a new argument is one
field, the check that fills it, and the kernel parameter it sets (flashcore/launch.py `params`).

Layouts: "dense" (q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D]); "varlen" (packed q [total_q, Hq, D], k and v
[total_k, Hkv, D], sequences by cu_seqlens); "kvcache" (q [B, Sq, Hq, D] into caches [B_cache, S, Hkv, D] or paged
caches [pages, page_size, Hkv, D]). A Call exists only after every host check passed; nothing is allocated or
launched yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from flashcore.tuning import TileConfig

NO_WINDOW = (-1, -1)


@dataclass(frozen=True)
class Call:
    layout: str  # "dense", "varlen" or "kvcache"
    q: torch.Tensor
    k: torch.Tensor  # the caches for "kvcache"
    v: torch.Tensor
    out: torch.Tensor | None  # the caller's buffers (checked), None: forward allocates them
    lse: torch.Tensor | None
    causal: bool
    scale: float
    deterministic: bool = False
    fallback: str = "error"
    debug_fault: int = 0
    num_splits: int = 0  # 0: automatic
    sm_margin: int = 0
    tile: TileConfig | None = None  # None: the tuned table's entry (or the defaults)
    window: tuple[int, int] = NO_WINDOW  # (left, right), -1: unbounded; causal's right bound is 0
    softcap: float = 0.0  # 0: off
    # FP8 (flashcore.attention_fp8): float32 [B, Hkv] descale factors (None: 1) and fc_fp8_v_transpose
    q_descale: torch.Tensor | None = None
    k_descale: torch.Tensor | None = None
    v_descale: torch.Tensor | None = None
    v_transpose: int = 0
    # packed sequences ("varlen"): int32 offsets [B + 1], optional used queries and keys [B], the longest sequence
    cu_seqlens_q: torch.Tensor | None = None
    cu_seqlens_k: torch.Tensor | None = None
    seqused_q: torch.Tensor | None = None
    seqused_k: torch.Tensor | None = None
    max_seqlen_q: int = 0
    max_seqlen_k: int = 0
    # a KV cache ("kvcache"): int32 lengths [B], optional slots [B] or page table [B, max_pages]
    cache_seqlens: torch.Tensor | None = None
    cache_batch_idx: torch.Tensor | None = None
    page_table: torch.Tensor | None = None
    cache_leftpad: torch.Tensor | None = None  # int32 [B]: sequence b's keys are rows [leftpad, cache_seqlens)
    attention_chunk: int = 0  # > 0: FA3's chunked local attention (kernel/flashcore.h fc_params.attention_chunk)
    # attention sinks (s_aux): float32 [Hq] raw logits, one extra value-less key per row (fc_params.sinks)
    sinks: torch.Tensor | None = None
    # FA3's MLA operand qv: [.., Hq, Dv] like q with v's head dim; every score gains qv . v (flashcore/mla.py: torch
    # computes such a call, no kernel has the second product)
    qv: torch.Tensor | None = None
    torch_only: bool = False  # computed by torch on any device: qv, or MLA's head dims (flashcore/mla.py)

    @property
    def fp8(self) -> bool:
        return is_fp8(self.q)

    @property
    def windowed(self) -> bool:
        """A sliding window, chunks or soft-capping: the serving kernel's score modifiers."""
        return self.window != NO_WINDOW or self.softcap != 0.0 or self.attention_chunk != 0

    @property
    def batch(self) -> int:
        return self.cu_seqlens_q.shape[0] - 1 if self.cu_seqlens_q is not None else self.q.shape[0]

    @property
    def packed_q(self) -> bool:
        """q is packed [total_q, Hq, D] (cu_seqlens_q): a varlen batch, or packed queries into a KV cache."""
        return self.cu_seqlens_q is not None

    @property
    def max_q(self) -> int:
        """The longest query sequence (the tile bucket's and the grid's)."""
        return self.max_seqlen_q if self.packed_q else self.q.shape[1]

    @property
    def max_k(self) -> int:
        """The longest key sequence: a packed batch's max_seqlen_k, a cache's capacity per sequence."""
        if self.layout == "varlen":
            return self.max_seqlen_k
        if self.page_table is not None:
            return self.k.shape[1] * self.page_table.shape[1]
        return self.k.shape[1]

    def index_arrays(self) -> dict[str, torch.Tensor | None]:
        """The call's device index tensors by their fc_params field (flashcore/_lib.py INDEX_ARRAYS): what the
        kernel reads per sequence; a field left out is NULL."""
        if self.layout == "varlen":
            return {"cu_seqlens_q": self.cu_seqlens_q, "cu_seqlens_k": self.cu_seqlens_k,
                    "seqused_q": self.seqused_q, "seqused_k": self.seqused_k}
        if self.layout == "kvcache":
            return {"cu_seqlens_q": self.cu_seqlens_q, "seqused_k": self.cache_seqlens,
                    "kv_batch_idx": self.cache_batch_idx,
                    "leftpad_k": self.cache_leftpad, "page_table": self.page_table}
        return {}

    @property
    def lse_shape(self) -> tuple[int, ...]:
        """[Hq, total_q] for packed queries, else [B, Hq, Sq]."""
        return lse_shape(self.q, self.packed_q)

    @property
    def empty(self) -> bool:
        """Nothing to launch: no query row or no key (forward answers without the kernel)."""
        return self.no_rows or self.no_keys

    @property
    def no_rows(self) -> bool:
        """No query row: packed queries' outputs are left as they are (lse -inf where forward allocates it)."""
        if self.packed_q:
            return self.batch == 0 or self.q.shape[0] == 0 or self.max_seqlen_q == 0
        return self.q.numel() == 0

    @property
    def no_keys(self) -> bool:
        """No key to attend to: out = 0, lse = -inf without a launch."""
        if self.layout == "varlen":
            return self.max_seqlen_k == 0 or self.k.shape[0] == 0
        return self.max_k == 0


def is_fp8(q: object) -> bool:
    """q is a float8_e4m3fn tensor: flashcore.attention_fp8's input."""
    import torch

    return isinstance(q, torch.Tensor) and q.dtype == torch.float8_e4m3fn


def out_shape(q: torch.Tensor, v: torch.Tensor) -> tuple[int, ...]:
    """The output's shape: q's, with v's head dim."""
    return (*q.shape[:-1], v.shape[-1])


def out_dtype(q: torch.Tensor) -> torch.dtype:
    """The output's dtype: q's, or bf16 for FP8 inputs (FA3's)."""
    import torch

    return torch.bfloat16 if is_fp8(q) else q.dtype


def new_out(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """An uninitialized contiguous output for q and v (out_dtype(q), q's device, v's head dim)."""
    import torch

    return torch.empty(out_shape(q, v), dtype=out_dtype(q), device=q.device)


def lse_shape(q: torch.Tensor, packed: bool = False) -> tuple[int, ...]:
    """lse's shape for q: [Hq, total_q] packed, else [B, Hq, Sq]."""
    return (q.shape[1], q.shape[0]) if packed else (q.shape[0], q.shape[2], q.shape[1])
