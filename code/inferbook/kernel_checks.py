"""Checks for a FlashAttention forward kernel written in a notebook (Exercise 4.1).

The tools a grader needs, not the algorithm: inputs whose storage past the sequence is filled
with NaN (so a load without a mask shows up in the output, even under Triton's interpreter,
which never raises on an out-of-bounds address), FlashAttention's error rule against the book's
float64 reference, a test that a kernel is the learner's own (it references nothing of
`inferbook`), and an ahead-of-time compile of a notebook's kernel for GPUs that are not present.

- `fresh_generator()` -> a `torch.Generator` seeded at grading time (values no message shows).
- `attention_inputs(...)` -> `(q, k, v)` views whose rows past `n_q` / `n_kv` hold NaN.
- `clones(q, k, v)` -> copies (storage, NaN padding and strides too) to hand the learner's kernel,
  so the reference is computed from inputs its stores cannot have changed.
- `check_attention(name, o, lse, q, k, v, causal, rows=None)` -> the error rule, as a named check.
- `package_references(fn)` -> what of `inferbook` a Triton function (and what it calls) uses.
- `compile_kernel(kernel, signature, constexprs, capability, ...)` -> the launch's shared memory
  in bytes, compiled by Triton for `capability` in a subprocess (the interpreter cannot compile).

The error rule (flash-attention's tests): the kernel's largest error against the float64
reference is at most twice the largest error of the plain computation in the same precision
(`inferbook.triton_flash.attention_naive`), plus a floor of `FLOOR[dtype]` (a few ulps: the
kernel's exp2 with log2(e) folded into the scale rounds differently from the plain softmax).
"""

from __future__ import annotations

import inspect
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import types
from pathlib import Path

import numpy as np
import torch

from . import validate
from .grading import check, fail, fresh_seed

FLOOR = {torch.float32: 1e-6, torch.float16: 1e-3}


def fresh_generator() -> torch.Generator:
    """Return a CPU generator seeded afresh on every run (while grading, from seeds drawn before
    any of the learner's code ran)."""
    return torch.Generator().manual_seed(fresh_seed() >> 2)


def attention_inputs(batch: int, heads: int, kv_heads: int, n_q: int, n_kv: int, head_dim: int,
                     dtype: torch.dtype = torch.float32, device: str = "cpu",
                     generator: torch.Generator | None = None, pad: int = 64,
                     q_scale: float = 1.0, v_row_pad: int = 0
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (q, k, v), standard normal (q times `q_scale`), as views of NaN-filled storage.

    Each (batch, head) owns `n + pad` rows of storage of which the first `n` are the tensor;
    the `pad` rows after them hold NaN, so a kernel that reads a row past the sequence without
    a mask gets NaN in its output (the interpreter does not fault on such reads). The last
    dimension is contiguous. `v_row_pad` NaN values after each row of V make V's row stride
    `head_dim + v_row_pad`, K's `head_dim` (a kernel that walks V with K's stride reads NaN).
    """
    for name, value in (("batch", batch), ("heads", heads), ("kv_heads", kv_heads),
                        ("n_q", n_q), ("n_kv", n_kv), ("head_dim", head_dim)):
        validate.positive_int(name, value)
    validate.non_negative_int("pad", pad)
    validate.non_negative_int("v_row_pad", v_row_pad)
    if heads % kv_heads:
        raise ValueError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    gen = generator or fresh_generator()

    def padded(h: int, n: int, scale: float, row_pad: int = 0) -> torch.Tensor:
        store = torch.full((batch, h, n + pad, head_dim + row_pad), float("nan"), dtype=torch.float32)
        store[:, :, :n, :head_dim] = torch.randn(batch, h, n, head_dim, generator=gen) * scale
        return store.to(device=device, dtype=dtype)[:, :, :n, :head_dim]

    return (padded(heads, n_q, q_scale), padded(kv_heads, n_kv, 1.0),
            padded(kv_heads, n_kv, 1.0, v_row_pad))


def _errors(got: torch.Tensor, ref: torch.Tensor) -> tuple[float, tuple[int, ...] | None]:
    """Return (largest |got - ref|, its index); (inf, index) at the first NaN or inf in got
    where the reference is finite (a -inf logsumexp of a row that sees nothing matches -inf)."""
    got = got.detach().double().cpu()
    bad = ~torch.isfinite(got) & ~(torch.isinf(ref) & (got == ref))
    if bad.any():
        return math.inf, tuple(int(i) for i in bad.nonzero()[0])
    err = torch.where(torch.isinf(ref), torch.where(got == ref, 0.0, math.inf), (got - ref).abs())
    if err.numel() == 0:
        return 0.0, None
    flat = int(err.argmax())
    return float(err.max()), tuple(int(i) for i in np.unravel_index(flat, err.shape))


def _where(index: tuple[int, ...] | None) -> str:
    if index is None:
        return ""
    names = ("batch", "head", "query row", "column")
    return " (first at " + ", ".join(f"{n} {i}" for n, i in zip(names, index)) + ")"


def clones(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Copies of `tensors` for the learner's kernel, each with its own copy of the whole storage
    (the NaN rows and row padding past the view included, the same offset and strides), so a
    kernel that reads past a tensor still reads NaN, and one that writes through its pointers
    changes only the copy: the check cell keeps the originals for the reference."""
    copies = []
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"tensors[{i}] must be a torch.Tensor, got {type(t).__name__}")
        storage = t.untyped_storage().clone()
        copy = torch.empty(0, dtype=t.dtype, device=t.device)
        copy.set_(storage, t.storage_offset(), t.size(), t.stride())
        copies.append(copy)
    return tuple(copies)


def check_attention(name: str, o: torch.Tensor, lse: torch.Tensor, q: torch.Tensor,
                    k: torch.Tensor, v: torch.Tensor, causal: bool, rows: int | None = None,
                    hint: str = "") -> None:
    """Named check: (o, lse) of attention(q, k, v) by FlashAttention's 2x error rule.

    The float64 reference is `inferbook.flash.attention_reference`; the baseline is the plain
    computation in q's dtype (`inferbook.triton_flash.attention_naive`; float32 matmuls in
    full float32 on a GPU too, as `inferbook.triton_device` makes a float32 `tl.dot`). The floor is `FLOOR[dtype]` times
    the largest |score| (at least 1): one rounding of a score of size s moves exp(s) by s ulps.
    `rows` (causal only): compare only the first `rows` query rows, with the reference and
    the baseline computed on the keys those rows see, so K/V past them may hold anything.
    The message gives the size and place of the error, never the expected values.
    """
    from . import flash
    from .triton_flash import attention_naive

    for what, t, shape in (("O", o, tuple(q.shape)), ("the logsumexp", lse, tuple(q.shape[:3]))):
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape:
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            fail(name, f"expected {what} of shape {shape}, got {got}")
    if rows is not None:
        if not causal:
            raise ValueError("rows needs causal=True (the first rows see only the first keys)")
        seen = rows + k.shape[2] - q.shape[2]
        q, k, v = q[:, :, :rows], k[:, :, :seen], v[:, :, :seen]
        o, lse = o[:, :, :rows], lse[:, :, :rows]
    q64, k64, v64 = (t.detach().double().cpu().numpy() for t in (q, k, v))
    ref_o, ref_lse = (torch.from_numpy(np.asarray(x)) for x in flash.attention_reference(
        q64, k64, v64, causal))
    group = q64.shape[1] // k64.shape[1]
    scores = np.abs(q64 @ np.repeat(k64, group, axis=1).swapaxes(-1, -2)) / math.sqrt(q64.shape[-1])
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False          # float32 means float32 (no TF32)
    try:
        base_o, base_lse = attention_naive(q.contiguous(), k.contiguous(), v.contiguous(), causal)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    floor = FLOOR.get(q.dtype, 1e-6) * max(1.0, float(scores.max(initial=0.0)))
    for what, got, ref, base in (("O", o, ref_o, base_o), ("logsumexp", lse, ref_lse, base_lse)):
        err, index = _errors(got, ref)
        base_err, _ = _errors(base, ref)
        allowed = 2 * base_err + floor
        if not err <= allowed:
            found = "NaN or inf" if math.isinf(err) else f"an error of {err:.2e}"
            fail(name, f"{what} has {found}{_where(index)} against the float64 reference; "
                        f"the rule allows {allowed:.1e} (twice the plain {str(q.dtype)[6:]} "
                        f"computation's error + {floor:.1e}). {hint}".rstrip())
    check(name, True, "")


# --- the learner's own kernel ---------------------------------------------------------------------
def _python_function(fn):
    """The Python function under a Triton JIT/interpreted function (or fn itself)."""
    return getattr(fn, "fn", fn)


def _is_triton_function(value) -> bool:
    return type(value).__name__ in ("JITFunction", "InterpretedFunction") and hasattr(value, "fn")


def _names(code: types.CodeType) -> set[str]:
    """Every global name a code object (and the code nested in it) may load."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _from_package(value) -> bool:
    module = value.__name__ if isinstance(value, types.ModuleType) else getattr(
        _python_function(value), "__module__", None)
    return isinstance(module, str) and (module == "inferbook" or module.startswith("inferbook."))


def _triton_graph(fn) -> dict[str, object]:
    """{global name: Triton function} for fn and every Triton function it calls, recursively."""
    found: dict[str, object] = {}
    todo = [(_python_function(fn).__name__, fn)]
    while todo:
        name, f = todo.pop()
        if name in found:
            continue
        found[name] = f
        py = _python_function(f)
        for n in sorted(_names(py.__code__)):
            value = py.__globals__.get(n)
            if _is_triton_function(value):
                todo.append((n, value))
    return found


def package_references(fn) -> list[str]:
    """Return the names through which `fn` (or a Triton function it calls) uses `inferbook`."""
    found = []
    for name, f in _triton_graph(fn).items():
        if _from_package(f):
            found.append(f"{name} (defined in {_python_function(f).__module__})")
            continue
        py = _python_function(f)
        for n in sorted(_names(py.__code__)):
            value = py.__globals__.get(n)
            if value is not None and _from_package(value):
                found.append(f"{n} in {name}")
    return found


def check_own_kernel(name: str, fn) -> None:
    """Named check: `fn` is a Triton function written here, using nothing of `inferbook`."""
    if not _is_triton_function(fn):
        fail(name, f"expected a function decorated with @triton.jit, got "
                    f"{type(fn).__name__}")
    py = _python_function(fn)
    try:
        source = inspect.getsource(py)
    except (OSError, TypeError):
        source = ""
    if re.search(r"raise\s+NotImplementedError", source):
        fail("answer written", f"{py.__name__} is not written yet (it raises NotImplementedError)")
    used = package_references(fn)
    if used:
        fail(name, "the kernel must be your own; it uses the book's package: "
                    + ", ".join(used))
    check(name, True, "")


# --- ahead-of-time compile of a notebook's kernel --------------------------------------------------
def kernel_module_source(kernel) -> tuple[str, str]:
    """Return (source of a module defining `kernel` and the Triton functions it calls, its name).

    Globals the functions read are carried over as Triton would see them on a GPU: modules as
    imports, `tl.constexpr` values and plain numbers as assignments; nothing else.
    """
    lines = ["import triton", "import triton.language as tl", "import math"]
    bodies, aliases = [], []
    for name, f in reversed(list(_triton_graph(kernel).items())):
        py = _python_function(f)
        for n in sorted(_names(py.__code__)):
            value = py.__globals__.get(n, None)
            if isinstance(value, types.ModuleType):
                line = (f"import {n}" if value.__name__ == n
                        else f"import {value.__name__} as {n}")
            elif type(value).__name__ == "constexpr":
                line = f"{n} = tl.constexpr({getattr(value, 'value', value)!r})"
            elif isinstance(value, (bool, int, float)) and not _is_triton_function(value):
                line = f"{n} = {value!r}"
            else:
                continue
            if line not in lines:
                lines.append(line)
        bodies.append(textwrap.dedent(inspect.getsource(py)))
        if name != py.__name__:
            aliases.append(f"{name} = {py.__name__}")
    source = "\n".join(lines) + "\n\n\n" + "\n\n".join(bodies) + "\n" + "\n".join(aliases) + "\n"
    return source, _python_function(kernel).__name__


_COMPILE_SCRIPT = """
import importlib.util, json, sys
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import triton
spec = importlib.util.spec_from_file_location("notebook_kernels", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
jobs = json.load(open(sys.argv[2]))
out = []
for job in jobs:
    try:
        names = list(job["signature"])
        attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in job["aligned"]}
        src = ASTSource(fn=getattr(mod, job["kernel"]), signature=job["signature"],
                        constexprs=job["constexprs"], attrs=attrs)
        k = triton.compile(src, target=GPUTarget("cuda", job["cc"], 32),
                           options=dict(num_warps=job["num_warps"], num_stages=job["num_stages"]))
        out.append({"shared": k.metadata.shared})
    except Exception as exc:
        where, inner = "", exc
        while True:
            lines = str(inner).splitlines()
            if "^" in [ln.strip() for ln in lines]:
                at = [ln.strip() for ln in lines].index("^")
                where = " (at `" + lines[at - 1].strip() + "`)" if at else where
            nxt = inner.__cause__ or inner.__context__
            if nxt is None:
                break
            inner = nxt
        message = " ".join(str(inner).split())
        out.append({"error": type(inner).__name__ + ": " + message[:200] + where})
json.dump(out, open(sys.argv[3], "w"))
"""


def compile_kernel(kernel, signature: dict[str, str], constexprs: dict, jobs: list[dict],
                   aligned: tuple[str, ...] = (), timeout: float = 300) -> list[dict]:
    """Compile a notebook's `kernel` ahead of time, once per job; return [{"shared": bytes} or
    {"error": message}] in order.

    jobs: dicts with "cc" (e.g. 80), "num_warps", "num_stages" and optional "constexprs"
    (merged over `constexprs`). signature: {argument: "*fp16" | "i32" | "fp32" | "constexpr"}
    as `triton.compile` takes it; `aligned`: arguments a launch would mark 16-divisible
    (pointers and strides of contiguous tensors). One subprocess without TRITON_INTERPRET
    compiles them all with Triton's own ptxas, so no GPU is needed.
    """
    source, name = kernel_module_source(kernel)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    payload = [dict(kernel=name, signature=signature, aligned=list(aligned), cc=int(j["cc"]),
                    num_warps=int(j["num_warps"]), num_stages=int(j["num_stages"]),
                    constexprs={**constexprs, **j.get("constexprs", {})}) for j in jobs]
    with tempfile.TemporaryDirectory() as tmp:
        mod, req, res = Path(tmp, "notebook_kernels.py"), Path(tmp, "jobs.json"), Path(tmp, "out.json")
        mod.write_text(source)
        req.write_text(json.dumps(payload))
        run = subprocess.run([sys.executable, "-c", _COMPILE_SCRIPT, str(mod), str(req), str(res)],
                             env=env, capture_output=True, text=True, timeout=timeout)
        if run.returncode != 0 or not res.exists():
            lines = [ln for ln in run.stderr.strip().splitlines() if ln.strip()]
            return [{"error": " | ".join(lines[-3:]) or "the compiler did not run"}] * len(jobs)
        return json.loads(res.read_text())
