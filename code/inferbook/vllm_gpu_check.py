"""Chapter 8's last cell: vLLM's own start-up numbers on this runtime's GPU beside the book's.

On a Colab GPU runtime (or wherever `INFERBOOK_RUN_VLLM=1`), `compare_on_this_gpu()` installs
vLLM with pip, pinned (`vllm==VLLM_PIN`, the version `vllm_memory` follows,
`vllm_memory.VLLM_PINNED`: versions after it are predicted with its rules, and a later vLLM
found installed is named so in the table's title), plans a small model for the runtime's GPU
with the recommender, starts the plan's `vllm serve` command, reads "Available KV cache
memory", "GPU KV cache size: N tokens" and "Maximum concurrency for X tokens per request: Y"
from its start-up log (`parse_startup_log`), stops the server and returns them printed beside
`vllm_memory.vllm_startup`'s prediction for that GPU (its CUDA-reported memory).

Anywhere else (no CUDA GPU, CI, the book build) it returns one line, `SKIP`, and installs
nothing. Every later failure is one line too, never a traceback: a GPU vLLM does not support
(compute capability below `MIN_COMPUTE_CAPABILITY`, 7.0 in vLLM's installation requirements,
https://docs.vllm.ai/en/v0.14.0/getting_started/installation/gpu/) or no network: nothing is
installed; a failed pip install: pip's last line; a server that exits, or prints nothing more
for `timeout_s` seconds (a reader thread enforces the deadline even when the server is
silent): vLLM's last log line. torch is imported only inside `runtime_gpu` (the planner stays
torch-free).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import socket
import queue
import subprocess
import sys
import threading
import time
from dataclasses import replace

from . import recommend, vllm_memory
from .hardware import GPU, GPUS
from .models import ModelSpec
from .vllm_logs import log_model

SKIP = ("Skipped: no Colab GPU runtime with network access here (or INFERBOOK_RUN_VLLM=1),\n"
        "so vLLM is neither installed nor started (Colab: Runtime > Change runtime type > GPU).")
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"     # ungated, small enough for a 16 GB T4
VLLM_PIN = vllm_memory.VLLM_PINNED    # the version pip installs: the one the memory model follows
MIN_COMPUTE_CAPABILITY = (7, 0)       # vLLM's CUDA requirement (its installation docs)
PIP_TIMEOUT_S = 1800.0
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


def _last_line(text: str | None, default: str) -> str:
    """Return the last non-blank line of `text` (at most 300 characters), or `default`."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else default


def _serve_log(argv: list[str], timeout_s: float) -> tuple[str, str]:
    """Start `argv` (a `vllm serve` command) and read its output until the concurrency line, the
    process's exit, or `timeout_s` seconds, whichever comes first; stop it. Return (output,
    outcome), outcome one of "ready", "exited with status N", "timed out". A reader thread
    feeds the lines through a queue, so the deadline holds while the server prints nothing."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as e:
        return f"{e}\n", f"could not be started ({type(e).__name__})"
    lines: queue.Queue = queue.Queue()

    def reader() -> None:
        for line in proc.stdout:                       # type: ignore[union-attr]
            lines.put(line)
        lines.put(None)                                # end of output: the process closed it

    threading.Thread(target=reader, daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    outcome = "timed out"
    try:
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = lines.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            if line is None:
                outcome = f"exited with status {proc.wait()}"
                break
            seen.append(line)
            if "Maximum concurrency for" in line:
                outcome = "ready"
                break
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    return "".join(seen), outcome


def compare_on_this_gpu(model: str = DEFAULT_MODEL, context_tokens: int = 8192,
                        timeout_s: float = 1200.0) -> str:
    """Return vLLM's logged start-up numbers beside the book's prediction on this GPU, or `SKIP`
    (see the module doc). `model` is a key of `data/model_configs.json`."""
    spec = log_model(model)
    g = runtime_gpu() if _allowed() else None
    if g is None:
        return SKIP
    if tuple(g.compute_capability) < MIN_COMPUTE_CAPABILITY:
        need = ".".join(map(str, MIN_COMPUTE_CAPABILITY))
        return (f"Skipped: vLLM needs a GPU of compute capability {need} or higher; this "
                f"{g.name} has {'.'.join(map(str, g.compute_capability))}. Nothing installed.")
    if not _online():
        return (f"Skipped: this runtime has a GPU ({g.name}) but no network to install vLLM "
                "from pypi.org. Nothing installed.")
    try:
        pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", f"vllm=={VLLM_PIN}"],
                             capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"pip install vllm=={VLLM_PIN} did not finish within {PIP_TIMEOUT_S:.0f} s"
    if pip.returncode != 0:
        why = _last_line(pip.stderr, _last_line(pip.stdout, "pip printed nothing"))
        return f"pip install vllm=={VLLM_PIN} failed (exit {pip.returncode}): {why}"
    try:
        version = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return f"pip install vllm=={VLLM_PIN} reported success but vllm is not installed"
    plan = recommend.recommend(spec, g, recommend.Workload("chat", context_tokens=context_tokens))
    if not plan.ok:
        return f"the book refuses {model} on this {g.name}: {plan.reason}"
    argv = [sys.executable, "-m", "vllm.entrypoints.cli.main", *plan.vllm_argv[1:], "--port",
            "8011"]
    text, outcome = _serve_log(argv, timeout_s)
    logged = parse_startup_log(text)
    if "kv_tokens" not in logged:
        return (f"vLLM {version} {outcome} before printing its KV-cache size "
                f"(limit {timeout_s:.0f} s); its last log line: {_last_line(text, '(no output)')}")
    rules = VLLM_PIN if vllm_memory.parse_version(version) > vllm_memory.parse_version(VLLM_PIN) else version
    title = (f"{model} on {g.name} ({g.memory_bytes / 2**30:.2f} GiB), vLLM {version}"
             + ("" if rules == version else f" (predicted with {rules}'s rules)") + ": "
             + " ".join(plan.vllm_argv[2:]))
    return side_by_side(logged, predicted(spec, g, plan, rules), title)
