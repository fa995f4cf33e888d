"""Benchmark: the book's engine beside a real peer, Hugging Face transformers, on one model.

One random-weight GPT-2-shaped model, loaded into both (`gpt.load_hf_gpt2` copies HF's
`GPT2LMHeadModel` weights into the book's `GPT`), serves the same requests four ways:

* ``book_engine``: `inferbook.engine.serve`, continuous batching over the paged KV cache;
* ``hf_continuous``: transformers' own continuous batching, `model.generate_batch(...)` with a
  `ContinuousBatchingConfig(page_size, num_blocks, max_batch_tokens)` sized like the book's pool
  (without it, transformers sizes its cache from a share of free memory);
* ``hf_one_by_one``: `model.generate()` one request at a time (KV cache, batch 1);
* ``hf_static``: one `generate()` call over a left-padded static batch with an attention mask.

Greedy tokens must be identical across all four (asserted). Throughput is measured in CPU
seconds of the process (`time.process_time`, one torch thread; transformers' continuous batching
runs its loop in a background thread, which process time counts too), in alternated rounds,
median and range. One extra timed run of each splits the time into
model matmuls, attention, the rest of the forward pass, and everything outside the model's
forward (scheduling, cache bookkeeping, sampling, Python), timed by forward hooks with
`time.thread_time` in whichever thread runs the model. Writes outputs/benchmarks/peer_engine.json.

    .venv/bin/python tests/bench/bench_peer_engine.py [--requests 32] [--new-tokens 32] [--repeats 5]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers
from transformers import ContinuousBatchingConfig, GenerationConfig, GPT2Config, GPT2LMHeadModel

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from bench_util import versions, write_result  # noqa: E402

from inferbook.engine import serve  # noqa: E402
from inferbook.gpt import load_hf_gpt2, num_parameters  # noqa: E402
from inferbook.steploop import Request  # noqa: E402

SHAPE = dict(vocab_size=2048, n_positions=512, n_embd=256, n_layer=4, n_head=4)
BLOCK_SIZE, NUM_BLOCKS, MAX_SEQS, MAX_TOKENS = 16, 256, 32, 1024
VARIANTS = ("book_engine", "hf_continuous", "hf_one_by_one", "hf_static")


def models(shape: dict, seed: int = 0):
    """Return (HF GPT2LMHeadModel, the book's GPT) with identical random weights, in eval mode."""
    torch.manual_seed(seed)
    config = GPT2Config(**shape, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    hf = GPT2LMHeadModel(config).eval()
    return hf, load_hf_gpt2(hf).eval()


def workload(n: int, new_tokens: int, prompt_len: tuple[int, int], vocab: int, seed: int = 1):
    """Return n prompts (random token ids, lengths uniform in prompt_len) as token lists."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(prompt_len[0], prompt_len[1] + 1, (n,), generator=g)
    return [torch.randint(1, vocab, (int(n_),), generator=g).tolist() for n_ in lengths]


def run_book(model, prompts, new_tokens):
    reqs = [Request(i, tuple(p), new_tokens, 0.0) for i, p in enumerate(prompts)]
    r = serve(model, reqs, num_blocks=NUM_BLOCKS, block_size=BLOCK_SIZE, max_num_seqs=MAX_SEQS,
              max_num_batched_tokens=MAX_TOKENS, clock="cpu")
    return [r.outputs[i] for i in range(len(prompts))]


def run_hf_continuous(hf, prompts, new_tokens):
    gen = GenerationConfig(max_new_tokens=new_tokens, do_sample=False, eos_token_id=-1,
                           use_cuda_graph=False)
    cb = ContinuousBatchingConfig(page_size=BLOCK_SIZE, num_blocks=NUM_BLOCKS,
                                  max_batch_tokens=MAX_TOKENS)
    with torch.inference_mode():
        out = hf.generate_batch(inputs=prompts, generation_config=gen, continuous_batching_config=cb)
    by_id = {int(k.rsplit("_", 1)[1]): list(v.generated_tokens) for k, v in out.items()}
    return [by_id[i] for i in range(len(prompts))]


def _generate(hf, ids, mask, new_tokens):
    with torch.inference_mode():
        return hf.generate(ids, attention_mask=mask, max_new_tokens=new_tokens,
                           min_new_tokens=new_tokens, do_sample=False, pad_token_id=0,
                           eos_token_id=None)


def run_hf_one_by_one(hf, prompts, new_tokens):
    out = []
    for p in prompts:
        ids = torch.tensor([p])
        out.append(_generate(hf, ids, torch.ones_like(ids), new_tokens)[0, len(p):].tolist())
    return out


def run_hf_static(hf, prompts, new_tokens):
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    y = _generate(hf, ids, mask, new_tokens)
    return [y[i, width:].tolist() for i in range(len(prompts))]


class Split:
    """CPU seconds spent in a model's matrix products, its attention and its whole forward pass,
    measured with `time.thread_time` in forward hooks, so that it counts in whichever thread runs
    the model (transformers' continuous batching runs it in a background thread).

    matmul: the linear layers (GPT-2's Conv1D or nn.Linear) and the output projection; attention:
    the attention modules minus their linear layers; forward: the model's forward calls. The rest
    of the run (scheduling, cache bookkeeping, sampling, Python) is total − forward.
    """

    def __init__(self, model, attn_linears, other_linears, attentions):
        self.seconds = {"attn_linear": 0.0, "other_linear": 0.0, "attention_module": 0.0,
                        "forward": 0.0}
        self._start: dict[int, float] = {}
        self.handles = []
        for m in attn_linears:
            self._hook(m, "attn_linear")
        for m in other_linears:
            self._hook(m, "other_linear")
        for m in attentions:
            self._hook(m, "attention_module")
        self._hook(model, "forward")

    def _hook(self, module, key):
        def pre(mod, args, kwargs=None):
            self._start[id(mod)] = time.thread_time()

        def post(mod, args, out, kwargs=None):
            self.seconds[key] += time.thread_time() - self._start.pop(id(mod))

        self.handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]

    def remove(self):
        for h in self.handles:
            h.remove()


def split_hooks(name, hf, ours):
    """Return a `Split` on the model variant `name` runs (the book's GPT or HF's GPT-2)."""
    if name == "book_engine":
        b = ours.blocks
        return Split(ours, [m for x in b for m in (x.attn.qkv, x.attn.proj)],
                     [m for x in b for m in (x.mlp.fc, x.mlp.proj)], [x.attn for x in b])
    h = hf.transformer.h
    return Split(hf, [m for x in h for m in (x.attn.c_attn, x.attn.c_proj)],
                 [m for x in h for m in (x.mlp.c_fc, x.mlp.c_proj)] + [hf.lm_head],
                 [x.attn for x in h])


def _timed_method(obj, attr, into: dict, key: str):
    """Wrap obj.attr so that its CPU seconds (this thread) add up in into[key]."""
    original = getattr(obj, attr)

    def wrapper(*args, **kwargs):
        t = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            into[key] += time.thread_time() - t

    setattr(obj, attr, wrapper)


def time_split(name, fn, hf, ours) -> dict[str, float]:
    """Run fn once under `split_hooks`; return CPU seconds by category."""
    split = split_hooks(name, hf, ours)
    extra = {"head": 0.0, "hidden": 0.0}
    if name == "book_engine":  # the engine calls hidden_states and head, not forward
        _timed_method(ours, "head", extra, "head")
        _timed_method(ours, "hidden_states", extra, "hidden")
    try:
        start = time.process_time()
        fn()
        total = time.process_time() - start
    finally:
        split.remove()
        if name == "book_engine":
            del ours.head, ours.hidden_states
    s = split.seconds
    forward = s["forward"] + extra["head"] + extra["hidden"]
    matmul = s["attn_linear"] + s["other_linear"] + extra["head"]
    attention = s["attention_module"] - s["attn_linear"]
    return {"total": total, "matmul": matmul, "attention": attention,
            "other_in_forward": max(0.0, forward - matmul - attention),
            "outside_forward": max(0.0, total - forward)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, nargs=2, default=[16, 128])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "outputs" / "benchmarks" / "peer_engine.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    transformers.logging.set_verbosity_error()

    hf, ours = models(SHAPE)
    prompts = workload(args.requests, args.new_tokens, tuple(args.prompt_len), SHAPE["vocab_size"])
    n = args.new_tokens
    fns = {
        "book_engine": lambda: run_book(ours, prompts, n),
        "hf_continuous": lambda: run_hf_continuous(hf, prompts, n),
        "hf_one_by_one": lambda: run_hf_one_by_one(hf, prompts, n),
        "hf_static": lambda: run_hf_static(hf, prompts, n),
    }
    outputs = {k: fn() for k, fn in fns.items()}  # also a warm-up round
    reference = outputs["book_engine"]
    identical = {k: v == reference for k, v in outputs.items()}
    first_diff = {k: next((i for i, (a, b) in enumerate(zip(v, reference)) if a != b), None)
                  for k, v in outputs.items()}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(args.repeats):  # alternated: each round runs every variant, order rotated
        order = list(fns)[r % len(fns):] + list(fns)[:r % len(fns)]
        for k in order:
            start = time.process_time()
            fns[k]()
            cpu[k].append(time.process_time() - start)
    total_tokens = args.requests * n
    tok_s = {k: [total_tokens / s for s in v] for k, v in cpu.items()}
    ratio_per_round = {k: [b / h for b, h in zip(cpu[k], cpu["book_engine"])] for k in fns}

    profile = {k: time_split(k, fn, hf, ours) for k, fn in fns.items()}

    result = {
        "benchmark": "peer_engine",
        "model": (f"GPT-2 shape {SHAPE}, random weights (seed 0), "
                  f"{num_parameters(ours):,} parameters, fp32"),
        "shape": SHAPE,
        "workload": {"requests": args.requests, "new_tokens_each": n,
                     "prompt_len": list(args.prompt_len), "prompts": "random token ids, seed 1",
                     "all_at_start": True},
        "engine_limits": {"block_size": BLOCK_SIZE, "num_blocks": NUM_BLOCKS,
                          "max_num_seqs": MAX_SEQS, "max_batch_tokens": MAX_TOKENS},
        "clock": "cpu (time.process_time of the process, one torch thread; all threads counted)",
        "repeats": args.repeats,
        "identical_tokens": identical,
        "first_differing_request": first_diff,
        "cpu_seconds": cpu,
        "throughput_tok_cpu_s": tok_s,
        "median_tok_cpu_s": {k: statistics.median(v) for k, v in tok_s.items()},
        "cpu_time_over_book_engine_per_round": ratio_per_round,
        "profile": profile,
        "versions": versions(transformers=transformers.__version__),
    }
    write_result(args.out, result)
    print(f"{'variant':<16}{'tok/CPU s':>10}{'range':>16}  identical  "
          f"matmul  attn  other  outside forward (share of CPU time)")
    for k in fns:
        t, p = tok_s[k], profile[k]
        print(f"{k:<16}{statistics.median(t):>10.0f}{min(t):>8.0f}-{max(t):<7.0f}  "
              f"{identical[k]!s:<9}  " + "  ".join(
                  f"{p[c] / p['total']:>5.0%}"
                  for c in ("matmul", "attention", "other_in_forward", "outside_forward")))
    print(f"wrote {args.out}")
    if not all(identical.values()):
        raise SystemExit(f"tokens differ from the book's engine: {first_diff}")


if __name__ == "__main__":
    main()
