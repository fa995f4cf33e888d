"""vllm_fit: the KV calculators' question on vLLM's start-up budget."""

import pytest

from inferbook import sizing
from inferbook.hardware import GPUS
from inferbook.models import MODELS
from inferbook.vllm_fit import vllm_fit, vllm_min_tp_degree
from inferbook.vllm_memory import vllm_default_caps, vllm_startup


def test_budget_is_vllm_startup_budget():
    """The calculator's budget is the one `vllm_startup` (checked against vLLM's logs) uses."""
    for model, gpu, n in [("Llama-3.1-8B", "H100 SXM", 1), ("Llama-3.1-70B", "H100 SXM", 4),
                          ("DeepSeek-V3", "H200", 8)]:
        r = vllm_fit(model, gpu, n, 4096, 1, weight_dtype="fp8" if "DeepSeek" in model else "bf16")
        tokens, seqs = vllm_default_caps(GPUS[gpu])
        start = vllm_startup(MODELS[model], GPUS[gpu], n, weight_dtype=r.weight_dtype,
                             max_num_batched_tokens=tokens, max_num_seqs=seqs)
        assert r.kv_budget_bytes == start.budget.available_kv_bytes


def test_answers_agree_with_each_other():
    r = vllm_fit("Llama-3.1-70B", "H100 SXM", 4, 32768, 8)
    assert r.starts
    assert r.fits == (r.max_batch >= 8) == (r.max_context >= 32768)
    one_more = vllm_fit("Llama-3.1-70B", "H100 SXM", 4, 32768, r.max_batch + 1)
    assert not one_more.fits and vllm_fit("Llama-3.1-70B", "H100 SXM", 4, 32768, r.max_batch).fits
    longer = vllm_fit("Llama-3.1-70B", "H100 SXM", 4, r.max_context + 1, 8)
    assert r.max_context == MODELS["Llama-3.1-70B"].max_position_embeddings or not longer.fits
    fewest = vllm_min_tp_degree("Llama-3.1-70B", "H100 SXM", 32768, 8)
    assert vllm_fit("Llama-3.1-70B", "H100 SXM", fewest, 32768, 8).fits
    for n in sizing.valid_tp_degrees(MODELS["Llama-3.1-70B"], 8):
        if n < fewest:
            assert not vllm_fit("Llama-3.1-70B", "H100 SXM", n, 32768, 8).fits
    assert r.used_bytes_per_gpu == (r.outside_bytes + r.budget.runtime.total_bytes
                                    + r.budget.weight_bytes + r.kv_bytes_per_gpu)
    assert "fits" in str(r) and "Llama-3.1-70B" in str(r)


def test_a_budget_with_nothing_left_does_not_start():
    r = vllm_fit("Llama-3.1-70B", "H100 SXM", 1, 1024, 1, gpu_memory_utilization=0.5)
    assert not r.starts and not r.fits and r.max_batch == 0 and r.max_context == 0
    assert "would not start" in str(r)


def test_lower_utilization_never_fits_more():
    hi = vllm_fit("Llama-3.1-8B", "L4", 1, 8192, 1, gpu_memory_utilization=0.95)
    lo = vllm_fit("Llama-3.1-8B", "L4", 1, 8192, 1, gpu_memory_utilization=0.85)
    assert lo.kv_budget_bytes < hi.kv_budget_bytes and lo.max_batch <= hi.max_batch


@pytest.mark.parametrize("kwargs, match", [
    (dict(n_gpus=3), "n_gpus"), (dict(gpu_memory_utilization=0), "gpu_memory_utilization"),
    (dict(gpu_memory_utilization=1.5), "gpu_memory_utilization"), (dict(batch=0), "batch"),
    (dict(ctx_tokens=-1), "ctx_tokens"), (dict(kv_dtype="fp7"), "kv_dtype"),
])
def test_refuses_bad_input_by_name(kwargs, match):
    args = dict(spec="Llama-3.1-70B", gpu="H100 SXM", n_gpus=4, ctx_tokens=4096, batch=1)
    args.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        vllm_fit(**args)


def test_unknown_names_are_refused():
    with pytest.raises((KeyError, ValueError)):
        vllm_fit("no-such-model", "H100 SXM")
    with pytest.raises((KeyError, ValueError)):
        vllm_fit("Llama-3.1-8B", "no-such-gpu")
