"""Workloads for the serving chapters, in one place (torch-free): who asks for what, and when.

* `mixed_workload`: mixed prompt and reply lengths (chat-like: most replies short, a few long),
  offline or with Poisson arrivals; chapter 6's engine runs. `capped_geometric_mean`: the mean
  reply length it draws, after the cap.
* `fixed_workload`: every request the same length, random token ids, optionally a shared system
  prompt; chapter 9's simulated GPU runs and the capacity planner.
* `poisson_arrivals`: the same requests, re-timed as a Poisson process.
* `agent_workload`: multi-turn agent conversations (a shared system prompt and tool schema, each
  turn's prompt the whole conversation so far) as (prompt, reply) token lists; chapter 5's
  prefix-caching replay.

Requests are `steploop.Request` objects (prompt token ids, max_new_tokens, arrival time in the
run's clock units). Arrivals of a Poisson process at `rate` per clock unit: exponential gaps of
mean 1 / rate, as `vllm bench serve --request-rate` draws them (burstiness 1).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from . import validate

MIN_RATE = 1e-200  # requests per clock unit: below it, 1/rate gaps overflow a float sum
MAX_COUNT = 10**7  # requests, turns or tokens: more is a mistake (and would not fit in memory)
from .steploop import Request


def _rate(rate) -> float | None:
    if rate is None:
        return None
    rate = validate.finite_float("rate", rate)
    if rate <= 0:
        raise ValueError(f"rate must be > 0 requests per clock unit (or None: all at t = 0), got {rate}")
    if rate < MIN_RATE:
        raise ValueError(f"rate must be ≥ {MIN_RATE:g} requests per clock unit (a gap of 1/rate between "
                         f"arrivals); got {rate:g}, whose arrival times would overflow")
    return rate


def _seed(seed) -> int:
    return validate.non_negative_int("seed", seed)


def _range(name: str, pair) -> tuple[int, int]:
    if isinstance(pair, (str, bytes)) or not hasattr(pair, "__len__") or len(pair) != 2:
        raise ValueError(f"{name} must be a (low, high) pair of integers, got {pair!r}")
    low, high = (validate.integer(f"{name}[{i}]", v, 1, MAX_COUNT) for i, v in enumerate(pair))
    if low > high:
        raise ValueError(f"{name} must be (low, high) with low ≤ high, got {tuple(pair)}")
    return low, high


def mixed_workload(n_requests: int, vocab: int | None = None, prompts: list[list[int]] | None = None,
                   prompt_len: tuple[int, int] = (8, 32), mean_output: float = 24.0,
                   max_output: int = 96, rate: float | None = None, seed: int = 0) -> list[Request]:
    """Return requests with mixed lengths: the workload of the continuous-batching chapter.

    Prompt length ~ Uniform{prompt_len}; prompts are slices of `prompts` texts (or random ids
    below `vocab`). Output length ~ min(max_output, Geometric(1 / mean_output)) with the
    geometric on {1, 2, ...} (NumPy's `geometric`: the trial of the first success, mean
    `mean_output` before the cap; `capped_geometric_mean` gives the mean after it): most replies
    are short, a few are long, as in chat traces. Arrivals: all at 0 (offline), or a Poisson
    process of `rate` requests per clock unit.
    """
    if (vocab is None) == (prompts is None):
        raise ValueError("give exactly one of vocab (random prompts) or prompts (token lists to slice)")
    validate.integer("n_requests", n_requests, 0, MAX_COUNT)
    if vocab is not None:
        validate.positive_int("vocab", vocab)
    else:
        prompts = [validate.int_list(f"prompts[{i}]", p, minimum=0) for i, p in enumerate(prompts)]
        if not prompts or not all(prompts):
            raise ValueError("prompts must hold at least one non-empty token list")
    low, high = _range("prompt_len", prompt_len)
    validate.finite_float("mean_output", mean_output, minimum=1.0)
    validate.integer("max_output", max_output, 1, MAX_COUNT)
    rate, rng = _rate(rate), np.random.default_rng(_seed(seed))
    t, requests = 0.0, []
    for i in range(n_requests):
        length = int(rng.integers(low, high + 1))
        if prompts is None:
            prompt = rng.integers(0, vocab, length).tolist()
        else:
            text = prompts[int(rng.integers(len(prompts)))]
            s = int(rng.integers(0, max(1, len(text) - length)))
            prompt = list(text[s:s + length])
        out = int(min(max_output, rng.geometric(1.0 / mean_output)))
        if rate is not None:
            t += float(rng.exponential(1.0 / rate))
        requests.append(Request(i, tuple(prompt), out, t if rate is not None else 0.0))
    return requests


def capped_geometric_mean(mean_output: float, max_output: int) -> float:
    """Return E[min(max_output, L)] for L ~ Geometric(1 / mean_output) on {1, 2, ...}.

    The output lengths `mixed_workload` draws, in expectation: with p = 1 / mean_output,
    E[min(m, L)] = sum over j = 0 .. m-1 of P(L > j) = sum (1 - p)^j = (1 - (1 - p)^m) / p.
    """
    mean_output = validate.finite_float("mean_output", mean_output, minimum=1.0)
    max_output = validate.integer("max_output", max_output, 1, MAX_COUNT)
    p = 1.0 / mean_output
    return mean_output * (1.0 - (1.0 - p) ** max_output)


def fixed_workload(n_requests: int, prompt_tokens: int, output_tokens: int, rate: float | None = None,
                   seed: int = 0, shared_prefix_tokens: int = 0) -> list[Request]:
    """Return requests of fixed lengths with random token ids; Poisson arrivals at `rate` per second
    (None: all at t = 0, an offline benchmark). The first `shared_prefix_tokens` of every prompt
    are the same (a system prompt), the rest differ."""
    n_requests = validate.integer("n_requests", n_requests, 1, MAX_COUNT)
    prompt_tokens = validate.integer("prompt_tokens", prompt_tokens, 1, MAX_COUNT)
    output_tokens = validate.integer("output_tokens", output_tokens, 1, MAX_COUNT)
    shared_prefix_tokens = validate.integer("shared_prefix_tokens", shared_prefix_tokens, 0, prompt_tokens)
    rate, rng = _rate(rate), np.random.default_rng(_seed(seed))
    shared = tuple(rng.integers(0, 32000, shared_prefix_tokens).tolist())
    t, out = 0.0, []
    for i in range(n_requests):
        if rate is not None:
            t += float(rng.exponential(1.0 / rate))
        # distinct first token after the shared part: no accidental prefix hits
        rest = (100000 + i,) + tuple(rng.integers(0, 32000, prompt_tokens - shared_prefix_tokens - 1).tolist())
        prompt = (shared + rest)[:prompt_tokens] if shared_prefix_tokens < prompt_tokens else shared
        out.append(Request(i, prompt, output_tokens, t))
    return out


def poisson_arrivals(requests: list[Request], rate: float, seed: int = 0) -> list[Request]:
    """Return the same requests with Poisson arrival times at `rate` per clock unit."""
    requests = validate.items("requests", requests)
    for i, r in enumerate(requests):
        if not isinstance(r, Request):
            raise TypeError(f"requests[{i}] must be a Request, got {type(r).__name__}")
    rate = _rate(rate)
    if rate is None:
        raise ValueError("rate must be > 0 requests per clock unit, got None")
    rng = np.random.default_rng(_seed(seed))
    times = np.cumsum(rng.exponential(1.0 / rate, len(requests)))
    return [replace(r, arrival_time=float(t)) for r, t in zip(requests, times)]


def agent_workload(
    n_conversations: int = 20,
    turns: int = 4,
    system_tokens: int = 600,
    tools_tokens: int = 900,
    user_tokens: tuple[int, int] = (20, 120),
    reply_tokens: tuple[int, int] = (30, 200),
    vocab: int = 50_000,
    seed: int = 0,
) -> list[tuple[list[int], list[int]]]:
    """Return requests (prompt tokens, reply tokens) in arrival order.

    Every conversation starts with the same system prompt and tool schema; turn k's prompt is
    the whole conversation so far (previous prompts and replies) plus a new user message. The
    replies are random tokens fixed in advance (a stand-in for what the model would generate);
    what matters for caching is that they become part of the next turn's prompt. Conversations
    interleave (round-robin by turn).
    """
    n_conversations = validate.integer("n_conversations", n_conversations, 0, MAX_COUNT)
    turns = validate.integer("turns", turns, 0, MAX_COUNT)
    if n_conversations * turns > MAX_COUNT:
        raise ValueError(f"n_conversations x turns = {n_conversations * turns} requests, more than {MAX_COUNT}")
    system_tokens = validate.integer("system_tokens", system_tokens, 0, MAX_COUNT)
    tools_tokens = validate.integer("tools_tokens", tools_tokens, 0, MAX_COUNT)
    user_lo, user_hi = _range("user_tokens", user_tokens)
    reply_lo, reply_hi = _range("reply_tokens", reply_tokens)
    vocab = validate.positive_int("vocab", vocab)
    rng = np.random.default_rng(_seed(seed))
    shared = rng.integers(0, vocab, system_tokens + tools_tokens).tolist()
    history = [list(shared) for _ in range(n_conversations)]
    requests = []
    for _ in range(turns):
        for c in range(n_conversations):
            history[c] += rng.integers(0, vocab, rng.integers(user_lo, max(user_hi, user_lo + 1))).tolist()
            reply = rng.integers(0, vocab, rng.integers(reply_lo, max(reply_hi, reply_lo + 1))).tolist()
            requests.append((list(history[c]), reply))
            history[c] += reply
    return requests
