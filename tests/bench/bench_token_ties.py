"""Benchmark: where the book's engine and vLLM's CPU engine part on GPT-2 small, and why.

On GPT-2 small (124 M parameters, random weights, fp32) the two engines' greedy tokens are not
all identical (`vllm_engine_throughput.json`, "gpt2_small": `identical_tokens` false), while on
the small models of `bench_vllm_engine.py` they are. A wrong mask, position or cache would part
them at a position where one token clearly wins; different float32 kernels (vLLM's oneDNN GEMMs
and CPU attention against PyTorch's) can part them only where two logits nearly tie. So for each
request whose tokens differ, at the first differing position, this script recomputes the logits
of the shared prefix in float64 (transformers, the same weights) and records the top-2 margin
and which engine picked the float64 argmax.

    .venv/bin/python tests/bench/bench_token_ties.py [--std 0.2 0.02]

Same model, workload and engine limits as `bench_vllm_engine.py --gpt2-small` (its functions);
weights N(0, std) for each `--std`. Writes outputs/benchmarks/vllm_gpt2_small_ties.json;
tests/test_vllm_engine.py checks that every difference recorded there is a near tie.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_vllm_engine as bench  # noqa: E402
from bench_util import write_result  # noqa: E402

OUT = bench.OUT / "vllm_gpt2_small_ties.json"


def first_differences(std: float) -> dict:
    """Run both engines on GPT-2 small with N(0, std) weights; return each differing request's
    first differing position with the float64 top-2 margin there."""
    bench.INIT_STD = std          # hf_model reads it
    torch.set_num_threads(1)
    shape, spec = bench.GPT2_SMALL_SHAPE, bench.GPT2_SMALL
    hf = bench.hf_model("gpt2", shape)
    prompts = bench.workload(vocab=shape["vocab_size"], **spec)
    n = spec["new_tokens"]
    start = time.process_time()
    book = bench.book_tokens(bench.book_model(hf), prompts, n, spec["max_num_seqs"],
                             spec["max_num_batched_tokens"])
    with tempfile.TemporaryDirectory() as tmp:
        hf.save_pretrained(tmp)
        rounds = bench.VllmRounds(tmp, prompts, spec)
        vllm = rounds.tokens
        rounds.close()
    f64 = hf.double()
    rows = []
    for i, (p, a, b) in enumerate(zip(prompts, book, vllm)):
        if a == b:
            continue
        k = next(j for j in range(n) if a[j] != b[j])
        with torch.inference_mode():
            logits = f64(torch.tensor([p + a[:k]])).logits[0, -1]
        top = torch.topk(logits, 2)
        best = int(top.indices[0])
        rows.append({"request": i, "position": k, "book_token": a[k], "vllm_token": b[k],
                     "float64_top2": top.indices.tolist(),
                     "float64_margin": float(top.values[0] - top.values[1]),
                     "float64_max_abs_logit": float(logits.abs().max()),
                     "float64_argmax_is": ("book" if best == a[k] else
                                           "vllm" if best == b[k] else "neither")})
    return {"init_std": std, "requests": len(prompts), "new_tokens": n,
            "identical_requests": len(prompts) - len(rows), "differences": rows,
            "cpu_seconds": time.process_time() - start}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--std", type=float, nargs="+", default=[0.2, 0.02])
    args = ap.parse_args()
    runs = [first_differences(s) for s in args.std]
    result = {
        "benchmark": "vllm_gpt2_small_ties",
        "question": "where the book's engine and vLLM's CPU engine part on GPT-2 small, and "
                    "whether each parting is a float64 near tie",
        "model": f"GPT-2 shape {bench.GPT2_SMALL_SHAPE}, random weights, fp32",
        "workload": bench.GPT2_SMALL,
        "engine_limits": {"block_size": bench.BLOCK_SIZE, "chunked_prefill": True,
                          "prefix_caching": True},
        "runs": runs,
    }
    path = write_result(OUT, result)
    for r in runs:
        print(f"N(0, {r['init_std']}): {r['identical_requests']} of {r['requests']} requests "
              f"identical; first-difference float64 margins "
              f"{[round(d['float64_margin'], 5) for d in r['differences']]}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
