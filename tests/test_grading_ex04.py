"""Exercise 4.1 graded the way a learner grades it: the kernel cases of tests/grading_cases_ex04.py.

One run of the documented command grades the blank exercise and the correct alternatives (each a
kernel written differently from the solution); a second grades every wrong kernel, each notebook
stopping at its first failed cell. Each wrong kernel must fail first at its named check. The
checks draw fresh random inputs at every grading, so these tests also exercise that the verdicts
do not depend on the values drawn. Plus unit tests of `inferbook.kernel_checks`.
"""

from __future__ import annotations

import functools
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

from grading_cases_ex04 import ALTERNATIVES, BOUNDARIES, E4, WRONG  # noqa: E402
from grading_helpers import grade_with_pytest, variant  # noqa: E402

import grading_cases  # noqa: E402  (merges tests/grading_cases_ex*.py into its tables)

# tests/test_grading.py grades every row of grading_cases' tables with the same command and the same
# assertions; once it holds these rows, grading them here again would only double the time.
MERGED = any(w[0] == E4 for w in grading_cases.WRONG)
graded_here = pytest.mark.skipif(MERGED, reason="graded by tests/test_grading.py (merged case table)")
from inferbook import kernel_checks as kc  # noqa: E402
from inferbook.grading import ExerciseCheckFailed  # noqa: E402


@functools.lru_cache(maxsize=None)
def graded(tmp_root: str):
    """{case id: Report} for the blank exercise, the alternatives and the wrong kernels."""
    from pathlib import Path

    root = Path(tmp_root)
    cases = {"blank": variant(E4, root / "blank", answers="blank")}
    for i, (_, _, answers) in enumerate(ALTERNATIVES):
        cases[f"alternative-{i}"] = variant(E4, root / f"alt{i}", answers, stale_outputs=(i == 0))
    reports, _ = grade_with_pytest(list(cases.values()), timeout=900)
    result = dict(zip(cases, reports))
    wrong = {f"wrong-{i}": variant(E4, root / f"wrong{i}", {answer: source})
             for i, (_, answer, source, _) in enumerate(WRONG)}
    reports, _ = grade_with_pytest(list(wrong.values()), stop_per_notebook=True, timeout=1200)
    result.update(zip(wrong, reports))
    return result


@pytest.fixture(scope="module")
def tmp_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("grading_ex04"))


def test_the_case_table_is_complete():
    assert len(WRONG) >= 8 and len(ALTERNATIVES) >= 2
    assert all(w[0] == E4 for w in WRONG) and set(BOUNDARIES) == {E4}
    if MERGED:
        assert all(w in grading_cases.WRONG for w in WRONG)
        assert all(a in grading_cases.ALTERNATIVES for a in ALTERNATIVES)


@graded_here
@pytest.mark.parametrize("case", range(len(ALTERNATIVES)), ids=[a[1] for a in ALTERNATIVES])
def test_correct_kernels_written_differently_pass(case, tmp_root):
    report = graded(tmp_root)[f"alternative-{case}"]
    assert report.passed, report.text


@graded_here
def test_blank_exercise_fails_by_name(tmp_root):
    report = graded(tmp_root)["blank"]
    messages = [m for _, _, m in report.parts]
    assert [s for _, s, _ in report.parts] == ["FAIL", "FAIL"], report.text
    assert messages[0].startswith("CHECK FAILED [Part 1/answer written]: attend_q_tile is not written yet")
    assert "fix Part 1 first" in messages[1]


@graded_here
@pytest.mark.parametrize("case", range(len(WRONG)), ids=[w[3] for w in WRONG])
def test_wrong_kernel_fails_first_at_the_named_check(case, tmp_root):
    expected = WRONG[case][3]
    report = graded(tmp_root)[f"wrong-{case}"]
    assert not report.passed
    assert report.first_failure() == expected, report.text
    message = next(m for _, s, m in report.parts if s == "FAIL")
    assert message.startswith(f"CHECK FAILED [{expected}]: "), report.text


# --- kernel_checks on its own ---------------------------------------------------------------------
def test_inputs_hold_nan_past_the_sequence():
    q, k, v = kc.attention_inputs(2, 4, 2, 5, 7, 16, pad=3)
    assert q.shape == (2, 4, 5, 16) and k.shape == v.shape == (2, 2, 7, 16)
    assert torch.isfinite(k).all()
    storage = torch.as_strided(k, (2, 2, 10, 16), k.stride())
    assert torch.isnan(storage[:, :, 7:]).all()
    with pytest.raises(ValueError, match="kv_heads"):
        kc.attention_inputs(1, 3, 2, 4, 4, 16)
    with pytest.raises(ValueError, match="n_q"):
        kc.attention_inputs(1, 2, 2, 0, 4, 16)


def test_fresh_generators_differ():
    a, b = (torch.randn(4, generator=kc.fresh_generator()) for _ in range(2))
    assert not torch.equal(a, b)


def _plain_attention(q, k, v, causal):
    from inferbook import flash

    o, lse = flash.attention_reference(*(t.double().numpy() for t in (q, k, v)), causal)
    return torch.from_numpy(o).to(q.dtype), torch.from_numpy(lse).float()


def test_error_rule_passes_the_reference_and_fails_a_perturbation():
    q, k, v = kc.attention_inputs(1, 2, 1, 9, 13, 16)
    o, lse = _plain_attention(q, k, v, True)
    kc.check_attention("exact", o, lse, q, k, v, True)
    with pytest.raises(ExerciseCheckFailed, match=r"\[bad\]: O has an error of .* query row 3"):
        bad = o.clone()
        bad[0, 1, 3, 2] += 1e-3
        kc.check_attention("bad", bad, lse, q, k, v, True)
    with pytest.raises(ExerciseCheckFailed, match="logsumexp has NaN"):
        kc.check_attention("nan", o, torch.full_like(lse, float("nan")), q, k, v, True)
    with pytest.raises(ExerciseCheckFailed, match="shape"):
        kc.check_attention("shape", o[:, :, :3], lse, q, k, v, True)


def test_package_kernels_are_detected():
    from inferbook import triton_flash

    assert kc.package_references(triton_flash._attend_kv_tiles)
    with pytest.raises(ExerciseCheckFailed, match="own"):
        kc.check_own_kernel("own", triton_flash._flash_forward_kernel)
    with pytest.raises(ExerciseCheckFailed, match="@triton.jit"):
        kc.check_own_kernel("own", lambda: None)
