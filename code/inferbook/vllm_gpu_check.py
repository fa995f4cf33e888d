"""Chapter 8's last cell: vLLM's own start-up numbers on this runtime's GPU beside the book's.

On a Colab GPU runtime (or wherever `INFERBOOK_RUN_VLLM=1`), `compare_on_this_gpu()` installs
vLLM with pip, plans a small model for the runtime's GPU with the recommender, starts the plan's
`vllm serve` command, reads "Available KV cache memory", "GPU KV cache size: N tokens" and
"Maximum concurrency for X tokens per request: Y" from its start-up log (`parse_startup_log`),
stops the server and returns them printed beside `vllm_memory.vllm_startup`'s prediction for
that GPU (its CUDA-reported memory) and the installed vLLM version.

Anywhere else (no CUDA GPU, no network, CI, the book build) it returns one line, `SKIP`, and
installs nothing; a server that does not start returns one line with vLLM's last log line,
never a traceback. torch is imported only inside `runtime_gpu` (the planner stays torch-free).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import replace

from . import recommend, vllm_memory
from .hardware import GPU, GPUS
from .models import ModelSpec
from .vllm_logs import log_model

SKIP = ("Skipped: no Colab GPU runtime with network access here (or INFERBOOK_RUN_VLLM=1),\n"
        "so vLLM is neither installed nor started (Colab: Runtime > Change runtime type > GPU).")
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"     # ungated, small enough for a 16 GB T4
_PATTERNS = {
    "available_gib": r"Available KV cache memory: ([\d.]+) GiB",
    "kv_tokens": r"KV cache size: ([\d,]+) tokens",
    "max_model_len": r"Maximum concurrency for ([\d,]+) tokens per request",
    "max_concurrency": r"tokens per request: ([\d.]+)x",
}


def parse_startup_log(text: str) -> dict:
    """Return the KV numbers a vLLM start-up log prints (keys of `_PATTERNS`; a number it does
    not print is absent). The last occurrence wins (every TP rank prints its own)."""
    if not isinstance(text, str):
        raise ValueError(f"text must be the log as a str, got {type(text).__name__}")
    out: dict = {}
    for key, pattern in _PATTERNS.items():
        found = re.findall(pattern, text)
        if found:
            value = found[-1].replace(",", "")
            out[key] = float(value) if "." in value or key == "available_gib" else int(value)
    return out


def _allowed() -> bool:
    return "google.colab" in sys.modules or os.environ.get("INFERBOOK_RUN_VLLM") == "1"


def _online(host: str = "pypi.org", port: int = 443, timeout: float = 3.0) -> bool:
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return True
    except OSError:
        return False


def runtime_gpu() -> GPU | None:
    """Return this runtime's first CUDA GPU as a preset with the memory CUDA reports, or None.

    The preset whose name the device's name contains (e.g. "Tesla T4" -> T4); otherwise the L4
    preset with the device's name, compute capability, SM count and memory."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(0)
    total = torch.cuda.mem_get_info(0)[1]
    props = torch.cuda.get_device_properties(0)
    compact = name.upper().replace(" ", "")
    matches = [g for key, g in GPUS.items() if key.upper().split()[0] in compact]
    base = max(matches, key=lambda g: len(g.name)) if matches else replace(
        GPUS["L4"], name=name, compute_capability=(props.major, props.minor),
        num_sms=props.multi_processor_count)
    return replace(base, cuda_total_bytes=int(total),
                   cuda_total_source=f"torch.cuda.mem_get_info on this runtime ({name})")


def predicted(spec: ModelSpec, g: GPU, plan, vllm_version: str) -> vllm_memory.VllmStartup:
    """Return the book's start-up prediction for `plan` (one GPU) under `vllm_version`."""
    return vllm_memory.vllm_startup(
        spec, g, 1, max_model_len=plan.max_model_len,
        gpu_memory_utilization=plan.gpu_memory_utilization, kv_dtype=plan.kv_dtype,
        max_num_batched_tokens=plan.max_num_batched_tokens, max_num_seqs=plan.max_num_seqs,
        vllm_version=vllm_version)


def side_by_side(logged: dict, pred: vllm_memory.VllmStartup, title: str) -> str:
    """Return the logged and predicted numbers as a small text table."""
    rows = [("Available KV cache memory (GiB)", logged.get("available_gib"),
             pred.budget.available_kv_bytes / 2**30, "{:.2f}"),
            ("GPU KV cache size (tokens)", logged.get("kv_tokens"), pred.kv_tokens, "{:,}"),
            ("Maximum concurrency (x)", logged.get("max_concurrency"), pred.max_concurrency,
             "{:.2f}")]
    lines = [title, f"{'':34}{'vLLM log':>14}{'book':>14}{'error':>9}"]
    for label, got, want, fmt in rows:
        shown = "-" if got is None else fmt.format(got)
        err = "" if not got else f"{100 * (want / got - 1):+.1f} %"
        lines.append(f"{label:34}{shown:>14}{fmt.format(want):>14}{err:>9}")
    return "\n".join(lines)


def _serve_log(argv: list[str], timeout_s: float) -> str:
    """Start `argv` (a `vllm serve` command), return its output up to the concurrency line."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    try:
        for line in proc.stdout:                       # type: ignore[union-attr]
            lines.append(line)
            if "Maximum concurrency for" in line or time.monotonic() > deadline:
                break
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return "".join(lines)


def compare_on_this_gpu(model: str = DEFAULT_MODEL, context_tokens: int = 8192,
                        timeout_s: float = 1200.0) -> str:
    """Return vLLM's logged start-up numbers beside the book's prediction on this GPU, or `SKIP`
    (see the module doc). `model` is a key of `data/model_configs.json`."""
    spec = log_model(model)
    g = runtime_gpu() if _allowed() else None
    if g is None or not _online():
        return SKIP
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "vllm"],
                         capture_output=True, text=True)
    if pip.returncode != 0:
        return f"pip install vllm failed: {(pip.stderr or pip.stdout).strip().splitlines()[-1]}"
    version = importlib.metadata.version("vllm")
    plan = recommend.recommend(spec, g, recommend.Workload("chat", context_tokens=context_tokens))
    if not plan.ok:
        return f"the book refuses {model} on this {g.name}: {plan.reason}"
    argv = [sys.executable, "-m", "vllm.entrypoints.cli.main", *plan.vllm_argv[1:], "--port",
            "8011"]
    logged = parse_startup_log(_serve_log(argv, timeout_s))
    if "kv_tokens" not in logged:
        return f"vLLM {version} did not print its KV-cache size within {timeout_s:.0f} s"
    title = (f"{model} on {g.name} ({g.memory_bytes / 2**30:.2f} GiB), vLLM {version}: "
             + " ".join(plan.vllm_argv[2:]))
    return side_by_side(logged, predicted(spec, g, plan, version), title)
