"""Compile the paged decode kernel ahead of time for sm75-sm100 and write what it needs.

    .venv/bin/python tests/bench/aot_paged_decode.py [--out outputs/benchmarks]

No GPU needed: Triton's compiler and its own ptxas/cuobjdump (`inferbook.triton_aot`). Writes
outputs/benchmarks/paged_decode_aot.json: per (GPU generation, head_dim, group x n_q rows) the
launch's shared memory, registers per thread, spills, whether tensor-core (mma) instructions
are used, and the programs resident per SM by each limit. Chapter 4 reads it;
tests/test_triton_aot.py recompiles one shape per generation and checks it against this file.
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
# (head_dim, page, group, n_q): Llama-3-8B's decode (128, GQA 4), a 64-dim model, and 8 query
# heads per KV head with 2 query tokens each (speculative verification of 2 tokens)
SHAPES = [(64, 16, 4, 1), (128, 16, 4, 1), (128, 16, 8, 2)]


def rows(compiled) -> list[dict]:
    out = []
    for c in compiled:
        cc = c.capability
        out.append(dict(
            capability=f"sm{cc[0]}{cc[1]}", head_dim=c.head_dim, dtype=str(c.dtype).removeprefix("torch."),
            page=c.page, group=c.group, n_q=c.n_q, num_warps=c.num_warps,
            shared_bytes=c.shared_bytes, smem_limit_bytes=smem_limit_bytes(cc),
            registers=c.registers, spill_bytes=c.spill_bytes, tensor_cores="mma" in c.ptx,
            resident_per_sm=occupancy(cc, c.registers, c.shared_bytes, c.num_warps)))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "outputs" / "benchmarks"))
    args = parser.parse_args(argv)
    requests = [(d, torch.float16, cc, page, group, n_q) for cc in ARCHS
                for d, page, group, n_q in SHAPES]
    table = rows(aot.compile_paged_decodes(requests))
    for r in table:
        print(f"{r['capability']:>6} d={r['head_dim']:<3} rows={r['group'] * r['n_q']:<2} "
              f"shared {r['shared_bytes'] / 1024:5.1f} KiB of {r['smem_limit_bytes'] / 1024:3.0f}"
              f"  {r['registers']:3d} regs  spills {r['spill_bytes']}  mma {r['tensor_cores']}"
              f"  resident/SM {r['resident_per_sm']['resident']}")
    import triton

    path = write_result(Path(args.out) / "paged_decode_aot.json",
                        {"kernel": "inferbook.triton_paged_decode.paged_decode_kernel",
                         "triton": triton.__version__, "num_stages": 2, "rows": table},
                        argv=[__file__, *(argv or [])])
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
