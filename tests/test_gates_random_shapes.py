"""Random-shapes gate on the CPU: the pure verdict, the drawers' limits, and whole runs with stand-in kernels (the
float32 reference rounded as the kernel rounds, which must pass; the same off by 1 %, which must fail) and the real
serving entries through fallback="sdpa"."""

from __future__ import annotations

import random
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from conftest import make_context

import flashcore
from flashcore import reference
from harness.config import load_config
from harness.gates.random_shapes import RandomShapesParams, check_draws, judge_of, verdict_family
from harness.results import Status
from harness.support import random_calls
from harness.support.random_calls import Failure, draw_shape, run_dense
from harness.support.random_serving import run_serving

REPO = Path(__file__).resolve().parent.parent
P = RandomShapesParams(dense_draws=10, serving_draws=6, error_factor=2.0, error_slack=1.0e-5, lse_rel=1.0e-3,
                       fp8_lse_rel=2.0e-3, fp8_score_bits=-10.0, max_scores=1 << 20)


def stand_in(scale_out: float = 1.0) -> ModuleType:
    """flashcore with dense entries that write the float32 reference, P rounded to the input type (x scale_out)."""
    fc = ModuleType("flashcore_stand_in")
    fc.__dict__.update(flashcore.__dict__)

    def write(q32: torch.Tensor, k32: torch.Tensor, v32: torch.Tensor, p_dtype: torch.dtype, causal: bool,
              out: torch.Tensor, lse: torch.Tensor) -> None:
        o, s = reference.dense(q32, k32, v32, causal=causal, scale=q32.shape[-1] ** -0.5, p_dtype=p_dtype)
        out.copy_((o * scale_out).to(out.dtype))
        lse.copy_(s)

    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, out: torch.Tensor,
                  lse: torch.Tensor, **_: Any) -> None:
        write(q.float(), k.float(), v.float(), q.dtype, causal, out, lse)

    def attention_fp8(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, q_descale: torch.Tensor,
                      k_descale: torch.Tensor, v_descale: torch.Tensor, causal: bool, out: torch.Tensor,
                      lse: torch.Tensor, **_: Any) -> None:
        h = k.shape[2]
        q32, k32, v32 = (reference.dequantize(x, d, h) for x, d in ((q, q_descale), (k, k_descale), (v, v_descale)))
        write(q32, k32, v32, q.dtype, causal, out, lse)

    fc.attention = attention  # type: ignore[attr-defined]
    fc.attention_fp8 = attention_fp8  # type: ignore[attr-defined]
    return fc


def test_verdict_passes_without_failures_and_names_the_seed() -> None:
    c = verdict_family("dense", 10, 10, [], seed=77)
    assert (c.status, c.threshold, c.measured, c.comparison) == (Status.PASS, 0, 0, "==")
    assert "seed 77" in c.message


def test_verdict_fails_on_one_failing_draw_and_shows_it() -> None:
    c = verdict_family("serving", 10, 10, [Failure("serving", 3, "varlen bf16 ...", "NaN left")], seed=5)
    assert c.status is Status.FAIL and c.measured == 1
    assert "#3 varlen bf16 ...: NaN left" in c.message and "seed 5" in c.message


def test_verdict_is_an_error_when_draws_did_not_run() -> None:
    assert verdict_family("dense", 10, 4, [], seed=1).status is Status.ERROR


def test_the_yaml_params_load() -> None:
    spec = next(g for ph in load_config(REPO / "gates").phases for g in ph.gates if g.name == "random-shapes")
    p = spec.params
    assert p.dense_draws >= 100 and p.error_factor == 2.0
    assert judge_of(p).fp8_score_share == 2.0 ** p.fp8_score_bits


def test_draws_stay_within_the_documented_limits() -> None:
    rng = random.Random(3)
    for _ in range(300):
        s = draw_shape(rng, 1 << 27)
        assert s.head_dim in ((64, 128, 256) if s.dtype == "e4m3" else range(8, 257, 8))
        assert s.head_dim_v == s.head_dim or (136 <= s.head_dim <= 192 and 104 <= s.head_dim_v <= 128)
        assert s.heads_q % s.heads_kv == 0 and min(s.batch, s.seqlen_q, s.seqlen_k) >= 1
        assert s.batch * s.heads_q * s.seqlen_q * s.seqlen_k <= 1 << 27


def test_a_kernel_that_rounds_as_torch_passes_and_one_off_by_a_percent_fails() -> None:
    j = judge_of(P)
    assert run_dense(stand_in(), 11, 16, j, 1 << 20, device="cpu") == []
    bad = run_dense(stand_in(1.01), 11, 16, j, 1 << 20, device="cpu")
    assert len(bad) >= 4 and all(f.problem.startswith("max error") for f in bad)


def test_an_unwritten_row_and_a_raising_call_are_failures() -> None:
    fc = stand_in()
    inner = fc.attention

    def skip_first_row(*args: Any, **kw: Any) -> None:
        inner(*args, **kw)
        kw["out"][:, 0] = float("nan")

    fc.attention = skip_first_row  # type: ignore[attr-defined]
    fc.attention_fp8 = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom"))  # type: ignore[attr-defined]
    problems = {f.problem for f in run_dense(fc, 5, 12, judge_of(P), 1 << 20, device="cpu")}
    assert any(p.startswith("NaN left") for p in problems) and "raised RuntimeError: boom" in problems


def test_serving_draws_through_the_fallback_pass_and_planted_bugs_fail() -> None:
    assert run_serving(flashcore, 21, 8, judge_of(P), device="cpu") == []
    assert len(run_serving(flashcore, 1, 12, judge_of(P), device="cpu", plant=True)) >= 4


def test_the_gate_passes_a_good_stand_in_and_fails_a_bad_one(tmp_path: Path) -> None:
    good = check_draws(make_context(tmp_path / "a", "random-shapes", P), stand_in(), "cpu")
    assert good.status is Status.PASS and [c.workload for c in good.checks] == ["dense", "serving"]
    bad = check_draws(make_context(tmp_path / "b", "random-shapes", P), stand_in(1.05), "cpu")
    assert bad.status is Status.FAIL and bad.details["dense"]["failures"]
    assert (tmp_path / "b" / "logs" / "random-shapes.log").read_text().count("dense #") == P.dense_draws


@pytest.mark.parametrize("name", ["EDGES", "SERVING_EDGES"])
def test_the_edges_sit_at_tile_boundaries(name: str) -> None:
    edges = getattr(random_calls, name)
    for tile in (64, 128, 192, 256):
        assert {tile - 1, tile, tile + 1} <= set(edges)
