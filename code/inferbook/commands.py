"""The `vllm serve` and SGLang commands of a plan, and a checker against the pinned releases.

Flags come from `data/vllm_args.json` and `data/sglang_args.json`: the argument names of the
pinned releases (vLLM 0.33.0, SGLang 0.5.23), read from their PyPI wheels; `check_command`
rejects any flag or value that is not there, and the tests run it on every generated command.
"""

from __future__ import annotations

import json
import shlex
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"


def vllm_argv(p) -> tuple[str, ...]:
    """Return the `vllm serve` argv for a plan (every value explicit, as the plan sized it)."""
    a = ["vllm", "serve", p.served_model, "--tensor-parallel-size", str(p.tensor_parallel)]
    if p.pipeline_parallel > 1:
        a += ["--pipeline-parallel-size", str(p.pipeline_parallel)]
    if p.data_parallel > 1:
        a += ["--data-parallel-size", str(p.data_parallel)]
    a += ["--max-model-len", str(p.max_model_len),
          "--gpu-memory-utilization", f"{p.gpu_memory_utilization:.2f}",
          "--max-num-seqs", str(p.max_num_seqs),
          "--max-num-batched-tokens", str(p.max_num_batched_tokens),
          "--enable-chunked-prefill", "--performance-mode", p.performance_mode]
    if p.async_scheduling:
        a.append("--async-scheduling")
    if p.prefix_caching:
        a.append("--enable-prefix-caching")
    if p.compute_dtype == "fp16":
        a += ["--dtype", "half"]
    if p.quantization:
        a += ["--quantization", p.quantization]
    if p.kv_dtype == "fp8":
        a += ["--kv-cache-dtype", "fp8"]
    if p.hf_overrides:
        a += ["--hf-overrides", p.hf_overrides]
    s = p.speculation
    if s is not None:
        cfg = {"method": s.method}
        if s.method != "suffix":
            cfg["num_speculative_tokens"] = s.num_tokens
        if s.draft_model:
            cfg["model"] = s.draft_model
        if s.method == "ngram":
            cfg.update(prompt_lookup_min=2, prompt_lookup_max=4)
        if s.schedule:
            cfg["num_speculative_tokens_per_batch_size"] = [list(r) for r in s.schedule]
        a += ["--speculative-config", json.dumps(cfg, separators=(",", ":"))]
    return tuple(a)


def sglang_argv(p) -> tuple[str, ...]:
    """Return the `python -m sglang.launch_server` argv for a plan."""
    a = ["python", "-m", "sglang.launch_server", "--model-path", p.served_model,
         "--tp-size", str(p.tensor_parallel)]
    if p.pipeline_parallel > 1:
        a += ["--pp-size", str(p.pipeline_parallel)]
    if p.data_parallel > 1:
        a += ["--dp-size", str(p.data_parallel)]
    mem = p.sglang.value   # sglang_rules.SglangMemory: SGLang 0.5.23's own fraction
    a += ["--context-length", str(p.max_model_len),
          "--mem-fraction-static", f"{mem.mem_fraction_static:.3f}",
          "--max-running-requests", str(p.max_num_seqs),
          "--chunked-prefill-size", str(p.max_num_batched_tokens)]
    if p.compute_dtype == "fp16":
        a += ["--dtype", "half"]
    if p.quantization:
        a += ["--quantization", p.quantization]
    if p.kv_dtype == "fp8":
        a += ["--kv-cache-dtype", "fp8_e4m3"]
    if p.hf_overrides:
        overrides = json.loads(p.hf_overrides)
        rope = dict(overrides.pop("rope_parameters"))
        rope["type"] = rope.pop("rope_type")   # SGLang reads the config's rope_scaling
        overrides["rope_scaling"] = rope
        a += ["--json-model-override-args", json.dumps(overrides, separators=(",", ":"))]
    s = p.speculation
    if s is not None and s.method == "ngram":
        a += ["--speculative-algorithm", "NGRAM",
              "--speculative-num-draft-tokens", str(s.num_tokens + 1)]
    elif s is not None and s.method != "suffix":   # SGLang 0.5.23 has no suffix decoding
        algo = "EAGLE3" if s.method == "eagle3" else "EAGLE"   # DeepSeek MTP runs as EAGLE
        a += ["--speculative-algorithm", algo]
        if s.draft_model:
            a += ["--speculative-draft-model-path", s.draft_model]
        a += ["--speculative-num-steps", str(s.num_tokens), "--speculative-eagle-topk", "1",
              "--speculative-num-draft-tokens", str(s.num_tokens + 1)]
    return tuple(a)


def format_command(argv) -> str:
    """Return argv as a shell command, each flag with its value on its own line."""
    argv = list(argv)
    i = 0
    while i < len(argv) and not argv[i].startswith("--"):
        i += 1
    lines = [" ".join(shlex.quote(x) for x in argv[:i])]
    while i < len(argv):
        j = i + 1
        while j < len(argv) and not argv[j].startswith("--"):
            j += 1
        lines.append("    " + " ".join(shlex.quote(x) for x in argv[i:j]))
        i = j
    return " \\\n".join(lines)


@lru_cache(maxsize=None)
def engine_args(engine: str) -> dict:
    """Return the stored argument data of the pinned release of `engine` ("vllm" or "sglang")."""
    if engine not in ("vllm", "sglang"):
        raise ValueError(f"engine must be 'vllm' or 'sglang', got {engine!r}")
    return json.loads((DATA / f"{engine}_args.json").read_text())


@lru_cache(maxsize=None)
def _flag_index(engine: str) -> dict[str, dict]:
    return {name: f for f in engine_args(engine)["flags"] for name in f.get("names", [])}


def check_command(argv, engine: str) -> list[str]:
    """Return the problems with `argv` against the pinned release's arguments (empty: all real).

    Checks that every --flag exists, that flags taking a value get one, that values are among
    the recorded choices, and the values of --kv-cache-dtype, --quantization, --attention-backend,
    the speculative method (vLLM) and algorithm (SGLang) against the stored value sets.
    """
    index, values = _flag_index(engine), engine_args(engine).get("values", {})
    problems: list[str] = []
    argv = list(argv)
    i = 0
    while i < len(argv) and not argv[i].startswith("--"):
        i += 1
    while i < len(argv):
        flag = argv[i]
        if not flag.startswith("-"):
            problems.append(f"stray argument {flag!r}")
            i += 1
            continue
        name, _, inline = flag.partition("=")
        info = index.get(name)
        if info is None:
            problems.append(f"unknown flag {name}")
            i += 1
            continue
        if info.get("deprecated"):
            problems.append(f"deprecated flag {name}")
        value = inline or None
        if info["kind"] == "value" and value is None:
            if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                problems.append(f"{name} needs a value")
            else:
                value = argv[i + 1]
                i += 1
        i += 1
        if value is None:
            continue
        if "choices" in info and value not in info["choices"]:
            problems.append(f"{name} {value!r} is not one of the recorded choices")
        allowed = values.get(name, {}).get("values")
        if allowed is not None and value not in allowed:
            problems.append(f"{name} {value!r} is not a value of the pinned release")
        kind = (values.get(name) or {}).get("type") or NUMERIC.get(engine, {}).get(name)
        if kind == "int" and not value.lstrip("-").isdigit():
            problems.append(f"{name} {value!r} is not an integer")
        elif kind == "float":
            try:
                float(value)
            except ValueError:
                problems.append(f"{name} {value!r} is not a number")
        if engine == "vllm" and name == "--speculative-config":
            cfg = json.loads(value)
            keys = set(values["--speculative-config:keys"]["values"])
            problems += [f"speculative_config key {k!r} unknown" for k in cfg if k not in keys]
            if cfg.get("method") not in values["--speculative-config:method"]["values"]:
                problems.append(f"speculative method {cfg.get('method')!r} unknown")
    return problems + _config_problems(argv, engine)


# Value types of the numeric flags the book emits (EngineArgs / ServerArgs field annotations).
NUMERIC = {
    "vllm": {"--tensor-parallel-size": "int", "--pipeline-parallel-size": "int",
             "--data-parallel-size": "int", "--max-model-len": "int", "--max-num-seqs": "int",
             "--max-num-batched-tokens": "int", "--gpu-memory-utilization": "float",
             "--kv-offloading-size": "float"},
    "sglang": {"--tp-size": "int", "--pp-size": "int", "--dp-size": "int", "--ep-size": "int",
               "--attn-dp-size": "int", "--context-length": "int", "--max-running-requests": "int",
               "--chunked-prefill-size": "int", "--mem-fraction-static": "float",
               "--hicache-size": "int", "--speculative-num-steps": "int",
               "--speculative-eagle-topk": "int", "--speculative-num-draft-tokens": "int"},
}


def _values(argv) -> dict[str, str]:
    out, argv = {}, list(argv)
    for i, a in enumerate(argv):
        if a.startswith("--") and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[a] = argv[i + 1]
    return out


def _config_problems(argv, engine: str) -> list[str]:
    """Return what the engine's config validation would refuse at start-up (the rules and
    their source lines: vLLM 0.33.0 config/scheduler.py, config/cache.py, config/vllm.py)."""
    v, flags, out = _values(argv), set(argv), []
    num = {k: float(x) for k, x in v.items() if k in NUMERIC.get(engine, {})
           and x.replace(".", "", 1).lstrip("-").isdigit()}
    if engine == "vllm":
        if num.get("--max-num-seqs", 0) > num.get("--max-num-batched-tokens", float("inf")):
            out.append("max_num_batched_tokens must be >= max_num_seqs "
                       "(SchedulerConfig.verify_max_model_len)")
        if ("--disable-chunked-prefill" in flags and num.get("--max-num-batched-tokens", 1e18)
                < num.get("--max-model-len", 0)):
            out.append("without chunked prefill max_num_batched_tokens must be >= max_model_len")
        util = num.get("--gpu-memory-utilization")
        if util is not None and not 0 < util <= 1:
            out.append("gpu_memory_utilization must be in (0, 1] (CacheConfig)")
        for k in ("--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size",
                  "--max-num-seqs", "--max-num-batched-tokens"):
            if k in num and num[k] < 1:
                out.append(f"{k} must be >= 1")
        if "--async-scheduling" in flags and "--speculative-config" in v:
            if json.loads(v["--speculative-config"]).get("method") in ("suffix", "custom_class"):
                out.append("async scheduling is refused with suffix drafting (V1 runner)")
        if "--enable-expert-parallel" in flags and num.get("--data-parallel-size", 1) * num.get(
                "--tensor-parallel-size", 1) < 2:
            out.append("expert parallelism needs more than one GPU")
    else:
        frac = num.get("--mem-fraction-static")
        if frac is not None and not 0 < frac < 1:
            out.append("mem_fraction_static must be in (0, 1)")
        tp = num.get("--tp-size", 1)
        for k in ("--attn-dp-size", "--ep-size"):
            if k in num and tp % num[k]:
                out.append(f"{k} must divide --tp-size")
    return out
