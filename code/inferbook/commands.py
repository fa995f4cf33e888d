"""The `vllm serve` and SGLang commands of a plan (one per kind of node), and a checker that
reads a command the way the pinned engines' parsers do and refuses what they refuse.

Flags come from `data/vllm_args.json` and `data/sglang_args.json`: the argument names of the
pinned releases (vLLM 0.33.0, SGLang 0.5.23), read from their PyPI wheels. `check_command`
accepts every spelling their parsers accept (`--flag value`, `--flag=value`, short aliases such
as `-tp`, `--no-…`/`--disable-…` booleans, vLLM's `--snake_case` and `32k` lengths) and returns
the problems the engine would raise at parse time or in its config validation.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
GPUS_PER_NODE = 8
HEAD_IP = "$HEAD_IP"          # the first node's address, a shell variable the user sets
SGLANG_DIST_PORT = 5000


@dataclass(frozen=True)
class NodeCommand:
    """The command `count` nodes run (`where` says which)."""

    where: str
    count: int
    argv: tuple[str, ...]


# ---------------------------------------------------------------------------------------------
# building commands


def _engine_shape(p) -> tuple[int, int]:
    """Return (GPUs per engine instance, engines) of a plan."""
    if p.expert_parallel > 1:
        return p.expert_parallel, p.data_parallel // p.expert_parallel
    per = p.tensor_parallel * p.pipeline_parallel
    return per, p.data_parallel


def vllm_argv(p, replicas: int | None = None) -> tuple[str, ...]:
    """Return the `vllm serve` argv of one engine instance of a plan, with `replicas`
    data-parallel replicas in it (default: the plan's), every value explicit."""
    a = ["vllm", "serve", p.served_model]
    if p.served_model_name:
        a += ["--served-model-name", p.served_model_name]
    if p.expert_parallel > 1:
        a += ["--tensor-parallel-size", "1", "--data-parallel-size", str(p.expert_parallel),
              "--enable-expert-parallel"]
    else:
        a += ["--tensor-parallel-size", str(p.tensor_parallel)]
        if p.pipeline_parallel > 1:
            a += ["--pipeline-parallel-size", str(p.pipeline_parallel)]
        dp = p.data_parallel if replicas is None else replicas
        if dp > 1:
            a += ["--data-parallel-size", str(dp)]
    a += ["--max-model-len", str(p.max_model_len),
          "--gpu-memory-utilization", f"{p.gpu_memory_utilization:.2f}",
          "--max-num-seqs", str(p.max_num_seqs),
          "--max-num-batched-tokens", str(p.max_num_batched_tokens),
          "--enable-chunked-prefill", "--performance-mode", p.performance_mode,
          "--generation-config", "auto"]
    if p.async_scheduling:
        a.append("--async-scheduling")
    if p.prefix_caching:
        a.append("--enable-prefix-caching")
    if p.compute_dtype == "fp16":
        a += ["--dtype", "half"]
    if p.quantization and p.quantization != "awq":   # AWQ: read from the checkpoint (Marlin)
        a += ["--quantization", p.quantization]
    if p.kv_dtype == "fp8":
        a += ["--kv-cache-dtype", "fp8"]
    if p.hf_overrides:
        a += ["--hf-overrides", p.hf_overrides]
    if p.parsers is not None and p.parsers.vllm_tool:
        a += ["--enable-auto-tool-choice", "--tool-call-parser", p.parsers.vllm_tool]
    if p.parsers is not None and p.parsers.vllm_reasoning:
        a += ["--reasoning-parser", p.parsers.vllm_reasoning]
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


def sglang_argv(p, replicas: int | None = None) -> tuple[str, ...]:
    """Return the `python -m sglang.launch_server` argv of one engine instance of a plan."""
    a = ["python", "-m", "sglang.launch_server", "--model-path", p.served_model]
    if p.served_model_name:
        a += ["--served-model-name", p.served_model_name]
    if p.expert_parallel > 1:
        e = str(p.expert_parallel)
        a += ["--tp-size", e, "--attn-dp-size", e, "--ep-size", e]
    else:
        a += ["--tp-size", str(p.tensor_parallel)]
        if p.pipeline_parallel > 1:
            a += ["--pp-size", str(p.pipeline_parallel)]
        dp = p.data_parallel if replicas is None else replicas
        if dp > 1:
            a += ["--dp-size", str(dp)]
    mem = p.sglang.value   # sglang_rules.SglangMemory: SGLang 0.5.23's own fraction
    running = p.sglang.extra.get("max_running_requests", p.max_num_seqs)
    a += ["--context-length", str(p.max_model_len),
          "--mem-fraction-static", f"{mem.mem_fraction_static:.3f}",
          "--max-running-requests", str(running),
          "--chunked-prefill-size", str(p.max_num_batched_tokens)]
    if p.compute_dtype == "fp16":
        a += ["--dtype", "half"]
    if p.quantization == "fp8_per_tensor":   # SGLang's fp8 still quantizes online
        a += ["--quantization", "fp8"]
    if p.kv_dtype == "fp8":
        a += ["--kv-cache-dtype", "fp8_e4m3"]
    if p.hf_overrides:
        a += ["--json-model-override-args", sglang_overrides(p.hf_overrides, p.max_model_len)]
    if p.parsers is not None and p.parsers.sglang_tool:
        a += ["--tool-call-parser", p.parsers.sglang_tool]
    if p.parsers is not None and p.parsers.sglang_reasoning:
        a += ["--reasoning-parser", p.parsers.sglang_reasoning]
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


def sglang_overrides(hf_overrides: str, context_length: int) -> str:
    """Return SGLang's --json-model-override-args for vLLM's rope --hf-overrides.

    SGLang 0.5.23 derives the context length as factor x max_position_embeddings, except that
    it drops the factor when the scaling carries original_max_position_embeddings
    (srt/utils/hf_transformers/common.py:680-693), and refuses a longer --context-length
    (srt/configs/model_config.py:1294-1316). So the override also sets max_position_embeddings
    to the scaled length; transformers 5.19 (SGLang's pin) spells the scaling rope_parameters.
    """
    overrides = json.loads(hf_overrides)
    overrides["max_position_embeddings"] = context_length
    return json.dumps(overrides, separators=(",", ":"))


def node_commands(p, engine: str) -> tuple[NodeCommand, ...]:
    """Return one command per kind of node: a single node runs one server (its DP replicas
    inside); engines that fit a node run one server per node behind a router; an engine wider
    than a node spans nodes with vLLM `--nnodes/--node-rank/--master-addr` (workers
    `--headless`) or SGLang `--nnodes/--node-rank/--dist-init-addr`."""
    build = vllm_argv if engine == "vllm" else sglang_argv
    per_node = min(p.num_gpus, GPUS_PER_NODE)
    size, engines = _engine_shape(p)
    used = size * engines
    if used <= per_node:
        return (NodeCommand("the node", 1, build(p)),)
    if size <= per_node:
        per = per_node // size
        full, rest = divmod(engines, per)
        out = [NodeCommand(f"each of {full} node(s), behind a router", full,
                           build(p, replicas=per))]
        if rest:
            out.append(NodeCommand("the last node, behind the same router", 1,
                                   build(p, replicas=rest)))
        return tuple(out)
    span = size // per_node
    out = []
    for rank in range(span):
        if engine == "vllm":
            extra = ["--nnodes", str(span), "--node-rank", str(rank), "--master-addr", HEAD_IP]
            extra += ["--headless"] if rank else []
        else:
            extra = ["--nnodes", str(span), "--node-rank", str(rank),
                     "--dist-init-addr", f"{HEAD_IP}:{SGLANG_DIST_PORT}"]
        where = (f"node {rank} of each of the {engines} engine(s)" if engines > 1 else
                 f"node {rank} of {span}")
        where += " (the head: $HEAD_IP is its address)" if rank == 0 else ""
        out.append(NodeCommand(where, engines, build(p) + tuple(extra)))
    return tuple(out)


def format_command(argv) -> str:
    """Return argv as a shell command, each flag with its value on its own line ($HEAD_IP is
    left for the shell to expand)."""
    argv = list(argv)

    def quote(x: str) -> str:
        return x if re.fullmatch(r"\$[A-Z_]+(:\d+)?", x) else shlex.quote(x)

    i = 0
    while i < len(argv) and not argv[i].startswith("--"):
        i += 1
    lines = [" ".join(quote(x) for x in argv[:i])]
    while i < len(argv):
        j = i + 1
        while j < len(argv) and not argv[j].startswith("--"):
            j += 1
        lines.append("    " + " ".join(quote(x) for x in argv[i:j]))
        i = j
    return " \\\n".join(lines)


# ---------------------------------------------------------------------------------------------
# reading commands as the engines do


@lru_cache(maxsize=None)
def engine_args(engine: str) -> dict:
    """Return the stored argument data of the pinned release of `engine` ("vllm" or "sglang")."""
    if engine not in ("vllm", "sglang"):
        raise ValueError(f"engine must be 'vllm' or 'sglang', got {engine!r}")
    return json.loads((DATA / f"{engine}_args.json").read_text())


@lru_cache(maxsize=None)
def _flag_index(engine: str) -> dict[str, dict]:
    return {name: f for f in engine_args(engine)["flags"] for name in f.get("names", [])}


# Value types of the numeric flags (EngineArgs / ServerArgs field annotations). "hint": vLLM's
# human_readable_int (1k = 1000, 1K = 1024; utils/argparse_utils.py:30-74), "hint_auto" also
# takes -1 / auto (max_model_len; engine/arg_utils.py:397-409).
NUMERIC = {
    "vllm": {"--tensor-parallel-size": "int", "--pipeline-parallel-size": "int",
             "--data-parallel-size": "int", "--max-model-len": "hint_auto",
             "--max-num-seqs": "int", "--max-num-batched-tokens": "hint",
             "--gpu-memory-utilization": "float", "--kv-offloading-size": "float",
             "--nnodes": "int", "--node-rank": "int", "--max-cudagraph-capture-size": "int"},
    "sglang": {"--tp-size": "int", "--pp-size": "int", "--dp-size": "int", "--ep-size": "int",
               "--attn-dp-size": "int", "--context-length": "int", "--max-running-requests": "int",
               "--chunked-prefill-size": "int", "--mem-fraction-static": "float",
               "--hicache-size": "int", "--speculative-num-steps": "int",
               "--speculative-eagle-topk": "int", "--speculative-num-draft-tokens": "int",
               "--nnodes": "int", "--node-rank": "int"},
}
JSON_FLAGS = {"vllm": ("--speculative-config", "--hf-overrides", "--compilation-config"),
              "sglang": ("--json-model-override-args",)}


def parse_int(text: str, kind: str = "int") -> int | None:
    """Return the integer the engine reads from `text` (vLLM's 32k / 1K forms for "hint"),
    or None when it would refuse it."""
    text = text.strip()
    if kind == "hint_auto" and text in ("auto", "-1"):
        return -1
    if kind.startswith("hint"):
        m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgt])", text)
        if m:
            return int(float(m.group(1)) * 10 ** (3 * "kmgt".index(m.group(2)) + 3))
        m = re.fullmatch(r"(\d+)([KMGT])", text)
        if m:
            return int(m.group(1)) * 2 ** (10 * "KMGT".index(m.group(2)) + 10)
    return int(text) if re.fullmatch(r"[+-]?\d+", text) else None


def read_command(argv, engine: str) -> tuple[dict[str, object], list[str]]:
    """Return ({canonical flag: value}, problems) as the engine's parser reads `argv`: values
    are strings (ints and floats parsed where the type is numeric), booleans True/False."""
    index, values = _flag_index(engine), {}
    problems: list[str] = []
    argv = [str(a) for a in argv]
    i = _program_length(argv)
    while i < len(argv):
        raw = argv[i]
        i += 1
        if not raw.startswith("-"):
            problems.append(f"stray argument {raw!r}")
            continue
        name, eq, inline = raw.partition("=")
        if engine == "vllm" and name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")   # FlexibleArgumentParser
        base, dot, key = name.partition(".")
        info = index.get(base if dot and base in JSON_FLAGS[engine] else name)
        if info is None:
            problems.append(f"unknown flag {name}")
            continue
        canonical = info["names"][0]
        if info.get("deprecated"):
            problems.append(f"deprecated flag {name}")
        if info["kind"] == "flag":
            if eq:
                problems.append(f"{name} takes no value (got {inline!r})")
            values[canonical] = not re.match(r"--(no|disable)-", name)
            continue
        if eq:
            value = inline
        elif i < len(argv) and not re.match(r"-[-a-zA-Z]", argv[i]):
            value = argv[i]
            i += 1
        else:
            problems.append(f"{name} needs a value")
            continue
        if dot:   # --speculative-config.method ngram: one key of the JSON
            cfg = values.get(canonical) if isinstance(values.get(canonical), dict) else {}
            values[canonical] = {**cfg, key: value}
            continue
        problems += _value_problems(engine, name, canonical, info, value)
        values[canonical] = _typed(engine, canonical, value)
    return values, problems


def _program_length(argv: list[str]) -> int:
    """Return how many leading words name the program (and vLLM's positional model)."""
    if argv[:2] == ["vllm", "serve"]:
        return 3 if len(argv) > 2 and not argv[2].startswith("-") else 2
    for n, prefix in ((3, ["python", "-m", "sglang.launch_server"]),
                      (3, ["python3", "-m", "sglang.launch_server"])):
        if argv[:n] == prefix:
            return n
    return 0


def _typed(engine: str, canonical: str, value: str):
    kind = NUMERIC.get(engine, {}).get(canonical)
    if kind in ("int", "hint", "hint_auto"):
        return parse_int(value, kind)
    if kind == "float":
        try:
            return float(value)
        except ValueError:
            return None
    if canonical in JSON_FLAGS[engine]:
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return None
    return value


def _value_problems(engine: str, name: str, canonical: str, info: dict, value: str) -> list[str]:
    out = []
    if "choices" in info and value not in info["choices"]:
        out.append(f"{name} {value!r} is not one of the recorded choices")
    stored = engine_args(engine).get("values", {})
    allowed = stored.get(canonical, {}).get("values")
    if allowed is not None and value not in allowed:
        out.append(f"{name} {value!r} is not a value of the pinned release")
    kind = NUMERIC.get(engine, {}).get(canonical)
    if kind in ("int", "hint", "hint_auto") and parse_int(value, kind) is None:
        out.append(f"{name} {value!r} is not an integer")
    elif kind == "float":
        try:
            float(value)
        except ValueError:
            out.append(f"{name} {value!r} is not a number")
    if canonical in JSON_FLAGS[engine]:
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as err:
            return out + [f"{name} is not valid JSON ({err.msg} at character {err.pos}): "
                          f"{value!r}"]
        if not isinstance(parsed, dict):
            out.append(f"{name} must be a JSON object, got {value!r}")
        elif engine == "vllm" and canonical == "--speculative-config":
            out += _speculative_problems(parsed, stored)
    return out


def _speculative_problems(cfg: dict, stored: dict) -> list[str]:
    """Return what vLLM 0.33.0's SpeculativeConfig refuses in a --speculative-config."""
    keys = set(stored["--speculative-config:keys"]["values"])
    out = [f"speculative_config key {k!r} unknown" for k in cfg if k not in keys]
    if cfg.get("method") not in stored["--speculative-config:method"]["values"]:
        out.append(f"speculative method {cfg.get('method')!r} unknown")
    k = cfg.get("num_speculative_tokens")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        out.append(f"num_speculative_tokens must be a positive integer, got {k!r}")
    rows = cfg.get("num_speculative_tokens_per_batch_size")
    if rows is not None:
        ok = isinstance(rows, list) and rows and all(
            isinstance(r, list) and len(r) == 3 and all(
                isinstance(x, int) and not isinstance(x, bool) for x in r) for r in rows)
        if not ok:
            return out + ["num_speculative_tokens_per_batch_size must be a list of "
                          f"[from, to, k] integer triples, got {rows!r}"]
        prev = 0
        for lo, hi, kb in rows:
            if not (lo == prev + 1 and lo <= hi and 0 <= kb <= (k or kb)):
                out.append(f"num_speculative_tokens_per_batch_size row {[lo, hi, kb]} must "
                           f"start at batch {prev + 1}, end at or after its start and keep "
                           f"0 <= k <= num_speculative_tokens")
                break
            prev = hi
    return out


def check_command(argv, engine: str) -> list[str]:
    """Return the problems with `argv` against the pinned release (empty: it parses and passes
    the config checks below)."""
    values, problems = read_command(argv, engine)
    return problems + _config_problems(values, engine)


def _config_problems(v: dict, engine: str) -> list[str]:
    """Return what the engine's config validation would refuse at start-up (vLLM 0.33.0
    config/scheduler.py, config/cache.py, config/vllm.py, engine/arg_utils.py:2390-2420;
    SGLang 0.5.23 server_args)."""
    out = []

    def num(k, default=None):
        x = v.get(k)
        return x if isinstance(x, (int, float)) and not isinstance(x, bool) else default

    if engine == "vllm":
        seqs, tokens = num("--max-num-seqs"), num("--max-num-batched-tokens")
        if seqs is not None and tokens is not None and seqs > tokens:
            out.append(f"max_num_batched_tokens must be >= max_num_seqs ({tokens} < {seqs}; "
                       "SchedulerConfig.verify_max_model_len)")
        length = num("--max-model-len")
        if (v.get("--enable-chunked-prefill") is False and tokens is not None
                and length is not None and 0 < tokens < length):
            out.append("without chunked prefill max_num_batched_tokens must be >= max_model_len")
        util = num("--gpu-memory-utilization")
        if util is not None and not (math.isfinite(util) and 0 < util <= 1):
            out.append(f"gpu_memory_utilization must be in (0, 1], got {util} (CacheConfig)")
        for k in ("--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size",
                  "--max-num-seqs", "--max-num-batched-tokens", "--nnodes"):
            if num(k) is not None and num(k) < 1:
                out.append(f"{k} must be >= 1, got {num(k)}")
        spec = v.get("--speculative-config")
        if v.get("--async-scheduling") and isinstance(spec, dict) and spec.get("method") in (
                "suffix", "custom_class"):
            out.append("async scheduling is refused with suffix drafting (V1 runner)")
        tp, pp, dp = (num(k, 1) for k in ("--tensor-parallel-size", "--pipeline-parallel-size",
                                          "--data-parallel-size"))
        if v.get("--enable-expert-parallel") and tp * dp < 2:
            out.append("expert parallelism needs more than one GPU")
        nnodes, rank = num("--nnodes", 1), num("--node-rank", 0)
        if nnodes > 1 and (tp * pp * dp) % nnodes:
            out.append(f"--nnodes {nnodes} must evenly divide the world size ({tp * pp * dp})")
        if not 0 <= rank < max(nnodes, 1):
            out.append(f"--node-rank must be between 0 and {nnodes - 1}, got {rank}")
    else:
        frac = num("--mem-fraction-static")
        if frac is not None and not (math.isfinite(frac) and 0 < frac < 1):
            out.append(f"mem_fraction_static must be in (0, 1), got {frac}")
        tp = num("--tp-size", 1)
        for k in ("--attn-dp-size", "--ep-size"):
            if num(k) is not None and (num(k) < 1 or tp % num(k)):
                out.append(f"{k} must divide --tp-size")
        nnodes, rank = num("--nnodes", 1), num("--node-rank", 0)
        if not 0 <= rank < max(nnodes, 1):
            out.append(f"--node-rank must be between 0 and {nnodes - 1}, got {rank}")
        if nnodes > 1 and not v.get("--dist-init-addr"):
            out.append("--nnodes > 1 needs --dist-init-addr, the head node's host:port "
                       "(srt/server_args.py:819-825 parses it)")
        for k in ("--max-running-requests", "--context-length", "--chunked-prefill-size"):
            if num(k) is not None and num(k) < 1 and not (k == "--chunked-prefill-size"
                                                          and num(k) == -1):
                out.append(f"{k} must be >= 1, got {num(k)}")
    return out
