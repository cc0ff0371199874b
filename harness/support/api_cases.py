"""The API gate's case table (`gates/api-cases.yaml`): parsed once into frozen dataclasses, and the tensors each
case describes, built on any torch device (the CPU tests build them on the CPU).

A case is `reject` (must raise `error` with a message matching `match`, before any launch) or `accept` (must
run and match the fp32 reference; `expect: empty` = the defined result of an empty input, without a launch).
Its top-level shape keys override `defaults`; `q`, `k`, `v`, `out`, `lse` override how one argument is built
(TensorSpec); `call` passes extra keyword arguments to flashcore.attention verbatim.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from harness.schema import ConfigError, mapping, param, parse_dataclass, read_yaml
from harness.support import gpu

if TYPE_CHECKING:
    import torch

ERRORS = ("FlashCoreError", "UnsupportedDeviceError")
TENSORS = ("q", "k", "v", "out", "lse")
CALL_KEYS = ("softmax_scale", "causal", "deterministic", "fallback", "debug_fault", "num_splits", "sm_margin",
             "window_size", "softcap", "max_seqlen_q", "max_seqlen_k")
# The serving entry points a reject case may call instead of flashcore.attention, by FA3's names: varlen =
# flash_attn_varlen_func on packed [B * S, H, D] q/k/v, kvcache = flash_attn_with_kvcache with k/v as the cache.
ENTRIES = ("attention", "varlen", "kvcache")
# Their index arguments: in `call`, {values: [...], dtype: int32|int64|fp32 (default int32), device: cuda|cpu} builds
# a tensor (any other value is passed verbatim); varlen gets cu_seqlens_q/k = [0, S, 2 S, ...] and max_seqlen_q/k = S
# unless the case says otherwise, kvcache gets cache_seqlens = [Sk] * B.
INDEX_KEYS = ("cu_seqlens_q", "cu_seqlens_k", "seqused_k", "cache_seqlens", "cache_batch_idx", "page_table")
ENTRY_KEYS = (*INDEX_KEYS, "max_seqlen_q", "max_seqlen_k")  # what only the serving entries take
INDEX_DTYPES = ("int32", "int64", "fp32")
# A case that passes one of these calls flashcore.serving.dense (attention's layout with a window or softcap) instead
# of flashcore.attention; reject cases only (the accept judge's reference has neither).
SERVING_KEYS = ("window_size", "softcap")
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp64": "float64", "int8": "int8",
          "int16": "int16", "fp8": "float8_e4m3fn", "bool": "bool"}
LAYOUTS = ("contiguous", "bhsd", "padded-heads", "packed", "seq-slice", "last-dim-strided", "misaligned",
           "odd-seq-stride", "expand", "transposed")
MISALIGN_BYTES = 8  # a base 8 bytes past a 16-byte boundary: fine for 16-bit loads, not for TMA


@dataclass(frozen=True)
class Dims:
    batch: int = param(ge=0)
    seqlen_q: int = param(ge=0)
    seqlen_k: int = param(ge=0)
    heads_q: int = param(ge=0)
    heads_kv: int = param(ge=0)
    head_dim: int = param(ge=0)
    dtype: str = param(choices=("bf16", "fp16"))
    causal: bool = param(default=False)


@dataclass(frozen=True)
class TensorSpec:
    """How to build one argument; every field defaults to the plain tensor the dims describe."""

    shape: tuple[int, ...] = param(default=())  # () = from the dims
    dtype: str = param(default="", choices=tuple(DTYPES))  # "" = the dims' dtype (lse: fp32)
    device: str = param(default="cuda", choices=("cuda", "cpu", "meta", "cuda:1"))
    layout: str = param(default="contiguous", choices=LAYOUTS)
    alias: str = param(default="", choices=("q", "k", "v", "out"))  # a view of that argument's memory
    value: str = param(default="", choices=("none", "list", "float"))  # not a tensor at all


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # "reject" or "accept"
    why: str
    dims: Dims
    tensors: Mapping[str, TensorSpec]  # only the arguments the case overrides
    call: Mapping[str, Any]
    error: str = ""  # reject: expected exception class (flashcore.<error>)
    match: str = ""  # reject: regex the message must contain
    expect: str = "result"  # accept: "result" (vs the fp32 reference) or "empty" (defined result, no launch)
    min_devices: int = 1  # GPUs the case needs; NOT_APPLICABLE, with the reason, on a host with fewer
    entry: str = "attention"  # reject: which entry point (ENTRIES) the case calls
    # reject: "call" (the call raises, before the library) or "check_errors" (bad index data only the kernel sees:
    # the call runs, and flashcore.check_errors() after it raises)
    raised_by: str = "call"


def _case(file: Path, kind: str, name: str, raw: Any, defaults: Mapping[str, Any]) -> Case:
    key = f"{kind}.{name}"
    raw = dict(mapping(file, key, raw))
    dim_keys = [k for k in raw if k in Dims.__dataclass_fields__]
    dims = parse_dataclass(Dims, {**defaults, **{k: raw.pop(k) for k in dim_keys}}, file, key)
    tensors = {t: parse_dataclass(TensorSpec, raw.pop(t), file, f"{key}.{t}") for t in TENSORS if t in raw}
    call = dict(mapping(file, f"{key}.call", raw.pop("call", None)))
    for k in call:
        if k not in (*CALL_KEYS, *INDEX_KEYS):
            raise ConfigError(file, f"{key}.call.{k}", call[k],
                              f"unknown argument; allowed: {', '.join((*CALL_KEYS, *INDEX_KEYS))}")
        if k in INDEX_KEYS and isinstance(call[k], Mapping):
            call[k] = parse_dataclass(IndexSpec, call[k], file, f"{key}.call.{k}")
    own = (("why", "error", "match", "min_devices", "entry", "raised_by") if kind == "reject"
           else ("why", "expect", "min_devices"))
    for k in raw:
        if k not in own:
            allowed = ", ".join([*own, *Dims.__dataclass_fields__, *TENSORS, "call"])
            raise ConfigError(file, f"{key}.{k}", raw[k], f"unknown key; allowed: {allowed}")
    spec = parse_dataclass(_Own[kind], raw, file, key)
    serving_only = [k for k in ENTRY_KEYS if k in call]
    if serving_only and getattr(spec, "entry", "attention") == "attention":
        raise ConfigError(file, f"{key}.call.{serving_only[0]}", call[serving_only[0]],
                          "an argument of the varlen and kvcache entries: set `entry`")
    if kind == "reject":
        try:
            re.compile(spec.match)
        except re.error as e:
            raise ConfigError(file, f"{key}.match", spec.match, f"not a valid regular expression: {e}") from None
    elif serving := [k for k in SERVING_KEYS if k in call]:
        raise ConfigError(file, f"{key}.call.{serving[0]}", call[serving[0]],
                          "window_size and softcap are for reject cases (the accept judge's reference has neither)")
    elif "softmax_scale" in call:
        raise ConfigError(file, f"{key}.call.softmax_scale", call["softmax_scale"],
                          "accept cases are judged against the reference at the default scale")
    return Case(name=name, kind=kind, dims=dims, tensors=MappingProxyType(tensors),
                call=MappingProxyType(call), **vars(spec))


@dataclass(frozen=True)
class IndexSpec:
    """An index tensor argument of a serving entry (INDEX_KEYS)."""

    values: tuple[int, ...] = param(default=())  # flat values (shape: [len] unless `shape` says otherwise)
    shape: tuple[int, ...] = param(default=())
    dtype: str = param(default="int32", choices=INDEX_DTYPES)
    device: str = param(default="cuda", choices=("cuda", "cpu"))


@dataclass(frozen=True)
class _Reject:
    why: str = param()
    error: str = param(choices=ERRORS)
    match: str = param()
    min_devices: int = param(default=1, ge=1)
    entry: str = param(default="attention", choices=ENTRIES)
    raised_by: str = param(default="call", choices=("call", "check_errors"))


@dataclass(frozen=True)
class _Accept:
    why: str = param()
    expect: str = param(default="result", choices=("result", "empty"))
    min_devices: int = param(default=1, ge=1)


_Own: dict[str, type] = {"reject": _Reject, "accept": _Accept}


@dataclass(frozen=True)
class CaseTable:
    defaults: Dims  # also the shape of the plain call made after the whole suite
    cases: tuple[Case, ...]


def load_cases(file: Path) -> CaseTable:
    """Every case of the file, rejects first; ConfigError names the file, key and value of any problem."""
    data = read_yaml(file, ("defaults", "reject", "accept"))
    defaults = mapping(file, "defaults", data.get("defaults"))
    default_dims = parse_dataclass(Dims, defaults, file, "defaults")
    cases: list[Case] = []
    for kind in ("reject", "accept"):
        for name, raw in mapping(file, kind, data.get(kind)).items():
            if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", name):
                raise ConfigError(file, f"{kind}.{name}", name, "a case name is [a-z0-9._-]+")
            if any(c.name == name for c in cases):
                raise ConfigError(file, f"{kind}.{name}", name, "case names are unique over reject and accept")
            cases.append(_case(file, kind, name, raw, defaults))
    if not any(c.kind == "reject" for c in cases) or not any(c.kind == "accept" for c in cases):
        raise ConfigError(file, "reject/accept", len(cases), "needs at least one reject and one accept case")
    return CaseTable(default_dims, tuple(cases))


# ---- building the arguments ------------------------------------------------------------------------


def default_shape(name: str, d: Dims, entry: str = "attention") -> tuple[int, ...]:
    if entry == "varlen" and name in ("q", "k", "v"):  # packed sequences: [B * S, H, D]
        rows, heads = (d.seqlen_q, d.heads_q) if name == "q" else (d.seqlen_k, d.heads_kv)
        return (d.batch * rows, heads, d.head_dim)
    if name in ("q", "out"):
        return (d.batch, d.seqlen_q, d.heads_q, d.head_dim)
    if name == "lse":
        return (d.batch, d.heads_q, d.seqlen_q)
    return (d.batch, d.seqlen_k, d.heads_kv, d.head_dim)


def _allocate(shape: tuple[int, ...], dtype: torch.dtype, device: str, layout: str) -> tuple[Any, Any]:
    """(storage, view): `storage` is a dense tensor that holds every element of `view` (fill it, not the view)."""
    import torch

    def empty(*s: int) -> torch.Tensor:
        return torch.empty(s, dtype=dtype, device=device)

    if layout in ("bhsd", "padded-heads", "packed", "seq-slice", "odd-seq-stride") and len(shape) != 4:
        raise ValueError(f"layout {layout} needs a rank-4 shape, got {shape}")
    b, s, h, d = shape if len(shape) == 4 else (0, 0, 0, 0)
    n = 1
    for x in shape:
        n *= x
    if layout == "contiguous":
        base = empty(*shape)
        return base, base
    if layout == "bhsd":  # q.transpose(1, 2) of a [B, H, S, D] tensor
        base = empty(b, h, s, d)
        return base, base.transpose(1, 2)
    if layout == "padded-heads":  # head stride 2 D
        base = empty(b, s, h, 2, d)
        return base, base[..., 0, :]
    if layout == "packed":  # the k of a packed [B, S, 3, H, D] qkv tensor
        base = empty(b, s, 3, h, d)
        return base, base[:, :, 1]
    if layout == "seq-slice":  # rows 3.. of a longer sequence: an offset, 16-byte aligned base
        base = empty(b, s + 3, h, d)
        return base, base[:, 3:]
    if layout == "last-dim-strided":
        base = empty(*shape[:-1], 2 * shape[-1])
        return base, base[..., ::2]
    if layout == "misaligned":
        off = MISALIGN_BYTES // torch.empty((), dtype=dtype).element_size()
        base = empty(n + 2 * off)
        return base, base[off : off + n].view(shape)
    if layout == "odd-seq-stride":  # seq stride H D + 4 elements: 8 bytes off the 16-byte grid
        row = h * d + 4
        base = empty(b * s * row)
        return base, base.as_strided(shape, (s * row, row, d, 1))
    if layout == "expand":  # stride 0 on every dim but the last
        base = empty(*[1] * (len(shape) - 1), shape[-1])
        return base, base.expand(shape)
    if layout == "transposed":  # every dim reversed in memory
        base = empty(*reversed(shape))
        return base, base.permute(*reversed(range(len(shape))))
    raise ValueError(f"unknown layout {layout}")


def _fill(storage: torch.Tensor, poison: bool, generator: torch.Generator | None) -> None:
    import torch

    if storage.device.type == "meta":
        return
    names = {torch.bfloat16: "bf16", torch.float16: "fp16"}
    if poison and storage.dtype in names:
        storage.view(torch.int16).fill_(gpu.POISON_16[names[storage.dtype]])
        return
    if poison and storage.dtype == torch.float32:
        storage.view(torch.int32).fill_(gpu.POISON_LSE)
        return
    noise = torch.randn(storage.shape, generator=generator, device=storage.device, dtype=torch.float32)
    storage.copy_(noise)


def _alias(target: Any, shape: tuple[int, ...], dtype: torch.dtype) -> Any:
    """A view of `target`'s memory with the given shape and dtype (`target` itself when they already match)."""
    if tuple(target.shape) == shape and target.dtype == dtype:
        return target
    import torch

    n = 1
    for x in shape:
        n *= x
    nbytes = n * torch.empty((), dtype=dtype).element_size()
    flat = target.reshape(-1)[: nbytes // target.element_size()]
    return flat.view(dtype).view(shape)


def build(case: Case, device: str, seed: int, *, poisoned_outputs: bool) -> dict[str, Any]:
    """q, k, v (random) and, when the case names them or `poisoned_outputs` is set, out and lse (poisoned).

    `device` replaces "cuda" (the CPU tests pass "cpu"); a missing key means the argument is not passed."""
    import torch

    generators: dict[str, torch.Generator] = {}
    args: dict[str, Any] = {}
    for name in TENSORS:
        spec = case.tensors.get(name)
        if name in ("out", "lse") and (case.entry != "attention" or (spec is None and not poisoned_outputs)):
            continue  # the serving entries (FA3's names) take no out or lse
        spec = spec or TensorSpec()
        if spec.value:
            value = {"none": None, "list": [1.0, 2.0], "float": 1.0}[spec.value]
            if value is not None:
                args[name] = value
            continue
        shape = spec.shape or default_shape(name, case.dims, case.entry)
        if name == "out" and not spec.shape and isinstance(args.get("v"), torch.Tensor) and args["v"].dim() == 4:
            shape = (*shape[:3], args["v"].shape[3])  # the output takes v's head dim (192 with a v of 128)
        dtype_name = spec.dtype or ("fp32" if name == "lse" else case.dims.dtype)
        dtype = getattr(torch, DTYPES[dtype_name])
        if spec.alias:
            args[name] = _alias(args[spec.alias], shape, dtype)
            continue
        where = device if spec.device == "cuda" else spec.device
        if where not in generators and not where.startswith("meta"):
            generators[where] = torch.Generator(device=where).manual_seed(seed + len(generators))
        storage, view = _allocate(shape, dtype, where, spec.layout)
        _fill(storage, name in ("out", "lse"), generators.get(where))
        args[name] = view
    return {**args, **index_args(case, device)}


def index_args(case: Case, device: str) -> dict[str, Any]:
    """The serving entry's index arguments: its defaults (INDEX_KEYS' comment), then the case's own."""
    import torch

    d, out = case.dims, {}
    if case.entry == "varlen":
        out = {"cu_seqlens_q": torch.arange(d.batch + 1, dtype=torch.int32, device=device) * d.seqlen_q,
               "cu_seqlens_k": torch.arange(d.batch + 1, dtype=torch.int32, device=device) * d.seqlen_k,
               "max_seqlen_q": d.seqlen_q, "max_seqlen_k": d.seqlen_k}
    elif case.entry == "kvcache":
        out = {"cache_seqlens": torch.full((d.batch,), d.seqlen_k, dtype=torch.int32, device=device)}
    for name in INDEX_KEYS:
        spec = case.call.get(name)
        if isinstance(spec, IndexSpec):
            dtype = {"int32": torch.int32, "int64": torch.int64, "fp32": torch.float32}[spec.dtype]
            t = torch.tensor(spec.values, dtype=dtype, device=device if spec.device == "cuda" else spec.device)
            out[name] = t.view(spec.shape) if spec.shape else t
    return out
