"""Exercises 6 and 7: plausible wrong answers fail at the check that names their mistake.

(The solution passing and the blank notebook failing are tested for every exercise in test_grading.py.)
"""

import pytest

from grading_helpers import run_exercise, solution_answer


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


ACCEPT_LOOP = """        n = 0
        while n < k and u[b, n] * q[b, n, draft[b, n]] < p[b, n, draft[b, n]]:  # u < p/q
            n += 1
"""
RESIDUAL = """        if n < k:
            dist = (p[b, n] - q[b, n]).clamp_min(0)    # residual after a rejection
            dist = dist / dist.sum() if dist.sum() > 0 else p[b, n]
        else:
            dist = p[b, k]                              # bonus token
"""


def verify_variant(old: str, new: str) -> str:
    """The solution's my_verify with one piece replaced."""
    return solution_answer("ex07_acceptance", "verify", old, new)


RESAMPLE_FROM_P = (RESIDUAL, """        dist = p[b, n]                                   # p, not the residual
""")
IGNORE_Q = (ACCEPT_LOOP, """        n = 0
        while n < k and u[b, n] < p[b, n, draft[b, n]]:     # accepts with p(x), not p(x)/q(x)
            n += 1
""")
COUNTS_ALL_ACCEPTS = (ACCEPT_LOOP, """        accepted = [bool(u[b, i] * q[b, i, draft[b, i]] < p[b, i, draft[b, i]]) for i in range(k)]
        n = sum(accepted)                                    # counts accepts after a rejection too
""")
NO_BONUS = (RESIDUAL, """        m = min(n, k - 1)                                    # after k acceptances, reuses position k-1
        dist = (p[b, m] - q[b, m]).clamp_min(0)
        dist = dist / dist.sum() if dist.sum() > 0 else p[b, m]
""")


@pytest.mark.parametrize(
    "source,failed_check",
    [
        (verify_variant(*RESAMPLE_FROM_P), "first token follows the target"),
        (verify_variant(*IGNORE_Q), "first token follows the target"),
        (verify_variant(*COUNTS_ALL_ACCEPTS), "greedy limit: accepted counts"),
        (verify_variant(*NO_BONUS), "bonus token follows the target after the drafts"),
    ],
    ids=["resample-from-p", "ignore-q", "counts-all-accepts", "no-bonus"],
)
def test_ex07_wrong_answers_fail_at_the_right_check(tmp_path, source, failed_check):
    run = run_exercise("ex07_acceptance", tmp_path, replacements={"verify": source})
    assert not run.passed
    assert failed_check in run.check_failures(), run.output[-3000:]
