"""The book's Triton kernels compiled ahead of time, for a GPU that need not be present.

- `compile_forward(head_dim, dtype, capability, causal, config=None)` -> `CompiledForward`
  (shared memory in bytes, PTX, cubin), by Triton's compiler and its own ptxas.
- `compile_forwards(requests)` -> the same for a batch (one subprocess under the interpreter).
- `compile_paged_decodes(requests)` -> `CompiledPagedDecode` for each (head_dim, dtype,
  capability, page, group, n_q): the paged decode kernel of `inferbook.triton_paged_decode`.
- `resource_usage(cubin)` -> registers per thread, stack, shared and local memory, by the
  `cuobjdump` Triton ships (ptxas puts register spills on the stack / in local memory).

How many programs of a compile are resident per SM is `inferbook.triton_launch.occupancy`
(no Triton): callers import it, and the per-SM limits, from there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
import triton

from . import triton_paged_decode
from .triton_flash import INTERPRETED, flash_forward_kernel
from .triton_launch import launch_config, parse_capability

__all__ = ["CompiledForward", "compile_forward", "compile_forwards", "CompiledPagedDecode",
           "compile_paged_decodes", "resource_usage"]



def _signature(dtype: torch.dtype) -> dict[str, str]:
    """Return the kernel's argument types for `triton.compile`, as a launch specialises them."""
    ptr = {torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.float32: "*fp32"}[dtype]
    sig = {name: ptr for name in ("Q", "K", "V", "O")}
    sig["LSE"] = "*fp32"
    for t in "qkvo":
        for axis in ("b", "h", "m" if t in "qo" else "n"):
            sig[f"stride_{t}{axis}"] = "i32"
    sig.update(num_heads="i32", group_size="i32", n_q="i32", n_kv="i32", qk_scale="fp32")
    for name in ("CAUSAL", "BLOCK_M", "BLOCK_N", "HEAD_DIM", "BLOCK_D", "DOT_PRECISION"):
        sig[name] = "constexpr"
    return sig


@dataclass(frozen=True)
class CompiledForward:
    """The forward kernel compiled ahead of time for one target and configuration."""

    head_dim: int
    dtype: torch.dtype
    capability: tuple[int, int]
    causal: bool
    config: tuple[int, int, int, int]   # (BLOCK_M, BLOCK_N, num_warps, num_stages)
    shared_bytes: int                   # the launch's shared memory, as Triton requests it
    ptx: str
    cubin: bytes


def compile_forward(head_dim: int, dtype: torch.dtype, capability, causal: bool,
                    config: tuple[int, int, int, int] | None = None) -> CompiledForward:
    """Return the forward kernel compiled ahead of time for `capability` (no GPU needed).

    Uses Triton's compiler and its own ptxas; `config` defaults to `launch_config`'s choice.
    Pointers and strides are marked 16-divisible, as a launch on contiguous tensors with
    head_dim a multiple of 16 specialises them, so the code is what a real launch would run.
    """
    return compile_forwards([(head_dim, dtype, capability, causal, config)])[0]


def compile_forwards(requests) -> list[CompiledForward]:
    """Return `compile_forward(*r)` for each request tuple, in order.

    Under the interpreter (TRITON_INTERPRET=1) Triton cannot compile in this process, so the
    batch is compiled by one Python subprocess without the variable. Triton caches each
    compiled kernel by source hash (~/.triton/cache): an unchanged kernel compiles once.
    """
    requests = [(hd, dt, parse_capability(cc), bool(causal), tuple(cfg) if cfg else None)
                for hd, dt, cc, causal, cfg in requests]
    if not INTERPRETED:
        return [_compile_one(*r) for r in requests]
    return _in_subprocess("compile_forwards", requests)


def _in_subprocess(function: str, requests: list) -> list:
    """Return `triton_aot.<function>(requests)` run by a Python without TRITON_INTERPRET."""
    import pickle
    import subprocess
    import sys
    import tempfile

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    package_parent = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([package_parent, env.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp, "requests.pkl"), Path(tmp, "results.pkl")
        src.write_bytes(pickle.dumps(requests))
        code = ("import pickle, sys; from inferbook import triton_aot as aot; "
                "reqs = pickle.load(open(sys.argv[1], 'rb')); "
                f"pickle.dump(aot.{function}(reqs), open(sys.argv[2], 'wb'))")
        run = subprocess.run([sys.executable, "-c", code, str(src), str(dst)], env=env,
                             capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"ahead-of-time compile failed:\n{run.stderr[-3000:]}")
        return pickle.loads(dst.read_bytes())


def _compile_one(head_dim, dtype, cc, causal, config) -> CompiledForward:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    config = config or launch_config(head_dim, dtype, cc)
    bm, bn, warps, stages = config
    sig = _signature(dtype)
    names = list(sig)
    aligned = {(names.index(n),): [["tt.divisibility", 16]] for n in names
               if n in ("Q", "K", "V", "O", "LSE") or n.startswith("stride")}
    constexprs = dict(CAUSAL=causal, BLOCK_M=bm, BLOCK_N=bn, HEAD_DIM=head_dim,
                      BLOCK_D=triton.next_power_of_2(head_dim),
                      DOT_PRECISION="ieee" if dtype == torch.float32 else "tf32")
    src = ASTSource(fn=flash_forward_kernel, signature=sig, constexprs=constexprs,
                    attrs=aligned)
    kernel = triton.compile(src, target=GPUTarget("cuda", cc[0] * 10 + cc[1], 32),
                            options=dict(num_warps=warps, num_stages=stages))
    return CompiledForward(head_dim, dtype, cc, causal, config, kernel.metadata.shared,
                           kernel.asm["ptx"], kernel.asm["cubin"])


# --------------------------------------------------------------------------------------
# The paged decode kernel
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CompiledPagedDecode:
    """`triton_paged_decode.paged_decode_kernel` compiled for one target and shape."""

    head_dim: int
    dtype: torch.dtype
    capability: tuple[int, int]
    page: int
    group: int                  # query heads per KV head
    n_q: int                    # query tokens per sequence
    num_warps: int
    shared_bytes: int           # as Triton requests it at launch
    registers: int              # per thread, by cuobjdump
    spill_bytes: int            # stack + local memory per thread (0: no spills)
    ptx: str


def compile_paged_decodes(requests) -> list[CompiledPagedDecode]:
    """Return the paged decode kernel compiled for each (head_dim, dtype, capability, page,
    group, n_q), with the launch's 4 warps and 2 stages (no GPU needed; a subprocess under the
    interpreter, as `compile_forwards`)."""
    requests = [(int(hd), dt, parse_capability(cc), int(page), int(group), int(n_q))
                for hd, dt, cc, page, group, n_q in requests]
    if not INTERPRETED:
        return [_compile_paged_one(*r) for r in requests]
    return _in_subprocess("compile_paged_decodes", requests)


def _paged_signature(dtype: torch.dtype) -> dict[str, str]:
    ptr = {torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.float32: "*fp32"}[dtype]
    sig = dict(Q=ptr, K_POOL=ptr, V_POOL=ptr, BLOCK_TABLES="*i32", CONTEXT_LENS="*i32",
               O_PART="*fp32", LSE_PART="*fp32")
    for name in ("stride_qb", "stride_qh", "stride_qm", "stride_kp", "stride_kt", "stride_kh",
                 "stride_vp", "stride_vt", "stride_vh", "stride_tb", "stride_ob", "stride_oh",
                 "stride_om", "stride_os", "stride_lb", "stride_lh", "stride_lm", "group_size",
                 "n_q", "pages_per_split"):
        sig[name] = "i32"
    sig["qk_scale"] = "fp32"
    for name in ("PAGE", "BLOCK_N", "HEAD_DIM", "BLOCK_D", "BLOCK_M", "DOT_PRECISION"):
        sig[name] = "constexpr"
    return sig


def _compile_paged_one(head_dim, dtype, cc, page, group, n_q) -> CompiledPagedDecode:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = _paged_signature(dtype)
    names = list(sig)
    # pointers, and the row strides of q and the pools (multiples of head_dim), 16-divisible as
    # a launch on contiguous tensors with head_dim a multiple of 16 specialises them
    aligned = {(names.index(n),): [["tt.divisibility", 16]] for n in names
               if n[0].isupper() and sig[n].startswith("*") or n in (
                   "stride_qb", "stride_qh", "stride_qm", "stride_kp", "stride_kt",
                   "stride_vp", "stride_vt")}
    constexprs = triton_paged_decode.kernel_constants(head_dim, page, group, n_q, dtype)
    src = ASTSource(fn=triton_paged_decode.paged_decode_kernel, signature=sig,
                    constexprs=constexprs, attrs=aligned)
    warps = 4
    kernel = triton.compile(src, target=GPUTarget("cuda", cc[0] * 10 + cc[1], 32),
                            options=dict(num_warps=warps, num_stages=2))
    usage = resource_usage(kernel.asm["cubin"])
    return CompiledPagedDecode(head_dim, dtype, cc, page, group, n_q, warps,
                               kernel.metadata.shared, usage["REG"],
                               usage["STACK"] + usage["LOCAL"], kernel.asm["ptx"])


def resource_usage(cubin: bytes) -> dict[str, int]:
    """Return {"REG", "STACK", "SHARED", "LOCAL"} of the kernel in a cubin, by cuobjdump."""
    import re
    import subprocess
    import tempfile

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([str(tool), "-res-usage", f.name], capture_output=True,
                             text=True, check=True).stdout
    match = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", out)
    if not match:
        raise RuntimeError(f"unexpected cuobjdump output: {out[:400]}")
    return dict(zip(("REG", "STACK", "SHARED", "LOCAL"), map(int, match.groups())))
