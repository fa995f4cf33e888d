"""Grading cases of Exercise 8.1 (plan a deployment by hand), in the shape of grading_cases.py:
WRONG (exercise, answer cell, source, the check that must fail FIRST), ALTERNATIVES
(differently written right answers that must pass) and BOUNDARIES (what each check covers).
The grader's owner merges `tests/grading_cases_ex*.py` into the case table.
"""

from grading_helpers import solution_answer as sol

E8 = "ex08_plan_deployment"
EXAMPLE = "Llama-3.1-70B on H100 SXM, TP=4, u=0.92"

BOUNDARIES = {
    E8: {
        "Part 1/… TP=4, u=0.92 · TP=8, u=0.9": "the example at two TP degrees and utilizations "
                                             "(a dict typed in for the example fails the second)",
        "Part 1/… hidden case": "a dense model, an MoE model at TP > 1 and one more, GPU, TP degree "
                                "and utilization drawn at grading time (stratified)",
        "Part 2/32K requests, … TP=4, TP=8": "the plan's count at each layout that fits",
        "Part 2/budget of k request(s) -1/+0/+1 byte": "a budget of exactly k requests, ±1 byte",
        "Part 2/requests of 4095/4096/4097/1 tokens": "block boundary −1, at, +1, one token",
        "Part 2/weights do not fit: 0, never negative": "a negative budget",
        "Part 2/… hidden case": "GQA and MLA models, TP degrees, budgets and contexts drawn afresh",
        "Part 3/smallest TP, …": "TP > 1 needed (32K, 64K: a degree that does not split the "
                                 "heads would fit), TP = 1 enough, nothing fits (None), 128K",
        "Part 3/… hidden model, GPU and context": "drawn at grading time: a GQA model and, every "
                                                  "grading, the MLA model at a context its rule decides",
        "Part 4/…, Llama-3.1-70B on 4x H100": "the example's plan, parsed by the pinned release",
        "Part 4/…, hidden plan": "a cap above the token budget (must be raised) and one below",
    },
}

MARKETING_MEMORY = sol(E8, "budget", "g.memory_bytes * utilization", "g.hbm_bytes * utilization")
NO_NON_TORCH = sol(E8, "budget", " + runtime.non_torch_bytes\n", "\n")
WEIGHTS_NOT_SPLIT = sol(E8, "budget", "-(-spec.n_params * 2 // tp)", "spec.n_params * 2")


def _typed_in() -> str:
    """An answer right only for the example (its numbers typed in), computed from the package
    so that it stays right for the example when the budget's terms are refined."""
    from inferbook import rules, vllm_memory
    from inferbook.hardware import gpu
    from inferbook.models import model
    spec = model("Llama-3.1-70B")
    b = rules.layout(spec, gpu("H100 SXM"), 4, 1, "bf16",
                     rules.PlanRequest(4, "bf16", "latency", None, 0.92)).budget
    whole = vllm_memory.vllm_replicated_bytes(spec, 4)   # Part 1 leaves these out
    return (f"def my_kv_budget(spec, g, tp, utilization, runtime):\n"
            f"    # the example's numbers, typed in\n"
            f"    return {{'requested': {b.usable_bytes}, 'weights': {b.weight_bytes - whole},\n"
            f"            'kv': {b.kv_budget_bytes + whole}}}\n")


TYPED_IN = _typed_in()
CALLS_PACKAGE = '''
from inferbook import sizing

def my_kv_budget(spec, g, tp, utilization, runtime):
    b = sizing.memory_budget(spec, g, tp, "bf16", gpu_memory_utilization=utilization,
                             runtime=runtime)
    return {"requested": b.usable_bytes, "weights": b.weight_bytes, "kv": b.kv_budget_bytes}
'''
NO_BLOCKS = sol(E8, "concurrency", "slots = -(-ctx // 16) * 16  # whole 16-token blocks",
                "slots = ctx")
HEADS_NOT_SPLIT = sol(E8, "concurrency",
                      "2 * max(1, spec.num_key_value_heads // tp) * spec.head_dim * 2",
                      "2 * spec.num_key_value_heads * spec.head_dim * 2")
NEGATIVE = sol(E8, "concurrency", "return max(0, kv_budget // per_request)",
               "return kv_budget // per_request")
ANY_TP = '''
def my_tp_degree(spec, g, ctx, utilization, runtimes):
    for tp in range(1, 9):                 # any degree, whether the heads split or not
        budget = my_kv_budget(spec, g, tp, utilization, runtimes[tp])
        if my_max_concurrency(spec, tp, budget["kv"], ctx) >= 1:
            return tp
    return None
'''
EIGHT_WHEN_NOTHING_FITS = sol(E8, "tp_degree", "    return None", "    return 8")
NOT_RAISED = sol(E8, "serve", "tokens = max(max_num_batched_tokens, max_num_seqs)",
                 "tokens = max_num_batched_tokens")
SGLANG_FLAG = sol(E8, "serve", "--max-model-len", "--context-length")
# Rule: with more GPUs than KV heads each GPU keeps one (replication), never kv // tp = 0.
REPLICATION_ZERO = sol(E8, "concurrency", "max(1, spec.num_key_value_heads // tp)",
                       "spec.num_key_value_heads // tp")
# Rule: KV heads per GPU are whole heads; kv / tp is right whenever tp divides kv.
FRACTIONAL_HEADS = sol(E8, "concurrency", "max(1, spec.num_key_value_heads // tp)",
                       "spec.num_key_value_heads / tp")
# Rule: an MLA model caches its latent, not KV heads (an MLA model in every grading).
MLA_AS_GQA = sol(E8, "concurrency", "if spec.is_mla:", "if False:")
# Rule: any degree 1..8 whose heads split, not only powers of two.
POWERS_OF_TWO = sol(E8, "tp_degree", "for tp in range(1, 9):", "for tp in (1, 2, 4, 8):")
# Rule: the utilization flag has two decimals (0.90, not 0.9; one such plan in every grading).
STR_UTILIZATION = sol(E8, "serve", "{utilization:.2f}", "{utilization}")
# Rule (Part 1, an MoE model at TP > 1 in every grading): every parameter is split over the GPUs.
ACTIVE_PARAMS = sol(E8, "budget", "-(-spec.n_params * 2 // tp)", "-(-spec.n_active_params * 2 // tp)")
MOE_WEIGHTS_WHOLE = sol(E8, "budget", "-(-spec.n_params * 2 // tp)",
                        "(spec.n_params * 2 if spec.is_moe else -(-spec.n_params * 2 // tp))")
# Rule (Part 3, an MLA model in every grading): its latent is counted as Part 2 counts it, not as
# KV heads split over TP (a tp_degree that re-derives the KV size inline with the GQA formula).
MLA_AS_HEADS_IN_TP = sol(E8, "tp_degree", 'if my_max_concurrency(spec, tp, budget["kv"], ctx) >= 1:',
                         "per = 2 * max(1, kv // tp) * spec.head_dim * 2 * spec.num_hidden_layers\n"
                         "        if budget['kv'] // (per * (-(-ctx // 16) * 16)) >= 1:")

WRONG = [
    (E8, "budget", MARKETING_MEMORY, f"Part 1/requested bytes, {EXAMPLE}"),
    (E8, "budget", NO_NON_TORCH, f"Part 1/KV budget, {EXAMPLE}"),
    (E8, "budget", WEIGHTS_NOT_SPLIT, f"Part 1/weight bytes per GPU, {EXAMPLE}"),
    (E8, "budget", CALLS_PACKAGE, "Part 1/your own code"),
    (E8, "budget", TYPED_IN, "Part 1/requested bytes, Llama-3.1-70B on H100 SXM, TP=8, u=0.9"),
    (E8, "concurrency", HEADS_NOT_SPLIT, "Part 2/32K requests, Llama-3.1-70B on H100, TP=4"),
    (E8, "concurrency", NO_BLOCKS, "Part 2/requests of 4097 tokens, TP=8"),
    (E8, "concurrency", NEGATIVE, "Part 2/weights do not fit: 0, never negative"),
    (E8, "tp_degree", ANY_TP, "Part 3/smallest TP, Llama-3.1-70B on H100 SXM at 32768"),
    (E8, "tp_degree", EIGHT_WHEN_NOTHING_FITS,
     "Part 3/smallest TP, Llama-3.1-405B on A100 40GB at 8192"),
    (E8, "serve", SGLANG_FLAG, "Part 4/vLLM 0.33 accepts it, Llama-3.1-70B on 4x H100"),
    (E8, "serve", NOT_RAISED, "Part 4/vLLM 0.33 accepts it, hidden plan"),
    # kv // tp = 0 raises on a drawn model whose KV bytes it divides by, else gives a wrong count
    (E8, "concurrency", REPLICATION_ZERO,
     ("Part 2/your code runs", "Part 2/requests that fit, hidden case")),
    (E8, "concurrency", FRACTIONAL_HEADS, "Part 2/requests that fit, hidden case"),
    (E8, "concurrency", MLA_AS_GQA, "Part 2/requests that fit, hidden case"),
    (E8, "tp_degree", POWERS_OF_TWO, "Part 3/smallest TP, hidden head counts"),
    (E8, "serve", STR_UTILIZATION, "Part 4/--gpu-memory-utilization, hidden plan"),
    (E8, "budget", ACTIVE_PARAMS, "Part 1/weight bytes per GPU, hidden case"),
    (E8, "budget", MOE_WEIGHTS_WHOLE, "Part 1/weight bytes per GPU, hidden case"),
    (E8, "tp_degree", MLA_AS_HEADS_IN_TP, "Part 3/smallest TP, hidden model, GPU and context"),
]

ALTERNATIVES = [
    (E8, "loops over layers and heads, a list joined with shlex", {
        "budget": '''
def my_kv_budget(spec, g, tp, utilization, runtime):
    from fractions import Fraction
    requested = math.ceil(Fraction(str(utilization)) * g.memory_bytes)
    weights = math.ceil(Fraction(2 * spec.n_params, tp))
    kv = requested - weights
    for term in ("activation_bytes", "cuda_graph_bytes", "non_torch_bytes"):
        kv -= getattr(runtime, term)
    return dict(requested=requested, weights=weights, kv=kv)
''',
        "concurrency": '''
def my_max_concurrency(spec, tp, kv_budget, ctx):
    if kv_budget <= 0:
        return 0
    if spec.is_mla:
        values = spec.kv_lora_rank + spec.qk_rope_head_dim
    else:
        heads = spec.num_key_value_heads // tp if spec.num_key_value_heads >= tp else 1
        values = 2 * heads * spec.head_dim
    blocks = math.ceil(ctx / 16)
    per_request = 0
    for _layer in range(spec.num_hidden_layers):
        per_request += blocks * 16 * values * 2
    n = 0
    while (n + 1) * per_request <= kv_budget:
        n += 1
    return n
''',
        "tp_degree": '''
def my_tp_degree(spec, g, ctx, utilization, runtimes):
    def shards(tp):
        kv = spec.num_key_value_heads
        return spec.num_attention_heads % tp == 0 and (
            spec.is_mla or kv % tp == 0 or tp % kv == 0)
    fitting = [tp for tp in sorted(runtimes) if tp <= 8 and shards(tp)
               and my_max_concurrency(
                   spec, tp, my_kv_budget(spec, g, tp, utilization, runtimes[tp])["kv"],
                   ctx) > 0]
    return fitting[0] if fitting else None
''',
        "serve": '''
def my_serve_command(repo, tp, ctx, utilization, max_num_seqs, max_num_batched_tokens):
    argv = ["vllm", "serve", repo,
            "--enable-chunked-prefill",
            "--max-num-batched-tokens", str(max(max_num_batched_tokens, max_num_seqs)),
            "--gpu-memory-utilization", "%.2f" % utilization,
            "--tensor-parallel-size", str(tp),
            "--max-num-seqs", str(max_num_seqs),
            "--max-model-len", str(ctx)]
    return shlex.join(argv)
''',
    }),
    (E8, "NumPy integers, = signs in flags, a helper per term", {
        "budget": '''
import numpy as np

def requested_bytes(g, u):
    return int(np.ceil(round(g.memory_bytes * u, 6)))

def my_kv_budget(spec, g, tp, utilization, runtime):
    req = requested_bytes(g, utilization)
    w = (2 * spec.n_params + tp - 1) // tp
    other = sum([runtime.activation_bytes, runtime.non_torch_bytes,
                 runtime.cuda_graph_bytes])
    return {"kv": req - w - other, "weights": w, "requested": req}
''',
        "concurrency": '''
def my_max_concurrency(spec, tp, kv_budget, ctx):
    if spec.is_mla:
        per_token_layer = np.int64(2 * (spec.kv_lora_rank + spec.qk_rope_head_dim))
    else:
        per_token_layer = np.int64(4 * max(spec.num_key_value_heads // tp, 1) * spec.head_dim)
    per_request = per_token_layer * spec.num_hidden_layers * 16 * ((ctx + 15) // 16)
    return np.int64(max(kv_budget, 0) // per_request)
''',
        "tp_degree": '''
def my_tp_degree(spec, g, ctx, utilization, runtimes):
    tp = 1
    while tp <= 8:
        ok_heads = spec.num_attention_heads % tp == 0
        kv = spec.num_key_value_heads
        ok_kv = spec.is_mla or kv % tp == 0 or tp % kv == 0
        if ok_heads and ok_kv:
            kv_bytes = my_kv_budget(spec, g, tp, utilization, runtimes[tp])["kv"]
            if my_max_concurrency(spec, tp, kv_bytes, ctx) >= 1:
                return tp
        tp += 1
    return None
''',
        "serve": '''
def my_serve_command(repo, tp, ctx, utilization, max_num_seqs, max_num_batched_tokens):
    budget = max_num_batched_tokens if max_num_batched_tokens >= max_num_seqs else max_num_seqs
    return " ".join([
        "vllm serve", repo,
        f"--tensor-parallel-size={tp}",
        f"--max-model-len={ctx}",
        f"--gpu-memory-utilization={utilization:.2f}",
        f"--max-num-seqs={max_num_seqs}",
        f"--max-num-batched-tokens={budget}",
        "--enable-chunked-prefill",
    ])
''',
    }),
]
