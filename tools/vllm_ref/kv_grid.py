"""vLLM CPU's KV-cache size and maximum concurrency on a grid of locally saved models.

Run under `.venv-vllm` (tests/vllm_ref.py does it):

    .venv-vllm/bin/python tools/vllm_ref/kv_grid.py IN.json OUT.json

IN.json: {"configs": [config, ...]}, a config:
         {"model_dir": a `save_pretrained` folder (random weights, no tokenizer),
          "dtype": "float32" | "bfloat16", "block_size": a multiple of 32,
          "kv_space_gib": int (VLLM_CPU_KVCACHE_SPACE), "max_model_len": int,
          "max_num_batched_tokens": int, "max_num_seqs": int}
OUT.json: {"results": [{"kv_tokens", "max_concurrency", "num_blocks", "log": the printed
           "CPU KV cache size ... Maximum concurrency ..." line or null, "seconds": the
           engine's wall-clock start-up}, ...], "import_seconds", "vllm", "torch"}

One process builds every engine in turn (vLLM's import is paid once): for each config it sets
VLLM_CPU_KVCACHE_SPACE, which the CPU platform turns into `kv_cache_memory_bytes`
(vllm/platforms/cpu.py:324-327 of vllm-cpu 0.32.0), builds `LLM(...)` (eager, no tokenizer),
reads what vLLM computed from the engine's config (`cache_config.kv_cache_size_tokens`,
`kv_cache_max_concurrency` and `num_gpu_blocks`, set by `update_kv_cache_capacity`,
vllm/v1/core/kv_cache_utils.py:2312-2335) and the line vLLM logged (its output goes to
OUT.json.log; vLLM prints an identical line only once per process, `info_once`), then frees
the engine.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time

import shim


def _capture_output(path: str):
    """Send this process's stdout and stderr (where vLLM's handlers print) to `path`; return a
    function giving the lines written since its last call."""
    sys.stdout.flush(), sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1), os.dup2(fd, 2)
    seen = [0]

    def new_lines() -> list[str]:
        sys.stdout.flush(), sys.stderr.flush()
        text = open(path, errors="replace").read()
        lines, seen[0] = text[seen[0]:].splitlines(), len(text)
        return lines

    return new_lines
def main(given: str, answer: str) -> None:
    payload = json.loads(open(given).read())
    shim.require_vllm()
    start = time.perf_counter()
    import torch
    from vllm import LLM

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    imported = time.perf_counter() - start
    new_lines = _capture_output(answer + ".log")
    results = []
    for cfg in payload["configs"]:
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(int(cfg["kv_space_gib"]))
        new_lines()
        start = time.perf_counter()
        llm = LLM(model=cfg["model_dir"], skip_tokenizer_init=True, dtype=cfg["dtype"],
                  enforce_eager=True, block_size=int(cfg["block_size"]),
                  max_model_len=int(cfg["max_model_len"]),
                  max_num_batched_tokens=int(cfg["max_num_batched_tokens"]),
                  max_num_seqs=int(cfg["max_num_seqs"]), seed=0)
        seconds = time.perf_counter() - start
        cache = llm.llm_engine.vllm_config.cache_config
        logged = [m for m in new_lines() if "KV cache size" in m and "Maximum concurrency" in m]
        results.append({"kv_tokens": cache.kv_cache_size_tokens,
                        "max_concurrency": cache.kv_cache_max_concurrency,
                        "num_blocks": cache.num_gpu_blocks,
                        "log": logged[-1] if logged else None, "seconds": seconds})
        del llm
        gc.collect()
    with open(answer, "w") as f:
        json.dump({"results": results, "import_seconds": imported, "vllm": shim.vllm_version(),
                   "torch": torch.__version__}, f)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: kv_grid.py IN.json OUT.json (see the docstring)")
    saved = os.dup(2)
    try:
        main(sys.argv[1], sys.argv[2])
    except BaseException:                 # show vLLM's output with the error, not only the log
        import traceback

        tail = open(sys.argv[2] + ".log", errors="replace").read()[-4000:] \
            if os.path.exists(sys.argv[2] + ".log") else ""
        os.write(saved, (tail + traceback.format_exc()).encode())
        sys.exit(1)
