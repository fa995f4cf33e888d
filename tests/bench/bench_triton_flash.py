"""Benchmark: our Triton FlashAttention forward against PyTorch attention on one GPU.

    .venv/bin/python tests/bench/bench_triton_flash.py [--quick] [--out outputs/benchmarks]

Methods, all forward-only, measured side by side in one run:
  naive        - S = QK^T, softmax, PV in PyTorch (materialises the N x N matrix)
  sdpa_math, sdpa_efficient, sdpa_flash, sdpa_cudnn
               - F.scaled_dot_product_attention pinned to one backend with
                 torch.nn.attention.sdpa_kernel; a backend the GPU/build cannot run is recorded
                 as "unsupported: <reason>" (e.g. flash and cuDNN need sm80+, so a T4 has neither)
  flash_attn   - flash_attn.flash_attn_func, if the package imports (FlashAttention-2, sm80+)
  ours_triton  - inferbook.triton_flash.flash_attention
For each (head_dim, causal, N) it records the median time of triton.testing.do_bench, TFLOP/s
by the usual convention 4·B·H·N²·d (half for causal), and the peak memory allocated beyond the
inputs. B·N is held at 16k tokens and H·d at 2048, as in flash-attn's benchmark. Before timing,
each method's output is compared with sdpa_math in float32 (max abs error recorded).

Writes outputs/benchmarks/flash_triton_<gpu>.json with the GPU name, compute capability, driver,
CUDA/torch/triton/flash-attn versions and the date. Without a CUDA GPU it prints why and exits
with status 0, writing nothing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import re
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def gpu_machine() -> dict:
    """Return the provenance of this run: GPU, capability, driver and library versions, date."""
    import triton

    major, minor = torch.cuda.get_device_capability(0)
    try:
        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        driver = "unknown"
    try:
        import flash_attn
        fa_version = flash_attn.__version__
    except ImportError:
        fa_version = None
    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": torch.cuda.get_device_name(0),
        "capability": f"{major}{minor}",
        "num_sms": props.multi_processor_count,
        "memory_bytes": props.total_memory,
        "driver": driver,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "flash_attn": fa_version,
        "python": platform.python_version(),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def naive_attention(q, k, v, causal):
    """Plain PyTorch attention in the inputs' dtype: the N x N matrix goes through HBM."""
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def methods():
    """Return {name: fn(q, k, v, causal) -> o} for every method this machine may run."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from inferbook.triton_flash import flash_attention

    def sdpa(backend):
        def run(q, k, v, causal):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return run

    table = {
        "naive": naive_attention,
        "sdpa_math": sdpa(SDPBackend.MATH),
        "sdpa_efficient": sdpa(SDPBackend.EFFICIENT_ATTENTION),
        "sdpa_flash": sdpa(SDPBackend.FLASH_ATTENTION),
        "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
        "ours_triton": lambda q, k, v, causal: flash_attention(q, k, v, causal)[0],
    }
    try:
        from flash_attn import flash_attn_func  # [B, N, H, d] layout

        table["flash_attn"] = lambda q, k, v, causal: flash_attn_func(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal).transpose(1, 2)
    except ImportError:
        pass
    return table


def measure(fn, q, k, v, causal, reference):
    """Return a result row (without the shape fields) for one method on one shape."""
    import triton.testing

    from inferbook.triton_plots import benchmark_flops

    batch, heads, n, d = q.shape
    try:
        o = fn(q, k, v, causal)
        torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return {"status": "out of memory", "median_ms": None, "tflops": None, "peak_mem_bytes": None,
                "max_abs_err": None}
    except Exception as err:  # backend not available for this GPU / dtype / shape, or a
        # Triton compile error (e.g. outside Triton's supported GPUs): record it, keep going
        reason = re.sub(r"\s+", " ", f"{type(err).__name__}: {err}").strip()[:200]
        return {"status": f"unsupported: {reason}", "median_ms": None, "tflops": None,
                "peak_mem_bytes": None, "max_abs_err": None}
    err = (o.float() - reference).abs().max().item()
    del o
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn(q, k, v, causal)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    ms = triton.testing.do_bench(lambda: fn(q, k, v, causal), warmup=25, rep=100,
                                 return_mode="median")
    tflops = benchmark_flops(batch, heads, n, d, causal) / (ms * 1e-3) / 1e12
    return {"status": "ok", "median_ms": ms, "tflops": tflops, "peak_mem_bytes": peak,
            "max_abs_err": err}


TOTAL_TOKENS, WIDTH = 16384, 2048   # B·N and H·d, as in flash-attn's benchmark


def sweep(seq_lens, head_dims, dtype=torch.float16, causal_modes=(False, True), log=print):
    """Return result rows for every method x head_dim x causal x N (the chapter calls this too)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    table = methods()
    rows = []
    for head_dim in head_dims:
        for causal in causal_modes:
            for n in seq_lens:
                batch, heads = max(1, TOTAL_TOKENS // n), WIDTH // head_dim
                gen = torch.Generator(device="cuda").manual_seed(0)
                q, k, v = (torch.randn(batch, heads, n, head_dim, device="cuda", dtype=dtype,
                                       generator=gen) for _ in range(3))
                # float32 reference; memory-efficient (O(N) memory, sm50+) first, math as fallback
                with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH], set_priority=True):
                    reference = F.scaled_dot_product_attention(
                        q.float(), k.float(), v.float(), is_causal=causal)
                for name, fn in table.items():
                    row = {"method": name, "batch": batch, "heads": heads, "seq_len": n,
                           "head_dim": head_dim, "causal": causal, "dtype": str(dtype).split(".")[-1]}
                    row.update(measure(fn, q, k, v, causal, reference))
                    rows.append(row)
                del q, k, v, reference
                torch.cuda.empty_cache()
                cells = " ".join(
                    f"{r['method']}={r['tflops']:.1f}" if r["status"] == "ok"
                    else f"{r['method']}=({r['status'][:24]})" for r in rows[-len(table):])
                log(f"d={head_dim} causal={causal!s:5} N={n:6}: TFLOP/s {cells}")
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N up to 4096 only, d=64 only")
    parser.add_argument("--out", default=str(ROOT / "outputs" / "benchmarks"))
    parser.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    args = parser.parse_args(argv)

    if not torch.cuda.is_available():
        print("bench_triton_flash: this benchmark needs a CUDA GPU and none is visible "
              f"(torch {torch.__version__}); nothing measured, nothing written. The kernel's "
              "correctness on CPU is tested by tests/test_triton_flash.py under TRITON_INTERPRET=1.")
        return 0

    dtype = getattr(torch, args.dtype)
    seq_lens = [512, 1024, 2048, 4096] + ([] if args.quick else [8192, 16384])
    head_dims = [64] if args.quick else [64, 128]
    machine = gpu_machine()
    print(f"{machine['gpu']} sm{machine['capability']} | torch {machine['torch']} | "
          f"triton {machine['triton']} | flash-attn {machine['flash_attn']} | {args.dtype}")
    rows = sweep(seq_lens, head_dims, dtype)
    ratios = []
    for r in rows:
        if r["method"] != "ours_triton" or r["status"] != "ok":
            continue
        for other in ("sdpa_flash", "sdpa_math", "flash_attn"):
            match = [o for o in rows if o["method"] == other and o["status"] == "ok"
                     and all(o[f] == r[f] for f in ("seq_len", "head_dim", "causal"))]
            if match:
                ratios.append({"seq_len": r["seq_len"], "head_dim": r["head_dim"],
                               "causal": r["causal"], "vs": other,
                               "ours_over_other_tflops": r["tflops"] / match[0]["tflops"]})
    print("\nours / other, forward TFLOP/s:")
    for x in ratios:
        print(f"  d={x['head_dim']} causal={x['causal']!s:5} N={x['seq_len']:6} "
              f"vs {x['vs']:10}: {x['ours_over_other_tflops']:.2f}x")
    slug = re.sub(r"[^a-z0-9]+", "_", machine["gpu"].lower()).strip("_")
    out = Path(args.out) / f"flash_triton_{slug}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine,
                               "config": {"dtype": args.dtype, "total_tokens": TOTAL_TOKENS,
                                          "heads_x_head_dim": WIDTH,
                                          "timer": "triton.testing.do_bench median"},
                               "results": rows, "ratios": ratios}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
