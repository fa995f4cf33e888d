"""Tests for inferbook.speculative: the rejection rule keeps the target's distribution exactly.

Statistical tests use a fixed seed, so they are deterministic; the threshold is a chi-square
p-value of 1e-3, i.e. a correct rule would fail for about one seed in a thousand, while the
wrong rules tested beside it (resample from p after a rejection; ignore q) give p-values below
1e-50 at the same sample size. Exact (non-statistical) checks carry the proof itself.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chi2, chisquare

from inferbook import speculative
from inferbook.decode import generate_cached
from inferbook.gpt import GPT, GPTConfig
from inferbook.speculation_math import expected_tokens_per_pass
from inferbook.speculative import (
    acceptance_probability,
    probabilities,
    residual,
    sample_generate,
    speculative_generate,
    verify,
)

P_MIN = 1e-3  # chi-square p-value below which a test fails (see the module docstring)


def dist(values) -> torch.Tensor:
    t = torch.tensor(values, dtype=torch.float64) + 1e-12
    return t / t.sum()


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 8).flatmap(lambda v: st.tuples(
    st.lists(st.floats(0, 1), min_size=v, max_size=v).filter(lambda x: sum(x) > 0.1),
    st.lists(st.floats(0, 1), min_size=v, max_size=v).filter(lambda x: sum(x) > 0.1))))
def test_one_step_output_distribution_is_exactly_p(pq):
    """P(emit x) = q(x)·min(1, p(x)/q(x)) + (1 − β)·residual(x) = min(p, q)(x) + (p − q)⁺(x) = p(x)."""
    p, q = dist(pq[0]), dist(pq[1])
    beta = acceptance_probability(p, q)
    emitted = torch.minimum(p, q) + (1 - beta) * residual(p, q)
    torch.testing.assert_close(emitted, p, atol=1e-12, rtol=0)
    assert abs(float(beta) - (1 - 0.5 * float((p - q).abs().sum()))) < 1e-12  # β = 1 − TV


def test_residual_of_equal_distributions_is_p():
    p = dist([0.2, 0.3, 0.5])
    torch.testing.assert_close(residual(p, p), p)


def _markov(v: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    target = torch.distributions.Dirichlet(torch.full((v,), 2.0)).sample((v,))
    draft = 0.5 * target + 0.5 * torch.distributions.Dirichlet(torch.full((v,), 2.0)).sample((v,))
    target, draft = target.double(), draft.double()
    return target / target.sum(-1, keepdim=True), draft / draft.sum(-1, keepdim=True)


def markov_samples(P, Q, k, n, seed, verify_fn=verify):
    """Return [n, k+1] sequences: one speculative round on bigram chains P (target), Q (draft)
    from state 0, completed by sampling P itself (what the next rounds do in distribution)."""
    g = torch.Generator().manual_seed(seed)
    prev = torch.zeros(n, dtype=torch.long)
    drafts, q_rows, p_rows = [], [], [P[prev]]
    for _ in range(k):
        q_rows.append(Q[prev])
        prev = torch.multinomial(q_rows[-1], 1, generator=g)[:, 0]
        drafts.append(prev)
        p_rows.append(P[prev])
    draft = torch.stack(drafts, 1)
    n_acc, nxt = verify_fn(torch.stack(p_rows, 1), torch.stack(q_rows, 1), draft, g)
    out = torch.cat([draft, torch.zeros(n, 1, dtype=torch.long)], 1)
    rows = torch.arange(n)
    out[rows, n_acc] = nxt
    for j in range(1, k + 1):  # positions after the round's last token: sample the target chain
        fill = torch.multinomial(P[out[:, j - 1]], 1, generator=g)[:, 0]
        out[:, j] = torch.where(n_acc < j, fill, out[:, j])
    return out


def chi_square_pvalue(P, k, seqs) -> float:
    v = P.shape[0]
    exact = np.zeros((v,) * (k + 1))
    for seq in itertools.product(range(v), repeat=k + 1):
        prob, prev = 1.0, 0
        for x in seq:
            prob, prev = prob * float(P[prev, x]), x
        exact[seq] = prob
    index = np.ravel_multi_index(seqs.numpy().T, exact.shape)
    counts = np.bincount(index, minlength=exact.size)
    return chisquare(counts, exact.ravel() * len(seqs)).pvalue


def test_speculative_round_matches_target_chain_chi_square():
    P, Q = _markov(4, seed=0)
    seqs = markov_samples(P, Q, k=3, n=200_000, seed=1)
    assert chi_square_pvalue(P, 3, seqs) > P_MIN


@pytest.mark.parametrize("wrong", ["resample_from_p", "ignore_q"])
def test_wrong_rules_are_detected(monkeypatch, wrong):
    """The same test has power: two plausible mistakes are rejected with p-values ≈ 0."""
    P, Q = _markov(4, seed=0)
    if wrong == "resample_from_p":
        monkeypatch.setattr(speculative, "residual", lambda p, q: p)
        fn = verify
    else:
        def fn(p, q, draft, g):  # accept with prob min(1, p) as if q were uniform-1
            return verify(p, torch.ones_like(q), draft, g)
    seqs = markov_samples(P, Q, k=3, n=200_000, seed=1, verify_fn=fn)
    assert chi_square_pvalue(P, 3, seqs) < 1e-50


@pytest.mark.parametrize("k", [1, 3, 6])
def test_tokens_per_round_formula_for_constant_alpha(k):
    """With context-free p and q, β is the same everywhere and E[tokens] = (1 − α^(k+1))/(1 − α)."""
    n = 100_000
    p, q = dist([0.5, 0.3, 0.15, 0.05]), dist([0.25, 0.25, 0.25, 0.25])
    g = torch.Generator().manual_seed(k)
    draft = torch.multinomial(q, n * k, replacement=True, generator=g).view(n, k)
    n_acc, _ = verify(p.expand(n, k + 1, 4), q.expand(n, k, 4), draft, g)
    tokens = (n_acc + 1).double()
    alpha = float(acceptance_probability(p, q))
    expected = expected_tokens_per_pass(alpha, k)
    assert abs(tokens.mean().item() - expected) < 5 * tokens.std().item() / n ** 0.5


def test_expected_tokens_per_pass_edges():
    assert expected_tokens_per_pass(0.0, 5) == 1.0
    assert expected_tokens_per_pass(1.0, 5) == 6.0
    assert expected_tokens_per_pass(0.5, 2) == pytest.approx(1.75)
    with pytest.raises(ValueError, match="alpha"):
        expected_tokens_per_pass(1.5, 2)


def test_verify_rejects_bad_shapes():
    p, q = torch.rand(2, 3, 5), torch.rand(2, 2, 5)
    with pytest.raises(ValueError, match="shapes disagree"):
        verify(p, q, torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"need p \[B, k\+1, V\]"):
        verify(p[0], q, torch.zeros(2, 2, dtype=torch.long))


def test_probabilities_validates_temperature():
    with pytest.raises(ValueError, match="temperature"):
        probabilities(torch.zeros(3), -1.0)
    torch.testing.assert_close(probabilities(torch.tensor([0.0, 2.0, 1.0]), 0), torch.tensor([0.0, 1.0, 0.0]))


def tiny_pair(vocab: int, seed: int, scale: float = 20.0) -> tuple[GPT, GPT]:
    """Random float64 GPTs with weights scaled up so their distributions are far from uniform."""
    torch.manual_seed(seed)
    target = GPT(GPTConfig(vocab_size=vocab, n_positions=64, n_embd=32, n_layer=2, n_head=2))
    draft = GPT(GPTConfig(vocab_size=vocab, n_positions=64, n_embd=16, n_layer=1, n_head=2))
    with torch.no_grad():
        for model in (target, draft):
            for param in model.parameters():
                param.mul_(scale)
    return target.double().eval(), draft.double().eval()


@pytest.mark.parametrize("k", [0, 1, 2, 4, 7])
@pytest.mark.parametrize("seed", [0, 1])
def test_greedy_speculative_equals_greedy_decoding(k, seed):
    target, draft = tiny_pair(13, seed)
    prompt = torch.randint(0, 13, (1, 5), generator=torch.Generator().manual_seed(seed))
    expected = generate_cached(target, prompt, 40).tokens
    result = speculative_generate(target, draft, prompt, 40, k, temperature=0)
    assert result.tokens.tolist() == expected.tolist()
    assert result.new_tokens == 40 and result.target_passes == len(result.rounds)
    assert sample_generate(target, prompt, 40, temperature=0).tolist() == expected.tolist()


def test_draft_equal_to_target_accepts_everything():
    target, _ = tiny_pair(13, 0)
    result = speculative_generate(target, target, torch.tensor([[1, 2]]), 30, 4, temperature=1.0,
                                  generator=torch.Generator().manual_seed(0))
    assert all(n == k for k, n in result.rounds)
    assert result.target_passes == 6 and result.acceptance_rate == 1.0
    assert all(abs(b - 1) < 1e-12 for b in result.betas)


def test_gpt_speculative_sampling_matches_target_distribution():
    """End to end with two real (random) GPTs: the first 3 new tokens follow the target exactly."""
    vocab, new = 2, 3
    target, draft = tiny_pair(vocab, 2, scale=8.0)
    prompt = torch.tensor([[0, 1]])
    exact = {}
    with torch.inference_mode():
        for seq in itertools.product(range(vocab), repeat=new):
            x = torch.tensor([[0, 1, *seq]])
            logp = torch.log_softmax(target(x)[0, 1:-1], -1)
            exact[seq] = float(torch.exp(sum(logp[i, s] for i, s in enumerate(seq))))
    g = torch.Generator().manual_seed(0)
    n = 500
    counts = dict.fromkeys(exact, 0)
    for _ in range(n):
        out = speculative_generate(target, draft, prompt, new, k=2, generator=g).tokens[0, 2:]
        counts[tuple(out.tolist())] += 1
    keys = sorted(exact)
    observed = np.array([counts[s] for s in keys])
    expected = np.array([exact[s] for s in keys]) * n
    assert abs(expected.sum() - n) < 1e-6
    stat = ((observed - expected) ** 2 / expected).sum()
    assert chi2.sf(stat, len(keys) - 1) > P_MIN


def test_speculative_generate_validates_inputs():
    target, draft = tiny_pair(13, 0)
    with pytest.raises(ValueError, match="prompt must be"):
        speculative_generate(target, draft, torch.tensor([1, 2]), 5, 2)
    with pytest.raises(ValueError, match="n_positions"):
        speculative_generate(target, draft, torch.tensor([[1, 2]]), 100, 2)
    other = GPT(GPTConfig(vocab_size=7, n_positions=64, n_embd=16, n_layer=1, n_head=2))
    with pytest.raises(ValueError, match="vocabularies differ"):
        speculative_generate(target, other, torch.tensor([[1, 2]]), 5, 2)


def test_tiny_lm_vocabulary_and_prompts():
    from inferbook import tiny_lm

    text = "def f(x):\n    return x  # ok"
    assert tiny_lm.decode(tiny_lm.encode(text)) == text
    assert tiny_lm.decode(tiny_lm.encode("tab\there é")) == "tab    here ?"  # tabs expand, others -> '?'
    with pytest.raises(ValueError, match="vocabulary"):
        tiny_lm.decode([len(tiny_lm.VOCAB)])
    windows = tiny_lm.prompt_windows(5, 16, seed=1)
    assert windows == tiny_lm.prompt_windows(5, 16, seed=1) and all(len(w) == 16 for w in windows)
    with pytest.raises(ValueError, match="length"):
        tiny_lm.prompt_windows(1, 0)


def test_trained_pair_loads_and_the_draft_agrees_with_the_target():
    """The committed weights: a draft that agrees with the target far more often than chance."""
    from inferbook import tiny_lm

    target, draft = tiny_lm.load("target"), tiny_lm.load("draft")
    assert target.config == tiny_lm.TARGET_CONFIG and draft.config == tiny_lm.DRAFT_CONFIG
    x = torch.tensor([tiny_lm.encode(tiny_lm.PROMPT_TEXT[:120])])
    with torch.inference_mode():
        beta = acceptance_probability(torch.softmax(target(x)[0], -1), torch.softmax(draft(x)[0], -1))
    assert beta.mean() > 0.5  # uniform guessing over 96 characters would give about 1/96
    with pytest.raises(ValueError, match="target"):
        tiny_lm.load("teacher")
