"""Launch choices of the FlashAttention Triton kernel, per GPU generation (no kernel here).

- `launch_config(head_dim, dtype, capability)` -> `(BLOCK_M, BLOCK_N, num_warps, num_stages)`:
  the untuned launch for one GPU generation, sized to its per-block shared memory.
- `autotune_configs(...)` -> the configurations the GPU autotuner tries.
- `smem_limit_bytes(capability)` -> the per-block shared-memory limit, from `inferbook.hardware`.
- `smem_estimate_bytes(...)` -> an upper estimate of one launch's shared memory.
- `launch_plan(batch, heads, kv_heads, n_q, block_m)` -> how the kernel's grid covers the work
  (with a GQA group's decode queries packed into one Q tile).

- `occupancy(capability, registers, shared_bytes, num_warps)` -> programs resident per SM, by
  each limit (NVIDIA's occupancy rules); `waves(programs, num_sms, resident)`,
  `wave_efficiency(programs, slots)`: how many rounds a grid takes and how full the last is.
- `causal_tile_work(n, block_m, block_n)`, `makespan(work, slots)`: causal load balance, and
  when the last program ends for a given launch order.

- `parse_capability(capability)` -> `(major, minor)` from (8, 0), 80 or "sm80".
- `kernel_strides(t, plan)`, `autotune_pruner(capability)`: what the launch hands Triton.

The kernel is `inferbook.triton_flash`; its ahead-of-time compile is `inferbook.triton_aot`.
This module imports no Triton: the arithmetic of a launch can be read (and tested) without it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import validate
from .arith import ceil_div
from .hardware import GPUS

__all__ = ["MIN_HEAD_DIM", "MAX_HEAD_DIM", "SUPPORTED_DTYPES", "SMEM_BYTES_PER_BLOCK",
           "TUNED_CAPABILITIES", "smem_limit_bytes", "launch_config", "autotune_configs",
           "smem_estimate_bytes", "LaunchPlan", "launch_plan", "parse_capability",
           "next_power_of_2", "kernel_strides", "autotune_pruner", "SMLimits", "SM_LIMITS",
           "sm_limits", "smem_per_sm_bytes", "occupancy", "waves", "wave_efficiency",
           "causal_tile_work", "makespan"]

MIN_HEAD_DIM, MAX_HEAD_DIM = 16, 256
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _smem_limits() -> dict[tuple[int, int], int]:
    """Return {compute capability: per-block shared-memory limit}, from the GPU presets."""
    limits: dict[tuple[int, int], int] = {}
    for g in GPUS.values():
        if g.smem_bytes_per_block is not None:
            cc = g.compute_capability
            limits[cc] = min(limits.get(cc, g.smem_bytes_per_block), g.smem_bytes_per_block)
    return limits


SMEM_BYTES_PER_BLOCK: dict[tuple[int, int], int] = _smem_limits()

# (BLOCK_M, BLOCK_N, num_warps, num_stages) for 2-byte inputs, per architecture and BLOCK_D
# (head_dim rounded up to a power of two). Each fits its architecture's per-block shared
# memory with no register spills: tests/test_triton_aot.py compiles every entry ahead of time
# with Triton's own ptxas and checks both. Larger tiles where there is more shared memory;
# fewer rows (BLOCK_M) or keys (BLOCK_N) as head_dim grows, so that the float32 accumulator
# (BLOCK_M x BLOCK_D) and the scores (BLOCK_M x BLOCK_N) stay in registers. On sm75 Triton
# (3.9) lowers tl.dot to FMA instructions, not tensor cores, with float32 operands in
# registers: hence the T4's small tiles and 8 warps.
_LAUNCH_TABLE: dict[tuple[int, int], dict[int, tuple[int, int, int, int]]] = {
    (7, 5): {16: (64, 64, 8, 2), 32: (64, 32, 8, 2), 64: (64, 32, 8, 2),
             128: (32, 32, 8, 2), 256: (32, 16, 8, 2)},
    (8, 0): {16: (128, 64, 4, 3), 32: (128, 64, 4, 3), 64: (128, 64, 4, 3),
             128: (128, 64, 8, 3), 256: (64, 64, 8, 2)},
    (8, 6): {16: (128, 64, 4, 3), 32: (128, 64, 4, 3), 64: (128, 64, 4, 3),
             128: (128, 32, 8, 3), 256: (64, 32, 8, 2)},
    (8, 9): {16: (128, 64, 4, 3), 32: (128, 64, 4, 3), 64: (128, 64, 4, 3),
             128: (128, 32, 8, 3), 256: (64, 32, 8, 2)},
    (9, 0): {16: (128, 128, 8, 3), 32: (128, 128, 8, 3), 64: (128, 128, 8, 3),
             128: (128, 64, 8, 3), 256: (64, 32, 8, 2)},
    (10, 0): {16: (128, 128, 8, 3), 32: (128, 128, 8, 3), 64: (128, 128, 8, 3),
              128: (128, 64, 8, 3), 256: (64, 64, 8, 2)},
}
TUNED_CAPABILITIES = tuple(_LAUNCH_TABLE)


def next_power_of_2(n: int) -> int:
    """Return the smallest power of two >= n (n >= 1), as `triton.next_power_of_2` does."""
    return 1 << (validate.positive_int("n", n) - 1).bit_length()


def parse_capability(capability) -> tuple[int, int]:
    """Return (major, minor) from (8, 0), 80 or "sm80"; ValueError otherwise."""
    if isinstance(capability, str) and capability.startswith("sm") and capability[2:].isdigit():
        capability = int(capability[2:])
    if isinstance(capability, int) and not isinstance(capability, bool) and capability > 0:
        return divmod(capability, 10)
    if (isinstance(capability, tuple) and len(capability) == 2
            and all(isinstance(x, int) for x in capability)):
        return capability
    raise ValueError(f"capability must be (major, minor), e.g. (8, 0), or 80 / 'sm80'; "
                     f"got {capability!r}")


def _tuned_for(capability) -> tuple[int, int]:
    """Return the tuned architecture used for `capability`.

    A capability in the table is itself; another of the same major generation uses the
    nearest one below it (sm87 -> sm86); anything else from sm75 on uses the T4's choices,
    the most frugal ones.
    """
    cc = parse_capability(capability)
    if cc < (7, 5):
        raise ValueError(f"the kernel needs compute capability 7.5 or newer; got {cc}")
    same_major = [t for t in TUNED_CAPABILITIES if t[0] == cc[0] and t <= cc]
    return max(same_major) if same_major else (7, 5)


def smem_limit_bytes(capability) -> int:
    """Return the largest shared memory one thread block may use on this GPU generation.

    From `inferbook.hardware` (the smallest limit among the presets of that capability); a
    capability without a preset takes the limit of the architecture `launch_config` uses for it.
    """
    cc = parse_capability(capability)
    return SMEM_BYTES_PER_BLOCK.get(cc) or SMEM_BYTES_PER_BLOCK[_tuned_for(cc)]


def _element_bytes(dtype: torch.dtype) -> int:
    if dtype not in SUPPORTED_DTYPES:
        names = ", ".join(str(a).removeprefix("torch.") for a in SUPPORTED_DTYPES)
        raise ValueError(f"dtype is {dtype}; allowed: {names}")
    return torch.empty((), dtype=dtype).element_size()


def launch_config(head_dim: int, dtype: torch.dtype,
                  capability) -> tuple[int, int, int, int]:
    """Return (BLOCK_M, BLOCK_N, num_warps, num_stages): the untuned launch for this GPU.

    capability: (major, minor) as `torch.cuda.get_device_capability()` gives it (or 80, "sm80").
    Per-architecture choices for sm75 (T4), sm80 (A100), sm86 (A10, RTX 30), sm89 (L4,
    RTX 40), sm90 (H100, H200) and sm100 (B200); each fits `smem_limit_bytes(capability)`.
    float32 inputs take half the rows (and fewer keys where needed). bfloat16 needs sm80 or
    newer (a T4 has no bf16 tensor cores): ValueError below that.
    """
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or not (
            MIN_HEAD_DIM <= head_dim <= MAX_HEAD_DIM):
        raise ValueError(f"head_dim must be an int in [{MIN_HEAD_DIM}, {MAX_HEAD_DIM}]; "
                         f"got {head_dim!r}")
    wide = _element_bytes(dtype) // 2          # 2 for float32: twice the bytes per element
    arch = _tuned_for(capability)
    if dtype == torch.bfloat16 and parse_capability(capability) < (8, 0):
        raise ValueError(f"bfloat16 needs compute capability 8.0 or newer; got "
                         f"{parse_capability(capability)} (use float16 on a T4)")
    block_m, block_n, warps, stages = _LAUNCH_TABLE[arch][next_power_of_2(head_dim)]
    block_m = max(block_m // wide, 16)
    limit = smem_limit_bytes(capability)
    while smem_estimate_bytes(head_dim, dtype, block_m, block_n, warps, stages) > limit:
        if block_n > 16:
            block_n //= 2                 # float32 tiles: twice the bytes, half the keys
        elif stages > 1:
            stages -= 1
        else:
            break
    return block_m, block_n, warps, stages


def autotune_configs(head_dim: int, dtype: torch.dtype,
                     capability) -> list[tuple[int, int, int, int]]:
    """Return the (BLOCK_M, BLOCK_N, num_warps, num_stages) the GPU autotuner tries.

    `launch_config`'s choice first, then neighbours (half or double the K/V tile, one more or
    one fewer pipeline stage, the other warp count), kept only if their shared memory, by
    `smem_estimate_bytes`, fits `smem_limit_bytes(capability)`.
    """
    bm, bn, warps, stages = launch_config(head_dim, dtype, capability)
    candidates = [(bm, bn, warps, stages), (bm, bn * 2, warps, stages),
                  (bm, bn // 2, warps, stages), (bm, bn, warps, stages + 1),
                  (bm, bn, warps, max(stages - 1, 1)), (bm, bn, 12 - warps, stages),
                  (bm // 2, bn, 4, stages)]
    limit = smem_limit_bytes(capability)
    out = []
    for c in candidates:
        if c not in out and c[0] >= 16 and c[1] >= 16 and smem_estimate_bytes(
                head_dim, dtype, *c) <= limit:
            out.append(c)
    return out


def smem_estimate_bytes(head_dim: int, dtype: torch.dtype, block_m: int, block_n: int,
                        num_warps: int, num_stages: int) -> int:
    """Return an upper estimate of the kernel's shared memory for one launch configuration.

    Tensor-core code (sm80+) keeps K and V tiles, BLOCK_N x BLOCK_D each, for every pipeline
    stage and a Q tile in shared memory, plus up to 2 KiB of barriers. FMA code (sm75)
    stages the float32 operands of one matmul at a time: (BLOCK_M + BLOCK_N) x BLOCK_D for
    the first, BLOCK_M x BLOCK_N plus max(BLOCK_M, BLOCK_N) x BLOCK_D for the second. The
    estimate is the larger of the two; `tests/test_triton_aot.py` checks that it is never
    below what the compiler reports.
    """
    validate.integer("head_dim", head_dim, MIN_HEAD_DIM, MAX_HEAD_DIM)
    for name, value in (("block_m", block_m), ("block_n", block_n), ("num_warps", num_warps),
                        ("num_stages", num_stages)):
        validate.positive_int(name, value)
    d = next_power_of_2(head_dim)
    e = _element_bytes(dtype)
    tensor_cores = e * (2 * max(num_stages, 1) * block_n * d + block_m * d) + 2048
    fma = 4 * max((block_m + block_n) * d, block_m * block_n + max(block_m, block_n) * d)
    return max(tensor_cores, fma)


@dataclass(frozen=True)
class LaunchPlan:
    """How the kernel's grid covers one call: a view of q/o for the kernel, and the grid.

    `packed` is True for a decode step (n_q = 1) with grouped-query attention: the `group`
    query heads that share a KV head become the rows of one Q tile (flash-attn's
    seqlen/ngroups swap), so each K/V tile is read once per KV head instead of once per query
    head. Then the kernel sees `heads = kv_heads`, `n_q = group`, `group_size = 1`, and
    strides that walk q's heads as if they were rows: no copy.
    """

    heads: int          # heads as the kernel sees them
    group_size: int     # query heads per KV head, as the kernel sees them
    n_q: int            # query rows per (batch, head), as the kernel sees them
    block_m: int
    grid: tuple[int, int]
    packed: bool


def launch_plan(batch: int, heads: int, kv_heads: int, n_q: int, block_m: int) -> LaunchPlan:
    """Return the LaunchPlan: grid (cdiv(n_q, BLOCK_M), batch x heads), or packed for decode.

    Packing applies when n_q == 1 and heads > kv_heads; the Q tile then holds the group's
    rows, BLOCK_M = max(16, next power of two >= group) but no more than `block_m`, and the
    grid is (cdiv(group, BLOCK_M), batch x kv_heads).
    """
    for name, value in (("batch", batch), ("heads", heads), ("kv_heads", kv_heads), ("n_q", n_q),
                        ("block_m", block_m)):
        validate.positive_int(name, value)
    if heads % kv_heads:
        raise ValueError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    group = heads // kv_heads
    if n_q == 1 and group > 1:
        bm = min(block_m, max(16, next_power_of_2(group)))
        return LaunchPlan(kv_heads, 1, group, bm, (ceil_div(group, bm), batch * kv_heads),
                          True)
    return LaunchPlan(heads, group, n_q, block_m, (ceil_div(n_q, block_m), batch * heads),
                      False)


def kernel_strides(t: torch.Tensor, plan: LaunchPlan) -> tuple[int, int, int]:
    """Return (batch, head, row) strides of q or o as the kernel walks them under `plan`."""
    if plan.packed:   # rows are the group's heads; a "head" is a whole group
        return t.stride(0), plan.n_q * t.stride(1), t.stride(1)
    return t.stride(0), t.stride(1), t.stride(2)


def autotune_pruner(capability):
    """Return triton.autotune's early_config_prune: keep `autotune_configs`' choices only."""
    def prune(configs, named_args, **kwargs):
        head_dim = kwargs.get("HEAD_DIM", named_args.get("HEAD_DIM"))
        allowed = set(autotune_configs(head_dim, named_args["Q"].dtype, capability))
        kept = [c for c in configs if (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps,
                                       c.num_stages) in allowed]
        return kept or configs[:1]
    return prune


# --------------------------------------------------------------------------------------
# Occupancy and waves: how many programs an SM holds at once, and how many rounds a grid takes
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SMLimits:
    """Per-SM limits of one compute capability (CUDA C++ Programming Guide, "Technical
    Specifications per Compute Capability"; allocation rules of the CUDA toolkit's
    cuda_occupancy.h)."""

    max_blocks: int               # resident thread blocks (programs) per SM
    max_warps: int                # resident warps per SM (threads / 32)
    smem_allocation_bytes: int    # shared memory is allocated in units of this many bytes
    reserved_smem_bytes: int      # the runtime's own shared memory per block (sm80 on: 1 KiB)
    registers: int = 65536        # 32-bit registers per SM, and at most per block
    max_registers_per_thread: int = 255


# Resident blocks / warps per SM: 16/32 (sm75), 32/64 (sm80), 16/48 (sm86), 24/48 (sm89),
# 32/64 (sm90, sm100). Shared memory per SM (164, 100, 100, 228, 228 KiB from sm80; 64 on a T4)
# is in `inferbook.hardware`. cuda_occupancy.h allocates shared memory in 256-byte units up to
# compute capability 7.x and 128-byte units from 8.x, and adds the per-block reservation
# (cudaDevAttrReservedSharedMemoryPerBlock, 1 KiB) from Ampere on.
SM_LIMITS: dict[tuple[int, int], SMLimits] = {
    (7, 5): SMLimits(16, 32, 256, 0),
    (8, 0): SMLimits(32, 64, 128, 1024),
    (8, 6): SMLimits(16, 48, 128, 1024),
    (8, 9): SMLimits(24, 48, 128, 1024),
    (9, 0): SMLimits(32, 64, 128, 1024),
    (10, 0): SMLimits(32, 64, 128, 1024),
}
REGISTER_ALLOCATION_UNIT = 256    # registers are allocated per warp, in units of 256
REGISTER_SUB_PARTITIONS = 4       # an SM's register file is split over 4 schedulers' warps


def sm_limits(capability) -> SMLimits:
    """Return the per-SM limits of `capability` (sm75, sm80, sm86, sm89, sm90, sm100)."""
    cc = parse_capability(capability)
    if cc not in SM_LIMITS:
        known = ", ".join(f"sm{a}{b}" for a, b in SM_LIMITS)
        raise ValueError(f"no per-SM limits for sm{cc[0]}{cc[1]}; known: {known}")
    return SM_LIMITS[cc]


def smem_per_sm_bytes(capability) -> int:
    """Return the shared memory one SM can give its blocks, from `inferbook.hardware`."""
    cc = parse_capability(capability)
    sizes = [g.smem_bytes_per_sm for g in GPUS.values()
             if g.compute_capability == cc and g.smem_bytes_per_sm]
    if not sizes:
        raise ValueError(f"no GPU preset of compute capability sm{cc[0]}{cc[1]}")
    return min(sizes)


def occupancy(capability, registers: int, shared_bytes: int, num_warps: int) -> dict[str, int]:
    """Return the programs resident per SM by each limit, and overall ("resident").

    As NVIDIA's occupancy calculator (cuda_occupancy.h) counts them: a warp's registers are
    registers x 32 rounded up to 256; each of the SM's 4 register sub-partitions (16 K
    registers) holds floor(16 K / that) warps, and a program needs `num_warps` of the SM's
    4 x that many. Shared memory: the launch's bytes plus the per-block reservation, rounded
    up to the allocation unit, into the SM's shared memory. Warps: max resident warps //
    num_warps. Blocks: the hardware's cap. `registers` is per thread, as cuobjdump reports it.
    """
    lim = sm_limits(capability)
    registers = validate.integer("registers", registers, 1, lim.max_registers_per_thread)
    shared_bytes = validate.integer("shared_bytes", shared_bytes, 0, None)
    num_warps = validate.integer("num_warps", num_warps, 1, 32)
    per_warp = ceil_div(registers * 32, REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
    if per_warp * num_warps > lim.registers:
        by_registers = 0
    else:
        warps_per_partition = (lim.registers // REGISTER_SUB_PARTITIONS) // per_warp
        by_registers = warps_per_partition * REGISTER_SUB_PARTITIONS // num_warps
    unit = lim.smem_allocation_bytes
    smem = ceil_div(shared_bytes + lim.reserved_smem_bytes, unit) * unit
    by_shared = smem_per_sm_bytes(capability) // smem if smem else lim.max_blocks
    by = dict(registers=by_registers, shared=by_shared, warps=lim.max_warps // num_warps,
              blocks=lim.max_blocks)
    by["resident"] = min(by.values())
    return by


def waves(programs: int, num_sms: int, resident_per_sm: int) -> int:
    """Return the rounds a grid of `programs` equal programs takes: ceil(programs / slots),
    slots = num_sms x resident_per_sm (every resident program runs at once)."""
    programs = validate.positive_int("programs", programs)
    slots = validate.positive_int("num_sms", num_sms) * validate.positive_int(
        "resident_per_sm", resident_per_sm)
    return ceil_div(programs, slots)


def wave_efficiency(programs: int, slots: int) -> float:
    """Return the busy fraction of the last-rounded grid: (programs / slots) / its ceiling."""
    programs = validate.positive_int("programs", programs)
    slots = validate.positive_int("slots", slots)
    return programs / (ceil_div(programs, slots) * slots)


def causal_tile_work(n: int, block_m: int, block_n: int) -> list[int]:
    """Return the K/V tiles each Q tile's program loads in causal self-attention of n tokens.

    Q tile i (rows i x BLOCK_M ...) sees keys up to its last row, so it loads
    ceil(min(n, (i + 1) x BLOCK_M) / BLOCK_N) tiles: the work grows along the diagonal, and the
    last program does about twice the average.
    """
    n = validate.positive_int("n", n)
    block_m = validate.positive_int("block_m", block_m)
    block_n = validate.positive_int("block_n", block_n)
    return [ceil_div(min(n, (i + 1) * block_m), block_n) for i in range(ceil_div(n, block_m))]


def makespan(work, slots: int) -> float:
    """Return when the last program ends if `work` (durations, in launch order) is dispatched
    to `slots` concurrent slots, each program to the slot that frees first (list scheduling,
    as a GPU's block scheduler hands out programs in order as resident ones finish)."""
    import heapq

    slots = validate.positive_int("slots", slots)
    work = [validate.finite_float("work", w, minimum=0.0) for w in list(work)]
    if not work:
        raise ValueError("work must list at least one program's duration")
    free = [0.0] * min(slots, len(work))
    heapq.heapify(free)
    end = 0.0
    for w in work:
        start = heapq.heappop(free)
        end = max(end, start + w)
        heapq.heappush(free, start + w)
    return end
