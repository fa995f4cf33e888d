"""Where notebook Triton kernels run: the GPU if there is one, else Triton's interpreter.

Import this module BEFORE `triton`. With no CUDA device it sets `TRITON_INTERPRET=1` (unless the
variable is already set), so every `@triton.jit` function defined afterwards runs in Triton's
NumPy interpreter on CPU tensors. It must come first because Triton decides at its own import
how its library functions (`tl.max`, `tl.sum`, ...) are built: a kernel interpreted on top of
a Triton imported for a GPU fails with "Cannot call @triton.jit'd outside of the scope of a
kernel".

On a GPU it sets `TRITON_F32_DEFAULT=ieee` (unless set): a float32 `tl.dot` then multiplies in
full float32, as the float32 baseline of the book's error rule does, not in TF32.

- `DEVICE`: "cuda" or "cpu", where to put the kernel's tensors.
- `INTERPRETED`: whether kernels run in the interpreter.
"""

from __future__ import annotations

import os
import sys

import torch

__all__ = ["DEVICE", "INTERPRETED"]

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
else:
    os.environ.setdefault("TRITON_F32_DEFAULT", "ieee")
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"
DEVICE = "cpu" if INTERPRETED or not torch.cuda.is_available() else "cuda"


def _triton_loaded_for_gpu() -> bool:
    """True if Triton was imported before this module without the interpreter."""
    language = sys.modules.get("triton.language")
    reduce_max = getattr(getattr(language, "standard", None), "max", None)
    return type(reduce_max).__name__ == "JITFunction"


if INTERPRETED and _triton_loaded_for_gpu():
    raise RuntimeError("Triton was imported before inferbook.triton_device, without its "
                       "interpreter: restart the kernel and import inferbook.triton_device "
                       "(the set-up cell) before anything imports triton")
