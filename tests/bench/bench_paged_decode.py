"""Benchmark: the paged decode kernel against SDPA (and flash-attn's paged decode) on one GPU.

    .venv/bin/python tests/bench/bench_paged_decode.py [--quick] [--out outputs/benchmarks]

A decode step of Llama-3.1-8B's attention shape (32 query heads on 8 KV heads, head_dim 128,
fp16) for batch x context in a small grid, the cache in pages of 16 tokens behind shuffled
block tables. Methods, measured side by side in one run (triton.testing.do_bench, median):
  ours_paged      - inferbook.triton_paged_decode.paged_decode (split-KV, the default splits)
  torch_paged     - inferbook.paged.paged_decode_attention (gather the pages, then attention)
  sdpa_contiguous - F.scaled_dot_product_attention on a contiguous cache (no pages at all:
                    the bar a paged kernel is held to), GQA by enable_gqa
  flash_attn_paged - flash_attn.flash_attn_with_kvcache with its block table (pages of 256,
                    the size it needs), if flash-attn imports
Each output is checked against sdpa_contiguous first. Decode is memory-bound, so each row
records the bandwidth reached: bytes of K and V read / time. Writes
outputs/benchmarks/paged_decode_<gpu>.json (the GPU, versions, date). Without a CUDA GPU it
prints why and exits with status 0, writing nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
HEADS, KV_HEADS, HEAD_DIM, PAGE = 32, 8, 128, 16


def _bench_triton_flash():
    spec = importlib.util.spec_from_file_location("bench_triton_flash",
                                                  ROOT / "tests/bench/bench_triton_flash.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_case(batch, context, page=PAGE, seed=0):
    """Return (q, k_pool, v_pool, tables [batch, pages] int32, k, v contiguous) on the GPU."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    pages = -(-context // page)
    k = torch.randn(batch, KV_HEADS, context, HEAD_DIM, device="cuda", dtype=torch.float16,
                    generator=gen)
    v = torch.randn_like(k)
    tables = torch.randperm(batch * pages, device="cuda", generator=gen).view(batch, pages)
    tables = tables.to(torch.int32)
    shape = (batch * pages, page, KV_HEADS, HEAD_DIM)
    k_pool, v_pool = _repage(k, tables, page, shape), _repage(v, tables, page, shape)
    q = torch.randn(batch, HEADS, 1, HEAD_DIM, device="cuda", dtype=torch.float16,
                    generator=gen)
    return q, k_pool, v_pool, tables, k, v


def methods():
    from inferbook import paged
    from inferbook.triton_paged_decode import paged_decode

    def ours(case, lens):
        q, k_pool, v_pool, tables, _, _ = case
        return lambda: paged_decode(q, k_pool, v_pool, tables, lens)[0]

    def torch_paged(case, lens):
        q, k_pool, v_pool, tables, _, _ = case
        rows = tables.tolist()
        return lambda: paged.paged_decode_attention(q[:, :, 0], k_pool, v_pool, rows,
                                                    lens).unsqueeze(2)

    def sdpa(case, lens):
        q, _, _, _, k, v = case
        return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v,
                                                                        enable_gqa=True)

    out = {"ours_paged": ours, "torch_paged": torch_paged, "sdpa_contiguous": sdpa}
    try:
        from flash_attn import flash_attn_with_kvcache
    except ImportError:
        return out

    def flash_paged(case, lens):
        q, _, _, _, k, v = case
        batch, context = q.shape[0], k.shape[2]
        pages = -(-context // 256)                           # flash-attn pages: multiples of 256
        tables = torch.randperm(batch * pages, device="cuda").view(batch, pages).to(torch.int32)
        shape = (batch * pages, 256, KV_HEADS, HEAD_DIM)
        k_pool, v_pool = _repage(k, tables, 256, shape), _repage(v, tables, 256, shape)
        seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
        q_fa = q.transpose(1, 2)                             # [batch, 1, heads, d]
        return lambda: flash_attn_with_kvcache(q_fa, k_pool, v_pool, cache_seqlens=seqlens,
                                               block_table=tables).transpose(1, 2)

    out["flash_attn_paged"] = flash_paged
    return out


def _repage(src, tables, page, shape):
    """Return a pool of `shape` holding src [batch, kv_heads, context, d] behind `tables`."""
    batch, _, context, _ = src.shape
    pages = tables.shape[1]
    padded = torch.nn.functional.pad(src, (0, 0, 0, pages * page - context))
    paged = padded.view(batch, KV_HEADS, pages, page, HEAD_DIM).permute(0, 2, 3, 1, 4)
    pool = torch.zeros(shape, dtype=src.dtype, device=src.device)
    pool[tables.long().view(-1)] = paged.reshape(-1, page, KV_HEADS, HEAD_DIM)
    return pool


def sweep(batches, contexts):
    import triton

    rows = []
    for batch in batches:
        for context in contexts:
            case = make_case(batch, context)
            lens = [context] * batch
            want = torch.nn.functional.scaled_dot_product_attention(
                case[0].float(), case[4].float(), case[5].float(), enable_gqa=True)
            kv_bytes = 2 * batch * KV_HEADS * context * HEAD_DIM * 2
            for name, build in methods().items():
                row = dict(method=name, batch=batch, context=context)
                try:
                    fn = build(case, lens)
                    err = (fn().float() - want).abs().max().item()
                    ms = triton.testing.do_bench(fn)
                    row.update(status="ok", max_abs_err=err, ms=ms,
                               gb_per_s=kv_bytes / (ms * 1e-3) / 1e9)
                except Exception as e:  # a method this GPU or build cannot run
                    row.update(status=f"failed: {type(e).__name__}: {str(e)[:200]}")
                rows.append(row)
                print(f"b={batch:<3} N={context:<6} {name:<17} {row.get('ms', float('nan')):8.3f} ms "
                      f"{row.get('gb_per_s', float('nan')):8.0f} GB/s  {row['status'][:60]}")
            del case
            torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two batches, two contexts")
    parser.add_argument("--out", default=str(ROOT / "outputs" / "benchmarks"))
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_paged_decode: this benchmark needs a CUDA GPU and none is visible "
              f"(torch {torch.__version__}); nothing measured, nothing written. The kernel's "
              "correctness on CPU is tested by tests/test_triton_paged_decode.py under "
              "TRITON_INTERPRET=1.")
        return 0
    machine = _bench_triton_flash().gpu_machine()
    batches, contexts = ([1, 16], [2048, 16384]) if args.quick else ([1, 8, 32], [1024, 8192, 32768])
    rows = sweep(batches, contexts)
    ratios = []
    for r in rows:
        if r["method"] != "ours_paged" or r["status"] != "ok":
            continue
        for other in ("sdpa_contiguous", "torch_paged", "flash_attn_paged"):
            match = [o for o in rows if o["method"] == other and o["status"] == "ok"
                     and (o["batch"], o["context"]) == (r["batch"], r["context"])]
            if match:
                ratios.append(dict(batch=r["batch"], context=r["context"], vs=other,
                                   ours_over_other_bandwidth=r["gb_per_s"] / match[0]["gb_per_s"]))
    print("\nours / other, bandwidth (GB/s of K and V read):")
    for x in ratios:
        print(f"  b={x['batch']:<3} N={x['context']:<6} vs {x['vs']:16}: "
              f"{x['ours_over_other_bandwidth']:.2f}x")
    slug = re.sub(r"[^a-z0-9]+", "_", machine["gpu"].lower()).strip("_")
    out = Path(args.out) / f"paged_decode_{slug}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine, "config": dict(
        heads=HEADS, kv_heads=KV_HEADS, head_dim=HEAD_DIM, page=PAGE, dtype="float16",
        timer="triton.testing.do_bench median"), "results": rows, "ratios": ratios}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
