"""Read the pinned engines' wheels and write what the planner checks commands against.

    pip download --no-deps sglang==0.5.23 vllm==0.33.0 -d wheels
    unzip -q wheels/sglang-*.whl -d sglang_src; unzip -q wheels/vllm-*.whl -d vllm_src
    python tools/extract_engine_rules.py --sglang-src sglang_src --vllm-src vllm_src

Importing the engines' own parsers needs their full dependency trees (torch 2.14, CUDA
extensions, fastapi, ...), which CI does not install; so this script reads their source with
`ast` instead, and writes:

* `code/inferbook/data/sglang_rules.json`: each SGLang rule `inferbook.sglang_rules` follows
  (the memory fraction, fp8's minimum capability, the attention-DP flag), as file, line and
  the quoted source line;
* the value type of every numeric flag `inferbook.commands.NUMERIC` checks, compared with the
  dataclass annotations of vLLM's `EngineArgs` (engine/arg_utils.py) and SGLang's
  `arg_groups/fields/*.py` (a mismatch is printed and the exit status is 1).

`tests/test_commands.py` re-checks the quotes against the wheel when `SGLANG_SRC` is set.
Flags and choices themselves (`data/vllm_args.json`, `data/sglang_args.json`) were listed from
the engines' argparse parsers (see their "source" entries).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "code"))

SGLANG_QUOTES = [
    ("srt/arg_groups/memory_hook.py", "mem_fraction_static", "reserved_mem = 512"),
    ("srt/arg_groups/memory_hook.py", "mem_fraction_static",
     "reserved_mem += activation_tokens * 1.5"),
    ("srt/arg_groups/memory_hook.py", "mem_fraction_static",
     "activation_tokens = max(cfg.chunked_prefill_size, 2048)"),
    ("srt/arg_groups/memory_hook.py", "mem_fraction_static",
     "reserved_mem += cfg.tp_size * cfg.pp_size / 8 * 1024"),
    ("srt/arg_groups/memory_hook.py", "mem_fraction_static",
     "reserved_mem = max(reserved_mem, 10 * 1024)"),
    ("srt/arg_groups/memory_hook.py", "mem_fraction_static",
     "round((gpu_mem - reserved_mem) / gpu_mem, 3)"),
    ("srt/arg_groups/memory_hook.py", "graph reserve",
     "reserved_mem += decode_cuda_graph_config.max_bs * 2"),
    ("srt/arg_groups/memory_hook.py", "graph reserve",
     "reserved_mem += len(prefill_cuda_graph_config.bs) * 8"),
    ("srt/arg_groups/memory_hook.py", "graph reserve", "reserved_mem += 1.5 * 1024"),
    ("srt/arg_groups/memory_hook.py", "graph reserve",
     "reserved_mem += decode_cuda_graph_config.max_bs * cfg.attn_dp_size * 3"),
    ("srt/arg_groups/memory_hook.py", "capacity defaults",
     "decode_cuda_graph_config.max_bs = cfg.max_running_requests"),
    ("srt/arg_groups/memory_hook.py", "capacity defaults", "if gpu_mem < 20 * 1024:"),
    ("srt/arg_groups/memory_hook.py", "capacity defaults", "chunked_prefill_size=16384,"),
    ("srt/arg_groups/cuda_graph_hook.py", "prefill graphs",
     "+ list(range(4608, max_bs + 1, 512))"),
    ("srt/arg_groups/cuda_graph_hook.py", "prefill graphs off with PP",
     "if cfg.pp_size > 1 and cfg.cuda_graph_config.prefill.backend == Backend.BREAKABLE:"),
    ("srt/environ.py", "post-capture sizing off",
     "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING = EnvBool(False)"),
    ("srt/utils/common.py", "GPU memory",
     '["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],'),
    ("srt/layers/quantization/fp8.py", "fp8 minimum capability",
     "return 100 if self.use_mxfp8 else 80"),
    ("srt/arg_groups/parallel_hook.py", "attention DP flag", "`--attn-dp-size N`."),
    # --max-running-requests is global: each attention-DP worker gets its share
    ("srt/mem_cache/kv_cache_configurator.py", "running requests per DP worker",
     "requested_per_worker = max(1, max_num_reqs // self.attn_dp_size)"),
    ("srt/arg_groups/memory_hook.py", "graph reserve",
     "reserved_mem += decode_cuda_graph_config.max_bs * cfg.attn_dp_size * 1.5"),
]


def sglang_rules(src: Path, wheel: Path | None) -> dict:
    """Return the quotes with the line where each first occurs in the unpacked wheel."""
    out = []
    for file, topic, quote in SGLANG_QUOTES:
        lines = (src / "sglang" / file).read_text().split("\n")
        hits = [i + 1 for i, line in enumerate(lines) if quote in line]
        if not hits:
            raise SystemExit(f"{file}: {quote!r} not found: the wheel is not 0.5.23?")
        out.append(dict(file="sglang/" + file, line=hits[0], topic=topic, quote=quote))
    source = dict(artifact="sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl",
                  registry="https://pypi.org/project/sglang/0.5.23/")
    if wheel is not None:
        source["sha256"] = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return dict(engine="sglang", version="0.5.23", source=source, rules=out)


def _annotations(tree: ast.AST, class_name: str | None) -> dict[str, str]:
    out = {}
    for node in ast.walk(tree):
        if class_name and not (isinstance(node, ast.ClassDef) and node.name == class_name):
            continue
        body = node.body if isinstance(node, ast.ClassDef) else []
        for stmt in body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                out[stmt.target.id] = ast.unparse(stmt.annotation)
    return out


def _kind(annotation: str) -> str | None:
    # SGLang writes A[type, help]: the type is the first subscript element
    m = re.match(r"A\[(.*?),", annotation)
    text = m.group(1) if m else annotation
    if re.search(r"\bfloat\b", text):
        return "float"
    if re.search(r"\bint\b", text):
        return "int"
    return None


def check_types(vllm_src: Path | None, sglang_src: Path | None) -> list[str]:
    """Return mismatches between `commands.NUMERIC` and the wheels' field annotations."""
    from inferbook.commands import NUMERIC, engine_args
    problems = []
    for engine, src in (("vllm", vllm_src), ("sglang", sglang_src)):
        if src is None:
            continue
        if engine == "vllm":
            ann = _annotations(ast.parse((src / "vllm/engine/arg_utils.py").read_text()),
                               "EngineArgs")
        else:
            ann = {}
            for f in sorted((src / "sglang/srt/arg_groups/fields").glob("*.py")):
                for k, v in _annotations(ast.parse(f.read_text()), None).items():
                    ann.setdefault(k, v)
        dests = {n: f["dest"] for f in engine_args(engine)["flags"] for n in f.get("names", [])}
        for flag, kind in NUMERIC[engine].items():
            found = _kind(ann.get(dests.get(flag, ""), ""))
            if found != kind:
                problems.append(f"{engine} {flag}: NUMERIC says {kind}, the wheel {found} "
                                f"({ann.get(dests.get(flag, ''))!r})")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sglang-src", type=Path, help="the unpacked sglang 0.5.23 wheel")
    ap.add_argument("--sglang-wheel", type=Path, help="the wheel itself (for its sha256)")
    ap.add_argument("--vllm-src", type=Path, help="the unpacked vllm 0.33.0 wheel")
    args = ap.parse_args()
    if args.sglang_src:
        data = sglang_rules(args.sglang_src, args.sglang_wheel)
        path = ROOT / "code/inferbook/data/sglang_rules.json"
        old = json.loads(path.read_text()) if path.exists() else {}
        data["source"].setdefault("sha256", old.get("source", {}).get("sha256", ""))
        path.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {len(data['rules'])} SGLang rules to {path.relative_to(ROOT)}")
    problems = check_types(args.vllm_src, args.sglang_src)
    for p in problems:
        print("type mismatch:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
