"""docs/fa3-api.md stays true: its tables list every parameter of FlashCore's five FA3-named functions and every
parameter of FA3's (tests/data/fa3_signatures.yaml, copied from FA3 main and fa3-fwd 0.0.3), FlashCore keeps FA3's
positional parameters, and each argument the page calls refused or ignored behaves so on the CPU (fallback="sdpa")."""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml

torch = pytest.importorskip("torch")
import flashcore  # noqa: E402
from flashcore import FlashCoreError, UnsupportedArgument, head_dims  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "fa3-api.md"
SIGNATURES = yaml.safe_load((Path(__file__).resolve().parent / "data" / "fa3_signatures.yaml").read_text())
FUNCTIONS = ("flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache", "get_scheduler_metadata",
             "flash_attn_combine")
VERSIONS = tuple(SIGNATURES["versions"])  # fa3_main, fa3_fwd
STATUSES = ("runs", "hint", "ignored", "refused", "extension")
NOT_IN_FA3 = "—"
# FA3 defaults FlashCore spells differently with the same meaning.
SAME_DEFAULT = {("get_scheduler_metadata", "qkv_dtype"): None}  # None: torch.bfloat16 (flashcore/scheduler.py)
_ROW = re.compile(r"^\| `(\w+)` \| (.*?) \| (.*?) \| (.*) \|$")
_REFUSED = re.compile(r"refused \(`([^`]+)`\)")


def _tables() -> dict[str, dict[str, tuple[str, str, str]]]:
    """Each `## `function`` section's rows: argument -> (FA3 main, fa3-fwd 0.0.3, FlashCore)."""
    tables: dict[str, dict[str, tuple[str, str, str]]] = {}
    current: dict[str, tuple[str, str, str]] | None = None
    for line in DOC.read_text().splitlines():
        heading = re.match(r"^## `(\w+)`$", line)
        if heading:
            current = tables.setdefault(heading.group(1), {})
        elif line.startswith("## "):
            current = None
        elif current is not None and (row := _ROW.match(line)):
            assert row.group(1) not in current, f"{row.group(1)} has two rows"
            current[row.group(1)] = (row.group(2), row.group(3), row.group(4))
    return tables


TABLES = _tables()


def _fa3_params(version: str, function: str) -> list[tuple[str, Any]]:
    """(name, default) of FA3's parameters as the data file copies them; inspect's `empty` for required ones."""
    out = []
    for spelled in SIGNATURES["versions"][version][function]:
        name, _, default = spelled.partition("=")
        if not default:
            out.append((name, inspect.Parameter.empty))
        elif default.startswith("torch."):
            out.append((name, getattr(torch, default.removeprefix("torch."))))
        else:
            out.append((name, ast.literal_eval(default)))
    return out


def _signature(function: str) -> inspect.Signature:
    return inspect.signature(getattr(flashcore, function))


def test_the_page_has_a_table_for_each_function() -> None:
    assert sorted(TABLES) == sorted(FUNCTIONS)
    assert all(len(rows) >= 4 for rows in TABLES.values())


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("function", FUNCTIONS)
def test_flashcore_keeps_fa3s_positional_parameters_and_defaults(version: str, function: str) -> None:
    positional = [p for p in _signature(function).parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
    fa3 = _fa3_params(version, function)
    assert [p.name for p in positional] == [name for name, _ in fa3]
    for p, (name, default) in zip(positional, fa3, strict=True):
        assert p.default == SAME_DEFAULT.get((function, name), default), f"{function}({name}=...)"


@pytest.mark.parametrize("function", FUNCTIONS)
def test_every_flashcore_parameter_has_a_row_and_every_row_is_a_parameter(function: str) -> None:
    assert sorted(TABLES[function]) == sorted(_signature(function).parameters)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("function", FUNCTIONS)
def test_rows_say_which_arguments_are_fa3s(version: str, function: str) -> None:
    """A row has FA3 cells exactly when FA3 has the argument (which the test above puts in FlashCore's signature);
    a FlashCore-only argument is an extension."""
    fa3 = {name for name, _ in _fa3_params(version, function)}
    column = VERSIONS.index(version)
    for name, cells in TABLES[function].items():
        if name in fa3:
            assert cells[column] != NOT_IN_FA3, f"{function}: {name} is FA3's ({version})"
        else:
            assert cells[column] == NOT_IN_FA3 and cells[2].startswith("extension"), f"{function}: {name}"


@pytest.mark.parametrize("function", FUNCTIONS)
def test_every_flashcore_cell_starts_with_what_flashcore_does(function: str) -> None:
    bad = {name: cells[2] for name, cells in TABLES[function].items() if not cells[2].startswith(STATUSES)}
    assert bad == {}


def stated_head_dims() -> str:
    """The page's head-dim sentence, from flashcore/head_dims.py: q's head dims by their rule, v's other head dims
    grouped by the q head dims that take the same ones."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for d in head_dims.SUPPORTED:
        others = tuple(sorted(dv for dv in head_dims.HEAD_DIM_V[d] if dv != d))
        if others:
            groups.setdefault(others, []).append(d)
    extra = [f"{head_dims.describe(dvs).removeprefix('head dims ').removeprefix('head dim ')} with "
             f"{head_dims.describe(tuple(ds))}" for dvs, ds in groups.items()]
    return (f"q and k: {head_dims.RULE}; v: q's{', or ' if extra else ''}{'; or '.join(extra)}; "
            f"FP8: {head_dims.describe(head_dims.FP8)}.")


def test_the_head_dims_are_stated_once_as_head_dims_py_reports_them() -> None:
    stated = stated_head_dims()
    lines = [line for line in DOC.read_text().splitlines() if line.startswith("**Head dims**")]
    assert len(lines) == 1
    assert lines[0].endswith("): " + stated), f"docs/fa3-api.md's head-dim line should end with: {stated}"


# ---- CPU calls behind the page's "refused" and "ignored, as FA3" cells

def _t(*shape: int, dtype: Any = torch.bfloat16) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)), dtype=dtype)


def _i32(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


def _dense(dtype: Any = torch.bfloat16) -> tuple[torch.Tensor, ...]:
    return tuple(x.to(dtype) for x in (_t(2, 8, 4, 64), _t(2, 8, 2, 64), _t(2, 8, 2, 64)))


def _func(**kw: Any) -> Any:
    return flashcore.flash_attn_func(*_dense(), fallback="sdpa", **kw)


def _varlen(**kw: Any) -> Any:
    return flashcore.flash_attn_varlen_func(_t(10, 4, 64), _t(12, 2, 64), _t(12, 2, 64), _i32(0, 4, 10),
                                            _i32(0, 5, 12), 6, 7, fallback="sdpa", **kw)


def _kvcache(dtype: Any = torch.bfloat16, **kw: Any) -> Any:
    q, k_cache, v_cache = (x.to(dtype) for x in (_t(2, 3, 4, 64), _t(2, 32, 2, 64), _t(2, 32, 2, 64)))
    return flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=_i32(5, 9), fallback="sdpa", **kw)


def _varlen_fp8(**kw: Any) -> Any:
    q, k, v = (x.to(torch.float8_e4m3fn) for x in (_t(10, 4, 64), _t(12, 2, 64), _t(12, 2, 64)))
    return flashcore.flash_attn_varlen_func(q, k, v, _i32(0, 4, 10), _i32(0, 5, 12), 6, 7, **kw)


def _kvcache_fp8(**kw: Any) -> Any:
    q, k_cache, v_cache = (x.to(torch.float8_e4m3fn) for x in (_t(2, 3, 4, 64), _t(2, 32, 2, 64), _t(2, 32, 2, 64)))
    return flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=_i32(5, 9), **kw)


_FP8 = torch.float8_e4m3fn


def _captured(call: Callable[[], Any]) -> Callable[[], Any]:
    """`call` as if a CUDA graph were being captured on the current stream."""
    def run() -> Any:
        with mock.patch.object(torch.cuda, "is_available", lambda: True), \
                mock.patch.object(torch.cuda, "is_current_stream_capturing", lambda: True):
            return call()
    return run


# (function, row, refused name) -> a call that sets it
REFUSALS: dict[tuple[str, str, str], Callable[[], Any]] = {
    ("flash_attn_func", "qv", "fp8 qv"): lambda: flashcore.flash_attn_func(
        *(x.to(_FP8) for x in _dense()), qv=_t(2, 8, 4, 64).to(_FP8), fallback="sdpa"),
    ("flash_attn_varlen_func", "qv", "fp8 qv"): lambda: _varlen_fp8(qv=_t(10, 4, 64).to(_FP8)),
    ("flash_attn_with_kvcache", "qv", "fp8 qv"): lambda: _kvcache(_FP8, qv=_t(2, 3, 4, 64).to(_FP8)),
    ("flash_attn_varlen_func", "debug_checks", "fp8 graph capture"): _captured(_varlen_fp8),
    ("flash_attn_with_kvcache", "debug_checks", "fp8 graph capture"): _captured(_kvcache_fp8),
}


def test_the_page_names_each_refusal_the_tests_make() -> None:
    named = {(function, row, name) for function, rows in TABLES.items() for row, cells in rows.items()
             for name in _REFUSED.findall(cells[2])}
    assert named == set(REFUSALS)


@pytest.mark.parametrize(("function", "row", "name"), sorted(REFUSALS))
def test_a_refused_argument_raises_unsupported_argument_naming_it_with_the_pages_reason(
        function: str, row: str, name: str) -> None:
    with pytest.raises(UnsupportedArgument) as refused:
        REFUSALS[function, row, name]()
    message = str(refused.value)
    assert message.startswith(f"{name}: ")
    reason = message.removeprefix(f"{name}: ")
    assert f"refused (`{name}`): {reason}" in TABLES[function][row][2]


# (function, row) -> the call with the argument alone, and the same call without it: FA3 ignores it there
IGNORED: dict[tuple[str, str], tuple[Callable[[], Any], Callable[[], Any]]] = {
    ("flash_attn_with_kvcache", "cu_seqlens_k_new"): (lambda: _kvcache(cu_seqlens_k_new=_i32(0, 1, 4)), _kvcache),
    ("flash_attn_with_kvcache", "max_seqlen_q"): (lambda: _kvcache(max_seqlen_q=99), _kvcache),
    ("flash_attn_with_kvcache", "rotary_seqlens"): (lambda: _kvcache(rotary_seqlens=_i32(1, 2)), _kvcache),
    ("flash_attn_with_kvcache", "rotary_interleaved"): (lambda: _kvcache(rotary_interleaved=False), _kvcache),
}


def test_the_page_names_each_argument_ignored_as_fa3_ignores_it() -> None:
    named = {(function, row) for function, rows in TABLES.items() for row, cells in rows.items()
             if "ignored, as FA3" in cells[2]}
    assert named == set(IGNORED)


@pytest.mark.parametrize(("function", "row"), sorted(IGNORED))
def test_an_argument_fa3_ignores_alone_changes_nothing_alone(function: str, row: str) -> None:
    given, without = IGNORED[function, row]
    assert torch.equal(given(), without())


@pytest.mark.parametrize("call", [_func, _varlen, _kvcache], ids=["func", "varlen", "kvcache"])
def test_pack_gqa_is_a_hint(call: Callable[..., Any]) -> None:
    assert TABLES[_table_of(call)]["pack_gqa"][2].startswith("hint")
    assert torch.equal(call(pack_gqa=True), call()) and torch.equal(call(pack_gqa=False), call())


def _table_of(call: Callable[..., Any]) -> str:
    return {_func: "flash_attn_func", _varlen: "flash_attn_varlen_func", _kvcache: "flash_attn_with_kvcache"}[call]


def test_varlen_passes_sm_margin_to_the_call(monkeypatch: pytest.MonkeyPatch) -> None:
    from flashcore import serving

    seen = []

    def spy(call: Any, key: Any = None) -> Any:
        seen.append(call.sm_margin)
        return forward(call, key)

    forward = serving.forward
    monkeypatch.setattr(serving, "forward", spy)
    _varlen(sm_margin=3)
    assert seen == [3]


@pytest.mark.parametrize("call", [_func, _varlen, _kvcache], ids=_table_of)
def test_num_splits_up_to_fa3s_256_runs_and_257_is_named(call: Callable[..., Any]) -> None:
    def first(out: Any) -> torch.Tensor:
        return out if isinstance(out, torch.Tensor) else out[0]

    assert torch.equal(first(call(num_splits=256)), first(call(num_splits=1)))  # CPU: no split at all
    with pytest.raises(FlashCoreError, match="num_splits"):
        call(num_splits=257)


def test_descales_with_16_bit_packed_or_cache_inputs_raise_naming_them() -> None:
    for call in (_varlen, _kvcache):
        for name in ("q_descale", "k_descale", "v_descale"):
            with pytest.raises(FlashCoreError, match=f"{name} is given but q is torch.bfloat16"):
                call(**{name: torch.ones(2, 2)})
