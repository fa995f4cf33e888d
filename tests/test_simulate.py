"""Tests for inferbook.simulate: the cost model's terms, the scheduler on a simulated clock
(same decisions as the engine), the CPU fit, disaggregation and the capacity decision."""

from __future__ import annotations

import math

import pytest
import torch

from inferbook import capacity, cost_model, metrics, roofline, sizing, steploop, workload
from inferbook import simulate as sim
from inferbook.decision import Decision
from inferbook.engine import serve
from inferbook.gpt import GPT, GPTConfig
from inferbook.hardware import gpu
from inferbook.models import model
from inferbook.steploop import Request
from inferbook.workload import mixed_workload
from inferbook.hardware import gpu as gpu_preset

LLAMA8 = model("Llama-3.1-8B")


class Unit:
    """Every step lasts one clock unit: the simulated clock then counts steps like the engine."""

    name = "unit"

    def step_time(self, shapes):
        return 1.0


# --- cost model ------------------------------------------------------------------------------

def test_terms_match_roofline_and_sizing():
    eff = cost_model.Efficiency(0.5, 0.8, 0.7, 1e-3, 0.0, 0.0)
    cm = cost_model.CostModel.for_gpu(LLAMA8, gpu_preset("H100 SXM"), 1, eff, "bf16", "bf16")
    shapes = [(1, 999)] * 8 + [(512, 0)]
    c = cm.cost(shapes)
    s = LLAMA8
    flops = (roofline.forward_cost(s.n_active_params, s.num_hidden_layers, s.num_attention_heads * s.head_dim,
                                   s.num_key_value_heads * s.head_dim, 8, 1, 999).flops
             + roofline.forward_cost(s.n_active_params, s.num_hidden_layers, s.num_attention_heads * s.head_dim,
                                     s.num_key_value_heads * s.head_dim, 1, 512, 0).flops)
    g = gpu("H100 SXM")
    assert c.compute_s == pytest.approx(flops / (0.5 * g.fp16_tensor_flops))
    kv_tokens = 8 * 1000 + 512
    bytes_ = sizing.weight_bytes(s, weight_dtype="bf16") + kv_tokens * sizing.kv_bytes_per_token(
        s, kv_dtype="bf16")
    assert c.memory_s == pytest.approx(bytes_ / (0.8 * g.hbm_bytes_per_s))
    assert c.comm_s == 0
    assert c.total_s == pytest.approx(1e-3 + max(c.compute_s, c.memory_s))
    assert cm.cost([(1, 100)]).bound == "memory" and cm.cost([(4096, 0)]).bound == "compute"


def test_tensor_parallel_splits_work_and_adds_allreduce():
    one = cost_model.CostModel.for_gpu(LLAMA8, gpu_preset("H100 SXM"), 1)
    two = cost_model.CostModel.for_gpu(LLAMA8, gpu_preset("H100 SXM"), 2)
    shapes = [(1, 500)] * 64
    assert two.cost(shapes).memory_s == pytest.approx(one.cost(shapes).memory_s / 2, rel=1e-6)
    assert two.cost(shapes).compute_s == pytest.approx(one.cost(shapes).compute_s / 2)
    e = two.eff
    message = 64 * LLAMA8.hidden_size * 2
    link = gpu("H100 SXM").nvlink_bytes_per_s / 2
    expected = 2 * LLAMA8.num_hidden_layers * (message / (e.link_efficiency * link) + e.allreduce_latency_s)
    assert two.cost(shapes).comm_s == pytest.approx(expected)


def test_fp8_weights_double_the_peak_on_hopper_only():
    h100 = cost_model.CostModel.for_gpu(LLAMA8, gpu_preset("H100 SXM"), weight_dtype="fp8")
    a100 = cost_model.CostModel.for_gpu(LLAMA8, gpu_preset("A100 80GB"), weight_dtype="fp8")
    assert h100.peak_flops == 2 * gpu("H100 SXM").fp16_tensor_flops
    assert a100.peak_flops == gpu("A100 80GB").fp16_tensor_flops


def test_bad_inputs_are_rejected():
    with pytest.raises(ValueError, match="flops_efficiency"):
        cost_model.Efficiency(flops_efficiency=0)
    with pytest.raises(ValueError, match="heads"):
        cost_model.CostModel.for_gpu(LLAMA8, gpu_preset("H100 SXM"), tp=3)
    with pytest.raises(ValueError, match="chunked_prefill"):
        sim.serve_simulated([Request(0, tuple(range(40)), 2)], Unit(), num_blocks=10, max_num_batched_tokens=16)


# --- the scheduler on a simulated clock: same decisions as the engine --------------------------

@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=50, n_positions=96, n_embd=16, n_layer=1, n_head=2)).eval()


@pytest.mark.parametrize("kwargs", [
    dict(num_blocks=40, max_num_seqs=8, max_num_batched_tokens=64),
    dict(num_blocks=9, max_num_seqs=8, max_num_batched_tokens=64),             # preemption
    dict(num_blocks=40, max_num_seqs=8, max_num_batched_tokens=16, chunked_prefill=True),
    dict(num_blocks=40, max_num_seqs=4, max_num_batched_tokens=64, policy="static"),
    dict(num_blocks=40, max_num_seqs=8, max_num_batched_tokens=64, prefix_caching=True),
])
def test_simulated_clock_reproduces_the_engine_in_steps(tiny, kwargs):
    prompts = [[1, 2, 3, 4, 5, 6, 7, 8] * 4] if kwargs.get("prefix_caching") else None
    reqs = mixed_workload(24, vocab=None if prompts else 50, prompts=prompts, prompt_len=(6, 20),
                          mean_output=6, max_output=16, seed=3)
    reqs = [Request(r.request_id, r.prompt, r.max_new_tokens, float(2 * i)) for i, r in enumerate(reqs)]
    engine = serve(tiny, reqs, block_size=4, clock="steps", **kwargs)
    simulated = sim.serve_simulated(reqs, Unit(), block_size=4, **kwargs)
    assert simulated.steps == engine.steps
    assert simulated.preemptions == engine.preemptions
    assert simulated.prefix_hit_rate == pytest.approx(engine.prefix_hit_rate)
    for a, b in zip(simulated.metrics, engine.metrics):
        assert (a.ttft, a.tpot, a.e2e, a.output_tokens) == pytest.approx((b.ttft, b.tpot, b.e2e, b.output_tokens))
    if kwargs["num_blocks"] == 9:
        assert engine.preemptions > 0


def test_step_shapes_and_cpu_fit_recover_known_constants(tiny):
    reqs = mixed_workload(30, vocab=50, prompt_len=(6, 20), mean_output=6, max_output=16, seed=1)
    shapes = sim.step_shapes(reqs, num_blocks=60, block_size=4, max_num_seqs=6, max_num_batched_tokens=64)
    truth = cost_model.CostModel.for_gpt(tiny.config, 2e9, cost_model.Efficiency(step_overhead_s=1e-3, seq_overhead_s=5e-5))
    seconds = [truth.step_time(s) for s in shapes]
    fitted = cost_model.fit_cpu(shapes, seconds, tiny.config)
    assert fitted.eff.step_overhead_s == pytest.approx(1e-3, rel=1e-6)
    assert fitted.eff.seq_overhead_s == pytest.approx(5e-5, rel=1e-6)
    assert fitted.achieved_flops == pytest.approx(2e9, rel=1e-6)


def test_continuous_beats_static_and_chunking_cuts_the_tpot_tail():
    dep = sim.Deployment(LLAMA8, "H100 SXM", 1, max_num_seqs=64, max_num_batched_tokens=2048)
    reqs = workload.fixed_workload(120, 1500, 64, rate=6.0, seed=0)
    static = dep.run(reqs, policy="static", max_num_batched_tokens=65536, chunked_prefill=False)
    cont = dep.run(reqs, chunked_prefill=False, max_num_batched_tokens=4096)
    chunked = dep.run(reqs)
    assert cont.percentile("e2e", 90) < static.percentile("e2e", 90)
    assert chunked.percentile("tpot", 90) < cont.percentile("tpot", 90)


def test_prefix_caching_skips_the_shared_prompt():
    dep = sim.Deployment(LLAMA8, "H100 SXM", 1, max_num_seqs=32)
    reqs = workload.fixed_workload(40, 1024, 8, rate=4.0, seed=0, shared_prefix_tokens=960)
    off, on = dep.run(reqs), dep.run(reqs, prefix_caching=True)
    assert on.prefix_hit_rate > 0.8
    assert on.percentile("ttft", 50) < off.percentile("ttft", 50)


def test_fixed_workload_is_poisson_and_exact_lengths():
    reqs = workload.fixed_workload(2000, 10, 5, rate=4.0, seed=0)
    assert {len(r.prompt) for r in reqs} == {10} and {r.max_new_tokens for r in reqs} == {5}
    gaps = [b.arrival_time - a.arrival_time for a, b in zip(reqs, reqs[1:])]
    assert sum(gaps) / len(gaps) == pytest.approx(0.25, rel=0.08)
    assert [r.arrival_time for r in workload.fixed_workload(3, 4, 1)] == [0.0, 0.0, 0.0]


def test_disaggregation_returns_one_metric_per_request():
    dep = sim.Deployment(LLAMA8, "H100 SXM", 1, max_num_seqs=64)
    reqs = workload.fixed_workload(60, 512, 32, rate=8.0, seed=0)
    got = sim.disaggregated(dep, dep, reqs, 1, 1)
    assert sorted(m.request_id for m in got) == list(range(60))
    assert all(m.output_tokens == 32 and m.ttft > 0 and m.tpot > 0 for m in got)
    assert 0 <= metrics.goodput_fraction(got, 1.0, 0.05) <= 1


# --- capacity ----------------------------------------------------------------------------------

def test_decide_capacity_meets_the_targets_with_fewest_gpus():
    kw = dict(prompt_tokens=256, output_tokens=32, ttft_p90_s=0.25, tpot_p90_s=0.05, n_requests=80)
    low = capacity.decide_capacity(LLAMA8, "H100 SXM", request_rate=2.0, **kw)
    high = capacity.decide_capacity(LLAMA8, "H100 SXM", request_rate=1000.0, **kw)
    for d in (low, high):
        assert isinstance(d, Decision) and d.chapter == "ch 9"
        v = d.value
        assert set(v) == {"tensor_parallel_size", "replicas", "max_num_seqs", "p90_ttft_s", "p90_tpot_s"}
        assert v["p90_ttft_s"] <= 0.25 and v["p90_tpot_s"] <= 0.05
        assert "Poisson" in d.reason and "error" in d.reason
    gpus = lambda d: d.value["tensor_parallel_size"] * d.value["replicas"]  # noqa: E731
    assert gpus(low) == 1
    assert gpus(high) > gpus(low)


def test_decide_capacity_signature_and_impossible_targets():
    d = capacity.decide_capacity(model("Llama-3.1-70B"), "H100 SXM", request_rate=1.0, prompt_tokens=128,
                            output_tokens=8, ttft_p90_s=1e-4, tpot_p90_s=1e-4, kv_dtype="fp16",
                            weight_dtype="fp16", n_requests=20)
    assert d.value is None and "no configuration" in d.reason
    with pytest.raises(ValueError, match="request_rate"):
        capacity.decide_capacity(LLAMA8, "H100 SXM", request_rate=0, prompt_tokens=1, output_tokens=1,
                            ttft_p90_s=1, tpot_p90_s=1)


def test_one_kth_of_an_offline_run_takes_the_whole_runs_steps():
    """k identical copies of 1/k of a fixed-length offline run (requests, batch limit, token
    budget, KV pool) step together: costing each step's sequences k times gives the whole run's
    time (the cheap path of tests/bench/bench_simulate.py)."""
    cm = cost_model.CostModel.for_gpu(LLAMA8, gpu_preset("H100 SXM"), 1)
    full = dict(num_blocks=400, max_num_seqs=32, max_num_batched_tokens=512, chunked_prefill=True)
    reqs = workload.fixed_workload(64, 100, 40)
    whole = sum(cm.step_time(s) for s in sim.step_shapes(reqs, **full))
    k = 4
    part = dict(num_blocks=100, max_num_seqs=8, max_num_batched_tokens=128, chunked_prefill=True)
    scaled = sum(cm.step_time(s * k) for s in sim.step_shapes(reqs[: 64 // k], **part))
    assert scaled == pytest.approx(whole, rel=0.02)


# --- one loop, one fitted model, hardened entry points -------------------------------------------

def test_engine_and_simulator_share_one_loop_and_scheduler():
    """The identical steps above follow from the design: both run steploop.run with a steploop
    Scheduler; only the step executor differs."""
    import inspect

    from inferbook import engine, steploop
    assert engine.Scheduler is steploop.Scheduler and steploop.Scheduler is steploop.Scheduler
    assert "run(self.scheduler" in inspect.getsource(engine.Engine.run)
    assert "run(sched" in inspect.getsource(sim.serve_simulated)
    assert "while pending" not in inspect.getsource(engine) + inspect.getsource(sim)


def test_fitted_model_is_the_default_of_every_applied_path():
    import json

    from inferbook.notebook import repo_root
    data = json.loads((repo_root() / "outputs/benchmarks/simulate_published.json").read_text())
    assert cost_model.FITTED.eff == cost_model.Efficiency(**data["fitted_efficiency"])
    assert sim.Deployment(LLAMA8, "H100 SXM").eff == cost_model.FITTED.eff
    assert cost_model.CostModel.for_gpu(LLAMA8, gpu_preset("H100 SXM")).eff == cost_model.FITTED.eff
    assert cost_model.FITTED.eff != cost_model.Efficiency()  # the fit is not the unfitted defaults
    assert "held-out" in cost_model.FITTED.error_sentence


def test_decode_step_time_is_the_fitted_cost_models_decode_step():
    t = cost_model.decode_step_time(LLAMA8, gpu_preset("H100 SXM"), 1, 64, 1000)
    assert t == cost_model.FITTED.cost_model(LLAMA8, "H100 SXM").step_time([(1, 999)] * 64)
    assert cost_model.decode_tokens_per_s(LLAMA8, gpu_preset("H100 SXM"), 1, 64, 1000) == pytest.approx(64 / t)
    # more sequences per step: more tokens per second (memory-bound decode)
    assert cost_model.decode_tokens_per_s(LLAMA8, gpu_preset("H100 SXM"), 1, 128, 1000) > 64 / t


def test_missing_fit_refuses_instead_of_using_defaults(tmp_path):
    missing = cost_model.load_fitted(tmp_path / "none.json")
    assert missing.eff is None and "not measured" in missing.error_sentence
    with pytest.raises(RuntimeError, match="bench_simulate"):
        missing.efficiency()


DEP = None


def _dep():
    global DEP
    DEP = DEP or sim.Deployment(LLAMA8, "H100 SXM", max_num_seqs=8)
    return DEP


@pytest.mark.parametrize("call, match", [
    (lambda: capacity.decide_capacity(LLAMA8, "H100 SXM", request_rate=math.inf, prompt_tokens=8,
                                 output_tokens=8, ttft_p90_s=1, tpot_p90_s=1), "request_rate"),
    (lambda: capacity.decide_capacity(LLAMA8, "H100 SXM", request_rate=1.0, prompt_tokens=8,
                                 output_tokens=8, ttft_p90_s=math.nan, tpot_p90_s=1), "ttft_p90_s"),
    (lambda: capacity.decide_capacity(LLAMA8, "H100 SXM", request_rate=1.0, prompt_tokens=8.5,
                                 output_tokens=8, ttft_p90_s=1, tpot_p90_s=1), "prompt_tokens"),
    (lambda: capacity.decide_capacity(LLAMA8, "H100 SXM", request_rate=1.0, prompt_tokens=8,
                                 output_tokens=8, ttft_p90_s=1, tpot_p90_s=1, max_gpus=0), "max_gpus"),
    (lambda: capacity.decide_capacity(3, "H100 SXM", request_rate=1.0, prompt_tokens=8,
                                 output_tokens=8, ttft_p90_s=1, tpot_p90_s=1), "spec"),
    (lambda: capacity.decide_capacity(LLAMA8, "H100 SXM", request_rate=1.0, prompt_tokens=10**7,
                                 output_tokens=8, ttft_p90_s=1, tpot_p90_s=1), "context"),
    (lambda: cost_model.fit_cpu([[(1, 1)]] * 3, [0.1] * 3, "cfg"), "config"),
    (lambda: cost_model.fit_cpu([[(1, 1)]] * 3, [0.0] * 3, GPTConfig()), "all 0"),
    (lambda: cost_model.CostModel.for_gpt("cfg", 1e9, cost_model.Efficiency()), "config"),
    (lambda: sim.run_replicas(_dep(), workload.fixed_workload(4, 8, 2), 0), "replicas"),
    (lambda: sim.run_replicas(_dep(), [], 1), "requests"),
    (lambda: sim.run_replicas("dep", workload.fixed_workload(4, 8, 2), 1), "dep"),
    (lambda: sim.split_round_robin(workload.fixed_workload(4, 8, 2), -1), "replicas"),
    (lambda: sim.disaggregated(_dep(), _dep(), workload.fixed_workload(4, 8, 2), 0, 1), "n_prefill"),
    (lambda: sim.disaggregated(_dep(), _dep(), workload.fixed_workload(4, 8, 2), 1, 1, 0.0), "link_bytes_per_s"),
    (lambda: sim.Deployment(LLAMA8, "H100 SXM", tp=0), "tp"),
    (lambda: sim.Deployment(LLAMA8, "no such GPU"), "GPU"),
    (lambda: sim.Deployment(LLAMA8, "H100 SXM", eff=0.5), "eff"),
    (lambda: sim.Deployment(LLAMA8, "H100 SXM", tp=3), "heads"),
    (lambda: cost_model.Efficiency(flops_efficiency=math.nan), "flops_efficiency"),
    (lambda: cost_model.Efficiency(bandwidth_efficiency="0.5"), "bandwidth_efficiency"),
    (lambda: cost_model.Efficiency(step_overhead_s=math.inf), "step_overhead_s"),
    (lambda: cost_model.CostModel.for_gpu(LLAMA8, gpu_preset("H100 SXM"), tp=0), "tp"),
    (lambda: cost_model.CostModel.for_gpu(LLAMA8, gpu_preset("H100 SXM")).cost([(0, 5)]), "new_tokens"),
    (lambda: cost_model.CostModel.for_gpu(LLAMA8, gpu_preset("H100 SXM")).cost([(1, -5)]), "past_tokens"),
    (lambda: cost_model.CostModel.for_gpu(LLAMA8, gpu_preset("H100 SXM")).cost([(1,)]), "pair"),
    (lambda: cost_model.CostModel.for_gpt(GPTConfig(vocab_size=8, n_positions=8, n_embd=8, n_layer=1,
                                             n_head=1), 0.0, cost_model.Efficiency()), "achieved_flops"),
    (lambda: sim.serve_simulated([Request(0, (1, 2), 2)], Unit(), num_blocks=0), "num_blocks"),
    (lambda: sim.serve_simulated([Request(0, (1, 2), 2)], Unit(), num_blocks=4, policy="x"), "policy"),
    (lambda: sim.serve_simulated([Request(0, (1, 2), 2)], object(), num_blocks=4), "step_time"),
    (lambda: sim.serve_simulated([], Unit(), num_blocks=4), "at least one"),
    (lambda: sim.serve_simulated([Request(0, (1, 2), 2)] * 2, Unit(), num_blocks=4), "unique"),
    (lambda: sim.serve_simulated([Request(0, tuple(range(40)), 2)], Unit(), num_blocks=1), "could never"),
    (lambda: sim.kv_blocks(LLAMA8, gpu_preset("H100 SXM"), 1, block_size=0), "block_size"),
    (lambda: cost_model.fit_cpu([[(1, 1)]] * 3, [0.1, math.nan, 0.1], GPTConfig()), r"seconds\[1\]"),
    (lambda: cost_model.decode_step_time(LLAMA8, gpu_preset("H100 SXM"), 1, 0, 10), "batch"),
    (lambda: cost_model.decode_step_time(LLAMA8, gpu_preset("H100 SXM"), 1, 1, 0), "context"),
])
def test_bad_input_is_refused_with_the_argument_named(call, match):
    with pytest.raises((TypeError, ValueError), match=match):
        call()


def test_decide_capacity_with_one_token_replies_plans_on_ttft_alone():
    d = capacity.decide_capacity(LLAMA8, "H100 SXM", request_rate=2.0, prompt_tokens=256, output_tokens=1,
                            ttft_p90_s=0.5, tpot_p90_s=0.01, n_requests=40)
    assert d.value is not None and d.value["p90_tpot_s"] == 0.0


# -- the form fitted to vLLM's steps (tests/bench/bench_vllm_serve.py) ---------------------------

def test_logits_at_the_last_token_only_take_the_head_off_every_earlier_prompt_token():
    cfg = GPTConfig(vocab_size=2048, n_positions=512, n_embd=256, n_layer=4, n_head=4)
    eff = cost_model.Efficiency()
    every = cost_model.CostModel.for_gpt(cfg, 1e10, eff)
    last = cost_model.CostModel.for_gpt(cfg, 1e10, eff, logits="last")
    assert every.head_params == 0 and last.head_params == 2048 * 256
    head = 2 * 2048 * 256
    # a 128-token chunk skips 127 logits; a decode row (its only token is sampled) skips none
    assert every.flops([(128, 0)]) - last.flops([(128, 0)]) == pytest.approx(127 * head)
    assert every.flops([(1, 50)] * 3) == last.flops([(1, 50)] * 3)
    mixed = [(64, 10), (1, 30), (1, 7)]
    assert every.flops(mixed) - last.flops(mixed) == pytest.approx(63 * head)


def test_a_fitted_byte_rate_makes_the_cpu_step_a_roofline():
    cfg = GPTConfig(vocab_size=2048, n_positions=512, n_embd=256, n_layer=4, n_head=4)
    eff = cost_model.Efficiency(step_overhead_s=1e-3, bandwidth_efficiency=1.0)
    summed = cost_model.CostModel.for_gpt(cfg, 2.5e10, eff)
    roof = cost_model.CostModel.for_gpt(cfg, 2.5e10, eff, achieved_bytes_per_s=1e10)
    one, many = [(1, 99)], [(1, 99)] * 32
    assert summed.cost(one).memory_s == 0
    # one decode row: streaming the weights (and its 100 tokens of KV) takes longer than its FLOPs
    assert roof.cost(one).bound == "memory"
    assert roof.cost(one).memory_s == pytest.approx((roof.weight_bytes + 100 * roof.kv_bytes_per_token) / 1e10)
    assert roof.step_time(one) == pytest.approx(1e-3 + roof.cost(one).memory_s)
    # 32 rows: the FLOPs take over, and the weights are paid once, not 32 times
    assert roof.cost(many).bound == "compute"
    assert roof.step_time(many) == pytest.approx(summed.step_time(many))


@pytest.mark.parametrize("kwargs,match", [
    (dict(logits="first"), "logits"),
    (dict(achieved_bytes_per_s=0.0), "achieved_bytes_per_s"),
    (dict(achieved_bytes_per_s=math.inf), "achieved_bytes_per_s"),
])
def test_bad_cpu_model_options_are_refused_by_name(kwargs, match):
    cfg = GPTConfig(vocab_size=8, n_positions=8, n_embd=8, n_layer=1, n_head=1)
    with pytest.raises((TypeError, ValueError), match=match):
        cost_model.CostModel.for_gpt(cfg, 1e9, cost_model.Efficiency(), **kwargs)
