"""The book's scheduler on a trace written in vLLM's terms (torch-free).

A *trace* is what `tools/vllm_ref/drive_scheduler.py` feeds vLLM's own V1 scheduler:

    {"config": {"num_blocks": 4, "block_size": 4, "max_num_seqs": 4,
                "max_num_batched_tokens": 8, "enable_chunked_prefill": True,
                "enable_prefix_caching": False, "scheduler_reserve_full_isl": True, ...},
     "requests": [{"request_id": 0, "prompt": [...], "outputs": [...], "arrival": 0}, ...]}

(vLLM's option names; `num_blocks` is the book's pool, vLLM gets one block more for its null
block.) `schedule_trace(trace)` serves it with `steploop.run`: a `steploop.Scheduler` on block
books (with a `prefix_cache.PrefixCache` when prefix caching is on) and a
`steploop.ScriptedExecutor` that "generates" each request's `outputs`, with steps as the clock,
and returns every step as the driver prints vLLM's: ``{"t": step, "rows": [[request id, start,
tokens], ...], "preempted": [ids]}``, rows in scheduling order, start = tokens already cached.
`tests/test_vllm_scheduler.py` compares the two step by step; chapters 5 and 6 show the
committed examples (outputs/benchmarks/vllm_scheduler.json).
"""

from __future__ import annotations

from . import validate
from .blocks import BlockAllocator, BlockManager
from .prefix_cache import PrefixCache
from .steploop import Request, Scheduler, ScriptedExecutor, run

CONFIG_KEYS = ("num_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens",
               "enable_chunked_prefill", "enable_prefix_caching", "scheduler_reserve_full_isl")
REQUEST_KEYS = ("request_id", "prompt", "outputs", "arrival")


def schedule_trace(trace: dict) -> list[dict]:
    """Return the steps the book's scheduler takes on `trace` (see the module docstring)."""
    cfg, specs = _check(trace)
    books = BlockManager(BlockAllocator(cfg["num_blocks"], cfg["block_size"]))
    prefix = PrefixCache(books.allocator) if cfg["enable_prefix_caching"] else None
    sched = Scheduler(books, cfg["max_num_seqs"], cfg["max_num_batched_tokens"],
                      chunked_prefill=cfg["enable_chunked_prefill"], prefix_cache=prefix,
                      reserve_full_prompt=cfg["scheduler_reserve_full_isl"])
    requests = [Request(r["request_id"], tuple(r["prompt"]), len(r["outputs"]), r["arrival"])
                for r in specs]
    executor = ScriptedExecutor({r["request_id"]: r["outputs"] for r in specs})
    run(sched, requests, executor)
    return [{"t": int(e["t"]), "rows": [list(row) for row in e["rows"]],
             "preempted": sorted(e["preempted"])} for e in executor.log]


def _check(trace) -> tuple[dict, list[dict]]:
    """Return (config, requests) of `trace`; raise a ValueError naming what is missing."""
    if not isinstance(trace, dict) or not isinstance(trace.get("config"), dict):
        raise validate.ArgumentTypeError("trace must be a dict with a 'config' dict and a 'requests' list, "
                                         f"got {type(trace).__name__}")
    cfg = trace["config"]
    missing = [k for k in CONFIG_KEYS if k not in cfg]
    if missing:
        raise ValueError(f"trace config lacks {', '.join(missing)} (needs {', '.join(CONFIG_KEYS)})")
    specs = validate.items("trace requests", trace.get("requests"))
    for i, r in enumerate(specs):
        if not isinstance(r, dict) or any(k not in r for k in REQUEST_KEYS):
            raise ValueError(f"trace requests[{i}] must be a dict with keys {', '.join(REQUEST_KEYS)}, "
                             f"got {r!r}")
        if not r["outputs"]:
            raise ValueError(f"trace requests[{i}]: outputs must hold at least one token")
    return cfg, specs
