"""The one forward path behind every public function: a checked Call in, (out, lse) back. It picks the device
(the kernel on SM 9.0, torch with fallback="sdpa" elsewhere and on CPU tensors, UnsupportedDeviceError otherwise),
makes the outputs the caller did not pass, answers empty calls without a launch, and launches the kernel with the
call's fc_params (flashcore/launch.py). `plan` answers what that launch would be without launching it."""

from __future__ import annotations

import contextlib
import math
from typing import TYPE_CHECKING, Any

from flashcore import _lib, launch, reference, tuning
from flashcore import fallback as sdpa_fallback
from flashcore.call import Call, new_out

if TYPE_CHECKING:
    import torch


def _device(call: Call) -> tuple[int, str, bool]:
    """(CUDA index or -1, device name, computed by torch rather than the kernel: also every torch_only call)."""
    q = call.q
    if q.device.type == "cpu":  # only with fallback="sdpa": the checks refuse CPU tensors otherwise
        return -1, "CPU", True
    index = launch.device_index(q.device)
    capability, name = launch.device_info(index)
    return index, name, launch.use_fallback(str(q.device), capability, name, call.fallback) or call.torch_only


def outputs(call: Call) -> tuple[torch.Tensor, torch.Tensor]:
    """The call's out and lse: the caller's, else new ones (lse -inf for packed queries, whose rows outside every
    sequence are never written)."""
    import torch

    out = new_out(call.q, call.v) if call.out is None else call.out
    if call.lse is not None:
        return out, call.lse
    if call.packed_q:
        return out, torch.full(call.lse_shape, -math.inf, dtype=torch.float32, device=call.q.device)
    return out, torch.empty(call.lse_shape, dtype=torch.float32, device=call.q.device)


def forward(call: Call, key: tuple[object, ...] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Compute the call; a kernel launch is remembered under its fastpath signature `key` (None: not remembered)."""
    index, name, on_torch = _device(call)
    out, lse = outputs(call)
    if call.empty:
        if not (call.packed_q and call.no_rows):  # a row that sees no key: out = 0, lse = -inf (its sink if any)
            out.zero_()
            lse.fill_(-math.inf)
            if call.sinks is not None:
                lse.copy_(reference.sink_lse(call.sinks, lse.shape, call.packed_q))
        return out, lse
    if on_torch:
        _on_torch(call, out, lse, name)
        return out, lse
    launch.launch(launch.params(call, out, lse, launch.tile_config(call, index)), call.q.device, key)
    return out, lse


def _on_torch(call: Call, out: torch.Tensor, lse: torch.Tensor, name: str) -> None:
    """The fallback: torch SDPA for plain dense calls (warned once per device), the float32 reference for the
    serving layouts, score modifiers and torch_only calls (flashcore/mla.py warned for those)."""
    import torch

    q, k, v = call.q, call.k, call.v
    if call.layout == "dense" and not call.windowed and call.sinks is None and not call.torch_only:
        sdpa_fallback.warn_once(f"{q.device} ({name})")
        with torch.cuda.device(q.device) if q.device.type != "cpu" else contextlib.nullcontext():
            sdpa_fallback.attention(q, k, v, out, lse, call.causal, call.scale, call.deterministic)
        return
    mods: dict[str, Any] = {"causal": call.causal, "scale": call.scale, "window": call.window,
                            "softcap": call.softcap, "chunk": call.attention_chunk, "sinks": call.sinks}
    qv = call.qv
    if call.layout == "dense":
        o, s = reference.dense(q, k, v, qv=qv, **mods)
        out.copy_(o)
        lse.copy_(s)
    elif call.layout == "varlen":
        assert call.cu_seqlens_q is not None and call.cu_seqlens_k is not None
        used_q, used_k = (None if t is None else t.tolist() for t in (call.seqused_q, call.seqused_k))
        cu_q = call.cu_seqlens_q.tolist()
        o, s = reference.varlen(q, k, v, cu_q, call.cu_seqlens_k.tolist(), used_k, used_q=used_q, qv=qv, **mods)
        for rows in reference.query_rows(cu_q, used_q):  # the kernel's rows: no other row is written
            out[rows] = o[rows]
            lse[:, rows] = s[:, rows]
    else:
        assert call.cache_seqlens is not None
        pads = [0] * call.batch if call.cache_leftpad is None else call.cache_leftpad.tolist()
        packed = reference.query_rows(call.cu_seqlens_q.tolist(), None) if call.cu_seqlens_q is not None else None
        for b, (n, pad) in enumerate(zip(call.cache_seqlens.tolist(), pads, strict=True)):
            kb, vb = reference.cached_keys(k, v, b, n, call.cache_batch_idx, call.page_table, pad)
            if packed is None:
                out[b], lse[b] = reference.sequence(q[b], kb, vb, qv=None if qv is None else qv[b], **mods)
            else:  # packed queries: sequence b's rows of q, out and lse [Hq, total_q]
                rows = packed[b]
                out[rows], lse[:, rows] = reference.sequence(q[rows], kb, vb, qv=None if qv is None else qv[rows],
                                                             **mods)


def plan(call: Call) -> tuple[_lib.FcPlanInfo, tuning.TileConfig]:
    """fc_plan of the launch `forward` would make (no fallback: a GPU that is not SM 9.0 raises), and the tile
    configuration asked for. Launches nothing."""
    import torch

    index = launch.device_index(call.q.device)
    capability, name = launch.device_info(index)
    launch.use_fallback(str(call.q.device), capability, name, "error")
    config = launch.tile_config(call, index)
    # fc_plan checks o like q; q itself stands in (nothing is written). FP8: o is bf16, so a bf16 one is allocated.
    o = new_out(call.q, call.v) if call.fp8 else call.q
    with torch.cuda.device(call.q.device):
        return launch.plan(_lib.load(), launch.params(call, o, None, config)), config
