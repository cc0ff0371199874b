"""flash_attn_with_kvcache's append without a GPU (the torch path, fallback="sdpa"): rotary embedding of the new keys
and of q (interleaved or not, rotary_dim < D, rotary_seqlens), packed new keys (cu_seqlens_k_new), contiguous,
slotted and paged caches, against a plain reference written from FA3's definition (hopper/flash_attn_interface.py,
hopper/rotary.h); argument errors and bad index values named."""

from __future__ import annotations

import pytest
import torch

import flashcore
from flashcore import rotary
from flashcore.errors import FlashCoreError

H, HKV, D = 4, 2, 64


def rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.bfloat16)


def ints(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


def table(rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [rows, cols] in bf16 (FA3's test rounds them to the input dtype too)."""
    angle = torch.rand(rows, cols) * 6.283
    return torch.cos(angle).to(torch.bfloat16), torch.sin(angle).to(torch.bfloat16)


def fa3_rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pos: int, interleaved: bool) -> torch.Tensor:
    """One head row x [D] at table row `pos`, pair by pair as FA3's rotary.h: fp32, rounded once."""
    out = x.clone()
    rd = 2 * cos.shape[1]
    for i in range(rd // 2):
        a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + rd // 2)
        x0, x1 = x[a].float(), x[b].float()
        c, s = cos[pos, i].float(), sin[pos, i].float()
        out[a] = (x0 * c - x1 * s).to(x.dtype)
        out[b] = (x0 * s + x1 * c).to(x.dtype)
    return out


def reference_append(k_cache: torch.Tensor, v_cache: torch.Tensor, rows: list[torch.Tensor],
                     v_rows: list[torch.Tensor], lengths: list[int], entry_of: list[int], page_table: list[list[int]]
                     | None, rot: tuple[torch.Tensor, torch.Tensor, list[int], bool] | None) -> None:
    """Sequence b's new rows rows[b] [n, Hkv, D] written at cache_seqlens[b] + j, rotated at base[b] + j."""
    for b, (k_b, v_b) in enumerate(zip(rows, v_rows, strict=True)):
        for j in range(k_b.shape[0]):
            pos = lengths[b] + j
            key = k_b[j].clone()
            if rot is not None:
                cos, sin, base, interleaved = rot
                key = torch.stack([fa3_rotate(key[h], cos, sin, base[b] + j, interleaved) for h in range(HKV)])
            if page_table is None:
                entry, row = entry_of[b], pos
            else:
                page_size = k_cache.shape[1]
                entry, row = page_table[entry_of[b]][pos // page_size], pos % page_size
            k_cache[entry, row] = key
            v_cache[entry, row] = v_b[j]


def q_reference(q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, base: list[int], per_row: bool,
                interleaved: bool) -> torch.Tensor:
    """q [B, Sq, H, D] rotated: row i of sequence b at base[b] + i (causal or local) or at base[b]."""
    out = q.clone()
    for b in range(q.shape[0]):
        for i in range(q.shape[1]):
            for h in range(q.shape[2]):
                out[b, i, h] = fa3_rotate(q[b, i, h], cos, sin, base[b] + (i if per_row else 0), interleaved)
    return out


@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("rotary_dim", [D, 32])
@pytest.mark.parametrize("layout", ["contiguous", "slots", "paged", "packed", "packed-paged"])
@pytest.mark.parametrize("causal", [True, False])
def test_rotary_append_matches_fa3_definition(interleaved: bool, rotary_dim: int, layout: str, causal: bool) -> None:
    torch.manual_seed(hash((interleaved, rotary_dim, layout, causal)) % 1000)
    batch, capacity, sq = 3, 12, 2
    lengths = [3, 0, 7]
    news = [2, 1, 3] if layout.startswith("packed") else [2, 2, 2]
    k_rows = [rand(n, HKV, D) for n in news]
    v_rows = [rand(n, HKV, D) for n in news]
    cos, sin = table(16, rotary_dim // 2)
    q = rand(batch, sq, H, D)
    kw: dict[str, object] = {}
    entry_of, pages = list(range(batch)), None
    if layout == "slots":
        k_cache, v_cache = rand(5, capacity, HKV, D), rand(5, capacity, HKV, D)
        entry_of = [4, 0, 2]
        kw["cache_batch_idx"] = ints(entry_of)
    elif layout.endswith("paged"):
        page_size = 4
        k_cache, v_cache = rand(10, page_size, HKV, D), rand(10, page_size, HKV, D)
        pages = [[9, 2, 5], [0, 1, 3], [7, 6, 4]]
        kw["page_table"] = ints(sum(pages, [])).view(batch, 3)
    else:
        k_cache, v_cache = rand(batch, capacity, HKV, D), rand(batch, capacity, HKV, D)
    if layout.startswith("packed"):
        k_new, v_new = torch.cat(k_rows), torch.cat(v_rows)
        kw["cu_seqlens_k_new"] = ints([0, 2, 3, 6])
    else:
        k_new, v_new = torch.stack(k_rows), torch.stack(v_rows)
    want_k, want_v = k_cache.clone(), v_cache.clone()
    reference_append(want_k, want_v, k_rows, v_rows, lengths, entry_of, pages, (cos, sin, lengths, interleaved))
    q_ro = q_reference(q, cos, sin, lengths, causal, interleaved)
    got = flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, rotary_cos=cos, rotary_sin=sin,
                                            cache_seqlens=ints(lengths), causal=causal,
                                            rotary_interleaved=interleaved, fallback="sdpa", **kw)
    assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v)
    # the attention of the rotated q over the appended cache: the same call without rotary on rotated inputs
    new_lengths = ints([a + n for a, n in zip(lengths, news, strict=True)])
    plain = {key: val for key, val in kw.items() if key != "cu_seqlens_k_new"}
    want = flashcore.flash_attn_with_kvcache(q_ro, want_k, want_v, cache_seqlens=new_lengths, causal=causal,
                                             fallback="sdpa", **plain)
    assert torch.equal(got, want)


def test_rotary_seqlens_sets_the_positions_not_cache_seqlens() -> None:
    k_cache, v_cache = rand(2, 10, HKV, D), rand(2, 10, HKV, D)
    k_new, v_new, q = rand(2, 1, HKV, D), rand(2, 1, HKV, D), rand(2, 1, H, D)
    cos, sin = table(8, D // 2)
    lengths, base = [4, 6], [1, 0]
    want_k, want_v = k_cache.clone(), v_cache.clone()
    reference_append(want_k, want_v, list(k_new), list(v_new), lengths, [0, 1], None, (cos, sin, base, False))
    flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, rotary_cos=cos, rotary_sin=sin,
                                      cache_seqlens=ints(lengths), rotary_seqlens=ints(base),
                                      rotary_interleaved=False, fallback="sdpa")
    assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v)


def test_packed_append_without_rotary_writes_each_sequences_rows() -> None:
    k_cache, v_cache = rand(3, 8, HKV, D), rand(3, 8, HKV, D)
    news = [0, 3, 1]
    k_rows, v_rows = [rand(n, HKV, D) for n in news], [rand(n, HKV, D) for n in news]
    want_k, want_v = k_cache.clone(), v_cache.clone()
    reference_append(want_k, want_v, k_rows, v_rows, [2, 5, 0], [0, 1, 2], None, None)
    flashcore.flash_attn_with_kvcache(rand(3, 1, H, D), k_cache, v_cache, torch.cat(k_rows), torch.cat(v_rows),
                                      cache_seqlens=ints([2, 5, 0]), cu_seqlens_k_new=ints([0, 0, 3, 4]),
                                      fallback="sdpa")
    assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v)


@pytest.mark.parametrize("causal,window,chunk,want", [
    (True, (-1, -1), 0, True), (False, (-1, -1), 0, False), (False, (3, -1), 0, True),
    (False, (11, -1), 0, False), (False, (-1, 0), 0, True), (False, (-1, 4), 0, False), (False, (-1, -1), 8, True)])
def test_q_positions_follow_fa3s_causal_or_local_rule(causal: bool, window: tuple[int, int], chunk: int,
                                                      want: bool) -> None:
    # cache capacity 12, 5 query rows: a left bound >= 11 or a right bound >= 4 is dropped (FA3's normalization)
    assert rotary.q_per_row(causal, window, chunk, 12, 5) is want


def _call(**kw: object) -> None:
    k_cache = rand(2, 8, HKV, D)
    args: dict[str, object] = {"k": rand(2, 1, HKV, D), "v": rand(2, 1, HKV, D), "cache_seqlens": ints([1, 2]),
                               "fallback": "sdpa"}
    args.update(kw)
    flashcore.flash_attn_with_kvcache(rand(2, 1, H, D), k_cache, k_cache.clone(), **args)  # type: ignore[arg-type]


@pytest.mark.parametrize("kw,named", [
    ({"rotary_cos": table(8, 32)[0], "rotary_sin": table(8, 32)[1], "k": None, "v": None}, "k and v are not"),
    ({"rotary_cos": table(8, 32)[0]}, "rotary_cos and rotary_sin go together"),
    ({"rotary_cos": table(8, 32)[0].float(), "rotary_sin": table(8, 32)[1].float()}, "rotary_cos has dtype"),
    ({"rotary_cos": table(8, 12)[0], "rotary_sin": table(8, 12)[1]}, "multiple of 16"),
    ({"rotary_cos": table(8, 40)[0], "rotary_sin": table(8, 40)[1]}, "at most the head dim"),
    ({"rotary_cos": table(8, 32)[0], "rotary_sin": table(9, 32)[1]}, "rotary_sin has"),
    ({"rotary_cos": table(8, 32)[0], "rotary_sin": table(8, 32)[1], "rotary_seqlens": ints([1])}, "rotary_seqlens"),
    ({"rotary_cos": table(8, 64)[0][:, ::2], "rotary_sin": table(8, 32)[1]}, "last dim must be contiguous"),
    ({"cu_seqlens_k_new": ints([0, 1, 2])}, "packed"),
    ({"k": rand(2, HKV, D), "v": rand(2, HKV, D), "cu_seqlens_k_new": ints([0, 1])}, "cu_seqlens_k_new"),
    ({"k": rand(2, HKV, D), "v": rand(3, HKV, D), "cu_seqlens_k_new": ints([0, 1, 2])}, "k has 2 rows"),
    ({"k": rand(2, HKV, D), "v": rand(2, HKV, D), "cu_seqlens_k_new": ints([0, 1, 2]), "cache_seqlens": None},
     "pass cache_seqlens"),
])
def test_append_argument_errors_name_the_argument(kw: dict[str, object], named: str) -> None:
    with pytest.raises(FlashCoreError, match=named):
        _call(**kw)


def test_rotary_with_fp8_runs_on_the_bf16_copy_and_its_tables_may_be_e4m3() -> None:
    q = torch.randn(2, 1, H, D).to(torch.float8_e4m3fn)
    cache = torch.zeros(2, 4, H, D, dtype=torch.float8_e4m3fn)
    cos, sin = table(8, 32)
    out = flashcore.flash_attn_with_kvcache(q, cache, cache.clone(), q, q, rotary_cos=cos.to(torch.float8_e4m3fn),
                                            rotary_sin=sin.to(torch.float8_e4m3fn), cache_seqlens=ints([0, 0]),
                                            fallback="sdpa")
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all() and cache[:, 0].float().abs().sum() > 0


@pytest.mark.parametrize("kw,named", [
    ({"cache_seqlens": ints([1, 8])}, r"cache_seqlens\[1\] = 8"),
    ({"cache_seqlens": ints([-1, 0])}, r"cache_seqlens\[0\] = -1"),
    ({"cache_batch_idx": ints([0, 2])}, r"cache_batch_idx\[1\] = 2"),
    ({"rotary_cos": table(4, 32)[0], "rotary_sin": table(4, 32)[1], "cache_seqlens": ints([1, 4])},
     r"rotary_seqlens\[1\] = 4"),
    ({"rotary_cos": table(8, 32)[0], "rotary_sin": table(8, 32)[1], "rotary_seqlens": ints([0, -3])},
     r"rotary_seqlens\[1\] = -3"),
    ({"k": rand(2, HKV, D), "v": rand(2, HKV, D), "cu_seqlens_k_new": ints([0, 2, 1])}, r"cu_seqlens_k_new\[2\] = 1"),
    ({"k": rand(2, HKV, D), "v": rand(2, HKV, D), "cu_seqlens_k_new": ints([0, 1, 3])}, r"cu_seqlens_k_new\[2\] = 3"),
])
def test_bad_index_values_are_named_and_nothing_is_written(kw: dict[str, object], named: str) -> None:
    k_cache = rand(2, 8, HKV, D)
    before = k_cache.clone()
    args: dict[str, object] = {"k": rand(2, 1, HKV, D), "v": rand(2, 1, HKV, D), "cache_seqlens": ints([1, 2]),
                               "fallback": "sdpa"}
    args.update(kw)
    with pytest.raises(FlashCoreError, match=named):
        flashcore.flash_attn_with_kvcache(rand(2, 1, H, D), k_cache, k_cache.clone(), **args)  # type: ignore[arg-type]
    assert torch.equal(k_cache, before)


def test_a_bad_page_id_is_named() -> None:
    k_cache = rand(4, 2, HKV, D)
    with pytest.raises(FlashCoreError, match=r"page_table\[3\] = 9"):
        flashcore.flash_attn_with_kvcache(rand(2, 1, H, D), k_cache, k_cache.clone(), rand(2, 1, HKV, D),
                                          rand(2, 1, HKV, D), cache_seqlens=ints([1, 2]),
                                          page_table=ints([0, 1, 2, 9]).view(2, 2), fallback="sdpa")



def test_the_kernel_launch_describes_every_tensor_to_fc_append_kv(monkeypatch: pytest.MonkeyPatch) -> None:
    """fc_append_params as the kernel path fills it (a recording stand-in for the library: no GPU here)."""
    import contextlib
    import types

    from flashcore import _lib, append, device_errors

    seen: list[_lib.FcAppendParams] = []

    def fc_append_kv(params: object, stream: object) -> int:
        seen.append(_lib.FcAppendParams.from_buffer_copy(params))  # type: ignore[arg-type]
        return _lib.FC_OK

    lib = types.SimpleNamespace(fc_append_kv=lambda p, s: fc_append_kv(p, s))
    monkeypatch.setattr(_lib, "load", lambda: lib)
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda d: types.SimpleNamespace(cuda_stream=7))
    word = torch.zeros(4, dtype=torch.int64)
    monkeypatch.setattr(device_errors, "words", lambda d: word)
    k_cache, v_cache = rand(9, 16, HKV, D), rand(9, 16, HKV, D)
    pages = ints([3, 1, 4, 0, 2, 5]).view(2, 3)
    k, v = rand(5, HKV, D), rand(5, HKV, D)
    cos, sin = table(64, 16)
    rot = rotary.Rotary(cos, sin, ints([2, 9]), False, q_per_row=True)
    q, cu_q = rand(7, H, D), ints([0, 3, 7])
    lengths, q_out = append._kernel(k_cache, v_cache, k, v, ints([4, 30]), None, pages, ints([0, 2, 5]), rot, q,
                                    cu_q, False)
    (p,) = seen
    assert (p.batch, p.heads_kv, p.head_dim, p.head_dim_v, p.dtype) == (2, HKV, D, D, _lib.FC_BF16)
    assert list(p.k_new_stride) == [0, k.stride(0), k.stride(1)] and (p.seqlen_new, p.total_new) == (0, 5)
    assert list(p.k_cache_stride) == list(k_cache.stride()[:3]) and (p.cache_batch, p.capacity) == (9, 48)
    assert (p.page_table, p.page_table_stride, p.page_table_rows, p.page_size) == (pages.data_ptr(), 3, 2, 16)
    assert (p.rotary_rows, p.rotary_dim, p.rotary_cos_stride, p.rotary_interleaved) == (64, 32, 16, 0)
    assert p.rotary_seqlens == rot.seqlens.data_ptr() and p.errors == word.data_ptr()  # type: ignore[union-attr]
    assert (p.q, p.q_out, p.heads_q, p.seqlen_q, p.total_q, p.q_rotary_per_row) == (
        q.data_ptr(), q_out.data_ptr(), H, 0, 7, 1)  # type: ignore[union-attr]
    assert list(p.q_stride) == [0, q.stride(0), q.stride(1)] and p.seqlens_out == lengths.data_ptr()
    assert p.cache_batch_idx is None and p.cu_seqlens_q == cu_q.data_ptr()


def test_one_int_length_with_rotary_is_the_per_sequence_call() -> None:
    k_cache, v_cache, q = rand(2, 10, HKV, D), rand(2, 10, HKV, D), rand(2, 2, H, D)
    k_new, v_new = rand(2, 2, HKV, D), rand(2, 2, HKV, D)
    cos, sin = table(12, D // 2)
    caches = [(k_cache.clone(), v_cache.clone()) for _ in range(2)]
    outs = [flashcore.flash_attn_with_kvcache(q, kc, vc, k_new, v_new, rotary_cos=cos, rotary_sin=sin,
                                             cache_seqlens=lengths, causal=True, fallback="sdpa")
            for (kc, vc), lengths in zip(caches, [5, ints([5, 5])], strict=True)]
    assert torch.equal(outs[0], outs[1]) and torch.equal(caches[0][0], caches[1][0])
    assert not torch.equal(caches[0][0], k_cache)


def test_a_left_padded_cache_appends_and_rotates_at_cache_seqlens_as_fa3() -> None:
    """FA3 writes sequence b's new keys at cache_seqlens[b] (the pad counted) and rotates them there too."""
    k_cache, v_cache = rand(2, 10, HKV, D), rand(2, 10, HKV, D)
    k_new, v_new, q = rand(2, 1, HKV, D), rand(2, 1, HKV, D), rand(2, 1, H, D)
    cos, sin = table(12, D // 2)
    lengths = [6, 4]
    want_k, want_v = k_cache.clone(), v_cache.clone()
    reference_append(want_k, want_v, list(k_new), list(v_new), lengths, [0, 1], None, (cos, sin, lengths, True))
    flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, rotary_cos=cos, rotary_sin=sin,
                                      cache_seqlens=ints(lengths), cache_leftpad=ints([2, 4]), fallback="sdpa")
    assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v)
