"""Exercise 1: plausible wrong answers fail at the check that names their mistake.

(The solution passing and the blank notebook failing are tested for every exercise in test_grading.py.)
"""


import pytest

from grading_helpers import run_exercise


BLOG_COUNT = '''
def naive_rows(n):
    return n * (n - 1) // 2          # the blog's 4950 for n = 100

def naive_dots(n):
    return sum(p * (p + 1) // 2 for p in range(1, n + 1))

def cached_rows(n):
    return n

def cached_dots(n):
    return n * (n + 1) // 2
'''

FORGETS_POSITION = '''
@torch.inference_mode()
def cached_greedy(model, prompt, new_tokens):
    cache = KVCache.for_model(model.config, prompt.shape[0], prompt.shape[1] + new_tokens)
    logits = model(prompt, cache=cache, pos=0)
    tokens = prompt
    for _ in range(new_tokens):
        next_token = logits[:, -1].argmax(dim=-1, keepdim=True)
        tokens = torch.cat([tokens, next_token], dim=1)
        if tokens.shape[1] < prompt.shape[1] + new_tokens:
            logits = model(next_token, cache=cache, pos=prompt.shape[1])   # always the same slot
    return tokens
'''

NO_CACHE = '''
@torch.inference_mode()
def cached_greedy(model, prompt, new_tokens):
    tokens = prompt
    for _ in range(new_tokens):
        next_token = model(tokens)[:, -1].argmax(dim=-1, keepdim=True)   # recomputes the prefix
        tokens = torch.cat([tokens, next_token], dim=1)
    return tokens
'''


@pytest.mark.parametrize(
    "answer,source,failed_check",
    [
        ("counts", BLOG_COUNT, "naive query rows, n=1"),
        ("cached_decoder", FORGETS_POSITION, "cached decoder tokens, batch=1"),
        ("cached_decoder", NO_CACHE, "cached decoder work, batch=1"),
    ],
    ids=["blog-4950-count", "forgets-position", "no-cache"],
)
def test_wrong_answers_fail_at_the_right_check(tmp_path, answer, source, failed_check):
    run = run_exercise("ex01_naive_vs_cached", tmp_path, replacements={answer: source})
    assert not run.passed
    assert failed_check in run.check_failures(), run.output[-3000:]
