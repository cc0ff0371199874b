"""Compile-time points of the Hopper kernel (kernel/tile_point.h): keys per K/V tile, K/V ring stages, consumer
warpgroups, ping-pong, early rescale, producer registers. A point is compiled into the library (the defaults of
each head dim, plus kernel/tuned_points.inc), named in text as `n128-s3-w2-pp1-re0-r32`, and passed to the kernel
as one int (fc_params.point).

`problems(head_dim)` states the rules the kernel's static_asserts enforce (kernel/hopper_config.h), plus a register
estimate, so `make tune` rejects a point with the rule it breaks before spending a compile on it; ptxas (spills)
is the last word after the build (harness/tune/build.py).
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import astuple, dataclass

from flashcore.head_dims import KERNEL_HEAD_DIMS as HEAD_DIMS
from flashcore.head_dims import kernel_head_dim

SMEM_LIMIT = 227 * 1024  # what one H100 block may use
ALIGN = 1024  # 128-byte-swizzled tiles start on 1024-byte boundaries
TILE_INFO_BYTES = 32  # kernel/tile_scheduler.h kTileInfoBytes
ADDRESSING_REGS = 24  # registers a consumer needs besides its accumulators (the defaults keep 32-44 free)
_FLAG = 1 << 24  # kernel/tile_point.h kPointFlag
_NAME = re.compile(r"n(\d+)-s(\d+)-w(\d+)-pp([01])-re([01])-r(\d+)")


@dataclass(frozen=True)
class Point:
    block_n: int
    stages: int
    consumer_wgs: int
    pingpong: bool
    rescale_early: bool
    producer_regs: int

    @property
    def name(self) -> str:
        return (f"n{self.block_n}-s{self.stages}-w{self.consumer_wgs}-pp{int(self.pingpong)}-"
                f"re{int(self.rescale_early)}-r{self.producer_regs}")

    @property
    def code(self) -> int:
        """kernel/tile_point.h point_code()."""
        return (self.block_n | self.stages << 9 | self.consumer_wgs << 13 | int(self.pingpong) << 15
                | int(self.rescale_early) << 16 | (self.producer_regs // 8) << 17 | _FLAG)

    @classmethod
    def from_code(cls, code: int) -> Point:
        if not code & _FLAG:
            raise ValueError(f"{code:#x} is not a point code (kernel/tile_point.h)")
        return cls(code & 511, (code >> 9) & 15, (code >> 13) & 3, bool((code >> 15) & 1), bool((code >> 16) & 1),
                   ((code >> 17) & 31) * 8)

    @classmethod
    def parse(cls, name: str) -> Point:
        m = _NAME.fullmatch(name)
        if not m:
            raise ValueError(f"point {name!r}: expected n<block_n>-s<stages>-w<warpgroups>-pp<0|1>-re<0|1>-r<regs>, "
                             "e.g. n128-s2-w2-pp1-re0-r32")
        bn, st, wg, pp, re_, pr = (int(g) for g in m.groups())
        return cls(bn, st, wg, bool(pp), bool(re_), pr)

    def fields(self, head_dim: int) -> tuple[int, ...]:
        """FC_POINT's arguments: head dim, then the point's fields as ints (kernel/kernel.mk and kernel/flashcore.cu
        read them in this order)."""
        return (head_dim, *(int(x) for x in astuple(self)))

    def inc_line(self, head_dim: int) -> str:
        """Its line in a points file (kernel/tuned_points.inc)."""
        return f"FC_POINT({', '.join(str(f) for f in self.fields(head_dim))})"

    # -- what the kernel derives from (head dim, point): kernel/hopper_config.h HopperTileConfig --
    def launch_regs(self) -> int:
        """A thread holds at most 255 registers (one consumer warpgroup: 256 threads, 248 each)."""
        return min(65536 // (128 * (1 + self.consumer_wgs)), 255) // 8 * 8

    def consumer_regs(self) -> int:
        share = (self.launch_regs() * (1 + self.consumer_wgs) - self.producer_regs) // self.consumer_wgs // 8 * 8
        return min(share, 256)

    def smem_bytes(self, head_dim: int) -> tuple[int, bool]:
        """(bytes, O staged over V)."""
        q = 64 * self.consumer_wgs * head_dim * 2
        kv = self.block_n * head_dim * 2
        barriers = (8 * (5 + 4 * self.stages) + 15) // 16 * 16  # kernel/hopper_config.h HopperSlots
        base = ALIGN + q + 2 * self.stages * kv + barriers + 2 * TILE_INFO_BYTES
        o = 64 * -(-head_dim // 64) * 64 * 2 * self.consumer_wgs  # whole 64-column chunks (hdim 96: two)
        alias = base + o > SMEM_LIMIT
        return (base if alias else base + o), alias

    def accumulator_regs(self, head_dim: int) -> int:
        """Per consumer thread: S (fp32, block_n / 2) + P (16-bit pairs, block_n / 4) + O (fp32, head_dim / 2)."""
        return self.block_n // 2 + self.block_n // 4 + head_dim // 2

    def problems(self, head_dim: int) -> list[str]:
        """The rules this point breaks at `head_dim` (empty: it may be built; ptxas still judges spills). A head dim
        between the kernel's is judged on the kernel that runs it (a tuned table's d72 entry runs the 128 kernel)."""
        kernel = kernel_head_dim(head_dim) if head_dim not in HEAD_DIMS else head_dim
        if kernel is None:
            return [f"head dim {head_dim}: the kernel has {', '.join(map(str, HEAD_DIMS[:-1]))} and {HEAD_DIMS[-1]}"]
        head_dim = kernel
        out = []
        if self.block_n % 16 or not 64 <= self.block_n <= 256:
            out.append(f"wgmma N: block_n {self.block_n} must be a multiple of 16 in 64..256 (kernel/wgmma_ops.h)")
        if not 2 <= self.stages <= 8:
            out.append(f"stages {self.stages}: the K/V ring needs 2..8")
        if self.consumer_wgs not in (1, 2, 3):
            out.append(f"consumer_wgs {self.consumer_wgs}: 1 to 3 (named barrier ids 1..3)")
        elif self.consumer_wgs == 1 and self.pingpong:
            out.append("ping-pong needs 2 or more consumer warpgroups: one has no partner (pingpong false)")
        if self.producer_regs % 8 or self.producer_regs < 24:
            out.append(f"setmaxnreg: producer_regs {self.producer_regs} must be a multiple of 8, >= 24")
        if out:
            return out
        if self.producer_regs > self.launch_regs():
            out.append(f"setmaxnreg: producer_regs {self.producer_regs} above the {self.launch_regs()} the CTA "
                       "launches with")
        smem, alias = self.smem_bytes(head_dim)
        if smem > SMEM_LIMIT:
            out.append(f"shared memory: {smem} bytes > {SMEM_LIMIT} (227 KB)")
        if alias and self.consumer_wgs > self.stages:
            out.append(f"O staged over V needs a V stage per consumer warpgroup ({self.consumer_wgs} > "
                       f"{self.stages} stages)")
        q_bytes, kv_bytes = 64 * self.consumer_wgs * head_dim * 2, self.block_n * head_dim * 2
        if q_bytes % ALIGN or kv_bytes % ALIGN:
            out.append(f"swizzle alignment: Q {q_bytes} and K/V {kv_bytes} byte tiles must be multiples of {ALIGN}")
        need, have = self.accumulator_regs(head_dim) + ADDRESSING_REGS, self.consumer_regs()
        if need > have:
            out.append(f"registers: S + P + O take {self.accumulator_regs(head_dim)} per consumer thread, + "
                       f"{ADDRESSING_REGS} for addressing = {need} > the {have} setmaxnreg gives {self.consumer_wgs} "
                       f"consumer warpgroups beside a {self.producer_regs}-register producer")
        return out


def library_points(lib: ctypes.CDLL, head_dim: int, defaults_only: bool = False) -> tuple[Point, ...]:
    """fc_points() of a library opened by flashcore._lib (which declares its signature)."""
    buf = (ctypes.c_int32 * 256)()
    n = lib.fc_points(head_dim, buf, 256, int(defaults_only))
    return tuple(Point.from_code(buf[i]) for i in range(min(n, 256)))
