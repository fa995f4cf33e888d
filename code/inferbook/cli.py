"""`python -m inferbook.recommend`: plan a deployment from the command line."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from .models import ModelSpec
from .recommend import PRIORITIES, WORKLOAD_KINDS, Workload, recommend
from .render import render_markdown, update_skill_file


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m inferbook.recommend",
                                 description="Plan a vLLM/SGLang deployment (or say why not).")
    ap.add_argument("--model", help="a preset of inferbook.models, e.g. Llama-3.1-70B (with "
                    "--config: the repository the config belongs to)")
    ap.add_argument("--config", metavar="PATH", default=None,
                    help="a Hugging Face config.json (or its folder) to plan instead of a preset")
    ap.add_argument("--gpu", help="a preset of inferbook.hardware (H100, A100, T4, B200, ...), "
                    "or a count and a preset: 4xH100")
    ap.add_argument("--num-gpus", type=int, default=None)
    ap.add_argument("--base-model", action="store_true",
                    help="serve the base checkpoint instead of the chat (Instruct) one")
    ap.add_argument("--context", type=int, default=8192, help="longest request, tokens")
    ap.add_argument("--typical", type=int, default=None, help="typical request, tokens")
    ap.add_argument("--workload", choices=WORKLOAD_KINDS, default="chat")
    ap.add_argument("--concurrency", type=int, default=None)
    ap.add_argument("--shared-prefix", type=int, default=0)
    ap.add_argument("--output-tokens", type=int, default=None,
                    help="generated tokens per typical request (capacity planning)")
    ap.add_argument("--priority", choices=PRIORITIES, default=None)
    ap.add_argument("--tpot-ms", type=float, default=None, help="per-token latency target")
    ap.add_argument("--throughput", type=float, default=None, help="decode tokens/s target")
    ap.add_argument("--fp8-kv-checked", action="store_true")
    ap.add_argument("--draft-model", default=None)
    ap.add_argument("--acceptance-rate", type=float, default=None)
    ap.add_argument("--served-model", default=None)
    ap.add_argument("--request-rate", type=float, default=None,
                    help="requests/s (with --ttft-p90 and --tpot-p90: chapter 9's simulator)")
    ap.add_argument("--ttft-p90", type=float, default=None, help="seconds")
    ap.add_argument("--tpot-p90", type=float, default=None, help="seconds")
    ap.add_argument("--update-skill", nargs="?", const="outputs/skill-inference-optimizer.md",
                    default=None, metavar="PATH", help="regenerate the skill file's examples")
    return ap


# The names recommend() and Workload use in their errors, and the flags a user typed.
FLAGS = {
    "context_tokens": "--context", "typical_tokens": "--typical", "concurrency": "--concurrency",
    "shared_prefix_tokens": "--shared-prefix", "output_tokens": "--output-tokens",
    "priority": "--priority", "tpot_target_ms": "--tpot-ms",
    "throughput_target_tok_s": "--throughput", "acceptance_rate": "--acceptance-rate",
    "draft_model": "--draft-model", "served_model": "--served-model",
    "request_rate": "--request-rate", "ttft_p90_s": "--ttft-p90", "tpot_p90_s": "--tpot-p90",
    "GPU count": "--num-gpus / --gpu", "base_model": "--base-model", "unknown GPU preset": "unknown --gpu", "name: unknown": "unknown",
    "unknown model preset": "unknown --model", "workload kind": "--workload",
    "Workload(output_tokens=...)": "--output-tokens", "fp8_kv_quality_checked": "--fp8-kv-checked",
}


def flag_message(err: Exception) -> str:
    """Return an error message in the command line's words (the flags, not the field names)."""
    text = str(err)
    for name in sorted(FLAGS, key=len, reverse=True):
        text = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w])", FLAGS[name], text)
    return text


def _config_folder(path: str) -> Path:
    p = Path(path)
    return p if p.is_dir() else p.parent


def _config_spec(path: str, name: str | None) -> ModelSpec:
    """Return the spec of the config.json at `path`, or a ValueError naming the path."""
    p = Path(path)
    file = p / "config.json" if p.is_dir() else p
    if not file.is_file():
        raise ValueError(f"--config {path}: no such file (give a config.json or its folder)")
    try:
        config = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"--config {path}: not a readable JSON file ({err})") from err
    if not isinstance(config, dict):
        raise ValueError(f"--config {path}: a config.json holds a JSON object")
    return ModelSpec.from_hf_config(config, name=name or config.get("_name_or_path")
                                    or _config_folder(path).name)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit status (0 plan, 1 refusal, 2 invalid input)."""
    ap = _parser()
    args = ap.parse_args(argv)
    if args.update_skill:
        try:
            names = update_skill_file(args.update_skill)
        except OSError as err:
            print(f"error: --update-skill {args.update_skill}: cannot read or write the skill "
                  f"file ({err.strerror or err}); pass the path of "
                  "outputs/skill-inference-optimizer.md", file=sys.stderr)
            return 2
        except ValueError as err:
            print(f"error: --update-skill {args.update_skill}: {err}", file=sys.stderr)
            return 2
        print(f"updated {len(names)} examples in {args.update_skill}")
        return 0
    if not (args.model or args.config) or not args.gpu:
        ap.error("--model (or --config) and --gpu are required")
    try:
        model = args.model
        if args.config is not None:
            model = _config_spec(args.config, args.model)
        gpus = args.gpu if args.num_gpus is None else (args.gpu, args.num_gpus)
        if args.num_gpus is not None and re.match(r"\s*\d+\s*[x×*]", args.gpu):
            raise ValueError(f"--gpu {args.gpu!r} already gives a count; drop --num-gpus "
                             f"{args.num_gpus} or write --gpu {args.gpu.split('x')[-1]}")
        w = Workload(args.workload, context_tokens=args.context, typical_tokens=args.typical,
                     concurrency=args.concurrency, shared_prefix_tokens=args.shared_prefix,
                     output_tokens=args.output_tokens, priority=args.priority,
                     tpot_target_ms=args.tpot_ms, throughput_target_tok_s=args.throughput,
                     fp8_kv_quality_checked=args.fp8_kv_checked, draft_model=args.draft_model,
                     acceptance_rate=args.acceptance_rate)
        served = args.served_model
        if args.config is not None and served is None:
            served = args.model or str(_config_folder(args.config))
        result = recommend(model, gpus, w, served_model=served, request_rate=args.request_rate,
                           ttft_p90_s=args.ttft_p90, tpot_p90_s=args.tpot_p90,
                           base_model=args.base_model)
    except (ValueError, TypeError, NotImplementedError) as err:
        print(f"error: {flag_message(err)}", file=sys.stderr)
        return 2
    print(render_markdown(result))
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
