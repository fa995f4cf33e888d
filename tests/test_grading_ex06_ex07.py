"""Exercises 6 and 7: plausible wrong answers fail at the check that names their mistake.

(The solution passing and the blank notebook failing are tested for every exercise in test_grading.py.)
"""

import pytest

from grading_helpers import run_exercise


PREEMPT_OLDEST = '''
def make_room(state, s, n):
    while blocks_for(s["cached"] + n) - s["blocks"] > state["free"]:
        victim = state["running"].pop(0)         # evicts the oldest sequence instead of the newest
        state["free"] += victim["blocks"]
        victim["blocks"], victim["cached"] = 0, 0
        state["waiting"].appendleft(victim)
        if victim is s:
            return False
    return True
'''

ADMIT_IGNORES_BLOCKS = '''
def admit(state, budget, work):
    while state["waiting"] and budget > 0 and len(state["running"]) < MAX_NUM_SEQS:
        s = state["waiting"][0]
        n = s["length"]
        if n > budget and work:
            break
        state["waiting"].popleft()               # never checks the free blocks
        s["blocks"] = blocks_for(n)
        state["free"] -= s["blocks"]
        state["running"].append(s)
        work.append((s, n))
        budget -= n
    return budget
'''

ADMIT_ONLY_WHEN_EMPTY = '''
def admit(state, budget, work):
    if state["running"]:                           # static batching: wait for the batch to drain
        return budget
    while state["waiting"] and budget > 0 and len(state["running"]) < MAX_NUM_SEQS:
        s = state["waiting"][0]
        n = s["length"]
        if (n > budget and work) or blocks_for(n) > state["free"]:
            break
        state["waiting"].popleft()
        s["blocks"] = blocks_for(n)
        state["free"] -= s["blocks"]
        state["running"].append(s)
        work.append((s, n))
        budget -= n
    return budget
'''


@pytest.mark.parametrize(
    "answer,source,failed_check",
    [
        ("make_room", PREEMPT_OLDEST, "schedule with preemptions matches the engine"),
        ("admit", ADMIT_IGNORES_BLOCKS, "KV blocks never exceed the pool"),
        ("admit", ADMIT_ONLY_WHEN_EMPTY, "schedule with plenty of blocks matches the engine"),
    ],
    ids=["preempts-oldest", "ignores-blocks", "static-admission"],
)
def test_ex06_wrong_answers_fail_at_the_right_check(tmp_path, answer, source, failed_check):
    run = run_exercise("ex06_scheduler", tmp_path, replacements={answer: source})
    assert not run.passed
    assert failed_check in run.check_failures(), run.output[-3000:]


RESAMPLE_FROM_P = '''
def my_verify(p, q, draft, generator):
    batch, k = draft.shape
    n_accepted = torch.zeros(batch, dtype=torch.long)
    next_token = torch.zeros(batch, dtype=torch.long)
    u = torch.rand(batch, k, generator=generator, dtype=p.dtype)
    for b in range(batch):
        n = 0
        while n < k and u[b, n] * q[b, n, draft[b, n]] < p[b, n, draft[b, n]]:
            n += 1
        n_accepted[b] = n
        next_token[b] = torch.multinomial(p[b, n], 1, generator=generator)[0]   # p, not the residual
    return n_accepted, next_token
'''

IGNORE_Q = '''
def my_verify(p, q, draft, generator):
    batch, k = draft.shape
    n_accepted = torch.zeros(batch, dtype=torch.long)
    next_token = torch.zeros(batch, dtype=torch.long)
    u = torch.rand(batch, k, generator=generator, dtype=p.dtype)
    for b in range(batch):
        n = 0
        while n < k and u[b, n] < p[b, n, draft[b, n]]:     # accepts with p(x), not p(x)/q(x)
            n += 1
        if n < k:
            dist = (p[b, n] - q[b, n]).clamp_min(0)
            dist = dist / dist.sum() if dist.sum() > 0 else p[b, n]
        else:
            dist = p[b, k]
        n_accepted[b] = n
        next_token[b] = torch.multinomial(dist, 1, generator=generator)[0]
    return n_accepted, next_token
'''

COUNTS_ALL_ACCEPTS = '''
def my_verify(p, q, draft, generator):
    batch, k = draft.shape
    n_accepted = torch.zeros(batch, dtype=torch.long)
    next_token = torch.zeros(batch, dtype=torch.long)
    u = torch.rand(batch, k, generator=generator, dtype=p.dtype)
    for b in range(batch):
        accepted = [bool(u[b, i] * q[b, i, draft[b, i]] < p[b, i, draft[b, i]]) for i in range(k)]
        n = sum(accepted)                                    # counts accepts after a rejection too
        if n < k:
            dist = (p[b, n] - q[b, n]).clamp_min(0)
            dist = dist / dist.sum() if dist.sum() > 0 else p[b, n]
        else:
            dist = p[b, k]
        n_accepted[b] = n
        next_token[b] = torch.multinomial(dist, 1, generator=generator)[0]
    return n_accepted, next_token
'''

NO_BONUS = '''
def my_verify(p, q, draft, generator):
    batch, k = draft.shape
    n_accepted = torch.zeros(batch, dtype=torch.long)
    next_token = torch.zeros(batch, dtype=torch.long)
    u = torch.rand(batch, k, generator=generator, dtype=p.dtype)
    for b in range(batch):
        n = 0
        while n < k and u[b, n] * q[b, n, draft[b, n]] < p[b, n, draft[b, n]]:
            n += 1
        m = min(n, k - 1)                                    # after k acceptances, reuses position k-1
        dist = (p[b, m] - q[b, m]).clamp_min(0)
        dist = dist / dist.sum() if dist.sum() > 0 else p[b, m]
        n_accepted[b] = n
        next_token[b] = torch.multinomial(dist, 1, generator=generator)[0]
    return n_accepted, next_token
'''


@pytest.mark.parametrize(
    "source,failed_check",
    [
        (RESAMPLE_FROM_P, "first token follows the target"),
        (IGNORE_Q, "first token follows the target"),
        (COUNTS_ALL_ACCEPTS, "greedy limit: accepted counts"),
        (NO_BONUS, "bonus token follows the target after the drafts"),
    ],
    ids=["resample-from-p", "ignore-q", "counts-all-accepts", "no-bonus"],
)
def test_ex07_wrong_answers_fail_at_the_right_check(tmp_path, source, failed_check):
    run = run_exercise("ex07_acceptance", tmp_path, replacements={"verify": source})
    assert not run.passed
    assert failed_check in run.check_failures(), run.output[-3000:]
