"""Drive vLLM's own V1 `Scheduler` on a trace, without a model, and print every step as JSON.

Run under the vLLM CPU environment (never imported by the package), as `tests/vllm_ref.py`
runs it:

    .venv-vllm/bin/python tools/vllm_ref/drive_scheduler.py IN.json OUT.json

IN.json holds {"traces": [trace, ...]}, each trace

    {"config": {"num_blocks": 24, "block_size": 16, "max_num_seqs": 4,
                "max_num_batched_tokens": 64, "enable_chunked_prefill": true,
                "enable_prefix_caching": true, "scheduler_reserve_full_isl": true,
                "max_model_len": 2048},
     "requests": [{"request_id": 0, "prompt": [...], "outputs": [...], "arrival": 0}, ...]}

`outputs` are the tokens the fake model "samples" for that request, in order (their number is
the request's `max_tokens`), so the trace is deterministic and the book's step loop can be fed
the same tokens. `num_blocks` is the book's pool: vLLM gets one block more, because its block 0
is the null block (`vllm/v1/core/block_pool.py`, BlockPool.__init__: `self.null_block =
self.free_block_queue.popleft()`).

The loop is the one an engine core runs, with the clock counted in steps as the book's
`steploop.run` counts them with `clock="steps"`: at step t, requests with arrival ≤ t are added;
`schedule()`; if nothing was scheduled the step is idle (t + 1); otherwise a fake
`ModelRunnerOutput` gives each row that reached the end of its tokens its next output token
(a prefill chunk short of the end samples nothing) and `update_from_output` applies it.

OUT.json: {"vllm": version, "traces": [{"steps": [{"t": t, "rows": [[id, start, n], ...],
"preempted": [ids]}, ...]}, ...]} with rows in vLLM's scheduling order (running, then new and
resumed), start = the request's computed tokens before the step.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shim

shim.require_vllm()

MAX_STEPS = 100_000


def build_scheduler(cfg: dict, model_dir: str):
    """Return vLLM's V1 Scheduler on a hand-built config (as vLLM's tests/v1/core build one)."""
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
    )
    from vllm.v1.structured_output import StructuredOutputManager

    block_size = cfg["block_size"]
    num_blocks = cfg["num_blocks"] + 1  # + vLLM's null block 0
    max_model_len = cfg.get("max_model_len", 2048)
    scheduler_config = SchedulerConfig(
        max_num_seqs=cfg["max_num_seqs"],
        max_num_batched_tokens=cfg["max_num_batched_tokens"],
        max_model_len=max_model_len,
        enable_chunked_prefill=cfg["enable_chunked_prefill"],
        scheduler_reserve_full_isl=cfg.get("scheduler_reserve_full_isl", True),
        async_scheduling=False,
        is_encoder_decoder=False,
    )
    model_config = ModelConfig(model=model_dir, skip_tokenizer_init=True, dtype="float32",
                               max_model_len=max_model_len, seed=0)
    cache_config = CacheConfig(block_size=block_size, cache_dtype="auto",
                               enable_prefix_caching=cfg["enable_prefix_caching"])
    cache_config.num_gpu_blocks = num_blocks
    vllm_config = VllmConfig(scheduler_config=scheduler_config, model_config=model_config,
                             cache_config=cache_config)
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks, kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], FullAttentionSpec(
            block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32))])
    return Scheduler(vllm_config=vllm_config, kv_cache_config=kv_cache_config,
                     structured_output_manager=StructuredOutputManager(vllm_config),
                     block_size=block_size, log_stats=False)


def make_requests(specs: list[dict], block_size: int) -> list:
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    init_none_hash(sha256)
    hasher = get_request_block_hasher(block_size, sha256)
    out = []
    for s in specs:
        params = SamplingParams(max_tokens=len(s["outputs"]), ignore_eos=True, temperature=0.0)
        out.append(Request(request_id=str(s["request_id"]), prompt_token_ids=list(s["prompt"]),
                           sampling_params=params, pooling_params=None, arrival_time=float(s["arrival"]),
                           block_hasher=hasher))
    return out


def drive(trace: dict, model_dir: str) -> list[dict]:
    """Return the steps vLLM's scheduler takes on one trace."""
    from vllm.v1.outputs import ModelRunnerOutput

    cfg = trace["config"]
    sched = build_scheduler(cfg, model_dir)
    specs = {str(s["request_id"]): s for s in trace["requests"]}
    pending = sorted(make_requests(trace["requests"], cfg["block_size"]),
                     key=lambda r: r.arrival_time)
    steps, t = [], 0
    while pending or sched.has_unfinished_requests():
        if t > MAX_STEPS:
            raise RuntimeError(f"vLLM's scheduler did not finish the trace in {MAX_STEPS} steps")
        while pending and pending[0].arrival_time <= t:
            sched.add_request(pending.pop(0))
        out = sched.schedule()
        rows, sampled, ids = [], [], []
        for rid, n in out.num_scheduled_tokens.items():
            req = sched.requests[rid]
            start = req.num_computed_tokens - n  # schedule() already advanced it
            rows.append([int(rid), start, n])
            ids.append(rid)
            done = req.num_computed_tokens >= req.num_tokens
            sampled.append([specs[rid]["outputs"][len(req.output_token_ids)]] if done else [])
        if rows:
            steps.append({"t": t, "rows": rows,
                          "preempted": [int(r) for r in sorted(out.preempted_req_ids or (), key=int)]})
        # as EngineCore.step does, every schedule() is followed by update_from_output()
        sched.update_from_output(out, ModelRunnerOutput(
            req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled))
        t += 1
    return steps


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: drive_scheduler.py IN.json OUT.json")
    with open(sys.argv[1]) as f:
        payload = json.load(f)
    from transformers import GPT2Config

    answers = []
    with tempfile.TemporaryDirectory() as model_dir:
        # a model config only (no weights): ModelConfig reads config.json; nothing is downloaded
        GPT2Config(n_positions=4096, n_layer=1, n_head=1, n_embd=8).save_pretrained(model_dir)
        for trace in payload["traces"]:
            answers.append({"steps": drive(trace, model_dir)})
    with open(sys.argv[2], "w") as f:
        json.dump({"vllm": shim.vllm_version(), "traces": answers}, f)


if __name__ == "__main__":
    main()
