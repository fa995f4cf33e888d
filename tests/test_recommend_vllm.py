"""The recommender against vLLM 0.33.0's own code: each fix quotes the source line it relies on.

The quotes live in `code/inferbook/data/vllm_rules.json` (file, function, line), read from the
pinned wheel like `vllm_args.json`. With `VLLM_SRC` pointing at the unpacked wheel
(`pip download vllm==0.33.0 --no-deps; unzip`), `test_quotes_are_in_the_wheel` re-checks that
every quoted line is inside the named function.
"""

import ast
import math
import json
import os
from pathlib import Path

import pytest

from inferbook import attention_backends, roofline, rules, sizing, speculation_rules
from inferbook.commands import DATA
from inferbook.hardware import gpu
from inferbook.models import model
from inferbook.recommend import Workload, recommend

RULES = json.loads((DATA / "vllm_rules.json").read_text())


def quote(item, file_suffix: str) -> dict:
    """Return the stored rule of issue item `item` from the file ending in `file_suffix`."""
    found = [r for r in RULES["rules"] if r["item"] == item and r["file"].endswith(file_suffix)]
    assert found, f"no stored vLLM quote for item {item} in {file_suffix}"
    return found[0]


def _function_source(path: Path, qualname: str) -> str:
    tree = ast.parse(path.read_text())
    text = path.read_text()
    node = tree
    for part in qualname.split("."):
        node = next(n for n in ast.walk(node)
                    if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part)
    return ast.get_source_segment(text, node)


@pytest.mark.skipif(not os.environ.get("VLLM_SRC"), reason="VLLM_SRC: the unpacked wheel")
def test_quotes_are_in_the_wheel():
    root = Path(os.environ["VLLM_SRC"])
    for r in RULES["rules"]:
        body = _function_source(root / r["file"], r["function"])
        for line in (r["quote"], r["also"]):
            assert not line or line in body, f"{r['file']}::{r['function']}: {line!r}"


def test_every_rule_names_its_source():
    assert RULES["version"] == "0.33.0" and len(RULES["source"]["sha256"]) == 64
    for r in RULES["rules"]:
        assert r["file"].startswith("vllm/") and r["function"] and r["quote"]


def test_1_max_num_seqs_is_a_cap_not_the_worst_case():
    q = quote(1, "scheduler.py")
    assert q["quote"] == "# The request cannot be scheduled."   # then it preempts
    p = recommend("Llama-3.1-70B", "4xH100",
                  Workload("chat", context_tokens=32768, typical_tokens=4096),
                  served_model="meta-llama/Llama-3.1-70B-Instruct")   # the lesson's bf16
    # the old plan sized --max-num-seqs for 32K requests (13); vLLM's default cap is 1024
    assert p.seqs_at_full_context < 20 and p.max_num_seqs == 1024
    assert p.seqs_at_typical > 100
    assert "not a reservation" in p.decision("batching").reason
    assert "get_batch_defaults" in p.decision("batching").citation


def test_2_chat_plans_serve_the_instruct_model():
    p = recommend("Llama-3.1-70B", "4xH100", Workload("chat", context_tokens=32768))
    # on Hopper the published FP8 chat checkpoint is ranked beside bf16: either is Instruct
    assert p.served_model in ("meta-llama/Llama-3.1-70B-Instruct",
                              "RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8")
    p = recommend("Llama-3.1-70B", "4xA100", Workload("chat", context_tokens=32768))
    assert p.served_model == "meta-llama/Llama-3.1-70B-Instruct"
    assert recommend("Qwen2.5-7B", "1xH100", "agent").served_model == "Qwen/Qwen2.5-7B-Instruct"
    # every workload serves the chat checkpoint (RAG and batch requests use the chat API and
    # template too); the base one only when asked
    assert recommend("Qwen2.5-7B", "1xH100", "batch").served_model == "Qwen/Qwen2.5-7B-Instruct"
    assert recommend("Qwen2.5-7B", "1xH100", "rag").served_model == "Qwen/Qwen2.5-7B-Instruct"
    assert recommend("Qwen2.5-7B", "1xH100", "batch",
                     base_model=True).served_model == "Qwen/Qwen2.5-7B"


def test_3_sliding_windows_count_as_vllm_counts_them():
    q = quote(3, "kv_cache_interface.py")
    assert "max_in_flight_tokens" in q["quote"]
    mistral = model("Mistral-7B-v0.1")
    p = recommend(mistral, "1xL4", Workload("chat", context_tokens=32768))
    lay = p.decision("parallelism").value["layout"]
    # vLLM 0.33.0 SlidingWindowSpec.max_admission_blocks_per_request: whole 16-token blocks
    blocks = -(-min(4096 - 1 + lay.window_extra_tokens, 32768) // 16) + 1
    per_request = 32 * 2 * 8 * 128 * 2 * 16 * blocks
    assert lay.window_extra_tokens == 2 * p.max_num_batched_tokens   # async: pp + 1 batches
    assert p.kv_bytes_per_sequence == per_request
    assert p.seqs_at_full_context == p.memory.kv_budget_bytes // per_request > 1
    # the window caps the cache: a 32K request holds under a third of its full-attention cache
    assert p.kv_bytes_per_sequence * 3 < 32 * 2 * 8 * 128 * 2 * 32768
    gemma = recommend("Gemma-2-9B", "1xA100", Workload("chat", context_tokens=8192))
    g_lay = gemma.decision("parallelism").value["layout"]
    assert gemma.kv_bytes_per_sequence == sizing.kv_bytes_per_gpu(
        "Gemma-2-9B", 1, 8192, 1, "bf16", window_extra_tokens=g_lay.window_extra_tokens,
        block_size=16)


def test_4_data_parallel_plans_use_a_fixed_draft_length():
    q = quote(4, "config/vllm.py")
    assert "data_parallel_size <= 1" in q["quote"]
    # with DP vLLM keeps one k for every batch size: the book reads it from its own schedule
    # at one replica's running batch, and turns speculation off past the compute-bound point
    spec, h100 = model("Llama-3.1-8B"), gpu("H100")
    t_crit = roofline.critical_tokens(h100, 2 * spec.n_active_params,
                                            sizing.weight_bytes(spec, "bf16"))
    for b in (1, 4, 40, 300):
        d = speculation_rules.decide_speculation(spec, h100, "chat", "latency", "bf16",
                                                 "org/eagle3", None, 1024, 4, running_batch=b)
        sched = speculation_rules.spec_schedule(d.value.num_tokens if d.value else 8, t_crit,
                                                1024)
        k_at_b = next(r[2] for r in speculation_rules.spec_schedule(
            speculation_rules.choose_draft_length(0.7, 1 / spec.num_hidden_layers), t_crit, 1024)
            if r[0] <= b <= r[1])
        assert (d.value.num_tokens if d.value else 0) == k_at_b, (b, d.reason, sched)
        assert d.value is None or d.value.schedule == ()
    w = Workload("chat", context_tokens=8192, typical_tokens=1024, draft_model="org/eagle3")
    dp = recommend("Llama-3.1-8B", "4xH100", w)
    if dp.data_parallel == 1:
        dp = recommend("Llama-3.1-8B", "8xL4", w)
    assert dp.data_parallel > 1
    if dp.speculation is not None:
        assert dp.speculation.schedule == ()
    assert "num_speculative_tokens_per_batch_size" not in " ".join(dp.vllm_argv)
    assert "_maybe_disable_dynamic_sd_for_data_parallel" in dp.decision(
        "speculative decoding").citation
    assert "shrinks" not in dp.decision("speculative decoding").reason
    one = recommend("Llama-3.1-8B", "1xH100", w)
    assert one.data_parallel == 1 and len(one.speculation.schedule) > 1
    assert "num_speculative_tokens_per_batch_size" in " ".join(one.vllm_argv)


def test_5_fp8_kv_support_is_per_backend():
    fa = quote(5, "fa_utils.py")
    assert "sm90_fp8_kv_supported" in fa["quote"]
    checked = Workload("chat", context_tokens=8192, fp8_kv_quality_checked=True)
    a100 = recommend("Llama-3.1-8B", "1xA100", checked)          # sm80: FlashInfer reads fp8
    assert a100.kv_dtype == "fp8" and a100.vllm_attention_backend == "FLASHINFER"
    assert "--kv-cache-dtype fp8" in a100.vllm_command
    h100 = recommend("Llama-3.1-8B", "1xH100", checked)          # sm90: FA3 reads fp8
    assert h100.vllm_attention_backend == "FLASH_ATTN" and h100.flash_attention_version == 3
    t4 = recommend("Qwen2.5-7B", "1xT4", Workload("chat", context_tokens=4096,
                                                   fp8_kv_quality_checked=True))
    assert t4.kv_dtype == "fp16" and "no vLLM backend reads an fp8" in t4.decision("kv cache").reason
    assert attention_backends.fp8_kv_backend((7, 5), mla=False, head_dim=128) is None
    assert recommend("Llama-3.1-8B", "1xA100", "chat").kv_dtype == "bf16"   # not without a check


def test_6_budget_is_utilization_minus_weights_activations_graphs_non_torch():
    q = quote(6, "gpu_worker.py")
    assert q["quote"] == "- profile_result.non_kv_cache_memory"
    p = recommend("Llama-3.1-70B", "4xH100", Workload("chat", context_tokens=32768))
    m = p.memory
    assert m.usable_bytes == math.ceil(0.92 * gpu("H100").cuda_total_bytes)
    assert m.runtime.activation_bytes > 0 and m.runtime.cuda_graph_bytes > 0
    assert m.runtime.non_torch_bytes > 0
    assert m.kv_budget_bytes == m.usable_bytes - m.weight_bytes - m.runtime.total_bytes
    assert "--gpu-memory-utilization 0.92" in p.vllm_command
    # every number of the KV reason is in the plan
    reason = p.decision("kv cache").reason
    assert f"{m.kv_budget_bytes / 1e9:.1f} GB" in reason and f"{m.weight_bytes / 1e9:.1f}" in reason
    # a marginal plan under the old 10 % reserve: Qwen2.5-7B bf16 at 8K on a T4 needed fp8 then
    # and still does; a 16 GB card minus 8% leaves too little for bf16 weights + runtime
    t4 = recommend("Qwen2.5-7B", "1xT4", Workload("chat", context_tokens=8192,
                                                   allow_quantization=False))
    assert not t4.ok and "does not fit" in t4.reason
    assert "_check_enough_kv_cache_memory" in quote(6, "kv_cache_planning.py")["function"]


def test_7_the_attention_label_never_contradicts_its_reason():
    b200 = recommend("Qwen2.5-7B", "1xB200", "chat")
    assert b200.vllm_attention_backend == "FLASHINFER" and b200.flash_attention_version is None
    from inferbook.render import choice
    assert "FLASHINFER (" not in choice(b200, "attention")
    h100 = recommend("Qwen2.5-7B", "1xH100", "chat")
    assert "FLASH_ATTN (FlashAttention-3)" in choice(h100, "attention")
    assert "_get_backend_priorities" in quote(5, "cuda.py")["function"]


@pytest.mark.parametrize("typical, prefix", [(2000, 2000), (1000, 2000)])
def test_8_a_shared_prefix_must_be_shorter_than_a_typical_request(typical, prefix):
    with pytest.raises(ValueError, match="shared_prefix_tokens .* must be shorter"):
        Workload("agent", context_tokens=8192, typical_tokens=typical,
                 shared_prefix_tokens=prefix)


def test_8_prefix_just_under_the_typical_request_fits_many():
    p = recommend("Qwen2.5-7B", "1xH100", Workload("agent", context_tokens=8192,
                                                    typical_tokens=2001,
                                                    shared_prefix_tokens=2000))
    assert p.ok and p.seqs_at_typical > 1000


def test_options_performance_mode_suffix_and_async_scheduling():
    assert "double max_num_batched_tokens" in quote("options", "arg_utils.py")["quote"]
    chat = recommend("Llama-3.1-8B", "1xH100", "chat")
    assert "--performance-mode interactivity" in chat.vllm_command
    batch = recommend("Llama-3.1-8B", "1xH100", "batch")
    assert "--performance-mode throughput" in batch.vllm_command
    assert batch.max_num_batched_tokens == 2 * rules.vllm_batch_defaults(gpu("H100"))[0]
    agent = recommend("Llama-3.1-8B", "1xH100", "agent")
    assert agent.speculation.method == "suffix"
    assert '"method":"suffix"' in agent.vllm_command
    assert not agent.async_scheduling and "--async-scheduling" not in agent.vllm_argv
    assert "Arctic Inference" in quote("options", "speculative.py")["quote"]
    assert chat.async_scheduling and "--async-scheduling" in chat.vllm_argv
