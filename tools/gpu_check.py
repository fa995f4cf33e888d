"""`make gpu-check`: on a machine with a CUDA GPU, test the Triton kernel natively and benchmark it.

    .venv/bin/python tools/gpu_check.py [--quick]

1. runs tests/test_triton_flash.py and tests/test_triton_paged_decode.py natively (no
   interpreter: CUDA tensors, bf16 included);
2. runs tests/bench/bench_paged_decode.py: the paged decode kernel against SDPA on a contiguous
   cache, the package's gather + attention and, if installed, flash-attn's paged decode,
   writing outputs/benchmarks/paged_decode_<gpu>.json (bandwidth reached per method);
3. runs tests/bench/bench_triton_flash.py, which writes
   outputs/benchmarks/flash_triton_<gpu>.json (GPU, capability, driver, versions, date) and
   prints the table of ratios (ours / SDPA backends / flash-attn);
4. prints the verdict on the forward kernel's targets, each derived from the roofline of what the compiled
   kernel can use (`target_for`):
   - sm80 and newer: Triton compiles `tl.dot` to tensor-core (mma) instructions, so the kernel
     and SDPA's flash backend (FlashAttention-2) run the same algorithm on the same roof; the
     ceiling of their ratio is 1, and the target is 0.9 of it: at least 0.9x SDPA-flash in fp16
     at N >= 4096, head_dim 64 and 128;
   - sm75 (T4): no mma instructions (chapter 4's compile shows none), so the kernel's roof is the
     T4's FP32 FMA peak (8.1 TFLOP/s), while SDPA-math runs cuBLAS on the fp16 tensor cores and
     is bound by HBM traffic (intensity N d / (2 (N + d))); the ceiling of ours / SDPA-math is
     the ratio of the two roofs (about 0.8 at N = 4096, d = 64), and the target is half of it.
     Twice SDPA-math would need about 20 TFLOP/s: out of reach on FMA.

Chapter 4 plots every committed outputs/benchmarks/flash_triton_*.json. Without a GPU this
prints why and exits with status 2, having measured and written nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


TENSOR_CORE_FRACTION = 0.9   # same algorithm, same roof: ask for 90% of the baseline
FMA_FRACTION = 0.5           # different units, different algorithm: half the roof ratio


def target_for(capability: str, seq_len: int, head_dim: int) -> tuple[str, float, float] | None:
    """Return (baseline, ceiling, target) for ours / baseline TFLOP/s on this GPU generation.

    The ceiling is the ratio of the roofline bounds of the two kernels (see the module doc);
    the target is a fixed fraction of it. None for a generation without a derivation.
    """
    from inferbook.hardware import gpu
    from inferbook.roofline import FP32_FMA_FLOPS, attention_ceiling_flops

    major = int(capability[:-1])
    if major >= 8:
        return "sdpa_flash", 1.0, TENSOR_CORE_FRACTION
    if capability == "75":
        t4 = gpu("T4")
        ours = attention_ceiling_flops(t4, seq_len, head_dim, "flash",
                                       peak_flops=FP32_FMA_FLOPS["T4"])
        math_path = attention_ceiling_flops(t4, seq_len, head_dim, "standard")
        ceiling = ours / math_path
        return "sdpa_math", ceiling, FMA_FRACTION * ceiling
    return None


def targets(run: dict) -> list[str]:
    """Return one line per target that applies to this run's GPU: met or not, with the ratios."""
    cc = run["machine"]["capability"]
    rows = [r for r in run.get("ratios", []) if r["seq_len"] >= 4096 and r["head_dim"] in (64, 128)]
    probe = target_for(cc, 4096, 64)
    if probe is None:
        return [f"no target derived for sm{cc}; ratios above"]
    baseline = probe[0]
    wanted = [(r, target_for(cc, r["seq_len"], r["head_dim"])) for r in rows
              if r["vs"] == baseline]
    name = f"{baseline} (fp16, N >= 4096, d in {{64, 128}})"
    if not wanted:
        return [f"target vs {name}: no comparable measurement"]
    misses = [(r, t) for r, t in wanted if r["ours_over_other_tflops"] < t[2]]
    worst_r, worst_t = min(wanted, key=lambda rt: rt[0]["ours_over_other_tflops"] / rt[1][2])
    verdict = "met" if not misses else "NOT met"
    return [f"target >= {worst_t[2]:.2f}x {name} (roofline ceiling {worst_t[1]:.2f}x): "
            f"{verdict} (worst {worst_r['ours_over_other_tflops']:.2f}x over {len(wanted)} shapes)"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the benchmark's --quick sweep")
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("gpu-check: no CUDA GPU is visible here (torch "
              f"{torch.__version__}); nothing tested natively, nothing measured or written. "
              "Without a GPU, `make test` checks the kernel under Triton's interpreter and "
              "compiles it ahead of time for sm75-sm100 (tests/test_triton_aot.py).")
        return 2
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly",
                            "tests/test_triton_flash.py", "tests/test_triton_paged_decode.py",
                            "tests/test_triton_aot.py"], cwd=ROOT)
    paged_spec = importlib.util.spec_from_file_location(
        "bench_paged_decode", ROOT / "tests" / "bench" / "bench_paged_decode.py")
    paged_bench = importlib.util.module_from_spec(paged_spec)
    paged_spec.loader.exec_module(paged_bench)
    paged_bench.main(["--out", str(ROOT / "outputs" / "benchmarks")] + (["--quick"] if args.quick else []))
    spec = importlib.util.spec_from_file_location(
        "bench_triton_flash", ROOT / "tests" / "bench" / "bench_triton_flash.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = ROOT / "outputs" / "benchmarks"
    before = {p: p.stat().st_mtime for p in out.glob("flash_triton_*.json")}
    bench.main(["--out", str(out)] + (["--quick"] if args.quick else []))
    written = [p for p in out.glob("flash_triton_*.json") if before.get(p) != p.stat().st_mtime]
    for path in written:
        print(f"\n{path.relative_to(ROOT)}:")
        for line in targets(json.loads(path.read_text())):
            print("  " + line)
    print(f"\nnative tests: {'passed' if tests.returncode == 0 else 'FAILED'}")
    return tests.returncode


if __name__ == "__main__":
    sys.exit(main())
