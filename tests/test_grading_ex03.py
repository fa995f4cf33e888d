"""Exercise 3: plausible wrong answers fail at the check that names their mistake.

(The solution passing and the blank notebook failing are tested for every exercise in test_grading.py.)
"""

import pytest

from grading_helpers import run_exercise


UPDATE_HEAD = '''
def attention_update(m, l, acc, s, v):
    m_new = np.maximum(m, s.max(axis=1))
'''

FORGETS_TO_RESCALE_OUTPUT = UPDATE_HEAD + '''
    m_safe = np.where(np.isneginf(m_new), 0.0, m_new)
    alpha = np.exp(m - m_safe)
    p = np.exp(s - m_safe[:, None])
    return m_new, alpha * l + p.sum(axis=1), acc + p @ v          # acc keeps the old max's scale
'''

NAN_FOR_MASKED_ROWS = UPDATE_HEAD + '''
    alpha = np.exp(m - m_new)                                      # -inf - (-inf) = NaN
    p = np.exp(s - m_new[:, None])
    return m_new, alpha * l + p.sum(axis=1), alpha[:, None] * acc + p @ v
'''

TOP_LEFT_CAUSAL = '''
def tile_visible(q_start, q_end, k_start, n_q, n_k):
    return k_start <= q_end - 1                                    # ignores n_k - n_q
'''

OFF_BY_ONE = '''
def tile_visible(q_start, q_end, k_start, n_q, n_k):
    return k_start < (q_end - 1) + (n_k - n_q)                     # drops the diagonal tile
'''


@pytest.mark.parametrize(
    "answer,source,failed_check",
    [
        ("online_update", FORGETS_TO_RESCALE_OUTPUT, "rescaled output"),
        ("online_update", NAN_FOR_MASKED_ROWS, "fully masked tile"),
        ("tile_visible", TOP_LEFT_CAUSAL, "visible tiles, n_q != n_k, (64, 256, 32)"),
        ("tile_visible", OFF_BY_ONE, "visible tiles, n_q != n_k, (64, 81, 16)"),
    ],
    ids=["no-output-rescale", "nan-masked-rows", "top-left-causal", "off-by-one"],
)
def test_wrong_answers_fail_at_the_right_check(tmp_path, answer, source, failed_check):
    run = run_exercise("ex03_online_softmax", tmp_path, replacements={answer: source})
    assert not run.passed
    assert failed_check in run.check_failures(), run.output[-3000:]
