"""Speculative decoding: a cheap draft proposes k tokens, the target checks them in one pass.

The rule (Leviathan et al. 2023; Chen et al. 2023). With p the target's and q the draft's
next-token distribution at a drafted position and d ~ q the drafted token:

* accept d with probability min(1, p(d) / q(d));
* on the first rejection, emit a token from the residual norm(max(0, p − q)) and stop;
* if all k drafts are accepted, emit a bonus token from the target's distribution after them.

Every emitted token is then distributed exactly as the target would have sampled it, and one
target pass yields between 1 and k + 1 tokens. `verify` is the rule for a batch of rounds;
`speculative_generate` runs it with two `gpt.GPT`s and their KV caches. Temperature 0 makes
p and q one-hot, and the same rule becomes greedy verification: accept while the draft's token
is the target's argmax, then emit the target's argmax.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from . import validate
from .gpt import GPT
from .kv_cache import KVCache


def _float_tensor(name: str, t) -> torch.Tensor:
    """Raise unless `t` is a floating-point tensor with at least one axis and one entry per row."""
    if not isinstance(t, torch.Tensor):
        raise validate.ArgumentTypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.dtype.is_floating_point:
        raise validate.ArgumentTypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if t.dim() == 0 or t.shape[-1] == 0:
        raise ValueError(f"{name} must have a non-empty last axis (the vocabulary), got shape {tuple(t.shape)}")
    return t


def _distributions(p, q) -> None:
    """Raise unless p and q are same-shaped tensors of probabilities (finite, ≥ 0)."""
    for name, t in (("p", p), ("q", q)):
        _float_tensor(name, t)
        if not torch.isfinite(t).all() or (t < 0).any():
            raise ValueError(f"{name} must hold probabilities (finite, ≥ 0)")
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same shape, got {tuple(p.shape)} and {tuple(q.shape)}")


def probabilities(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Return softmax(logits / temperature) over the last axis; one-hot argmax when temperature is 0."""
    temperature = validate.finite_float("temperature", temperature, minimum=0.0)
    _float_tensor("logits", logits)
    if torch.isnan(logits).any() or torch.isposinf(logits).any():
        raise ValueError("logits must not hold NaN or +inf (-inf masks a token)")
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    return torch.softmax(logits / temperature, dim=-1)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Return norm(max(0, p − q)) over the last axis: the distribution to sample after a rejection.

    Where p == q everywhere the residual is undefined, but then a rejection has probability 0;
    we return p there so the result is always a distribution.
    """
    _distributions(p, q)
    r = (p - q).clamp_min(0)
    total = r.sum(-1, keepdim=True)
    return torch.where(total > 0, r / total.clamp_min(torch.finfo(r.dtype).tiny), p)


def acceptance_probability(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Return β = Σ_x min(p(x), q(x)) = 1 − TV(p, q): the chance that a drafted token is accepted."""
    _distributions(p, q)
    return torch.minimum(p, q).sum(-1)


def verify(p: torch.Tensor, q: torch.Tensor, draft: torch.Tensor,
           generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (n_accepted [B], next_token [B]) for B rounds of draft-then-verify.

    p: [B, k + 1, V] target probabilities at the k drafted positions and the one after them;
    q: [B, k, V] draft probabilities the drafts were sampled from; draft: [B, k] token ids.
    Round b emits draft[b, :n_accepted[b]] followed by next_token[b].
    """
    if p.dim() != 3 or q.dim() != 3 or draft.dim() != 2:
        raise ValueError(f"need p [B, k+1, V], q [B, k, V], draft [B, k]; got {tuple(p.shape)}, "
                         f"{tuple(q.shape)}, {tuple(draft.shape)}")
    if draft.dtype.is_floating_point or draft.dtype == torch.bool:
        raise validate.ArgumentTypeError(f"draft must hold integer token ids, got dtype {draft.dtype}")
    batch, k = draft.shape
    if draft.numel():
        validate.int_tensor("draft", draft, 0, p.shape[-1], "token ids")
    if p.shape != (batch, k + 1, q.shape[-1]) or q.shape != (batch, k, p.shape[-1]):
        raise ValueError(f"shapes disagree: p {tuple(p.shape)} must be [B, k+1, V] and q "
                         f"{tuple(q.shape)} [B, k, V] with draft [B={batch}, k={k}]")
    u = torch.rand(batch, k, generator=generator, dtype=p.dtype, device=p.device)
    p_drafted = p[:, :k].gather(-1, draft[..., None])[..., 0]
    q_drafted = q.gather(-1, draft[..., None])[..., 0]
    accepted = u * q_drafted < p_drafted  # ⇔ u < p/q: probability min(1, p/q); never when p = 0
    n_accepted = accepted.long().cumprod(-1).sum(-1)  # drafts before the first rejection
    # After a rejection at position n sample the residual; after k acceptances the bonus
    # token comes from p itself, which is the residual against a zero draft distribution.
    q_padded = torch.cat([q, torch.zeros_like(p[:, :1])], dim=1)
    rows = torch.arange(batch, device=p.device)
    dist = residual(p[rows, n_accepted], q_padded[rows, n_accepted])
    next_token = torch.multinomial(dist, 1, generator=generator)[:, 0]
    return n_accepted, next_token


@dataclass
class SpeculativeResult:
    """tokens: prompt + new tokens, [1, prompt_len + new_tokens].

    rounds: (k used, drafts accepted) per target pass. betas: Σ min(p, q) at every drafted
    position the target tested (1 − TV between target and draft there).
    """

    tokens: torch.Tensor
    rounds: list[tuple[int, int]] = field(default_factory=list)
    betas: list[float] = field(default_factory=list)
    target_passes: int = 0
    draft_passes: int = 0
    seconds: float = 0.0

    @property
    def new_tokens(self) -> int:
        return sum(n + 1 for _, n in self.rounds)

    def tokens_per_target_pass(self, full_rounds_only: bool = True) -> float:
        """Return mean emitted tokens per target pass (by default over rounds that drafted the full k)."""
        validate.flag("full_rounds_only", full_rounds_only)
        if not self.rounds:
            raise ValueError("rounds is empty: no speculative round ran, so there is no rate")
        k_max = max(k for k, _ in self.rounds)
        chosen = [n + 1 for k, n in self.rounds if k == k_max or not full_rounds_only]
        return sum(chosen) / len(chosen)

    @property
    def acceptance_rate(self) -> float:
        """Return accepted / tested drafts (a draft after the first rejection is never tested)."""
        tested = sum(min(n + 1, k) for k, n in self.rounds)
        return sum(n for _, n in self.rounds) / max(tested, 1)


def _check_models(target: GPT, draft: GPT, prompt: torch.Tensor, new_tokens: int, k: int,
                  temperature: float) -> None:
    validate.instance_of("target", target, GPT), validate.instance_of("draft", draft, GPT)
    validate.token_tensor("prompt", prompt, min(target.config.vocab_size, draft.config.vocab_size))
    if prompt.shape[0] != 1:
        raise ValueError(f"prompt must be [1, t] (one sequence), got shape {tuple(prompt.shape)}")
    validate.positive_int("new_tokens", new_tokens)
    validate.non_negative_int("k", k)
    validate.finite_float("temperature", temperature, minimum=0.0)
    if target.config.vocab_size != draft.config.vocab_size:
        raise ValueError(f"target and draft vocabularies differ: {target.config.vocab_size} vs "
                         f"{draft.config.vocab_size}")
    limit = min(target.config.n_positions, draft.config.n_positions)
    if prompt.shape[1] + new_tokens > limit:
        raise ValueError(f"prompt ({prompt.shape[1]}) + new_tokens ({new_tokens}) exceeds n_positions={limit}")


@torch.inference_mode()
def speculative_generate(target: GPT, draft: GPT, prompt: torch.Tensor, new_tokens: int, k: int,
                         temperature: float = 1.0,
                         generator: torch.Generator | None = None) -> SpeculativeResult:
    """Return `new_tokens` tokens sampled from `target` (exactly), drafted `k` at a time by `draft`.

    prompt: [1, t]. Each round: the draft samples k tokens one by one (k small passes), the
    target scores all of them in one pass, `verify` keeps a prefix and adds one token. Each
    model's KV cache is rolled back by overwriting from its first stale position.
    """
    _check_models(target, draft, prompt, new_tokens, k, temperature)
    new_tokens, k, temperature = int(new_tokens), int(k), float(temperature)
    start = time.perf_counter()
    total = prompt.shape[1] + new_tokens
    dtype = next(target.parameters()).dtype
    t_cache = KVCache.for_model(target.config, 1, total, dtype=dtype)
    d_cache = KVCache.for_model(draft.config, 1, total, dtype=next(draft.parameters()).dtype)
    tokens = prompt[0].tolist()
    t_valid = d_valid = 0  # positions whose keys/values each cache holds correctly
    result = SpeculativeResult(prompt)
    while len(tokens) < total:
        n = len(tokens)
        k_round = min(k, total - n - 1)  # never emit past `total`
        drafted, q_rows = [], []
        for _ in range(k_round):
            fresh = torch.tensor([(tokens + drafted)[d_valid:]])  # what the draft cache lacks
            logits = draft(fresh, cache=d_cache, pos=d_valid, last_only=True)[0, -1]
            d_valid += fresh.shape[1]
            q_rows.append(probabilities(logits.double(), temperature))
            drafted.append(int(torch.multinomial(q_rows[-1], 1, generator=generator)))
        result.draft_passes += k_round
        fed = torch.tensor([tokens[t_valid:] + drafted])
        logits = target(fed, cache=t_cache, pos=t_valid)[0, -(k_round + 1):]
        result.target_passes += 1
        p = probabilities(logits.double(), temperature)
        q = torch.stack(q_rows) if q_rows else p.new_zeros(0, p.shape[-1])
        n_acc, nxt = verify(p[None], q[None], torch.tensor([drafted], dtype=torch.long).view(1, k_round),
                            generator)
        n_acc, nxt = int(n_acc), int(nxt)
        betas = acceptance_probability(p[:k_round], q)
        result.betas.extend(betas[:min(n_acc + 1, k_round)].tolist())
        result.rounds.append((k_round, n_acc))
        tokens.extend(drafted[:n_acc] + [nxt])
        t_valid = n + n_acc  # the target saw tokens[n-1], d_1..d_k; d_1..d_n_acc survive
        d_valid = min(d_valid, n + n_acc)
    result.tokens = torch.tensor([tokens], dtype=prompt.dtype)
    result.seconds = time.perf_counter() - start
    return result


@torch.inference_mode()
def sample_generate(model: GPT, prompt: torch.Tensor, new_tokens: int, temperature: float = 1.0,
                    generator: torch.Generator | None = None) -> torch.Tensor:
    """Return prompt + `new_tokens` tokens sampled one per pass from `model` with a KV cache, [1, t + n].

    The baseline speculative decoding must match in distribution (and, at temperature 0, exactly).
    """
    validate.instance_of("model", model, GPT)
    _check_models(model, model, prompt, new_tokens, 0, temperature)
    new_tokens, temperature = int(new_tokens), float(temperature)
    total = prompt.shape[1] + new_tokens
    cache = KVCache.for_model(model.config, 1, total, dtype=next(model.parameters()).dtype)
    tokens = prompt[0].tolist()
    logits = model(prompt, cache=cache, pos=0, last_only=True)[0, -1]
    while True:
        p = probabilities(logits.double(), temperature)
        tokens.append(int(torch.multinomial(p, 1, generator=generator)))
        if len(tokens) == total:
            return torch.tensor([tokens], dtype=prompt.dtype)
        logits = model(torch.tensor([tokens[-1:]]), cache=cache, pos=len(tokens) - 1, last_only=True)[0, -1]
