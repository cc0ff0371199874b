"""The stream-K tail's plan and index arithmetic (kernel/stream_tail.h, host half), compiled with the system compiler.

The kernel trusts three facts of this arithmetic: the items cover every K/V block of every tail tile exactly once, the
(tile, piece) pairs number the partial slots without a collision, and tail_tile_pieces names exactly the pieces whose
items a tile has (combine_tail_kernel adds those slots up, so a miscount loses or doubles a part of O)."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import build_host_program

PROGRAM = r"""
#include <cstdio>
#include <cstdlib>
#include "stream_tail.h"
int main(int argc, char** argv) {
  const long long tiles = std::atoll(argv[1]);
  const int blocks = std::atoi(argv[2]);
  const long long ctas = std::atoll(argv[3]);
  const flashcore::TailPlan t = flashcore::plan_tail(tiles, blocks, ctas);
  std::printf("plan %d %d %d %lld %d %lld\n", t.tiles, t.pieces, t.blocks, static_cast<long long>(t.first),
              t.stride, static_cast<long long>(flashcore::tail_slots(t)));
  for (int j = 0; t.tiles > 0 && j < 2 * t.stride; ++j) {
    const flashcore::TailItem it = flashcore::tail_item(j, t.stride, t.tiles, t.pieces, t.blocks);
    std::printf("item %d %d %d %d %d\n", j, it.tile, it.piece, it.begin, it.end);
  }
  for (int tile = 0; tile < t.tiles; ++tile) {
    int first = 0, last = 0;
    flashcore::tail_tile_pieces(tile, t.tiles, t.pieces, t.blocks, first, last);
    std::printf("tile %d %d %d\n", tile, first, last);
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def tail(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    exe = build_host_program(tmp_path_factory.mktemp("stream_tail"), "tail", PROGRAM)

    def run(tiles: int, blocks: int, ctas: int) -> dict:
        out = subprocess.run([str(exe), str(tiles), str(blocks), str(ctas)], capture_output=True, text=True,
                             check=True).stdout.split("\n")
        plan = [int(x) for x in out[0].split()[1:]]
        items = [tuple(int(x) for x in line.split()[1:]) for line in out if line.startswith("item ")]
        covers = {int(line.split()[1]): (int(line.split()[2]), int(line.split()[3]))
                  for line in out if line.startswith("tile ")}
        keys = ("tiles", "pieces", "blocks", "first", "stride", "slots")
        return {**dict(zip(keys, plan, strict=True)), "items": items, "covers": covers}

    return run


def test_s8k_prefill_keeps_pieces_of_four_blocks_or_more(tail) -> None:  # type: ignore[no-untyped-def]
    # S8K: 4096 tiles of 43 blocks: 4 tiles left over 31 waves -> 172 blocks in 43 pieces of 4
    t = tail(4096, 43, 132)
    assert (t["tiles"], t["pieces"]) == (4, 43)
    per_piece: dict[int, int] = {}
    for _, tile, piece, begin, end in t["items"]:
        if tile >= 0:
            per_piece[piece] = per_piece.get(piece, 0) + end - begin
    assert sorted(set(per_piece.values())) == [4]


@pytest.mark.parametrize("tiles,blocks,ctas", [
    (2000, 11, 132),  # 20 tiles of 11 blocks: 55 pieces of 4
    (140, 10, 132),   # 8 tiles of 10 blocks: 20 pieces of 4, fewer than the SMs
    (133, 100, 132),  # one tile left: one piece per SM up to 25 of 4 blocks
    (196, 9, 16),     # a small GPU
    (262, 37, 130),   # odd counts
])
def test_items_cover_every_tail_block_once_and_slots_never_collide(tail, tiles, blocks, ctas) -> None:  # type: ignore[no-untyped-def]
    t = tail(tiles, blocks, ctas)
    assert t["tiles"] > 0, t
    assert t["first"] == tiles - t["tiles"] and t["tiles"] <= 0.25 * ctas
    assert t["tiles"] < t["pieces"] <= ctas
    seen: dict[tuple[int, int], int] = {}
    pieces_of: dict[int, set[int]] = {}
    slots = set()
    for j, tile, piece, begin, end in t["items"]:
        half, p = divmod(j, t["stride"])
        if tile < 0:
            continue
        assert piece == p and 0 <= tile < t["tiles"] and 0 <= begin < end <= blocks
        for b in range(begin, end):
            assert (tile, b) not in seen, (tile, b)
            seen[(tile, b)] = piece
        pieces_of.setdefault(tile, set()).add(piece)
        slot = tile + piece
        assert slot not in slots and 0 <= slot < t["slots"]
        slots.add(slot)
        if half == 1:  # a piece's second item starts its next tile
            assert begin == 0
    assert len(seen) == t["tiles"] * blocks  # every block of every tail tile, once
    for tile, (first, last) in t["covers"].items():
        assert pieces_of[tile] == set(range(first, last + 1)), tile
    # the pieces are even: lengths differ by at most one block
    lengths: dict[int, int] = {}
    for (_, _), piece in seen.items():
        lengths[piece] = lengths.get(piece, 0) + 1
    assert max(lengths.values()) - min(lengths.values()) <= 1


@pytest.mark.parametrize("tiles,blocks,ctas", [
    (2112, 22, 132),  # whole waves: nothing left
    (2048, 22, 132),  # S4K: 68 of 132 left (52 %): measured to gain less than the partials' sum costs
    (2100, 22, 132),  # 120 of 132 left: a nearly full wave
    (100, 22, 132),   # one partial wave (the split-KV rule's business)
    (2048, 7, 132),   # short tiles: pieces under 4 blocks would gain nothing
    (2048, 22, 1),    # one CTA
])
def test_no_tail_where_it_cannot_pay(tail, tiles, blocks, ctas) -> None:  # type: ignore[no-untyped-def]
    t = tail(tiles, blocks, ctas)
    assert t["tiles"] == 0 and t["slots"] == 0 and t["items"] == []
