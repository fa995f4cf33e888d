"""Exercises 5a (prefix caching) and 5b (toy PagedAttention): wrong answers fail at the right check.

(The solution passing and the blank notebook failing are tested for every exercise in test_grading.py.)
"""

import pytest

from grading_helpers import run_exercise, solution_answer


# --- exercise 2: plausible wrong answers ---------------------------------------------------------
REENCODES = '''
def score_with_fork(model, prompt, completions):
    out = []
    with torch.inference_mode():
        for c in completions:                      # no cache at all: P is encoded every time
            out.append(model(torch.tensor([prompt + c]))[0, len(prompt):])
    return out
'''

NO_FORK = '''
def score_with_fork(model, prompt, completions):
    cache = PagedKVCache.for_model(model.config, num_blocks=64, block_size=16)
    cache.add_sequence("P")
    out = []
    with torch.inference_mode():
        model(torch.tensor([prompt]), cache=cache.view("P"), pos=0)
        for c in completions:                      # every completion appended to the same sequence
            view = cache.view("P")
            out.append(model(torch.tensor([c]), cache=view, pos=view.length)[0])
    return out
'''

NOT_CHAINED = '''
def chained_block_hashes(tokens, block_size=16):
    return [hash_block(0, tokens[s:s + block_size])          # each block hashed on its own
            for s in range(0, len(tokens) - block_size + 1, block_size)]
'''

PARTIAL_BLOCK = '''
def chained_block_hashes(tokens, block_size=16):
    hashes, parent = [], 0
    for start in range(0, len(tokens), block_size):          # hashes the partial last block too
        parent = hash_block(parent, tokens[start:start + block_size])
        hashes.append(parent)
    return hashes
'''

NO_CAP = '''
def reusable_tokens(prompt, cached, block_size=16):
    n = 0
    for h in chained_block_hashes(prompt, block_size):       # may reuse every block of the prompt
        if h not in cached:
            break
        n += 1
    return n * block_size
'''


@pytest.mark.parametrize(
    "answer,source,failed_check",
    [
        ("fork", REENCODES, "prompt prefilled once"),
        ("fork", NO_FORK, "forked logits equal re-encoding"),
        ("hashes", NOT_CHAINED, "hash chained to the parent"),
        ("hashes", PARTIAL_BLOCK, "only full blocks are hashed"),
        ("reuse", NO_CAP, "the last token is always computed"),
    ],
    ids=["re-encodes", "no-fork", "hash-not-chained", "hashes-partial-block", "reuses-whole-prompt"],
)
def test_ex02_wrong_answers_fail_at_the_right_check(tmp_path, answer, source, failed_check):
    run = run_exercise("ex05a_prefix_caching", tmp_path, replacements={answer: source})
    assert not run.passed
    assert failed_check in run.check_failures(), run.output[-3000:]


# --- exercise 3: plausible wrong answers ---------------------------------------------------------
OFF_BY_ONE = '''
def blocks_needed(num_tokens, block_size=16):
    return num_tokens // block_size + (num_tokens > 0)     # one block too many at a boundary
'''

def cache_variant(old: str, new: str) -> str:
    """The solution's ToyPagedCache with one piece replaced."""
    return solution_answer("ex05b_paged_attention", "paged_cache", old, new)


NOT_RETURNED = ("""        for block in self.tables.pop(seq):
            self.alloc.free(block)""", """        self.tables.pop(seq)                               # blocks never given back""")

WRITES_SHARED = ("""        elif self.alloc.refs[table[-1]] > 1:""", """        elif False:                                         # writes into the shared block""")


@pytest.mark.parametrize(
    "answer,source,failed_check",
    [
        ("blocks_needed", OFF_BY_ONE, "blocks at a block boundary"),
        ("paged_cache", cache_variant(*NOT_RETURNED), "blocks return to the free list on finish"),
        ("paged_cache", cache_variant(*WRITES_SHARED), "copy-on-write isolates the forks"),
    ],
    ids=["off-by-one-at-boundary", "blocks-not-returned", "cow-writes-shared-block"],
)
def test_ex03_wrong_answers_fail_at_the_right_check(tmp_path, answer, source, failed_check):
    run = run_exercise("ex05b_paged_attention", tmp_path, replacements={answer: source})
    assert not run.passed
    assert failed_check in run.check_failures(), run.output[-3000:]
