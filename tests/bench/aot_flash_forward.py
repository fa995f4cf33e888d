"""Compile the FlashAttention forward kernel ahead of time for sm75-sm100 and write what it needs.

    .venv/bin/python tests/bench/aot_flash_forward.py [--out outputs/benchmarks]

No GPU needed: Triton's compiler and its own ptxas/cuobjdump (`inferbook.triton_aot`). Writes
outputs/benchmarks/flash_forward_aot.json: per (GPU generation, head_dim), fp16 causal with
`launch_config`'s tiles, the launch's shared memory, registers per thread, spills, whether
tensor-core (mma) instructions are used, and the programs resident per SM by each limit
(`triton_launch.occupancy`). Chapter 4 reads it; tests/test_triton_aot.py recompiles the same
grid and checks it against this file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import inferbook.triton_device  # noqa: E402,F401  (before triton)
from bench_util import write_result  # noqa: E402
from inferbook import triton_aot as aot  # noqa: E402
from inferbook.triton_launch import occupancy, smem_limit_bytes  # noqa: E402

ARCHS = [(7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0)]
HEAD_DIMS = [16, 32, 64, 128, 256]


def row(c: aot.CompiledForward) -> dict:
    """Return one table row for a compiled forward kernel."""
    cc = c.capability
    usage = aot.resource_usage(c.cubin)
    bm, bn, warps, stages = c.config
    return dict(
        capability=f"sm{cc[0]}{cc[1]}", head_dim=c.head_dim,
        dtype=str(c.dtype).removeprefix("torch."), causal=c.causal, block_m=bm, block_n=bn,
        num_warps=warps, num_stages=stages, shared_bytes=c.shared_bytes,
        smem_limit_bytes=smem_limit_bytes(cc), registers=usage["REG"],
        spill_bytes=usage["STACK"] + usage["LOCAL"], tensor_cores="mma" in c.ptx,
        resident_per_sm=occupancy(cc, usage["REG"], c.shared_bytes, warps))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "outputs" / "benchmarks"))
    args = parser.parse_args(argv)
    requests = [(d, torch.float16, cc, True, None) for cc in ARCHS for d in HEAD_DIMS]
    table = [row(c) for c in aot.compile_forwards(requests)]
    for r in table:
        print(f"{r['capability']:>6} d={r['head_dim']:<3} {r['block_m']}x{r['block_n']}/"
              f"{r['num_warps']}/{r['num_stages']} shared {r['shared_bytes'] / 1024:5.1f} KiB"
              f"  {r['registers']:3d} regs  spills {r['spill_bytes']}"
              f"  resident/SM {r['resident_per_sm']}")
    import triton

    path = write_result(Path(args.out) / "flash_forward_aot.json",
                        {"kernel": "inferbook.triton_flash.flash_forward_kernel",
                         "triton": triton.__version__, "rows": table},
                        argv=[__file__, *(argv or [])])
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
