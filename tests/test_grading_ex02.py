"""Exercise 2: plausible wrong answers fail at the check that names their mistake.

(The solution passing and the blank notebook failing are tested for every exercise in test_grading.py.)
"""

import pytest

from grading_helpers import run_exercise


LESSON_FORMULA = '''
def my_bytes_per_token_per_layer(spec, bytes_per_value):
    return 2 * spec.head_dim * bytes_per_value        # the lesson's formula: one head only
'''

MLA_TIMES_TWO = '''
def my_bytes_per_token_per_layer(spec, bytes_per_value):
    if spec.is_mla:   # treats the latent like a K and a V
        return 2 * (spec.kv_lora_rank + spec.qk_rope_head_dim) * bytes_per_value
    return 2 * spec.num_key_value_heads * spec.head_dim * bytes_per_value
'''

IGNORES_WINDOWS = '''
def my_kv_bytes(spec, ctx_tokens, batch, bytes_per_value):
    return batch * ctx_tokens * spec.num_hidden_layers * my_bytes_per_token_per_layer(spec, bytes_per_value)
'''


@pytest.mark.parametrize(
    "answer,source,failed_check",
    [
        ("per_layer", LESSON_FORMULA, "bytes per token per layer, Llama-2-7B"),
        ("per_layer", MLA_TIMES_TWO, "MLA bytes per token per layer, DeepSeek-V2-Lite"),
        ("kv_bytes", IGNORES_WINDOWS, "KV bytes, Mistral-7B-v0.1 at 32768"),
    ],
    ids=["lesson-formula", "mla-factor-2", "ignores-windows"],
)
def test_wrong_answers_fail_at_the_right_check(tmp_path, answer, source, failed_check):
    run = run_exercise("ex02_kv_sizing", tmp_path, replacements={answer: source})
    assert not run.passed
    assert failed_check in run.check_failures(), run.output[-3000:]
