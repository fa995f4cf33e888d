"""The recommender: real flags, memory that fits, refusals, and a skill file that cannot drift."""

import itertools
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferbook import recommend as rec
from inferbook import parallelism, render, rules, sizing
from inferbook.cli import main
from inferbook.hardware import gpu
from inferbook.models import model, param_count as model_params
from inferbook.commands import check_command, engine_args
from inferbook.recommend import Refusal, Workload, recommend
from inferbook.speculation_rules import choose_draft_length, spec_schedule
from inferbook.render import WORKED_EXAMPLES, generated_block

ROOT = Path(__file__).resolve().parent.parent
SKILL = ROOT / "outputs" / "skill-inference-optimizer.md"

# A grid of requests wide enough to reach every branch: every GPU class, dense/GQA/MLA/MoE,
# every workload kind, with and without the optional knobs.
GRID = [
    (m, f"{n}x{g}", Workload(kind, context_tokens=ctx, typical_tokens=min(ctx, 2048),
                             shared_prefix_tokens=1000 if kind == "agent" else 0,
                             fp8_kv_quality_checked=fp8, draft_model=draft))
    for (m, g, n), kind, ctx, fp8, draft in itertools.product(
        [("Qwen2.5-7B", "T4", 1), ("Llama-3.1-8B", "L4", 1), ("Qwen2.5-14B", "A100 80GB", 2),
         ("Llama-3.1-70B", "H100", 4), ("Mixtral-8x7B", "H100", 2), ("DeepSeek-V3", "H200", 8),
         ("Gemma-2-9B", "B200", 1), ("Mistral-7B-v0.1", "A10G", 1)],
        ["chat", "agent", "rag", "batch"], [4096, 8192], [False, True], [None, "org/eagle3-head"])
]


def _results():
    out = []
    for m, g, w in GRID:
        r = recommend(m, g, w)
        out.append((m, g, w, r))
    return out


RESULTS = _results()
PLANS = [r for *_, r in RESULTS if r.ok]


def test_grid_produces_plans_and_commands():
    assert len(PLANS) >= 100, "the grid should mostly produce plans"
    for p in PLANS:
        assert p.vllm_command.startswith(f"vllm serve {p.served_model}")
        if p.sglang.value is None:   # fp8 below sm80, or SGLang's static memory too small
            assert p.sglang_argv == () and any("no SGLang command" in x for x in p.warnings)
        else:
            assert "python -m sglang.launch_server" in p.sglang_command


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_flag_of_every_generated_command_exists(engine):
    index = {n for f in engine_args(engine)["flags"] for n in f.get("names", [])}
    for p in PLANS + [r for e in WORKED_EXAMPLES if (r := render.run_example(e)).ok]:
        argv = p.vllm_argv if engine == "vllm" else p.sglang_argv
        if not argv:
            continue
        flags = [a for a in argv if a.startswith("--")]
        assert flags, "a command without flags"
        missing = [f for f in flags if f not in index]
        assert not missing, f"{engine} flags not in the pinned release: {missing}"
        assert check_command(argv, engine) == []


def test_checker_rejects_what_the_seeds_invented():
    # The blog's EngineArgs(use_flash_attention=True) has no CLI counterpart.
    assert check_command(["vllm", "serve", "m", "--use-flash-attention"], "vllm")
    assert check_command(["vllm", "serve", "m", "--kv-cache-dtype", "fp9"], "vllm")
    assert check_command(["vllm", "serve", "m", "--tensor-parallel-size"], "vllm")  # no value
    bogus = json.dumps({"method": "telepathy", "num_speculative_tokens": 3})
    assert check_command(["vllm", "serve", "m", "--speculative-config", bogus], "vllm")
    assert check_command(["python", "-m", "sglang.launch_server", "--kv-cache-dtype", "fp8"],
                         "sglang"), "SGLang 0.5.23 spells it fp8_e4m3"
    # and accepts what the lesson's own command uses (all four are real vLLM flags)
    lesson = ["vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct", "--tensor-parallel-size", "4",
              "--max-model-len", "32768", "--enable-prefix-caching", "--kv-cache-dtype", "fp8"]
    assert check_command(lesson, "vllm") == []


def test_stored_arg_lists_say_where_they_come_from():
    for engine, version in (("vllm", "0.33.0"), ("sglang", "0.5.23")):
        d = engine_args(engine)
        assert d["version"] == version
        assert re.fullmatch(r"[0-9a-f]{64}", d["source"]["sha256"])
        assert d["source"]["read_from"] and d["source"]["artifact"].endswith(".whl")
        assert len(d["flags"]) > 200
    v = {n for f in engine_args("vllm")["flags"] for n in f.get("names", [])}
    assert {"--tensor-parallel-size", "--gpu-memory-utilization", "--max-num-seqs",
            "--max-num-batched-tokens", "--enable-chunked-prefill", "--speculative-config",
            "--attention-backend"} <= v
    s = {n for f in engine_args("sglang")["flags"] for n in f.get("names", [])}
    assert {"--model-path", "--tp-size", "--mem-fraction-static", "--max-running-requests",
            "--chunked-prefill-size", "--speculative-algorithm", "--disable-radix-cache"} <= s


def _hand_weight_bytes(spec, dtype):
    bits = {"bf16": 16, "fp16": 16, "fp8": 8, "int4": 4.25}[dtype]
    if bits == 16:
        return spec.n_params * 2
    emb = spec.vocab_size * spec.hidden_size * (1 if spec.tie_word_embeddings else 2)
    return (spec.n_params - emb) * bits / 8 + 2 * emb


def test_every_plan_fits_vllms_budget():
    """utilization x total = weights + runtime terms + KV budget, and a full-length request and
    the typical requests the plan counts both fit in the KV budget (vLLM would start)."""
    for p in PLANS:
        spec, g, m = model(p.model), gpu(p.gpu), p.memory
        shards = p.tensor_parallel * p.pipeline_parallel
        weights = _hand_weight_bytes(spec, p.weight_dtype) / shards
        if p.expert_parallel > 1:   # attention and dense parts whole, routed experts / ep
            ep = p.expert_parallel
            moe_layers = spec.num_hidden_layers - spec.first_k_dense_replace
            experts = (moe_layers * spec.n_routed_experts * 3 * spec.hidden_size
                       * spec.moe_intermediate_size * {"bf16": 2, "fp8": 1}[p.weight_dtype])
            weights = _hand_weight_bytes(spec, p.weight_dtype) - experts * (1 - 1 / ep)
        draft = p.decision("parallelism").value["layout"].draft
        if draft is not None:   # an MTP layer or EAGLE-3 head loaded beside the model
            assert p.speculation is not None and p.speculation.method == draft.method
            weights += draft.bytes_per_gpu(p.tensor_parallel, p.expert_parallel,
                                           {"bf16": 2, "fp16": 2, "fp8": 1}[p.weight_dtype])
        assert abs(weights - m.weight_bytes) / weights < 0.01
        assert m.usable_bytes == -(-int(g.cuda_total_bytes * p.gpu_memory_utilization * 1e6)
                                   // 10**6)
        assert m.usable_bytes == m.weight_bytes + m.runtime.total_bytes + m.kv_budget_bytes
        assert p.kv_bytes_per_sequence <= m.kv_budget_bytes
        assert p.seqs_at_full_context >= 1 and p.seqs_at_typical >= p.seqs_at_full_context
        assert p.tensor_parallel * p.pipeline_parallel * p.data_parallel == p.num_gpus
        assert p.expert_parallel in (1, p.data_parallel)


def test_tp_degree_is_the_smallest_that_fits():
    # Llama-3.1-70B, 4 x H100, 32K: at TP=2 the 70.6 GB of weights per GPU leave less than one
    # 32K request's 5.4 GB of KV cache in 0.92 x 80 GB.
    p = recommend("Llama-3.1-70B", "4xH100", Workload("chat", context_tokens=32768))
    assert (p.tensor_parallel, p.data_parallel) == (4, 1)
    spec = model("Llama-3.1-70B")
    assert all(lay.sequences(spec, 32768) >= 1 for lay in
               (r.layout for r in p.decision("parallelism").value["rates"]))
    # on 8 GPUs at 8K, TP=2 still fails: 70.6 GB of weights + vLLM's runtime terms (the
    # sampler's float32 logits alone: 1024 rows x 128256 x 8 bytes) exceed 73.6 GB; TP=4 x 2
    q = recommend("Llama-3.1-70B", "8xH100", Workload("chat", context_tokens=8192))
    rates = q.decision("parallelism").value["rates"]
    assert q.tensor_parallel == max(rates, key=lambda r: r.tokens_per_s).layout.tp
    assert q.max_num_seqs <= q.max_num_batched_tokens


def test_concurrency_target_counts_every_replica():
    low = recommend("Llama-3.1-8B", "4xH100", Workload("chat", context_tokens=32768,
                                                        concurrency=8))
    assert low.data_parallel * low.max_num_seqs >= 8
    assert low.max_num_seqs == -(-8 // low.data_parallel)
    # MLA replicates its latent under TP: replicas hold more, so a high target keeps TP=1
    mla = recommend("DeepSeek-V2-Lite", "4xH100", Workload("chat", context_tokens=16384,
                                                            typical_tokens=2048,
                                                            concurrency=1024))
    assert (mla.tensor_parallel, mla.data_parallel) == (1, 4)
    assert mla.data_parallel * mla.seqs_at_typical >= 1024 and mla.max_num_seqs == 256


def _simplest_within_margin(scores: dict, margin: float = 0.10):
    """The layout a maintainer picks from {(tp, pp, dp): (tokens/s, running batch)}: the
    smallest TP among those within `margin` of the best, those with room for 16 requests
    first."""
    best = max(v for v, _ in scores.values())
    near = [k for k, (v, _) in scores.items() if v >= (1 - margin) * best]
    roomy = [k for k in near if scores[k][1] >= 16] or near
    return min(roomy, key=lambda k: k[0])


def test_plan_takes_the_simplest_layout_near_the_cost_models_best():
    """One cost model (chapter 9's `cost_model.decode_step_time`, with its all-reduce term),
    each replica running what its KV cache holds; among layouts within 10 % of the best the
    simplest (smallest TP) wins, and a model that fits one GPU runs as replicas."""
    from inferbook import cost_model
    for m, g, w in [("Llama-3.1-70B", "8xB200", Workload("chat", context_tokens=32768)),
                    ("Llama-3.1-70B", "8xB200", Workload("batch", context_tokens=8192)),
                    ("Llama-3.1-8B", "4xH100", Workload("chat", context_tokens=8192))]:
        p = recommend(m, g, w)
        spec, dev = model(m), gpu(p.gpu)
        scores = {}
        for r in p.decision("parallelism").value["rates"]:
            lay = r.layout
            b = min(lay.sequences(spec, w.sizing_tokens), lay.batching.value["max_num_seqs"])
            t = cost_model.decode_step_time(spec, dev, lay.tp, b, w.sizing_tokens,
                                            kv_dtype=lay.kv_dtype, weight_dtype=lay.weight_dtype)
            scores[(lay.tp, lay.pp, lay.dp)] = (lay.dp * b / t, b)
        chosen = (p.tensor_parallel, p.pipeline_parallel, p.data_parallel)
        # a one-GPU replica holding >= 8 requests within 25 % of the best runs as replicas
        one_gpu = [(r.layout.tp, r.layout.pp, r.layout.dp)
                   for r in p.decision("parallelism").value["rates"]
                   if r.layout.tp == 1 and r.batch >= 16
                   and scores[(1, 1, r.layout.dp)][0] >= 0.75 * max(v for v, _ in scores.values())]
        assert chosen == (one_gpu[0] if one_gpu else _simplest_within_margin(scores)), scores
        assert p.throughput_bound_tok_s == pytest.approx(scores[chosen][0], rel=1e-9)
        why = p.decision("parallelism").reason
        assert "runner-up" in why and "%" in why


def test_a_model_that_fits_one_gpu_runs_as_replicas():
    """Issue 30: Llama-3.1-8B on 8xB200 / 16xH100 is TP=1 x DP=N (was TP 4 x DP 2 and
    TP 8 x PP 2); on PCIe L4s no layout uses TP > 2 and none pipeline-parallel."""
    for g, n in (("B200", 8), ("H100", 16), ("H200", 4)):
        p = recommend("Llama-3.1-8B", f"{n}x{g}", Workload("chat"))
        assert (p.tensor_parallel, p.pipeline_parallel, p.data_parallel) == (1, 1, n), g
    for n in (4, 16):
        p = recommend("Llama-3.1-8B", f"{n}xL4", Workload("chat"))
        assert p.tensor_parallel <= 2 and p.pipeline_parallel == 1
    # a latency target may still ask for TP
    slow = recommend("Llama-3.1-8B", "8xH100", Workload("chat", concurrency=8))
    one = slow.tpot_bound_ms
    fast = recommend("Llama-3.1-8B", "8xH100", Workload("chat", concurrency=8,
                                                         tpot_target_ms=0.8 * one))
    assert fast.tensor_parallel > 1


def test_pipeline_only_when_no_tp_layout_holds_the_model():
    p = recommend("Llama-3.1-405B", "16xH100", Workload("chat", allow_quantization=False))
    assert (p.tensor_parallel, p.pipeline_parallel) == (8, 2)
    why = p.decision("parallelism").reason
    assert "no TP <= 8 layout holds the model" in why and "network" in why
    # PP is never free: one request (one micro-batch, one stage busy at a time) takes a whole
    # TP=8 pass plus the stage-to-stage transfers over the network
    lay = p.decision("parallelism").value["layout"]
    single = rules.layout(model("Llama-3.1-405B"), gpu("H100"), 8, 1, "bf16",
                          rules.PlanRequest(8, "bf16", "latency", None, 0.92))
    spec = model("Llama-3.1-405B")
    assert parallelism.step_seconds(spec, gpu("H100"), lay, 1, 8192) > \
        parallelism.step_seconds(spec, gpu("H100"), single, 1, 8192)
    # commands per node: a head and a headless worker, with the node flags
    assert [c.count for c in p.vllm_nodes] == [1, 1]
    head, worker = (c.argv for c in p.vllm_nodes)
    assert "--headless" not in head and "--headless" in worker
    for argv, rank in ((head, "0"), (worker, "1")):
        assert argv[argv.index("--nnodes") + 1] == "2"
        assert argv[argv.index("--node-rank") + 1] == rank
        assert "--master-addr" in argv
    sg = [c.argv for c in p.sglang_nodes]
    assert all("--dist-init-addr" in a and "--nnodes" in a for a in sg)
    # models that fit a node on a multi-node fleet: one server per node behind a router
    q = recommend("Llama-3.1-70B", "16xH100", Workload("chat"))
    assert q.pipeline_parallel == 1 and [c.count for c in q.vllm_nodes] == [2]
    assert "--nnodes" not in q.vllm_argv


def test_moe_ranks_dp_attention_with_expert_parallelism():
    """DeepSeek-V3 on 8xH200: DP attention + EP at high concurrency, TP at low."""
    w = dict(context_tokens=32768, typical_tokens=4096)
    hi = recommend("DeepSeek-V3", "8xH200", Workload("chat", **w))
    lo = recommend("DeepSeek-V3", "8xH200", Workload("chat", concurrency=2, **w))
    assert hi.expert_parallel == 8 and "--enable-expert-parallel" in hi.vllm_argv
    assert lo.expert_parallel == 1 and lo.tensor_parallel == 8
    assert "tensor parallelism beats" in lo.decision("parallelism").reason
    assert hi.seqs_at_typical * hi.data_parallel > lo.seqs_at_typical


def test_absurd_fleets_warn_and_plan_replicas():
    p = recommend("Llama-3.1-8B", "1000xH100", Workload("chat"))
    assert p.ok and any("fleet" in x for x in p.warnings)
    assert p.tensor_parallel == 1 and [c.count for c in p.vllm_nodes] == [125]
    with pytest.raises(ValueError, match="1,000,000"):
        recommend("Llama-3.1-8B", "1000000xH100", Workload("chat"))


def test_absurd_concurrency_is_a_warning_not_a_weight_change():
    ok = recommend("Llama-3.1-8B", "1xH100", Workload("chat", context_tokens=8192))
    huge = recommend("Llama-3.1-8B", "1xH100", Workload("chat", context_tokens=8192,
                                                         concurrency=10**6))
    assert huge.ok and huge.weight_dtype == ok.weight_dtype and huge.quantization is None
    assert huge.max_num_seqs <= huge.seqs_at_typical
    assert huge.max_num_seqs <= huge.max_num_batched_tokens
    assert any("wait in the queue" in x for x in huge.warnings)
    assert not any("activations" in x for x in huge.warnings)


def test_max_num_seqs_never_exceeds_max_num_batched_tokens():
    # vllm 0.33.0 config/scheduler.py::SchedulerConfig.verify_max_model_len refuses it
    for c in (100, 3000, 5000, 20000):
        p = recommend("Llama-3.1-8B", "8xB200", Workload("chat", context_tokens=2048,
                                                          concurrency=c))
        assert p.max_num_seqs <= p.max_num_batched_tokens


def test_refuses_models_that_do_not_fit():
    r = recommend("Llama-3.1-405B", "1xT4", Workload("chat", context_tokens=4096))
    assert isinstance(r, Refusal) and not r.ok
    assert "does not fit" in r.reason and "GB" in r.reason
    # bf16 Llama-3.1-70B (141 GB) cannot fit one 141 GB H200 ...
    r = recommend("Llama-3.1-70B", "1xH200", Workload("chat", context_tokens=8192,
                                                      allow_quantization=False))
    assert isinstance(r, Refusal)
    # ... fp8 weights (72.7 GB with 16-bit embeddings) do
    p = recommend("Llama-3.1-70B", "1xH200", Workload("chat", context_tokens=8192))
    # the published FP8 checkpoint on Hopper: no --quantization, its config declares it
    assert p.ok and p.weight_dtype == "fp8" and p.quantization is None
    assert p.served_model == "RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8"


def test_refuses_contexts_longer_than_the_model():
    r = recommend("Llama-2-7B", "1xA100", Workload("rag", context_tokens=4097))
    assert isinstance(r, Refusal) and "4,096" in r.reason
    assert recommend("Llama-2-7B", "1xA100", Workload("rag", context_tokens=4096)).ok


def test_int4_needs_a_quantized_checkpoint():
    r = recommend("Llama-3.1-405B", "4xH100", Workload("chat", context_tokens=8192))
    assert isinstance(r, Refusal) and "pre-quantized" in r.reason
    p = recommend("Llama-3.1-405B", "4xH100", Workload("chat", context_tokens=8192),
                  served_model="example/Llama-3.1-405B-AWQ")
    # AWQ is read from the checkpoint's config (vLLM picks its Marlin kernels itself;
    # an explicit --quantization awq would force the slower AWQ kernels)
    assert p.ok and p.quantization == "awq" and "--quantization" not in p.vllm_command
    assert p.served_model == "example/Llama-3.1-405B-AWQ"


def test_architecture_rules():
    t4 = recommend("Qwen2.5-7B", "1xT4", "chat")
    assert (t4.vllm_attention_backend, t4.hf_attn_implementation) == ("TRITON_ATTN", "sdpa")
    assert t4.compute_dtype == "fp16" and "--dtype half" in t4.vllm_command
    a100 = recommend("Qwen2.5-7B", "1xA100", "chat")
    assert a100.flash_attention_version == 2 and a100.compute_dtype == "bf16"
    h100 = recommend("Qwen2.5-7B", "1xH100", "chat")
    assert h100.flash_attention_version == 3 and h100.sglang_attention_backend == "fa3"
    b200 = recommend("Qwen2.5-7B", "1xB200", "chat")
    assert b200.vllm_attention_backend == "FLASHINFER" and b200.hf_attn_implementation == "flash_attention_4"
    ds = recommend("DeepSeek-V3", "8xH200", "chat")
    assert ds.vllm_attention_backend.endswith("MLA")


def test_prefix_caching_for_repeated_prompts():
    p = recommend("Qwen2.5-14B", "2xA100", Workload("agent", context_tokens=16384,
                                                     shared_prefix_tokens=6000, concurrency=32))
    assert p.prefix_caching and "--enable-prefix-caching" in p.vllm_argv
    assert "--disable-radix-cache" not in p.sglang_argv
    lay, spec = p.decision("parallelism").value["layout"], model("Qwen2.5-14B")
    assert lay.sequences(spec, 16384, 6000) > lay.sequences(spec, 16384, 0)


@settings(max_examples=60, deadline=None)
@given(k=st.integers(1, 8), t_crit=st.floats(1.5, 5000), max_seqs=st.integers(1, 600))
def test_schedule_is_a_valid_vllm_schedule(k, t_crit, max_seqs):
    sched = spec_schedule(k, t_crit, max_seqs)
    assert sched[0][0] == 1 and sched[-1][1] == max_seqs
    for (a, b, kb), nxt in zip(sched, sched[1:] + ((None, None, None),)):
        assert a <= b and 0 <= kb <= k
        if nxt[0] is not None:
            assert nxt[0] == b + 1 and nxt[2] <= kb      # contiguous, k never grows with load
        if kb > 0:
            assert b * (kb + 1) <= t_crit                 # verification stays memory-bound


@settings(max_examples=40, deadline=None)
@given(alpha=st.floats(0.05, 0.95), cost=st.floats(0, 0.5))
def test_draft_length_is_near_optimal(alpha, cost):
    from inferbook.speculation_math import expected_tokens_per_pass
    k = choose_draft_length(alpha, cost)
    speed = [expected_tokens_per_pass(alpha, j) / (1 + j * cost) for j in range(1, 9)]
    assert 1 <= k <= 8 and speed[k - 1] >= 0.9 * max(speed)
    assert all(s < 0.9 * max(speed) for s in speed[: k - 1])


@pytest.mark.parametrize("bad", [
    lambda: recommend("Llama-3.1-8B", "1xV100", "chat"),
    lambda: recommend("Llama-3.1-8B", "0xH100", "chat"),
    lambda: recommend("Nope-1B", "1xH100", "chat"),
    lambda: recommend("Llama-3.1-8B", "1xH100", "podcast"),
    lambda: Workload("chat", context_tokens=-1),
    lambda: Workload("chat", context_tokens=1000, typical_tokens=2000),
    lambda: Workload("agent", context_tokens=1000, shared_prefix_tokens=1000),
    lambda: Workload("chat", acceptance_rate=1.5),
    lambda: Workload("chat", acceptance_rate=float("nan")),
    lambda: Workload("chat", tpot_target_ms=float("inf")),
    lambda: Workload("chat", context_tokens=True),
    lambda: Workload("chat", context_tokens=4096.0),
    lambda: recommend("Llama-3.1-8B", "1xH100", "chat", gpu_memory_utilization=1.5),
    lambda: recommend("Llama-3.1-8B", "1xH100", "chat", gpu_memory_utilization=float("nan")),
])
def test_invalid_input_raises_value_error(bad):
    with pytest.raises(ValueError):
        bad()


def test_raw_config_dict_is_refused_with_a_pointer():
    with pytest.raises(TypeError, match="from_hf_config"):
        recommend({"num_hidden_layers": 32}, "1xH100", "chat")


def test_command_line(capsys):
    assert main(["--model", "Llama-3.1-70B", "--gpu", "H100", "--num-gpus", "4",
                 "--context", "32768", "--workload", "chat"]) == 0
    out = capsys.readouterr().out
    # on H100s the published FP8 chat checkpoint is ranked beside bf16 (and wins here)
    assert "vllm serve RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8" in out
    assert "--tensor-parallel-size 4" in out
    assert main(["--model", "Llama-2-7B", "--gpu", "A100", "--context", "32768"]) == 1
    assert "Refused" in capsys.readouterr().out
    assert main(["--model", "Llama-2-7B", "--gpu", "Z9"]) == 2


def test_skill_file_examples_are_regenerated_from_the_recommender():
    """No drift: every generated block in the skill file equals what the code produces now."""
    text = SKILL.read_text()
    for ex in WORKED_EXAMPLES:
        block = generated_block(ex)
        assert block in text, (f"skill file example {ex.name!r} is stale: run "
                               "`python -m inferbook.recommend --update-skill`")


def test_skill_file_rules_point_to_chapters_and_cite():
    text = SKILL.read_text()
    for chapter in ("01_kv_cache", "02_kv_cache_math", "03_flash_attention_numpy",
                    "04_flash_attention_triton", "05_paged_attention", "06_continuous_batching",
                    "07_speculative_decoding", "08_putting_it_together"):
        assert chapter in text, f"no rule points to {chapter}"
    keys = set(re.findall(r"^@\w+\{([^,]+),", (ROOT / "book" / "references.bib").read_text(), re.M))
    cited = set(re.findall(r"\[([a-z_0-9]+)\]", text))
    cited = {c for c in cited if re.search(r"\d", c) or c.startswith(("nvidia", "vllm", "sglang"))}
    assert cited, "the skill file cites nothing"
    assert cited <= keys, f"citations missing from references.bib: {sorted(cited - keys)}"


def test_latency_and_throughput_targets():
    base = recommend("Llama-3.1-8B", "2xH100", Workload("chat", context_tokens=8192,
                                                        concurrency=2))
    one = parallelism.step_seconds(model("Llama-3.1-8B"), gpu("H100 SXM"),
                                   base.decision("parallelism").value["rates"][0].layout, 1,
                                   8192) * 1e3
    # a target below TP=1's one-request step time raises TP until the cost model meets it
    fast = recommend("Llama-3.1-8B", "4xH100", Workload("chat", context_tokens=8192,
                                                        concurrency=2, tpot_target_ms=one * 0.7))
    lay = fast.decision("parallelism").value["layout"]
    assert lay.tp > 1
    assert parallelism.step_seconds(model("Llama-3.1-8B"), gpu("H100 SXM"), lay, 1,
                                    8192) * 1e3 <= one * 0.7
    big = recommend("Llama-3.1-8B", "1xH100", Workload("batch", throughput_target_tok_s=1e7))
    assert any("chapter 9's estimate" in x for x in big.warnings)
    assert big.throughput_bound_tok_s < 1e7


@settings(max_examples=40, deadline=None)
@given(m=st.sampled_from(sorted(__import__("inferbook.models", fromlist=["MODELS"]).MODELS)),
       g=st.sampled_from(["T4", "L4", "A10G", "RTX 4090", "A100 40GB", "A100 80GB", "H100 SXM",
                          "H200", "B200"]),
       n=st.sampled_from([1, 2, 3, 4, 8, 16]), ctx=st.integers(256, 200_000),
       kind=st.sampled_from(rec.WORKLOAD_KINDS), conc=st.one_of(st.none(), st.integers(1, 2000)))
def test_any_request_gets_a_valid_plan_or_a_refusal(m, g, n, ctx, kind, conc):
    r = recommend(m, (g, n), Workload(kind, context_tokens=ctx, concurrency=conc))
    if not r.ok:
        assert r.reason and r.suggestions
        return
    assert check_command(r.vllm_argv, "vllm") == [] and check_command(r.sglang_argv, "sglang") == []
    assert r.tensor_parallel * r.pipeline_parallel * r.data_parallel == n
    assert r.max_model_len == ctx <= model(m).max_position_embeddings
    assert r.kv_bytes_per_sequence <= r.memory.kv_budget_bytes
    assert r.memory.usable_bytes <= gpu(g).hbm_bytes
    assert 1 <= r.max_num_seqs and (conc is None or r.max_num_seqs <= conc)


# ---- chapter 9's capacity plan -----------------------------------------------------------------


def _fake_capacity(value):
    from inferbook.decision import Decision

    calls = []

    def decide_capacity(spec, gpu_name, **kwargs):
        calls.append((spec.name, gpu_name, kwargs))
        return Decision(value, "simulated (fake)", "09_serving_at_scale", "test")
    return decide_capacity, calls


def test_capacity_plan_sets_tp_replicas_and_cap(monkeypatch):
    fake, calls = _fake_capacity(dict(tensor_parallel_size=2, replicas=2, max_num_seqs=48,
                                      p90_ttft_s=0.8, p90_tpot_s=0.045))
    monkeypatch.setattr(rec, "decide_capacity", fake)
    w = Workload("chat", context_tokens=8192, typical_tokens=2048, output_tokens=256)
    p = recommend("Llama-3.1-8B", "4xH100", w, request_rate=5.0, ttft_p90_s=1.0, tpot_p90_s=0.05)
    assert (p.tensor_parallel, p.data_parallel, p.max_num_seqs) == (2, 2, 48)
    assert "--max-num-seqs 48" in p.vllm_command and "--data-parallel-size 2" in p.vllm_command
    name, g, kw = calls[0]
    assert (name, g) == ("Llama-3.1-8B", gpu("H100 SXM"))   # resolved once, by recommend
    assert kw["prompt_tokens"] == 2048 - 256 and kw["output_tokens"] == 256
    assert kw["gpu_memory_utilization"] == 0.92   # recommend's own (vLLM's default)
    assert kw["request_rate"] == 5.0 and kw["weight_dtype"] == "bf16"
    text = render.render_markdown(p)
    assert "p90 TTFT 0.80 s" in text and "p90 TPOT 45 ms" in text
    # more GPUs than given: refused, with the count
    fake, _ = _fake_capacity(dict(tensor_parallel_size=2, replicas=4, max_num_seqs=48,
                                  p90_ttft_s=0.8, p90_tpot_s=0.045))
    monkeypatch.setattr(rec, "decide_capacity", fake)
    r = recommend("Llama-3.1-8B", "4xH100", w, request_rate=5.0, ttft_p90_s=1.0, tpot_p90_s=0.05)
    assert not r.ok and "8 GPUs; 4 are available" in r.reason


def test_capacity_plan_arguments_go_together():
    """The capacity decision (chapter 9's simulator, imported at the top of `recommend`) needs
    a rate, both targets and the output length."""
    w = Workload("chat", context_tokens=8192, typical_tokens=2048, output_tokens=256)
    with pytest.raises(ValueError, match="go together"):
        recommend("Llama-3.1-8B", "1xH100", w, request_rate=1.0)
    with pytest.raises(ValueError, match="output_tokens"):
        recommend("Llama-3.1-8B", "1xH100", "chat", request_rate=1.0, ttft_p90_s=1.0,
                  tpot_p90_s=0.1)


def test_70b_on_8xb200_layout_is_the_simplest_near_the_simulators_best():
    """Issue 20 item 5 against chapter 9's simulator itself: each layout of Llama-3.1-70B on
    8x B200 is run through `simulate.Deployment` (the engine's scheduler on a simulated clock,
    the plan's caps and KV blocks) on a closed batch of 8K-token requests (256 generated);
    the plan's layout, ranked by the steady-state step cost, is the simplest (smallest TP) of
    those within 10 % of the most output tokens/s in simulation."""
    from inferbook import simulate, workload
    w = Workload("batch", context_tokens=8192, output_tokens=256)
    p = recommend("Llama-3.1-70B", "8xB200", w)
    spec = model("Llama-3.1-70B")
    simulated = {}
    for r in p.decision("parallelism").value["rates"]:
        lay, caps = r.layout, r.layout.batching.value
        blocks = lay.budget.kv_budget_bytes // sizing.kv_bytes_per_gpu(spec, lay.tp, 16, 1,
                                                                        lay.kv_dtype)
        dep = simulate.Deployment(spec, "B200", lay.tp, caps["max_num_seqs"],
                                  caps["max_num_batched_tokens"], True, lay.kv_dtype,
                                  lay.weight_dtype)
        out = dep.run(workload.fixed_workload(max(2 * r.batch, 16), 8192 - 256, 256),
                      num_blocks=int(blocks))
        simulated[(lay.tp, lay.dp)] = lay.dp * out.output_tokens / out.makespan
    best = max(simulated.values())
    near = [k for k, v in simulated.items() if v >= 0.9 * best]
    assert (p.tensor_parallel, p.data_parallel) == min(near), simulated


def test_a_moe_model_wider_than_a_node_ranks_ep_against_pp():
    """DeepSeek-V3 (671 GB of FP8 weights) does not fit one node of 8 H100s: the plan rates an
    expert-parallel group over both nodes against TP = 8 x PP = 2, and gives each node its
    command (the worker headless)."""
    p = recommend("DeepSeek-V3", "16xH100", Workload("chat"))
    shapes = {(r.layout.tp, r.layout.pp, r.layout.ep)
              for r in p.decision("parallelism").value["rates"]}
    assert (8, 2, 1) in shapes and (1, 1, 16) in shapes
    assert [c.count for c in p.vllm_nodes] == [1, 1]
    head, worker = (c.argv for c in p.vllm_nodes)
    assert head[head.index("--nnodes") + 1] == "2" and "--headless" in worker
    assert check_command(head, "vllm") == [] and check_command(worker, "vllm") == []


# --- draft weights and their KV in the budget (issue 30 §2) -----------------------------------

def test_mtp_layer_weights_and_kv_are_in_the_budget():
    """DeepSeek-V3's MTP layer is loaded beside the model: one more MoE decoder layer (sharded
    like the model's experts), eh_proj and norms on every GPU, and one more latent per token."""
    from inferbook import checkpoints, speculation_rules
    spec = model("DeepSeek-V3")
    p = recommend(spec, "8xH200", Workload("chat"))
    lay = p.decision("parallelism").value["layout"]
    assert p.speculation is not None and p.speculation.method == "mtp"
    draft = checkpoints.draft_weights(spec, "mtp", speculation_rules.MTP_LAYERS["DeepSeek-V3"])
    assert lay.draft == draft and draft.kv_layers == 1
    bare = rules.layout(spec, gpu("H200"), lay.tp, lay.pp, lay.weight_dtype,
                        rules.PlanRequest(8, lay.kv_dtype, "latency", None, 0.92), lay.ep)
    added = p.memory.weight_bytes - bare.budget.weight_bytes
    assert added == draft.bytes_per_gpu(lay.tp, lay.ep, 1) > 1.5e9   # fp8: a byte per weight
    # the layer itself: the model's last (MoE) layer + eh_proj (2h x h) + three norms
    h = spec.hidden_size
    one_layer = model_params(spec) - model_params(replace(spec, num_hidden_layers=60))
    assert draft.params == one_layer + 2 * h * h + 3 * h
    # its KV: 62 latent layers per token instead of 61
    target = sizing.kv_bytes_per_gpu(spec, lay.tp, 8192, 1, lay.kv_dtype,
                                     window_extra_tokens=lay.window_extra_tokens,
                                     block_size=rules.BLOCK_SIZE)
    assert p.kv_bytes_per_sequence == -(-target * 62 // 61)
    assert "in vLLM's budget" in p.decision("speculative decoding").reason


def test_eagle3_head_weights_and_kv_are_in_the_budget():
    """A validated EAGLE-3 head costs its weights (one layer, fc, a 32K-token LM head, 16-bit)
    and one more KV layer per token: fewer requests fit than without it."""
    w = Workload("chat", draft_model="RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3")
    with_head, without = recommend("Llama-3.1-8B", "1xH100", w), recommend(
        "Llama-3.1-8B", "1xH100", Workload("chat"))
    assert with_head.speculation.method == "eagle3" and without.speculation is None
    lay = with_head.decision("parallelism").value["layout"]
    assert lay.draft.method == "eagle3" and lay.draft.bytes_per_param == 2
    added = with_head.memory.weight_bytes - without.memory.weight_bytes
    assert added == lay.draft.bytes_per_gpu(1) and 0.8e9 < added < 0.9e9
    assert with_head.kv_bytes_per_sequence * 32 == without.kv_bytes_per_sequence * 33
    assert with_head.seqs_at_typical < without.seqs_at_typical


def test_no_draft_no_draft_weights():
    """A plan whose speculation is off loads no draft, so its budget has none."""
    for m, g, w in (("DeepSeek-V3", "8xH200", Workload("batch")),
                    ("Llama-3.1-8B", "1xH100", Workload("chat")),
                    ("Llama-3.1-8B", "1xH100", Workload("rag"))):
        p = recommend(m, g, w)
        lay = p.decision("parallelism").value["layout"]
        assert lay.draft is None, (m, w.kind)


def test_public_eagle3_heads_are_named_with_their_source():
    from inferbook import checkpoints
    p = recommend("Llama-3.1-8B", "1xH100", Workload("chat"))
    reason = p.decision("speculative decoding").reason
    for repo, source in checkpoints.EAGLE3_HEAD_SOURCES["meta-llama/Llama-3.1-8B-Instruct"]:
        assert repo in reason and source in reason
    assert checkpoints.EAGLE3_HEADS["meta-llama/Llama-3.1-8B-Instruct"] == (
        checkpoints.EAGLE3_HEAD_SOURCES["meta-llama/Llama-3.1-8B-Instruct"][0][0])


# --- formats people deploy: a published FP8 checkpoint ranked beside bf16 (issue 30 §3) -------

def test_405b_on_16_h100_ranks_fp8_one_node_against_bf16_pipeline():
    """bf16 Llama-3.1-405B needs TP=8 x PP=2 across two nodes; NVIDIA's published FP8
    checkpoint fits one node, so TP=8 x DP=2 is ranked beside it and wins, and the plan says
    by how much."""
    p = recommend("Llama-3.1-405B", "16xH100", Workload("chat"))
    rates = p.decision("parallelism").value["rates"]
    bf16 = [r for r in rates if r.layout.weight_dtype == "bf16"]
    fp8 = [r for r in rates if r.layout.weight_dtype == "fp8"]
    assert bf16 and all(r.layout.pp == 2 and r.layout.tp == 8 for r in bf16)
    assert any(r.layout.tp == 8 and r.layout.pp == 1 and r.layout.dp == 2 for r in fp8)
    assert (p.weight_dtype, p.quantization) == ("fp8", None)
    assert (p.tensor_parallel, p.pipeline_parallel, p.data_parallel) == (8, 1, 2)
    assert p.served_model == "nvidia/Llama-3.1-405B-Instruct-FP8"
    assert "--quantization" not in p.vllm_argv and check_command(p.vllm_argv, "vllm") == []
    why = p.decision("weights").reason
    assert "ranked beside" in why and "bf16 TP=8 x PP=2" in why and "fp8 TP=8 x DP=2" in why
    assert "check quality" in why


def test_fp8_is_ranked_only_where_it_runs_natively_and_not_over_a_named_repo():
    # sm80 (A100) has no W8A8 FP8 kernels: the checkpoint's bf16, no ranking
    a100 = recommend("Llama-3.1-8B", "1xA100", Workload("chat"))
    assert a100.weight_dtype == "bf16" and "ranked beside" not in a100.decision("weights").reason
    assert {r.layout.weight_dtype for r in a100.decision("parallelism").value["rates"]} == {"bf16"}
    # a repository the user names is served in its own format
    named = recommend("Llama-3.1-8B", "1xH100", Workload("chat"),
                      served_model="meta-llama/Llama-3.1-8B-Instruct")
    assert named.weight_dtype == "bf16"
    assert {r.layout.weight_dtype for r in named.decision("parallelism").value["rates"]} == {"bf16"}
    # left to choose on an H100, both formats are rated and the plan says which won
    free = recommend("Llama-3.1-8B", "1xH100", Workload("chat"))
    assert {r.layout.weight_dtype for r in free.decision("parallelism").value["rates"]} == {
        "bf16", "fp8"}
    assert "ranked beside" in free.decision("weights").reason


def test_nvfp4_is_ranked_on_blackwell_only():
    """NVIDIA's published NVFP4 405B runs on FP4 tensor cores (sm100): on 8x B200 it is rated
    beside bf16 and FP8, sized at 4.5 bits per weight; on H100s it is not offered."""
    b200 = recommend("Llama-3.1-405B", "8xB200", Workload("chat"))
    formats = {r.layout.weight_dtype for r in b200.decision("parallelism").value["rates"]}
    assert "nvfp4" in formats and "fp8" in formats
    if b200.weight_dtype == "nvfp4":
        assert b200.served_model == "nvidia/Llama-3.1-405B-Instruct-FP4"
        assert "--quantization" not in b200.vllm_argv
        lay = b200.decision("parallelism").value["layout"]
        assert lay.budget.weight_bytes >= sizing.weight_bytes(model("Llama-3.1-405B"),
                                                              "nvfp4") // 8
    h100 = recommend("Llama-3.1-405B", "16xH100", Workload("chat"))
    assert "nvfp4" not in {r.layout.weight_dtype
                           for r in h100.decision("parallelism").value["rates"]}
    assert sizing.weight_bytes(model("Llama-3.1-405B"), "nvfp4") < sizing.weight_bytes(
        model("Llama-3.1-405B"), "fp8")


def test_mtp_depth_follows_the_engine_guides():
    """DeepSeek-V3's one MTP module drafts one token, as vLLM's MTP guide starts and SGLang's
    DeepSeek settings run it (steps 1, top-k 1, two draft tokens)."""
    p = recommend("DeepSeek-V3", "8xH200", Workload("chat"))
    assert p.speculation.method == "mtp" and p.speculation.num_tokens == 1
    cfg = json.loads(p.vllm_argv[p.vllm_argv.index("--speculative-config") + 1])
    assert cfg == {"method": "mtp", "num_speculative_tokens": 1}
    argv = list(p.sglang_argv)
    assert [argv[argv.index(f) + 1] for f in ("--speculative-num-steps", "--speculative-eagle-topk",
                                              "--speculative-num-draft-tokens")] == ["1", "1", "2"]
    assert "MTP depth 1" in p.decision("speculative decoding").reason
