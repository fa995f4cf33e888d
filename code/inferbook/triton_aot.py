"""The FlashAttention Triton kernel compiled ahead of time, for a GPU that need not be present.

- `compile_forward(head_dim, dtype, capability, causal, config=None)` -> `CompiledForward`
  (shared memory in bytes, PTX, cubin), by Triton's compiler and its own ptxas.
- `compile_forwards(requests)` -> the same for a batch (one subprocess under the interpreter).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
import triton

from .triton_flash import INTERPRETED, _flash_forward_kernel
from .triton_launch import _capability, launch_config

__all__ = ["CompiledForward", "compile_forward", "compile_forwards"]


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
    requests = [(hd, dt, _capability(cc), bool(causal), tuple(cfg) if cfg else None)
                for hd, dt, cc, causal, cfg in requests]
    if not INTERPRETED:
        return [_compile_one(*r) for r in requests]
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
                "pickle.dump(aot.compile_forwards(reqs), open(sys.argv[2], 'wb'))")
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
    src = ASTSource(fn=_flash_forward_kernel, signature=sig, constexprs=constexprs,
                    attrs=aligned)
    kernel = triton.compile(src, target=GPUTarget("cuda", cc[0] * 10 + cc[1], 32),
                            options=dict(num_warps=warps, num_stages=stages))
    return CompiledForward(head_dim, dtype, cc, causal, config, kernel.metadata.shared,
                           kernel.asm["ptx"], kernel.asm["cubin"])
