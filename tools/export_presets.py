"""Write the presets the book's static calculators read: models, KV dtypes and GPUs, as JSON.

The rendered book has no kernel, so its calculators (book/calculators/*.js) compute in the
browser from this file. It holds the presets' published fields and, for the KV calculator's
budget (vLLM's start-up budget, `inferbook.vllm_memory`: the one budget the planner, the
simulator and the log check read), the two terms of it that are not arithmetic on those fields:
what vLLM subtracts at start-up besides the weights (`vllm_runtime_memory` at `vllm serve`'s
default scheduler caps on that GPU) and what every TP rank holds whole
(`vllm_replicated_bytes`), per model, GPU and valid TP degree. The formulas live in the JS and
are checked against `inferbook.sizing`, `inferbook.vllm_memory` and `inferbook.roofline` by
tests/test_book.py, so the two cannot drift apart.

    .venv/bin/python tools/export_presets.py out.json       # JSON
    .venv/bin/python tools/export_presets.py out.js --js    # window.INFERBOOK_PRESETS = {...};

The book's Sphinx extension (book/_ext/inferbook_sphinx.py) calls `presets()` at every build.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import inferbook
from inferbook import sizing, vllm_memory
from inferbook.hardware import GPUS
from inferbook.models import MODELS


def _model(spec) -> dict:
    # layers grouped by window: [[window or None, how many layers], ...] in first-seen order
    windows = Counter(spec.layer_windows)
    moe_layers = spec.n_moe_layers
    return {
        "attention": spec.attention,
        "is_moe": spec.is_moe,
        # a token's share of the parameters (MoE: its top-k routed experts), for the roofline knob
        "n_active_params": spec.n_active_params,
        # routed-expert parameters: what an MXFP4 checkpoint stores at 4 bits (sizing.weight_bytes)
        "routed_expert_params": (moe_layers * spec.n_routed_experts * 3 * spec.hidden_size
                                 * spec.moe_intermediate_size),
        "checkpoint_dtype": spec.checkpoint_dtype,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_dim,
        "is_mla": spec.is_mla,
        "kv_lora_rank": spec.kv_lora_rank,
        "qk_rope_head_dim": spec.qk_rope_head_dim,
        "layer_windows": [[w, n] for w, n in windows.items()],
        "n_params": spec.n_params,
        "embedding_params": sizing.embedding_params(spec),
        "max_position_embeddings": spec.max_position_embeddings,
        "source": spec.source,
    }


MAX_TP_DEGREE = 8


def _vllm_terms() -> dict:
    """vLLM's start-up terms the calculator cannot derive from the presets' fields, per model
    (and GPU) and every TP degree up to `MAX_TP_DEGREE` the model's heads allow."""
    runtime, replicated = {}, {}
    for name, spec in MODELS.items():
        degrees = sizing.valid_tp_degrees(spec, MAX_TP_DEGREE)
        replicated[name] = {str(n): vllm_memory.vllm_replicated_bytes(spec, n) for n in degrees}
        runtime[name] = {}
        for gpu_name, gpu in GPUS.items():
            tokens, seqs = vllm_memory.vllm_default_caps(gpu)
            runtime[name][gpu_name] = {
                str(n): vllm_memory.vllm_runtime_memory(spec, n, max_num_batched_tokens=tokens,
                                                        max_num_seqs=seqs, gpu=gpu).total_bytes
                for n in degrees}
    return {"version": vllm_memory.VLLM_PINNED,
            "default_utilization": vllm_memory.DEFAULT_UTILIZATION,
            "runtime_bytes": runtime, "replicated_bytes": replicated}


def presets() -> dict:
    """Return the calculators' inputs: every model, KV dtype and GPU preset of `inferbook`."""
    return {
        "generated_by": f"inferbook {inferbook.__version__} (tools/export_presets.py)",
        "max_tp_degree": MAX_TP_DEGREE,
        "vllm": _vllm_terms(),
        "models": {name: _model(spec) for name, spec in MODELS.items()},
        "dtypes": {
            name: {"name": name, "bits": d.bits, "group_size": d.group_size,
                   "group_overhead_bytes": d.group_overhead_bytes, "note": d.note}
            for name, d in sizing.DTYPES.items()
        },
        "gpus": {
            # memory_bytes: the total CUDA reports (what every budget uses, as vLLM does);
            # marketing_bytes: the datasheet's GB, for display only
            name: {"memory_bytes": g.memory_bytes, "marketing_bytes": g.marketing_bytes,
                   "memory_source": g.cuda_total_source,
                   "hbm_bytes_per_s": g.hbm_bytes_per_s, "fp16_tensor_flops": g.fp16_tensor_flops}
            for name, g in GPUS.items()
        },
    }


def as_js(data: dict) -> str:
    """Return `data` as a script that sets `window.INFERBOOK_PRESETS` (works from file:// too)."""
    return "window.INFERBOOK_PRESETS = " + json.dumps(data, indent=1) + ";\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--js", action="store_true", help="write a script, not plain JSON")
    args = parser.parse_args(argv)
    data = presets()
    args.out.write_text(as_js(data) if args.js else json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.out}: {len(data['models'])} models, {len(data['dtypes'])} dtypes, "
          f"{len(data['gpus'])} GPUs")


if __name__ == "__main__":
    main()
