"""GPU-readiness without a GPU: the Triton kernel compiled ahead of time for every target.

`inferbook.triton_aot.compile_forwards` runs Triton's real compiler and its own `ptxas` for a
GPU that is not present (GPUTarget("cuda", cc, 32)). For sm75 (T4), sm80 (A100), sm86 (A10),
sm89 (L4), sm90 (H100/H200) and sm100 (B200), every head_dim bucket 16...256, with
`launch_config`'s choice, we assert:
- shared memory (Triton's `metadata.shared`) fits the target's per-block limit
  (`smem_limit_bytes`, from the GPU presets) and is never above `smem_estimate_bytes`, which
  the GPU autotuner prunes by;
- no register spills: `cuobjdump -res-usage` on the cubin reports no stack frame and no local
  memory (ptxas puts spills there);
- tensor cores from sm80 on (mma / wgmma in the PTX). On sm75 Triton 3.9 emits FMA code.

Cost: a compile takes 1-10 s on a CPU; each grid is one batch (under the interpreter setting
of the other Triton tests, `compile_forwards` compiles a batch in one subprocess). Triton
caches compiled kernels by source hash in ~/.triton/cache (TRITON_CACHE_DIR), so only a
changed kernel is recompiled: cold, the whole file took about 4 minutes on 2 busy cores; warm,
about 30 s. The always-on test
covers every (architecture, head_dim) in fp16 causal; the `slow` one covers the rest of the
grid (bf16 from sm80, not causal).

Plus the 64-bit offset test: the kernel under the interpreter on a tensor whose batch stride
times batch index passes 2**31 elements.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import torch

if not torch.cuda.is_available():   # as in test_triton_flash.py: one setting per process
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import triton  # noqa: E402

from inferbook import triton_aot as aot  # noqa: E402
from inferbook.triton_launch import (  # noqa: E402
    SMLimits,
    occupancy,
    smem_estimate_bytes,
    smem_limit_bytes,
)

ARCHS = [(7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0)]
HEAD_DIMS = [16, 32, 64, 128, 256]
CUOBJDUMP = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
ROOT = Path(__file__).resolve().parent.parent


def resource_usage(cubin: bytes) -> dict[str, int]:
    """Return {"REG", "STACK", "SHARED", "LOCAL"} of the kernel in a cubin, by cuobjdump."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([str(CUOBJDUMP), "-res-usage", f.name], capture_output=True,
                             text=True, check=True).stdout
    match = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", out)
    assert match, f"unexpected cuobjdump output: {out[:400]}"
    return dict(zip(("REG", "STACK", "SHARED", "LOCAL"), map(int, match.groups())))


def check_compiled(compiled: aot.CompiledForward):
    """Assert the kernel fits its target, does not spill, and uses tensor cores from sm80."""
    cc, head_dim, dtype, config = (compiled.capability, compiled.head_dim, compiled.dtype,
                                   compiled.config)
    shared, limit = compiled.shared_bytes, smem_limit_bytes(cc)
    usage = resource_usage(compiled.cubin)
    what = f"sm{cc[0]}{cc[1]} d={head_dim} {dtype} causal={compiled.causal} {config}"
    assert shared <= limit, f"{what}: {shared} B shared > {limit} B per block"
    assert shared <= smem_estimate_bytes(head_dim, dtype, *config), f"{what}: above estimate"
    assert usage["STACK"] == 0 and usage["LOCAL"] == 0, f"{what}: spills {usage}"
    if cc >= (8, 0):
        assert "mma" in compiled.ptx, f"{what}: no tensor-core instruction"
    else:
        assert "mma" not in compiled.ptx   # Triton 3.9 lowers tl.dot to FMA on sm75
    print(f"{what}: {shared / 1024:.1f} KiB of {limit / 1024:.0f}, {usage['REG']} registers")


def compile_all(requests):
    """Compile (head_dim, dtype, cc, causal) with launch_config's choice, in one batch."""
    return aot.compile_forwards([(d, dt, cc, causal, None) for d, dt, cc, causal in requests])


@pytest.fixture(scope="module")
def fp16_causal():
    """Every (architecture, head_dim) in fp16 causal, compiled in one batch."""
    return compile_all([(d, torch.float16, cc, True) for cc in ARCHS for d in HEAD_DIMS])


@pytest.fixture(scope="module")
def rest_of_grid():
    """fp16 not causal everywhere, bf16 causal and not from sm80, in one batch."""
    requests = [(d, torch.float16, cc, False) for cc in ARCHS for d in HEAD_DIMS]
    requests += [(d, torch.bfloat16, cc, c) for cc in ARCHS if cc >= (8, 0)
                 for d in HEAD_DIMS for c in (True, False)]
    return compile_all(requests)


@pytest.mark.parametrize("cc", ARCHS, ids=[f"sm{a}{b}" for a, b in ARCHS])
def test_every_head_dim_fits_fp16_causal(cc, fp16_causal):
    mine = [c for c in fp16_causal if c.capability == cc]
    assert sorted(c.head_dim for c in mine) == HEAD_DIMS
    for compiled in mine:
        check_compiled(compiled)


def test_forward_table_is_what_the_compiler_reports(fp16_causal):
    """outputs/benchmarks/flash_forward_aot.json (chapter 4 reads it) against this compile."""
    import json


    table = json.loads((ROOT / "outputs" / "benchmarks" / "flash_forward_aot.json").read_text())
    assert table["triton"] == triton.__version__, "recompile: python tests/bench/aot_flash_forward.py"
    rows = {(r["capability"], r["head_dim"]): r for r in table["rows"]}
    assert len(rows) == len(fp16_causal)
    for c in fp16_causal:
        cc = c.capability
        r = rows[(f"sm{cc[0]}{cc[1]}", c.head_dim)]
        usage = resource_usage(c.cubin)
        got = (c.config, c.shared_bytes, usage["REG"],
               occupancy(cc, usage["REG"], c.shared_bytes, c.config[2]))
        want = ((r["block_m"], r["block_n"], r["num_warps"], r["num_stages"]),
                r["shared_bytes"], r["registers"], r["resident_per_sm"])
        assert got == want, f"sm{cc[0]}{cc[1]} d={c.head_dim}: the committed table is stale"


@pytest.mark.slow
@pytest.mark.parametrize("cc", ARCHS, ids=[f"sm{a}{b}" for a, b in ARCHS])
def test_full_grid_bf16_and_not_causal(cc, rest_of_grid):
    mine = [c for c in rest_of_grid if c.capability == cc]
    assert len(mine) == len(HEAD_DIMS) * (3 if cc >= (8, 0) else 1)
    for compiled in mine:
        check_compiled(compiled)


def test_the_old_t4_tiles_did_not_fit():
    # The tiles used before launch_config (128 x 32, 8 warps at head_dim 128) need more than
    # a T4's 64 KiB per block: the reason launch_config exists.
    old = aot.compile_forward(128, torch.float16, (7, 5), True, (128, 32, 8, 2))
    assert old.shared_bytes > smem_limit_bytes((7, 5))


OVERFLOW_SCRIPT = textwrap.dedent("""
    import os
    os.environ["TRITON_INTERPRET"] = "1"
    import numpy as np
    import torch
    from inferbook import flash, triton_flash as tf

    n, d = 40, 16
    stride_b = 2**30 + 64            # < 2**31, so Triton passes it as a 32-bit int
    # batch 2 starts 2 * stride_b = 2**31 + 128 elements in: past int32. 4 GiB of address
    # space, of which the few pages written below are all that is ever touched.
    buf = torch.empty(2 * stride_b + 3 * n * d, dtype=torch.float16)
    gen = torch.Generator().manual_seed(0)
    for b in range(3):
        buf[b * stride_b: b * stride_b + 3 * n * d] = torch.randn(3 * n * d, generator=gen)
    q, k, v = (buf.as_strided((3, 1, n, d), (stride_b, n * d, d, 1), i * n * d)
               for i in range(3))
    assert (q.shape[0] - 1) * q.stride(0) > 2**31
    o, lse = tf.flash_attention(q, k, v, causal=True)
    ref_o, ref_lse = flash.attention_reference(
        *(t.contiguous().double().numpy() for t in (q, k, v)), True)
    err = np.abs(o.double().numpy() - ref_o).max()
    assert err < 2e-3, err
    print("ok", err)
""")


def test_offsets_past_2_to_the_31_elements():
    # Under the interpreter, 32-bit program offsets wrap b * stride_qb to a negative offset:
    # the run reads the wrong memory (wrong output or a crash, hence a subprocess).
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
    run = subprocess.run([sys.executable, "-c", OVERFLOW_SCRIPT], capture_output=True,
                         text=True, env=env, timeout=300, cwd=ROOT)
    assert run.returncode == 0 and run.stdout.startswith("ok"), run.stdout + run.stderr[-2000:]


# ---------------------------------------------------------------------------------------
# the paged decode kernel (inferbook.triton_paged_decode), against its committed table
# ---------------------------------------------------------------------------------------
AOT_JSON = ROOT / "outputs" / "benchmarks" / "paged_decode_aot.json"


@pytest.fixture(scope="module")
def paged_decode_compiled():
    """Llama-3-8B's decode shape (head_dim 128, GQA 4, pages of 16) for every generation."""
    return aot.compile_paged_decodes([(128, torch.float16, cc, 16, 4, 1) for cc in ARCHS])


def test_paged_decode_fits_every_generation_and_matches_its_table(paged_decode_compiled):
    import json

    table = json.loads(AOT_JSON.read_text())
    assert table["triton"] == triton.__version__, "recompile: python tests/bench/aot_paged_decode.py"
    for c in paged_decode_compiled:
        cc = c.capability
        what = f"paged decode sm{cc[0]}{cc[1]}"
        threads = 32 * c.num_warps
        assert c.shared_bytes <= smem_limit_bytes(cc), what
        assert c.spill_bytes == 0, f"{what}: spills"
        assert c.registers <= SMLimits.max_registers_per_thread, what
        assert c.registers * threads <= SMLimits.registers, what
        assert ("mma" in c.ptx) == (cc >= (8, 0)), what
        resident = occupancy(cc, c.registers, c.shared_bytes, c.num_warps)
        assert resident["resident"] >= 1, what
        row = [r for r in table["rows"] if r["capability"] == f"sm{cc[0]}{cc[1]}"
               and (r["head_dim"], r["page"], r["group"], r["n_q"]) == (128, 16, 4, 1)]
        assert len(row) == 1, what
        assert (row[0]["shared_bytes"], row[0]["registers"], row[0]["resident_per_sm"]) == (
            c.shared_bytes, c.registers, resident), f"{what}: the committed table is stale"
    # the table's own rows all fit what they claim
    for r in table["rows"]:
        assert r["shared_bytes"] <= r["smem_limit_bytes"] and r["spill_bytes"] == 0, r


def test_occupancy_by_each_limit():
    # 128 registers x 128 threads: 4 blocks by registers; 48 KiB: 4 blocks in an A100's 164 KiB
    by = occupancy((8, 0), 128, 48 * 1024, 4)
    assert by == dict(registers=4, shared=3, warps=16, blocks=32, resident=3)
    assert occupancy((7, 5), 32, 0, 8)["warps"] == 4       # a T4 holds 32 warps per SM


def test_aot_reexports_nothing_from_triton_launch():
    """Occupancy and the per-SM limits are imported from `triton_launch`, which owns them."""
    for name in ("occupancy", "SM_LIMITS", "REGISTERS_PER_SM", "MAX_REGISTERS_PER_THREAD"):
        assert not hasattr(aot, name), name
    from inferbook import triton_flash

    assert "flash_forward_kernel" in triton_flash.__all__
