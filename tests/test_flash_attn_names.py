"""flashcore.flash_attn_func / flash_attn_with_kvcache: FA3's names and semantics, on CPU through fallback="sdpa"."""

from __future__ import annotations

import inspect

import pytest

torch = pytest.importorskip("torch")
import flashcore  # noqa: E402
from flashcore import UnsupportedArgument, flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache  # noqa: E402

# FA3's signatures (fa3-fwd 0.0.3, fa3_fwd_interface.py): a user switches by changing one import, so every name,
# position and default must match; FlashCore's own extensions (s_aux: vLLM's FA3 fork's keyword; fallback) are
# keyword-only, after them.
FA3_FUNC = [("q", None), ("k", None), ("v", None), ("softmax_scale", None), ("causal", False), ("qv", None),
            ("q_descale", None), ("k_descale", None), ("v_descale", None), ("window_size", (-1, -1)),
            ("attention_chunk", 0), ("softcap", 0.0), ("num_splits", 1), ("pack_gqa", None),
            ("deterministic", False), ("sm_margin", 0), ("return_attn_probs", False)]
FA3_KVCACHE = [("q", None), ("k_cache", None), ("v_cache", None), ("k", None), ("v", None), ("qv", None),
               ("rotary_cos", None), ("rotary_sin", None), ("cache_seqlens", None), ("cache_batch_idx", None),
               ("cache_leftpad", None), ("page_table", None), ("cu_seqlens_q", None), ("cu_seqlens_k_new", None),
               ("max_seqlen_q", None), ("rotary_seqlens", None), ("q_descale", None), ("k_descale", None),
               ("v_descale", None), ("softmax_scale", None), ("causal", False), ("window_size", (-1, -1)),
               ("attention_chunk", 0), ("softcap", 0.0), ("rotary_interleaved", True), ("scheduler_metadata", None),
               ("num_splits", 0), ("pack_gqa", None), ("sm_margin", 0), ("return_softmax_lse", False)]


FA3_VARLEN = [("q", None), ("k", None), ("v", None), ("cu_seqlens_q", None), ("cu_seqlens_k", None),
              ("max_seqlen_q", None), ("max_seqlen_k", None), ("seqused_q", None), ("seqused_k", None),
              ("softmax_scale", None), ("causal", False), ("qv", None), ("q_descale", None), ("k_descale", None),
              ("v_descale", None), ("window_size", (-1, -1)), ("attention_chunk", 0), ("softcap", 0.0),
              ("num_splits", 1), ("pack_gqa", None), ("deterministic", False), ("sm_margin", 0),
              ("return_attn_probs", False)]


@pytest.mark.parametrize(("fn", "fa3", "own"), [(flash_attn_func, FA3_FUNC, ["s_aux", "fallback"]),
                                                (flash_attn_with_kvcache, FA3_KVCACHE,
                                                 ["s_aux", "fallback", "debug_checks"]),
                                                (flashcore.flash_attn_varlen_func, FA3_VARLEN,
                                                 ["s_aux", "fallback", "debug_checks"])])
def test_signature_is_fa3s(fn, fa3, own) -> None:
    params = list(inspect.signature(fn).parameters.values())
    positional = [p for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    got = [(p.name, None if p.default is p.empty else p.default) for p in positional]
    assert got == fa3
    assert [p.name for p in params if p.kind is p.KEYWORD_ONLY] == own


def _qkv(b=2, sq=37, sk=53, hq=4, hkv=2, d=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, sq, hq, d, generator=g).bfloat16(), torch.randn(b, sk, hkv, d, generator=g).bfloat16(),
            torch.randn(b, sk, hkv, d, generator=g).bfloat16())


def test_func_is_flashcore_attention() -> None:
    q, k, v = _qkv()
    ref, ref_lse = flashcore.attention(q, k, v, causal=True, softmax_scale=0.1, fallback="sdpa")
    out = flash_attn_func(q, k, v, 0.1, True, fallback="sdpa")
    assert isinstance(out, torch.Tensor) and torch.equal(out, ref)
    out, lse = flash_attn_func(q, k, v, softmax_scale=0.1, causal=True, return_attn_probs=True, fallback="sdpa")
    assert torch.equal(out, ref) and torch.equal(lse, ref_lse) and lse.shape == (2, 4, 37)


def test_func_refuses_fp8_qv_by_name() -> None:
    q, k, v = (x.to(torch.float8_e4m3fn) for x in _qkv())
    with pytest.raises(UnsupportedArgument, match="^fp8 qv: "):
        flash_attn_func(q, k, v, qv=q, fallback="sdpa")


def test_func_window_and_softcap_match_the_reference() -> None:
    from flashcore import reference

    q, k, v = _qkv()
    out, lse = flash_attn_func(q, k, v, causal=True, window_size=(5, 9), softcap=3.0, return_attn_probs=True,
                               fallback="sdpa")
    ref, ref_lse = reference.dense(q, k, v, causal=True, scale=64 ** -0.5, window=(5, 9), softcap=3.0)
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse, ref_lse)


def test_func_accepts_fa3s_defaults_spelled_out_and_its_speed_hints() -> None:
    q, k, v = _qkv()
    ref = flash_attn_func(q, k, v, fallback="sdpa")
    same = flash_attn_func(q, k, v, None, False, None, None, None, None, [-1, -1], 0, 0.0, 1, True, False, 0, False,
                           fallback="sdpa")
    assert torch.equal(ref, same)
    with pytest.raises(flashcore.FlashCoreError, match="num_splits"):
        flash_attn_func(q, k, v, num_splits=-1, fallback="sdpa")


def test_kvcache_appends_in_place_then_attends_to_the_filled_part() -> None:
    q, k_new, v_new = _qkv(sq=3, sk=3)
    _, k_old, v_old = _qkv(sq=1, sk=20, seed=1)
    k_cache = torch.full((2, 32, 2, 64), float("nan"), dtype=torch.bfloat16)  # past the end: must never be read
    v_cache = k_cache.clone()
    k_cache[:, :20], v_cache[:, :20] = k_old, v_old
    out, lse = flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=20, causal=True,
                                       return_softmax_lse=True, fallback="sdpa")
    assert torch.equal(k_cache[:, 20:23], k_new) and torch.equal(v_cache[:, 20:23], v_new)  # FA3: in place
    ref, ref_lse = flashcore.attention(q, torch.cat([k_old, k_new], 1), torch.cat([v_old, v_new], 1), causal=True,
                                       fallback="sdpa")
    assert torch.equal(out, ref) and torch.equal(lse, ref_lse) and not out.isnan().any()
    tensor_lengths = torch.full((2,), 23, dtype=torch.int32)
    again = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=tensor_lengths, causal=True, fallback="sdpa")
    torch.testing.assert_close(again.float(), ref.float(), atol=2e-2, rtol=2e-2)  # per-sequence path: reference


def test_kvcache_per_sequence_lengths_and_what_it_refuses() -> None:
    q, k, v = _qkv(sq=1, sk=16)
    out = flash_attn_with_kvcache(q, k, v, cache_seqlens=torch.tensor([3, 9], dtype=torch.int32), fallback="sdpa")
    for b, n in enumerate((3, 9)):
        ref, _ = flashcore.attention(q[b:b + 1], k[b:b + 1, :n], v[b:b + 1, :n], fallback="sdpa")
        torch.testing.assert_close(out[b:b + 1].float(), ref.float(), atol=2e-2, rtol=2e-2)
    with pytest.raises(flashcore.FlashCoreError, match="1 .. 65536 keys per page"):  # a page of no rows
        flash_attn_with_kvcache(q, k[:, :0], v[:, :0], page_table=torch.zeros(2, 1, dtype=torch.int32), fallback="sdpa")
    with pytest.raises(flashcore.FlashCoreError, match="cache_seqlens is 17"):
        flash_attn_with_kvcache(q, k, v, cache_seqlens=17, fallback="sdpa")
    with pytest.raises(flashcore.FlashCoreError, match="torch.int32"):
        flash_attn_with_kvcache(q, k, v, cache_seqlens=torch.tensor([3, 3]), fallback="sdpa")
    new = torch.zeros(2, 4, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(flashcore.FlashCoreError, match="overflows the cache of 16"):
        flash_attn_with_kvcache(q, k, v, new, new, cache_seqlens=14, fallback="sdpa")
    with pytest.raises(flashcore.FlashCoreError, match="pass cache_seqlens"):
        flash_attn_with_kvcache(q, k, v, new, new, fallback="sdpa")
    with pytest.raises(flashcore.FlashCoreError, match="pass both or neither"):
        flash_attn_with_kvcache(q, k, v, new, None, cache_seqlens=3, fallback="sdpa")


def _fp8(b: int = 1, s: int = 40, h: int = 2) -> torch.Tensor:
    return torch.randn(b, s, h, 128).to(torch.float8_e4m3fn)


def test_func_runs_fp8_inputs_on_attention_fp8_with_the_descales(monkeypatch: pytest.MonkeyPatch) -> None:
    import flashcore.fp8

    seen: dict[str, object] = {}

    def fake(q, k, v, **kw):  # type: ignore[no-untyped-def]
        seen.update(kw)
        return "OUT", "LSE"

    monkeypatch.setattr(flashcore.fp8, "attention_fp8", fake)
    q, k, v = _fp8(), _fp8(), _fp8()
    d = [torch.rand(1, 2) for _ in range(3)]
    out = flash_attn_func(q, k, v, causal=True, q_descale=d[0], k_descale=d[1], v_descale=d[2], num_splits=0)
    assert out == "OUT"
    assert seen["causal"] is True and seen["num_splits"] is None  # FA3's 0: chosen automatically
    assert (seen["q_descale"], seen["k_descale"], seen["v_descale"]) == tuple(d)
    assert flash_attn_func(q, k, v, return_attn_probs=True) == ("OUT", "LSE")
    assert seen["q_descale"] is None and seen["num_splits"] == 1  # FA3's defaults: unit descales, no split


@pytest.mark.parametrize("kwargs", [{"window_size": (8, 0)}, {"softcap": 5.0}, {}],
                         ids=["window", "softcap", "fallback"])
def test_func_runs_fp8_with_what_attention_fp8_lacks_on_dequantized_inputs(kwargs) -> None:  # type: ignore[no-untyped-def]
    q, k, v = _fp8(), _fp8(), _fp8()
    got = flash_attn_func(q, k, v, fallback="sdpa", **kwargs)
    assert torch.equal(got, flash_attn_func(*(x.to(torch.bfloat16) for x in (q, k, v)), fallback="sdpa", **kwargs))


def test_func_refuses_descales_on_16_bit_inputs() -> None:
    q, k, v = _qkv()
    with pytest.raises(flashcore.FlashCoreError, match="k_descale is given but q is torch.bfloat16: descale factors "
                       "apply to float8_e4m3fn inputs only"):
        flash_attn_func(q, k, v, k_descale=torch.ones(2, 2), fallback="sdpa")


def test_varlen_descales_with_16_bit_inputs_raise_naming_them() -> None:
    q, k, v = _qkv()
    cu = torch.tensor([0, 37, 74], dtype=torch.int32)
    with pytest.raises(flashcore.FlashCoreError, match="^q_descale is given but q is torch.bfloat16: descale factors"):
        flash_attn_varlen_func(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), cu, cu, 37, 37,
                               q_descale=torch.ones(2, 2), fallback="sdpa")


def test_a_paged_kvcache_call_checks_its_page_table_and_caches_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """flash_attn_with_kvcache with a page table and an append: the page table, the cache shapes and the dense
    checks each run once, and no flashcore module calls back into one that called it (one walk through the rooms:
    flash_attn -> serving -> check_serving / append -> forward)."""
    import sys
    from collections import Counter

    from flashcore import check, check_serving

    counts: Counter[str] = Counter()
    for module, name in ((check_serving, "check_page_table"), (check_serving, "caches"), (check, "dense")):
        real = getattr(module, name)

        def counted(*a: object, _real: object = real, _name: str = name, **kw: object) -> object:
            counts[_name] += 1
            return _real(*a, **kw)  # type: ignore[operator]

        monkeypatch.setattr(module, name, counted)
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 1, 4, 64, generator=g).to(torch.bfloat16)
    k_cache, v_cache = (torch.randn(5, 16, 2, 64, generator=g).to(torch.bfloat16) for _ in range(2))
    table = torch.tensor([[0, 3], [4, 1]], dtype=torch.int32)
    k_new, v_new = (torch.randn(2, 1, 2, 64, generator=g).to(torch.bfloat16) for _ in range(2))
    lengths = torch.tensor([5, 20], dtype=torch.int32)
    edges: set[tuple[str, str]] = set()

    def profile(frame: object, event: str, arg: object) -> None:
        if event != "call":
            return
        callee = frame.f_globals.get("__name__", "")  # type: ignore[attr-defined]
        caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""  # type: ignore[attr-defined]
        if callee != caller and callee.startswith("flashcore") and caller.startswith("flashcore"):
            edges.add((caller, callee))

    sys.setprofile(profile)
    try:
        out = flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=lengths, page_table=table,
                                      fallback="sdpa")
    finally:
        sys.setprofile(None)
    assert counts == {"check_page_table": 1, "caches": 1, "dense": 1}
    assert out.shape == q.shape and torch.equal(k_cache[0, 5], k_new[0, 0]) and torch.equal(k_cache[1, 4], k_new[1, 0])
    assert {("flashcore.flash_attn", "flashcore.serving"), ("flashcore.serving", "flashcore.forward")} <= edges
    for module in {a for a, _ in edges}:  # no module calls one that (through others) called it
        seen, todo = set(), [module]
        while todo:
            m = todo.pop()
            for a, b in edges:
                if a == m and b not in seen:
                    seen.add(b)
                    todo.append(b)
        assert module not in seen, f"{module} is re-entered: {sorted(edges)}"


def test_refusals_name_the_argument_and_a_reason_without_internal_history() -> None:
    """Every refused argument raises UnsupportedArgument naming it and why; no message or comment in flashcore/
    cites an internal issue or step number (the history lives in docs/perf-notes.md)."""
    import re
    from pathlib import Path

    from flashcore import check

    for name, why in check.UNSUPPORTED.items():
        with pytest.raises(UnsupportedArgument, match=rf"^{re.escape(name)}: {re.escape(why)}$"):
            check.refuse({name: True})
    package = Path(flashcore.__file__).resolve().parent
    cited = [f"{p.name}:{i}" for p in package.rglob("*.py") for i, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"\b(issues?|steps?) \d", line, re.IGNORECASE)]
    assert cited == []


@pytest.mark.parametrize("window", [(5, 9), [5, 9], (torch.tensor(5), torch.tensor(9)), torch.tensor([5, 9]),
                                    torch.tensor([5, 9], dtype=torch.int32)])
def test_window_size_takes_what_fa3s_callers_pass(window) -> None:  # type: ignore[no-untyped-def]
    q, k, v = _qkv()
    ref = flash_attn_func(q, k, v, causal=True, window_size=(5, 9), fallback="sdpa")
    assert torch.equal(flash_attn_func(q, k, v, causal=True, window_size=window, fallback="sdpa"), ref)


def test_window_size_none_is_unbounded_and_bad_sides_are_named() -> None:
    q, k, v = _qkv()
    ref = flash_attn_func(q, k, v, causal=True, window_size=(-1, 3), fallback="sdpa")
    assert torch.equal(flash_attn_func(q, k, v, causal=True, window_size=(None, 3), fallback="sdpa"), ref)
    plain = flash_attn_func(q, k, v, causal=True, fallback="sdpa")
    assert torch.equal(flash_attn_func(q, k, v, causal=True, window_size=(None, None), fallback="sdpa"), plain)
    for bad, named in (((1.5, 2), "window_size left"), ((torch.tensor(1.0), 2), "window_size left"),
                       ((1, torch.tensor([1, 2])), "window_size right"), ((1, -2), "window_size right"),
                       (torch.tensor([1, 2, 3]), "window_size is"), ((True, 0), "window_size left")):
        with pytest.raises(flashcore.FlashCoreError, match=named):
            flash_attn_func(q, k, v, window_size=bad, fallback="sdpa")


def test_kvcache_ignores_rotary_seqlens_without_rotary_cos_as_fa3_does() -> None:
    q, k, v = _qkv(sq=1, sk=16)
    lengths = torch.tensor([3, 9], dtype=torch.int32)
    ref = flash_attn_with_kvcache(q, k, v, cache_seqlens=lengths, fallback="sdpa")
    got = flash_attn_with_kvcache(q, k, v, cache_seqlens=lengths, rotary_seqlens=lengths, fallback="sdpa")
    assert torch.equal(got, ref)


def test_a_window_given_as_a_tensor_is_read_on_every_call() -> None:
    """A tensor-valued window is not part of the repeat-call key (tensors hash by identity): changing it in place
    changes the next call's window."""
    q, k, v = _qkv()
    window = torch.tensor([5, 9])
    first = flash_attn_func(q, k, v, causal=True, window_size=window, fallback="sdpa")
    window[0] = 2
    second = flash_attn_func(q, k, v, causal=True, window_size=window, fallback="sdpa")
    assert torch.equal(second, flash_attn_func(q, k, v, causal=True, window_size=(2, 9), fallback="sdpa"))
    assert not torch.equal(first, second)
