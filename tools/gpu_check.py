"""`make gpu-check`: on a machine with a CUDA GPU, test the Triton kernel natively and benchmark it.

    .venv/bin/python tools/gpu_check.py [--quick]

1. runs tests/test_triton_flash.py natively (no interpreter: CUDA tensors, bf16 included);
2. runs tests/bench/bench_triton_flash.py, which writes
   outputs/benchmarks/flash_triton_<gpu>.json (GPU, capability, driver, versions, date) and
   prints the table of ratios (ours / SDPA backends / flash-attn);
3. prints the verdict on the kernel's targets: at least 0.9x SDPA's flash backend in fp16 at
   N >= 4096, head_dim 64 and 128, on sm90; at least 2x SDPA-math on a T4 (sm75).

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


def targets(run: dict) -> list[str]:
    """Return one line per target that applies to this run's GPU: met or not, with the ratios."""
    cc = run["machine"]["capability"]
    rows = [r for r in run.get("ratios", []) if r["seq_len"] >= 4096]
    if cc.startswith("9"):
        wanted = [r for r in rows if r["vs"] == "sdpa_flash" and r["head_dim"] in (64, 128)]
        goal, name = 0.9, "SDPA flash (fp16, N >= 4096, d in {64, 128})"
    elif cc == "75":
        wanted = [r for r in rows if r["vs"] == "sdpa_math"]
        goal, name = 2.0, "SDPA math (N >= 4096)"
    else:
        return [f"no target set for sm{cc}; ratios above"]
    if not wanted:
        return [f"target >= {goal}x {name}: no comparable measurement"]
    worst = min(r["ours_over_other_tflops"] for r in wanted)
    verdict = "met" if worst >= goal else "NOT met"
    return [f"target >= {goal}x {name}: {verdict} (worst {worst:.2f}x over {len(wanted)} shapes)"]


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
                            "tests/test_triton_flash.py", "tests/test_triton_aot.py"], cwd=ROOT)
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
