"""Grading cases of Exercise 9.1 (find the knee), in the shape of grading_cases.py:
WRONG (exercise, answer cell, source, the check that must fail FIRST), ALTERNATIVES
(differently written right answers that must pass) and BOUNDARIES (what each check covers).
The grader's owner merges `tests/grading_cases_ex*.py` into the case table.
"""

from grading_helpers import solution_answer as sol

E9 = "ex09_find_the_knee"

BOUNDARIES = {
    E9: {
        "Part 1/attainment, both at the limit": "TTFT and TPOT exactly at their limits (<=, not <)",
        "Part 1/attainment, one past each limit": "one request just past each limit, one inside",
        "Part 1/attainment, a one-token request": "a request with no TPOT (counts as 0, vLLM)",
        "Part 1/attainment, an SLO on TTFT only": "a limit of None (no limit on TPOT)",
        "Part 1/attainment, the example at 8 requests/s · hidden case": "a simulated run; an SLO and "
                                                                         "workload drawn afresh",
        "Part 2/knee of the example": "the highest rate with attainment >= 0.9",
        "Part 2/no rate meets the SLO: None": "a configuration that meets the SLO at no rate",
        "Part 2/knee, hidden configuration": "model, GPU, lengths and scheduler limits drawn at "
                                             "grading time, never printed",
        "Part 3/limit of the example at 8, 10 requests/s": "TPOT breaks first (chunked 2048 budget)",
        "Part 3/limit, long prompts (hidden rate)": "TTFT breaks first (4096-token prompts)",
        "Part 3/limit, hidden configuration": "a configuration and rate drawn afresh",
    },
}

TTFT_ONLY = sol(E9, "attainment", "        good += ok_ttft and ok_tpot", "        good += ok_ttft")
STRICT = sol(E9, "attainment", "r.ttft <= slo.ttft", "r.ttft < slo.ttft").replace(
    "tpot <= slo.tpot", "tpot < slo.tpot")
ONE_TOKEN_TPOT = sol(E9, "attainment", "tpot = r.tpot if r.output_tokens > 1 else 0.0",
                     "tpot = r.tpot")
NONE_IS_ZERO = sol(E9, "attainment", "ok_tpot = slo.tpot is None or tpot <= slo.tpot",
                   "ok_tpot = tpot <= (slo.tpot or 0.0)")
FIRST_FAILURE = '''
def my_knee(dep, prompt_tokens, output_tokens, slo, rates):
    for rate in rates:  # the first rate that misses the SLO
        if my_attainment(serve_at(dep, rate, prompt_tokens, output_tokens), slo) < 0.9:
            return rate
    return None
'''
NEVER_NONE = sol(E9, "knee", "return max(good) if good else None",
                 "return max(good) if good else rates[0]")
MEDIAN_LATENCIES = '''
import numpy as np


def my_knee(dep, prompt_tokens, output_tokens, slo, rates):
    good = []
    for rate in rates:  # the median request meets the SLO: not 90 % of them
        m = serve_at(dep, rate, prompt_tokens, output_tokens)
        if (np.median([r.ttft for r in m]) <= slo.ttft
                and np.median([r.tpot for r in m]) <= slo.tpot):
            good.append(rate)
    return max(good) if good else None
'''
TYPED_IN_KNEE = "def my_knee(dep, prompt_tokens, output_tokens, slo, rates):\n    return 6  # the example's\n"
ALWAYS_TPOT = sol(E9, "limit", 'return "ttft" if late >= slow else "tpot"', 'return "tpot"')
SWAPPED = sol(E9, "limit", 'return "ttft" if late >= slow else "tpot"',
              'return "tpot" if late >= slow else "ttft"')

# Rule: a limit of None is no limit, for TTFT too (not only TPOT).
TTFT_NONE_FAILS = sol(E9, "attainment", "ok_ttft = slo.ttft is None or r.ttft <= slo.ttft",
                      "ok_ttft = slo.ttft is not None and r.ttft <= slo.ttft")
# Rule: the knee is the highest rate at >= 0.9, so exactly 0.9 counts.
KNEE_STRICT = sol(E9, "knee", ">= 0.9", "> 0.9")
# Rule: the highest such rate of the sweep, not the last one before the first miss.
KNEE_STOPS_AT_DIP = """
def my_knee(dep, prompt_tokens, output_tokens, slo, rates):
    best = None
    for rate in sorted(rates):
        if my_attainment(serve_at(dep, rate, prompt_tokens, output_tokens), slo) < 0.9:
            break
        best = rate
    return best
"""
# Rule: the sweep is the `rates` argument.
KNEE_OWN_SWEEP = sol(E9, "knee", "for rate in rates", "for rate in RATES")
# Rule: a tie between TTFT and TPOT misses is "ttft".
LIMIT_TIE_TPOT = sol(E9, "limit", 'return "ttft" if late >= slow else "tpot"',
                     'return "ttft" if late > slow else "tpot"')
# Rule: a one-token reply never breaks the TPOT limit.
LIMIT_ONE_TOKEN = sol(E9, "limit", "slow = sum(r.output_tokens > 1 and r.tpot > slo.tpot for r in m)",
                      "slow = sum(r.tpot > slo.tpot for r in m)")

# Rule: references are computed before the learner's function runs, on objects of their own: a
# my_limit that rewrites the scripted stand-in it is given (so that the reference, run on the same
# object afterwards, agreed) fails.
LIMIT_REWRITES_SCRIPT = sol(E9, "limit", "    m = serve_at(dep, rate, prompt_tokens, output_tokens)\n",
                            '    if hasattr(dep, "counts"):  # a scripted stand-in: make it say "tpot"\n'
                            '        dep.counts[rate] = {"slow": 120}\n        return "tpot"\n'
                            "    m = serve_at(dep, rate, prompt_tokens, output_tokens)\n")

WRONG = [
    (E9, "attainment", TTFT_NONE_FAILS, "Part 1/attainment, an SLO on TPOT only"),
    (E9, "knee", KNEE_STRICT, "Part 2/knee, a sweep that dips, touches 0.9 and is given (hidden)"),
    (E9, "knee", KNEE_STOPS_AT_DIP, "Part 2/knee, a sweep that dips, touches 0.9 and is given (hidden)"),
    (E9, "knee", KNEE_OWN_SWEEP, "Part 2/knee, a sweep that dips, touches 0.9 and is given (hidden)"),
    # the hidden configuration is drawn afresh and may itself tie (then it fails first)
    (E9, "limit", LIMIT_TIE_TPOT, ("Part 3/limit, as many TTFT as TPOT misses (hidden)",
                                   "Part 3/limit, hidden configuration")),
    (E9, "limit", LIMIT_ONE_TOKEN, "Part 3/limit, one-token replies (hidden)"),
    (E9, "limit", LIMIT_REWRITES_SCRIPT, "Part 3/limit, as many TTFT as TPOT misses (hidden)"),
    (E9, "attainment", STRICT, "Part 1/attainment, both at the limit"),
    (E9, "attainment", TTFT_ONLY, "Part 1/attainment, one past each limit"),
    (E9, "attainment", ONE_TOKEN_TPOT, "Part 1/attainment, a one-token request"),
    (E9, "attainment", NONE_IS_ZERO, "Part 1/attainment, an SLO on TTFT only"),
    (E9, "knee", FIRST_FAILURE, "Part 2/knee of the example"),
    (E9, "knee", MEDIAN_LATENCIES, "Part 2/knee of the example"),
    (E9, "knee", NEVER_NONE, "Part 2/no rate meets the SLO: None"),
    (E9, "knee", TYPED_IN_KNEE, "Part 2/no rate meets the SLO: None"),
    (E9, "limit", SWAPPED, "Part 3/limit of the example at 8 requests/s"),
    (E9, "limit", ALWAYS_TPOT, "Part 3/limit, long prompts (hidden rate)"),
]

ALTERNATIVES = [
    (E9, "NumPy masks, a downward search, a Counter", {
        "attainment": '''
import numpy as np


def my_attainment(requests, slo):
    ttft = np.array([r.ttft for r in requests])
    tpot = np.array([r.tpot if r.output_tokens > 1 else 0.0 for r in requests])
    ok = np.ones(len(requests), dtype=bool)
    if slo.ttft is not None:
        ok &= ttft <= slo.ttft
    if slo.tpot is not None:
        ok &= tpot <= slo.tpot
    return float(ok.mean())
''',
        "knee": '''
def my_knee(dep, prompt_tokens, output_tokens, slo, rates):
    for rate in sorted(rates, reverse=True):  # from the top down: the first good one
        share = my_attainment(serve_at(dep, rate, prompt_tokens, output_tokens), slo)
        if share >= 0.9:
            return rate
    return None


print("knee:", my_knee(dep, PROMPT, OUTPUT, SLO_I, RATES))
''',
        "limit": '''
from collections import Counter


def my_limit(dep, prompt_tokens, output_tokens, slo, rate):
    broken = Counter()
    for r in serve_at(dep, rate, prompt_tokens, output_tokens):
        broken["ttft"] += r.ttft > slo.ttft
        broken["tpot"] += r.output_tokens > 1 and r.tpot > slo.tpot
    return max(["ttft", "tpot"], key=lambda k: (broken[k], k == "ttft"))
''',
    }),
    (E9, "a filter with math.inf, a dict of attainments", {
        "attainment": '''
import math


def my_attainment(requests, slo):
    ttft_limit = math.inf if slo.ttft is None else slo.ttft
    tpot_limit = math.inf if slo.tpot is None else slo.tpot
    met = [r for r in requests
           if r.ttft <= ttft_limit and (r.output_tokens == 1 or r.tpot <= tpot_limit)]
    return len(met) / len(requests)
''',
        "knee": '''
def my_knee(dep, prompt_tokens, output_tokens, slo, rates):
    share = {rate: my_attainment(serve_at(dep, rate, prompt_tokens, output_tokens), slo)
             for rate in rates}
    meeting = [rate for rate, s in share.items() if s >= 0.9]
    return max(meeting, default=None)
''',
    }),
]
