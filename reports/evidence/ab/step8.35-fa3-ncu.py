"""FA3's FP8 call for one bench/ab_kernels.py shape, four times (for ncu: skip one launch, profile the next)."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path.cwd() / "bench"))
sys.path.insert(0, str(Path.cwd()))
from ab_kernels import SHAPES, draw_inputs, fa3_descales  # noqa: E402

from harness.bench.backends import import_fa3  # noqa: E402

fa3 = import_fa3()[0]
shape = SHAPES[sys.argv[1]]
q, k, v, d = draw_inputs(shape)
for _ in range(4):
    fa3(q, k, v, causal=shape[6], num_splits=0, **fa3_descales(d))
torch.cuda.synchronize()
