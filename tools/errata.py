"""The errata page, generated: every entry quotes a source text and computes what is true.

    python tools/errata.py            # print the page
    python tools/errata.py --write    # rewrite book/errata.md
    python tools/errata.py --check    # exit 1 if book/errata.md is stale

Each entry is an `Entry`: the chapter it belongs to, which source says it (the lesson or the
blog article, see the introduction), the source's words in the original Chinese (`original`,
verbatim, so a test can find them in the seed texts when they are at hand) with an English
translation, and a function that computes the correction with the course package and returns it
as Markdown. `tests/test_errata.py` regenerates the page and compares it with the committed one,
so a number here can only change when the code that computes it changes.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
ERRATA = ROOT / "book" / "errata.md"


@dataclass(frozen=True)
class Entry:
    """One error in a source text and the computation that corrects it."""

    chapter: int
    source: str                 # "Lesson" or "Blog"
    original: str               # the source's words, verbatim (Chinese, or code as written)
    translation: str            # English; empty when `original` is English code
    body: Callable[[], str]     # the correction, computed, as Markdown


CHAPTERS = {
    1: ("Why decoding is slow", "the lesson's sections \u201cThe problem\u201d (问题) and \u201cBuild it\u201d "
        "(动手构建); the blog's section on the KV cache"),
    2: ("KV-cache math", "the lesson's section \u201cKV-cache math\u201d (KV cache 数学) and its key terms; "
        "the blog's \u201cpitfalls\u201d (避坑指南)"),
    3: ("From softmax to FlashAttention", "the lesson's section \u201cFlash Attention: the tiling trick\u201d "
        "(Flash Attention——分块技巧) and build step 2; the blog's FlashAttention section"),
    4: ("FlashAttention as a GPU kernel", "the lesson's versions table (版本演进) and key terms"),
    5: ("PagedAttention and prefix caching", "the lesson's sections \u201cPagedAttention\u201d, "
        "\u201cUsage\u201d (使用) and key terms"),
    6: ("Continuous batching", "the lesson's section \u201cContinuous batching\u201d (连续批处理)"),
    7: ("Speculative decoding", "the lesson's section \u201cSpeculative decoding: another latency "
        "optimisation\u201d (Speculative decoding——另一项延迟优化)"),
    8: ("Putting it together", "the blog's title, benchmark table (实测效果对比) and code; the lesson's "
        "section \u201cUsage\u201d (使用)"),
}


# ---- formatting ------------------------------------------------------------------------------

def gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def benchmark(name: str) -> dict:
    """Return a committed benchmark JSON from outputs/benchmarks/."""
    return json.loads((ROOT / "outputs" / "benchmarks" / f"{name}.json").read_text())


# ---- chapter 1 -------------------------------------------------------------------------------

def _ch1_16_million() -> str:
    from inferbook.decode import cached_counts, naive_counts

    rows, dots = naive_counts(1, 4096)
    crows, cdots = cached_counts(1, 4096)
    return (f"16 million is 4096² = {4096**2:,}. Counting what the decoders compute "
            f"(`inferbook.decode`'s counters, per layer and head): the naive decoder computes "
            f"{rows:,} query rows (N(N+1)/2) and {dots:,} query-key dot products (N(N+1)(N+2)/6, "
            f"which is O(N³), not O(N²)). The cached decoder computes {crows:,} rows and "
            f"{cdots:,} dot products: O(N²) in total, O(N) per step.")


def _ch1_5050() -> str:
    from inferbook.decode import cached_counts, naive_counts

    rows, dots = naive_counts(1, 100)
    crows, cdots = cached_counts(1, 100)
    return (f"Right as counts of query rows ({rows:,} and {crows:,}), but the cached decoder still "
            f"computes {cdots:,} query-key dot products, the naive one {dots:,}. The cache removes "
            "the recomputation of the prefix, not the attention over it.")


def _ch1_4950() -> str:
    from inferbook.decode import cached_counts

    crows, cdots = cached_counts(1, 100)
    return (f"{100 * 99 // 2:,} is the number of pairs of a token with a strictly earlier token "
            f"({cdots - crows:,} = {cdots:,} dot products of the cached decoder minus the {crows} "
            "of each token with itself): it is the work that remains *with* a KV cache, not the "
            "work a cache saves.")


def _ch1_dao() -> str:
    return ("Only FlashAttention is Dao et al.'s {cite:p}`dao2022flashattention`. Caching keys and "
            "values between decoding steps is older: OpenAI's GPT-2 release already passes them "
            "between steps as `past` {cite:p}`openai_gpt2_code`, and the cost of the cache at scale "
            "is analysed by Pope et al. {cite:p}`pope2023efficiently`.")


def _ch1_bandwidth_bound() -> str:
    from inferbook import roofline
    from inferbook.hardware import gpu
    from inferbook.models import model

    m, h = model("Llama-3.1-8B"), gpu("H100 SXM")
    shape = (m.n_params, m.num_hidden_layers, m.num_attention_heads * m.head_dim,
             m.num_key_value_heads * m.head_dim)
    prefill = roofline.forward_cost(*shape, batch=1, new_tokens=2048, past_tokens=0)
    decode = roofline.forward_cost(*shape, batch=1, new_tokens=1, past_tokens=2048)
    assert prefill.intensity > h.ridge_flops_per_byte > decode.intensity
    return (f"Decoding is; prefilling is not. With `inferbook.roofline`, Llama-3.1-8B on an H100 "
            f"SXM (ridge point {h.ridge_flops_per_byte:.0f} FLOP/byte) does "
            f"{prefill.intensity:,.0f} FLOP per byte when it prefills a 2,048-token prompt "
            f"(compute-bound) and {decode.intensity:.2f} FLOP per byte for one decode step at that "
            "context (memory-bound). Serving mixes both, which is why chunked prefill exists "
            "(chapter 6).")


def _ch1_blog_naive_complexity() -> str:
    n = 100
    keys = np.random.default_rng(0).normal(size=(n, 8))
    query = np.ones(8)
    dots = 0
    for key in keys:               # the pseudo-code's loop, counted
        _ = float(query @ key)
        dots += 1
    assert dots == n
    return (f"The function scores one query against the n cached keys: its loop computes {dots} "
            f"dot products for n = {n}, O(n·d) per call. O(n²) is the total over a generation with a "
            "cache; without one, recomputing every position each step is O(n³) dot products "
            "(chapter 1 counts both).")


def _ch1_blog_torch_cat() -> str:
    import torch

    try:
        torch.cat([[], torch.zeros(1, 1, 4)], dim=-2)
    except TypeError as error:
        message = str(error)
    else:  # pragma: no cover - torch changed its mind
        raise AssertionError("torch.cat([[], k]) no longer raises")
    return (f"The class initialises the caches as Python lists (`self.k_cache = []`), so the first "
            f"`torch.cat([self.k_cache, k], dim=-2)` raises `TypeError: {message}`. Start from "
            "`None` (or a preallocated tensor, as `inferbook.kv_cache` does). Its comment that "
            "\u201cthe O(n²) problem remains\u201d mixes up the totals: with the cache a step costs O(n), "
            "a generation O(n²), against O(n³) without it.")


def _ch1_demo_program() -> str:
    from inferbook.decode import cached_counts, naive_counts

    _, dots = naive_counts(1, 100)
    _, cdots = cached_counts(1, 100)
    return ("A naive decoder that is handed keys and values computed once, outside the loop, is a "
            "cached decoder in disguise, and counting its attention work gives the same number "
            "for both. The book's demo (`python code/inferbook/main.py`) recomputes every "
            f"position's keys and values from the tokens at every step, and counts {dots:,} against "
            f"{cdots:,} dot products for 100 tokens.")


# ---- chapter 2 -------------------------------------------------------------------------------

def _ch2_per_head() -> str:
    return ("One layer caches a key and a value for every KV head, so the formula is "
            "`2 * n_kv_heads * d_head * dtype_size`; the lesson's version is that of a single head.")


def _ch2_7b() -> str:
    from inferbook.models import model
    from inferbook.sizing import kv_bytes, kv_bytes_per_token, kv_bytes_per_token_per_layer

    m7 = model("Llama-2-7B")
    lesson = 2 * 128 * 2
    per_layer = kv_bytes_per_token_per_layer(m7, "fp16")
    per_token = kv_bytes_per_token(m7, "fp16")
    ctx = kv_bytes(m7, 32768, 1, "fp16")
    native = kv_bytes(m7, m7.max_position_embeddings, 1, "fp16")
    return (f"{lesson} bytes is one head. With all {m7.num_key_value_heads} heads (Llama-2-7B has "
            f"exactly this shape) a token costs {per_layer:,} bytes per layer and {per_token:,} bytes "
            f"({per_token // 1024:,} KiB) over the {m7.num_hidden_layers} layers, and a 32,768-token "
            f"sequence {ctx:,} bytes = {gb(ctx)} ({gib(ctx)}): {per_layer // lesson} times each of "
            f"the lesson's figures. (Llama-2-7B itself stops at {m7.max_position_embeddings:,} "
            f"tokens: {native:,} bytes.)")


def _ch2_70b() -> str:
    from inferbook.models import model
    from inferbook.sizing import kv_bytes, kv_bytes_per_token_per_layer

    m70 = model("Llama-3.1-70B")
    per_layer = kv_bytes_per_token_per_layer(m70, "fp16")
    ctx = kv_bytes(m70, 32768, 1, "fp16")
    return (f"{per_layer:,} bytes per token per layer is right (the Llama-3.1-70B preset; Llama 3 "
            f"and 3.1 share the attention shape), but {m70.num_hidden_layers} layers × "
            f"{per_layer:,} bytes × 32,768 tokens = {ctx:,} bytes = {gb(ctx)} ({gib(ctx)}), "
            "not 10.4 GB.")


def _ch2_128k() -> str:
    from inferbook.hardware import gpu
    from inferbook.models import model
    from inferbook.sizing import kv_bytes, weight_bytes

    m70, a100 = model("Llama-3.1-70B"), gpu("A100 40GB")
    c32, c128 = kv_bytes(m70, 32768, 1, "fp16"), kv_bytes(m70, 131072, 1, "fp16")
    assert c128 > a100.hbm_bytes
    return (f"The \u201c10 GB\u201d is the 32K figure ({gb(c32)}); at 131,072 tokens the cache is "
            f"four times that, {c128:,} bytes = {gb(c128)}, more than the whole "
            f"{gb(a100.hbm_bytes)} card, not \u201cmost of\u201d it; the bf16 weights alone are a further "
            f"{gb(weight_bytes(m70, 'bf16'))}.")


def _ch2_mha() -> str:
    from inferbook.models import model
    from inferbook.sizing import kv_bytes, kv_bytes_per_token_per_layer, with_kv_heads

    m70 = model("Llama-3.1-70B")
    mha = with_kv_heads(m70, m70.num_attention_heads)
    per_layer = kv_bytes_per_token_per_layer(mha, "fp16")
    ctx = kv_bytes(mha, 32768, 1, "fp16")
    return (f"MHA caches {mha.num_key_value_heads} KV heads instead of {m70.num_key_value_heads}: "
            f"{per_layer:,} bytes per token per layer and {ctx:,} bytes = {gb(ctx)} ({gib(ctx)}) "
            "at 32K, not 32 GB.")


def _ch2_mla_row() -> str:
    from inferbook.models import model
    from inferbook.sizing import kv_bytes_per_token

    v3 = model("DeepSeek-V3")
    right = kv_bytes_per_token(v3, "bf16")
    wrong = 2 * v3.kv_lora_rank * 2 * v3.num_hidden_layers
    assert right == (v3.kv_lora_rank + v3.qk_rope_head_dim) * 2 * v3.num_hidden_layers
    return (f"MLA caches one compressed latent of {v3.kv_lora_rank} values plus one shared RoPE key "
            f"of {v3.qk_rope_head_dim} values per token and layer, not a separate latent for K "
            f"and for V. DeepSeek-V3 ({v3.num_hidden_layers} layers, bf16) therefore caches "
            f"({v3.kv_lora_rank} + {v3.qk_rope_head_dim}) × 2 B × {v3.num_hidden_layers} = "
            f"{right:,} bytes per token, not 2 × {v3.kv_lora_rank} × 2 B × "
            f"{v3.num_hidden_layers} = {wrong:,} {{cite:p}}`deepseek2024v3`.")


def _ch2_blog_2_4_gb() -> str:
    from inferbook.models import model
    from inferbook.sizing import kv_bytes

    rows = []
    for name, ctx in [("Qwen2.5-7B", 4096), ("Qwen2.5-7B", 32768), ("Llama-2-7B", 4096),
                      ("Mistral-7B-v0.1", 32768), ("Llama-3.1-8B", 131072)]:
        rows.append(f"{name} at {ctx:,} tokens {gb(kv_bytes(model(name), ctx, 1, 'bf16'))}")
    return ("It depends on the attention layout and the context far more than on \u201c7B\u201d: "
            "with `inferbook.sizing` (bf16), " + "; ".join(rows) + ". Mistral-7B's 4,096-token "
            "sliding window caps its cache however long the context grows.")


def _ch2_b200_row() -> str:
    from inferbook.hardware import gpu

    h100, b200 = gpu("H100 SXM"), gpu("B200")
    return (f"\u201c~3 TB/s\u201d is the H100 SXM's {h100.hbm_bytes_per_s / 1e12:.2f} TB/s rounded "
            f"{{cite:p}}`nvidia_h100`; the B200 reads {b200.hbm_bytes_per_s / 1e12:.1f} TB/s "
            f"{{cite:p}}`nvidia_b200`, {b200.hbm_bytes_per_s / h100.hbm_bytes_per_s:.1f}× more, so one "
            "figure for both hides a generation. The B200 was announced with 192 GB "
            f"of HBM3e, but the DGX B200 datasheet lists {8 * b200.hbm_bytes / 1e9:,.0f} GB for "
            f"eight GPUs, {b200.hbm_bytes / 1e9:.0f} GB each, which is what a deployment sees and "
            "what the book's preset uses.")


# ---- chapter 3 -------------------------------------------------------------------------------

def _ch3_bit_identical() -> str:
    from inferbook import flash, softmax

    rng = np.random.default_rng(2)
    trials, differ, err_tiled, err_direct = 300, 0, [], []
    for _ in range(trials):
        q = (rng.normal(size=64) * 2).astype(np.float32)
        keys = rng.normal(size=(256, 64)).astype(np.float32)
        values = rng.normal(size=(256, 64)).astype(np.float32)
        exact = softmax.safe_softmax(keys.astype(np.float64) @ q.astype(np.float64)) \
            @ values.astype(np.float64)
        tiled = flash.flash_attention_forward(            # float32 throughout, tiles of 32
            q[None, None, None], keys[None, None], values[None, None], block_q=1, block_k=32,
            scale=1.0)[0][0, 0, 0]
        direct = softmax.safe_softmax(keys @ q) @ values
        differ += not np.array_equal(tiled, direct)
        err_tiled.append(np.abs(tiled - exact).max())
        err_direct.append(np.abs(direct - exact).max())
    # The count and the medians depend on the CPU's float32 kernels (OpenBLAS picks them by CPU:
    # 94 % on one machine, 95 % on another), so the page states what every machine shows: most
    # results differ, and the two errors are of one size, far below float32's unit roundoff x N.
    tiled_median, direct_median = float(np.median(err_tiled)), float(np.median(err_direct))
    assert differ > 0.8 * trials, differ
    assert max(tiled_median, direct_median) < min(2 * min(tiled_median, direct_median), 1e-6)
    return ("Exact in exact arithmetic, not bit-identical in any floating-point format: the tiled "
            "loop adds the same terms in another order, rescales partial sums by "
            "exp(m_old − m_new) and divides at the end. Over "
            f"{trials} random one-query problems (N = 256, d = 64, tiles of 32) the float32 tiled "
            "result differed from the float32 one-shot result in more than 80% of cases (the exact "
            "share depends on the CPU's float32 kernels), while both had errors of the same size "
            "against float64 (medians within 2× of each other, both below 1e-6). The right statement is "
            "flash-attention's test rule: error at most 2× that of the plain computation in the "
            "same precision (checked in `tests/test_flash.py`).")


def _ch3_p_shape() -> str:
    return ("The softmax output P is N×N, like S; only O is N×d. Standard attention writes and "
            "reads two N×N matrices.")


def _ch3_one_round_trip() -> str:
    from inferbook.io_model import flash_attention_io, kv_passes

    n, d, m = 4096, 64, 2**15
    block_q = m // (6 * d)
    passes = math.ceil(n / block_q)
    io = flash_attention_io(n, d, m)
    kv_reads = io.reads - n * d            # everything read except Q itself
    assert kv_reads == passes * 2 * n * d
    paper_passes = kv_passes(n, d, m, rows_divisor=4)
    assert paper_passes < passes == kv_passes(n, d, m)
    return ("True of the Q tiles and the O tiles. K and V are read once per Q tile: at N = "
            f"{n:,}, d = {d} and an SRAM of 2^15 elements, {passes} times each with Q tiles of "
            f"{block_q} rows (M/6d, chapter 3's tiles) and {paper_passes} times with the "
            f"{m // (4 * d)} rows of the paper's M/4d (`inferbook.io_model` counts it). That is "
            "why FlashAttention's traffic is Θ(N²d²/M), not Θ(Nd) {cite:p}`dao2022flashattention` "
            "(Theorem 2).")


def _ch3_blog_o_n_time() -> str:
    from inferbook.io_model import flash_attention_io, standard_attention_io

    n, d, m = 4096, 64, 2**15
    flash, standard = flash_attention_io(n, d, m), standard_attention_io(n, d, m)
    assert flash.flops == standard.flops == 4 * n * n * d
    return (f"The FLOPs are unchanged: 4N²d per head for both ({flash.flops:,} at N = {n:,}, "
            f"d = {d}, counted by `inferbook.io_model` for both algorithms). What becomes O(N) "
            f"is the extra memory; what shrinks is HBM traffic ({standard.total / flash.total:.1f}× "
            f"fewer elements moved than standard attention at N = {n:,}, M = 2^15), which is why "
            "it runs faster.")


def _blog_flash_attention(q, k, v, block_size):
    """The blog's pseudo-code, transcribed literally to NumPy (one head, its d_k = head dim)."""
    seq_len = q.shape[0]
    n_blocks = (seq_len + block_size - 1) // block_size
    o = np.zeros_like(q)
    l_ = np.zeros(seq_len)
    m_ = np.full(seq_len, -np.inf)
    for j in range(n_blocks):
        kb, vb = k[j * block_size:(j + 1) * block_size], v[j * block_size:(j + 1) * block_size]
        s = q @ kb.T / math.sqrt(q.shape[1])
        new_m = np.maximum(m_, s.max(axis=-1))
        correction = np.exp(m_ - new_m)
        new_l = l_ * correction + np.exp(s - new_m[:, None]).sum(axis=-1)
        o = o * correction[:, None] + (np.exp(s - new_m[:, None]) @ vb) / new_l[:, None]
        m_, l_ = new_m, new_l
    return o / l_[:, None]


BLOG_PROBLEM = dict(seed=7, n=256, d=32, block=64)   # chapter 3 runs the same problem


def blog_pseudocode_error() -> float:
    """Return the blog pseudo-code's largest error relative to the largest output on the square
    problem chapter 3 also uses (self-attention, N = 256: every key is read)."""
    from inferbook.flash import attention_reference

    rng = np.random.default_rng(BLOG_PROBLEM["seed"])
    n, d = BLOG_PROBLEM["n"], BLOG_PROBLEM["d"]
    q, k, v = (rng.normal(size=(n, d)) for _ in range(3))
    right = attention_reference(q[None, None], k[None, None], v[None, None])[0][0, 0]
    blog = _blog_flash_attention(q, k, v, BLOG_PROBLEM["block"])
    return float(np.abs(blog - right).max() / np.abs(right).max())


def _ch3_blog_pseudocode() -> str:
    from inferbook.flash import attention_reference

    err = blog_pseudocode_error()
    assert err > 0.1
    # The fix (unnormalised accumulation, one division at the end) is exact on the same problem.
    rng = np.random.default_rng(BLOG_PROBLEM["seed"])
    n, d, block = BLOG_PROBLEM["n"], BLOG_PROBLEM["d"], BLOG_PROBLEM["block"]
    q, k, v = (rng.normal(size=(n, d)) for _ in range(3))
    right = attention_reference(q[None, None], k[None, None], v[None, None])[0][0, 0]
    o, l_, m_ = np.zeros_like(q), np.zeros(n), np.full(n, -np.inf)
    for j in range(0, n, block):
        s = q @ k[j:j + block].T / math.sqrt(d)
        new_m = np.maximum(m_, s.max(axis=-1))
        c = np.exp(m_ - new_m)
        p = np.exp(s - new_m[:, None])
        l_, o, m_ = l_ * c + p.sum(axis=-1), o * c[:, None] + p @ v[j:j + block], new_m
    fixed = np.abs(o / l_[:, None] - right).max() / np.abs(right).max()
    assert fixed < 1e-12
    # A second, separate flaw: the block count comes from the number of queries.
    q_short = q[:64]
    blocks_read = (len(q_short) + block - 1) // block
    return ("It divides each block's contribution by the running sum `new_l`, then divides the "
            "final output by `l` again, and never rescales the already-normalised output when `l` "
            f"grows. Transcribed literally to NumPy and run as the blog intends (self-attention, "
            f"Q, K and V all {n}×{d}, blocks of {block}, so every key is read) it is off by "
            f"{err:.2f} relative to the largest output (chapter 3 runs the same problem). "
            "Accumulating `O = O * correction + exp(S - new_m) @ V_block` unnormalised and "
            f"dividing by `l` once at the end gives the reference to better than 1e-12 (float64). "
            "A separate flaw: "
            "the block count is taken from `Q.shape[0]`, so with fewer queries than keys (a chunk "
            f"of new tokens against a longer cache: {len(q_short)} queries, {n} keys) it reads "
            f"only {blocks_read * block} of the {n} keys. (It also uses an undefined `d_k`.)")


def _ch3_blog_score_block() -> str:
    from inferbook.hardware import gpu

    h100 = gpu("H100 SXM")
    n, d, block = 8192, 128, 64
    s_block = n * block * 4                  # S_block, float32 scores of every query
    q_bytes, o_bytes = n * d * 2, n * d * 4  # all of Q (fp16) and the float32 output
    working = s_block + q_bytes + o_bytes + 2 * block * d * 2
    assert working > h100.smem_bytes_per_block
    return ("Only K and V are tiled: `S_block = Q @ K_block.T` holds the scores of *every* query "
            "against one key block, and `O`, `l`, `m` are whole-sequence arrays. At N = "
            f"{n:,}, d = {d} and blocks of {block}, S_block alone is {s_block / 2**20:.1f} MiB of "
            f"float32 and the working set (S_block, Q in fp16, O in float32, one K/V block) "
            f"{working / 2**20:.1f} MiB, {working / h100.smem_bytes_per_block:,.0f} times the "
            f"{h100.smem_bytes_per_block // 1024} KiB one H100 thread block may use. FlashAttention "
            "also tiles Q, so that one Q tile, its running state and one K/V tile fit on chip "
            "(chapter 3's figure, chapter 4's kernel).")


def attention_time_ratio(gpu_name: str, n: int, d: int) -> float:
    """Return the roofline's ratio of standard to FlashAttention time (fp16, one head): each
    algorithm's lower bound max(FLOPs / peak, bytes / bandwidth) with `inferbook.io_model`'s
    counts and an SRAM of the GPU's shared memory per block."""
    from inferbook.hardware import gpu
    from inferbook.io_model import flash_attention_io, standard_attention_io
    from inferbook.roofline import time_bound

    g = gpu(gpu_name)
    m = g.smem_bytes_per_block // 2
    std, fa = standard_attention_io(n, d, m), flash_attention_io(n, d, m)
    return (time_bound(g, std.flops, 2 * std.total).seconds
            / time_bound(g, fa.flops, 2 * fa.total).seconds)


def _ch3_unsourced_speedups() -> str:
    a100 = [attention_time_ratio("A100 80GB", n, 64) for n in (512, 4096)]
    h100 = [attention_time_ratio("H100 SXM", n, 64) for n in (512, 4096)]
    assert a100[0] < a100[1] and h100[0] < h100[1]
    return ("The 2–4× on an A100 agrees with the sources once its baseline is named: *against a "
            "standard attention implementation*. The FlashAttention-2 paper describes "
            "FlashAttention as \u201c2–4× faster than a standard attention implementation\u201d "
            "{cite:p}`dao2024flashattention2`, and flash-attention's README reported 2–4× over "
            "PyTorch's standard attention on an A100 at sequence lengths 128 to 4K "
            "{cite:p}`flash_attn_readme_v1`. The lesson omits that baseline. No cited source states "
            "\u201c5–10× on H100 + FP8\u201d: FlashAttention-3 reports 1.5–2.0× *over "
            "FlashAttention-2* in FP16 and close to 1.2 PFLOP/s in FP8 "
            "{cite:p}`shah2024flashattention3`. Any such ratio depends on the baseline and on N: "
            "with the roofline and chapter 3's traffic counts (fp16, d = 64, SRAM = shared memory "
            f"per block), the time of standard attention over FlashAttention's is "
            f"{a100[0]:.1f}× at N = 512 and {a100[1]:.1f}× at N = 4,096 on an A100, "
            f"{h100[0]:.1f}× and {h100[1]:.1f}× on an H100.")


def _ch3_memory_bound_threshold() -> str:
    from inferbook.hardware import gpu
    from inferbook.io_model import (attention_intensity, flash_attention_io,
                                    standard_attention_intensity)

    ridges = {name: gpu(name).ridge_flops_per_byte for name in ("T4", "A100 80GB", "H100 SXM")}
    lows = [standard_attention_intensity(n, 64) for n in (512, 2048, 32768)]
    high128 = standard_attention_intensity(2**20, 128)
    assert max(lows + [high128]) < min(ridges.values())
    fa = [attention_intensity(flash_attention_io(n, 64, 163 * 1024 // 2)) for n in (512, 4096)]
    return ("There is no threshold at 2K. Standard attention does 4N²d FLOPs and moves Q, K, V, "
            "O and both N×N matrices through HBM, so its intensity is Nd / (2(N + d)) FLOP/byte "
            f"in fp16: {lows[0]:.1f} at N = 512, {lows[1]:.1f} at N = 2,048 and {lows[2]:.1f} at "
            f"N = 32,768 for d = 64 (never above d/2 = 32; {high128:.0f} at most for d = 128). "
            "Every ridge point is higher — " + ", ".join(f"{k} {v:.0f}" for k, v in
                                                          ridges.items()) +
            " FLOP/byte — so standard attention is memory-bound at *every* length. "
            "FlashAttention's intensity is what grows with N (with `inferbook.io_model`'s counts "
            f"and an A100's shared memory: {fa[0]:.0f} at N = 512, {fa[1]:.0f} at N = 4,096), "
            "which is why its advantage grows with N (chapter 3, \u201cAttention on the "
            "roofline\u201d).")


def _ch3_under_use() -> str:
    from inferbook.hardware import gpu
    from inferbook.io_model import standard_attention_intensity

    rows = []
    for name in ("A100 80GB", "H100 SXM"):
        g = gpu(name)
        for d in (64, 128):
            rows.append((name, d, g.ridge_flops_per_byte / standard_attention_intensity(4096, d)))
    factors = [r[2] for r in rows]
    return ("No source is given. The roofline bounds what any kernel of the *standard* algorithm "
            "can reach: its intensity divided by the ridge point is the largest fraction of peak "
            "it can use. At N = 4,096 in fp16 that leaves it at least "
            + "; ".join(f"{f:.1f}× below peak on an {n} at d = {d}" for n, d, f in rows) +
            f" — between {min(factors):.1f}× and {max(factors):.1f}×. So the order of magnitude "
            "fits, but it is a property of the algorithm's traffic, not of \u201cclassic "
            "kernels\u201d, and a bound, not a measurement.")


# ---- chapter 4 -------------------------------------------------------------------------------

def _ch4_sram() -> str:
    from inferbook.hardware import gpu

    from inferbook.roofline import BOOST_CLOCK_HZ, smem_bytes_per_s

    h100, a100 = gpu("H100 SXM"), gpu("A100 80GB")
    h100_bw, a100_bw = smem_bytes_per_s(h100), smem_bytes_per_s(a100)
    assert BOOST_CLOCK_HZ[h100.name] == 1.98e9 and BOOST_CLOCK_HZ[a100.name] == 1.41e9
    assert 25e12 < h100_bw < 35e12 and abs(a100_bw - 19e12) < 1e12
    return ("256 KB is the combined L1/shared-memory array of an SM; an SM can hand at most "
            f"{h100.smem_bytes_per_sm // 1024} KiB of it to shared memory and one thread block at "
            f"most {h100.smem_bytes_per_block // 1024} KiB (the `H100 SXM` preset). The ~30 TB/s "
            "is right: shared memory serves 32 banks × 4 bytes = 128 bytes per clock per SM "
            "{cite:p}`nvidia_cuda_guide_smem`, so an H100 SXM moves "
            f"{h100.num_sms} SMs × 128 B × 1.98 GHz = {h100_bw / 1e12:.1f} TB/s "
            "{cite:p}`nvidia_h100`. (The same product for an A100, "
            f"{a100.num_sms} × 128 B × 1.41 GHz = {a100_bw / 1e12:.1f} TB/s, is the FlashAttention "
            "paper's 19 TB/s estimate {cite:p}`dao2022flashattention`.) The ratio to HBM, "
            f"{h100_bw / h100.hbm_bytes_per_s:.0f}× on the H100, is a ratio of bandwidths, not a "
            "fixed cost per round trip: what an extra pass through HBM costs depends on the bytes "
            "it moves relative to the FLOPs done, which chapters 1 and 4 show with the roofline.")


def _ch4_versions() -> str:
    return ("Both numbers lie inside what the sources report, but the table never says against "
            "what. Measured against a standard attention implementation, the FlashAttention-2 "
            "paper gives FlashAttention 2–4× and FlashAttention-2 3–10×, and FlashAttention-2 "
            "1.7–3.0× against FlashAttention {cite:p}`dao2024flashattention2`; flash-attention's "
            "README reported 2–4× over PyTorch's standard attention on an A100 "
            "{cite:p}`flash_attn_readme_v1`. So \u201c2×\u201d for FlashAttention and \u201c3×\u201d "
            "for FlashAttention-2 are right *over standard attention* (the low ends of those "
            "ranges), and the 3× would also be the top of FlashAttention-2's range *over "
            "FlashAttention*. End to end the first paper reports 15% on BERT-large over the MLPerf "
            "1.1 record and 3× on GPT-2 (N = 1K) over Hugging Face's implementation "
            "{cite:p}`dao2022flashattention`. The FlashAttention-3 row (1.5–2.0× over "
            "FlashAttention-2 on an H100, about 740 TFLOP/s in FP16) is right "
            "{cite:p}`shah2024flashattention3`.")


def _ch4_fa4_year() -> str:
    return ("FlashAttention-4's code was public in 2025: the CuTe-DSL kernels in "
            "flash-attention's `flash_attn/cute` got their first Blackwell (sm100) forward on 29 "
            "June 2025 and a Blackwell backward in October 2025 {cite:p}`flash_attn_cute`. 2026 is "
            "the year of the paper (March 2026) {cite:p}`zadouri2026flashattention4` and of the "
            "first `flash-attn-4` package (a beta). Code, package and paper each have a date; the "
            "table gives one without saying which.")


def _ch4_fa4_pending() -> str:
    return ("False for the released CuTe-DSL interface: `flash_attn.cute` has "
            "`flash_attn_varlen_func` (packed sequences with `cu_seqlens_q`/`cu_seqlens_k`) and "
            "takes K and V with fewer heads than Q (GQA, with query heads packed per KV head); "
            "the Blackwell forward handled GQA from its first version (June 2025) and varlen from "
            "13 July 2025 {cite:p}`flash_attn_cute`.")


def _ch4_fa4() -> str:
    from inferbook.attention_backends import FLASH_ATTENTION_VERSIONS

    fa3 = next(v for v in FLASH_ATTENTION_VERSIONS if v.name == "FlashAttention-3")
    assert fa3.min_compute_capability == (9, 0)
    return ("True of its first code (the Blackwell forward came in June 2025, the backward in "
            "October 2025 {cite:p}`flash_attn_cute`), not of the paper, whose backward pass uses "
            "Blackwell's tensor memory and 2-CTA MMA mode {cite:p}`zadouri2026flashattention4`. "
            "And training on Blackwell cannot \u201cstill use\u201d FlashAttention-3: its kernels "
            "are written for Hopper (sm90) {cite:p}`shah2024flashattention3`.")


# ---- chapter 5 -------------------------------------------------------------------------------

def _ch5_fragmentation() -> str:
    from inferbook.fragmentation import sharegpt_like, simulate

    requests = sharegpt_like(1000, seed=0)
    paged = simulate(requests, "paged", capacity_tokens=32768, block_size=16)
    paged128 = simulate(requests, "paged", capacity_tokens=32768, block_size=128)
    return ("Paging removes *external* fragmentation (any free block serves any sequence) but "
            "keeps the internal kind: the unused tail of each sequence's last block, at most 15 "
            "slots with 16-token blocks. On 1,000 simulated chat completions with ShareGPT-like "
            f"lengths (`inferbook.fragmentation`, seed 0, a pool of 32,768 token slots) that is "
            f"{paged.waste:.2%} of the memory allocated to sequences, not zero ({paged128.waste:.2%} "
            "with 128-token blocks). Nothing is ever moved to defragment the pool: a block table "
            "makes physical placement irrelevant.")


def _ch5_4x() -> str:
    from inferbook.fragmentation import sharegpt_like, simulate

    requests = sharegpt_like(1000, seed=0)
    runs = {p: simulate(requests, p, capacity_tokens=32768, block_size=16)
            for p in ("reserve_max", "exact", "paged")}
    paged = runs["paged"]
    prompts = int(requests.prompt_lens.sum())
    return ("The vLLM paper reports 2–4× higher throughput than FasterTransformer and Orca at the "
            "same latency, depending on model and workload {cite:p}`kwon2023vllm`: a range, not a "
            "constant. In the chapter's simulation the paged pool finishes the same 1,000 requests "
            f"in {runs['reserve_max'].steps / paged.steps:.2f}× fewer decoding steps than "
            f"reserving the maximum length per request and {runs['exact'].steps / paged.steps:.2f}× "
            "fewer than an oracle that reserves exactly each request's final length, at a cost "
            f"the step count hides: {paged.preemptions:,} preemptions, after which "
            f"{paged.recomputed_tokens:,} token states ({paged.recomputed_tokens / prompts:.0%} "
            "of all prompt tokens) are prefilled again.")


def _ch5_prefix_5x() -> str:
    from inferbook.prefix_cache import replay
    from inferbook.workload import agent_workload

    agent = agent_workload(n_conversations=20, turns=4, seed=0)
    none = replay(agent, num_blocks=4000, caching=False)
    small, big = replay(agent, num_blocks=200), replay(agent, num_blocks=4000)
    return ("No source is given, and what prefix caching removes is prefill work, in proportion "
            "to the shared part of each prompt and to how much cache the server can keep: on the "
            "chapter's simulated agent workload (a shared system prompt and tool schema, 4-turn "
            f"conversations) it cut the prompt tokens to prefill {none.prefill_tokens / small.prefill_tokens:.1f}× "
            f"with a pool of 200 blocks and {none.prefill_tokens / big.prefill_tokens:.1f}× with "
            "room to keep everything. Throughput follows only in proportion to the share of time "
            "spent in prefill.")


# ---- chapter 6 -------------------------------------------------------------------------------

def _ch6_5_10x() -> str:
    run = benchmark("serving")["serving"]
    static, continuous = run["static"], run["continuous"]
    per_step = continuous["throughput_tok_per_step"] / static["throughput_tok_per_step"]
    cpu = continuous["throughput_tok_cpu_s_median"] / static["throughput_tok_cpu_s_median"]
    work = run["workload"]
    return ("No source is given, and the gain is not a constant: it is about the ratio of the "
            "longest reply to the mean reply within a static batch, so it depends on the spread of "
            "output lengths and on the batch size. On chapter 6's workload "
            f"({work['n_requests']} requests, mean output {work['mean_output']:.0f} tokens, at most "
            f"{work['max_output']}) the same engine served {per_step:.2f}× more tokens per step "
            f"with continuous batching than with static batches of {run['engine']['max_num_seqs']}, "
            f"and {cpu:.2f}× more tokens per CPU-second (median of repeats; "
            "`outputs/benchmarks/serving.json`, written by `tests/bench/bench_serving.py`).")


# ---- chapter 7 -------------------------------------------------------------------------------

def _ch7_k_tokens() -> str:
    from inferbook.speculation_math import expected_tokens_per_pass

    alpha, k = 0.7, 4
    return ("It produces k + 1: the target's distribution at the first rejected position (or "
            "after the last draft when all are accepted) comes out of the same pass, and the "
            "rejection rule always emits one token from it {cite:p}`leviathan2023speculative`. A "
            "draft that is never accepted still yields one token per pass. With acceptance rate α "
            "the expected count is (1 − α^(k+1)) / (1 − α): "
            f"{expected_tokens_per_pass(alpha, k):.2f} tokens per target pass at α = {alpha}, "
            f"k = {k} (`inferbook.speculative`).")


def _ch7_speedups() -> str:
    from inferbook.speculation_math import expected_tokens_per_pass

    alpha, k, c = 0.7, 4, 0.3
    speedup = expected_tokens_per_pass(alpha, k) / (k * c + 1)
    return ("Not measurements: the speedup is (1 − α^(k+1)) / ((1 − α)(kc + 1)) for a draft "
            "costing c target passes {cite:p}`leviathan2023speculative`, and it shrinks at large "
            f"batch sizes. At α = {alpha}, k = {k} and c = {c} it is {speedup:.2f}×; chapter 7 "
            "measures α and c on its own models. The EAGLE-2 paper reports 3.05–4.26× "
            "{cite:p}`li2024eagle2`, Medusa 2.2–3.6× {cite:p}`cai2024medusa`, both at batch 1; "
            "Lookahead decoding 1.8× on MT-bench {cite:p}`fu2024lookahead`, and it is not free: "
            "its n-gram branches add FLOPs to every step, which a busy server does not have "
            "spare.")


# ---- chapter 8 -------------------------------------------------------------------------------

def _ch8_title_3x() -> str:
    naive, kv, fa, paged = 45, 120, 185, 340
    return (f"The article's own table does not say 3×: the KV cache alone is {kv / naive:.2f}× "
            f"its naive row, KV cache plus FlashAttention {fa / naive:.2f}×, and with "
            f"PagedAttention {paged / naive:.2f}×. None of the rows states a batch size, lengths or "
            "precision, so no ratio between them can be attributed to one technique.")


def _ch8_table() -> str:
    from inferbook.hardware import gpu
    from inferbook.models import model
    from inferbook.sizing import kv_bytes, weight_bytes

    qwen, a100 = model("Qwen2.5-14B"), gpu("A100 80GB")
    w = weight_bytes(qwen, "bf16")
    kv1k = kv_bytes(qwen, 1024, 1, "bf16")
    per_gpu = (w + kv1k) / 2
    bound = a100.hbm_bytes_per_s / per_gpu
    kv4k = kv_bytes(qwen, 4096, 1, "bf16")
    share = kv4k / (w + kv4k)
    assert 185 > bound
    return ("No batch size, lengths, precision or engine version are given, so the absolute "
            "numbers cannot be checked. What can be: one stream with TP = 2 must read half of the "
            f"{gb(w)} of bf16 weights on each GPU per decode step, which bounds it at about "
            f"{bound:.0f} tok/s at a 1K-token context ({a100.hbm_bytes_per_s / 1e9:,.0f} GB/s per "
            f"A100). The +FlashAttention row (185 tok/s, {185 / 120:.2f}× over the KV-cache row) is "
            f"above that bound, and at 4K context the KV cache is only {share:.1%} of the bytes a "
            "decode step reads, so no attention kernel can buy that much of the step time: the "
            "batch must have changed between rows. PagedAttention does not speed up a decode "
            "step; it raises the batch that fits, so the last row's "
            f"{340 / 185:.2f}× is a batching gain that the table attributes to the wrong cause.")


def _ch8_ttft() -> str:
    return ("The first token comes from one prefill pass, the same with and without a cache; a KV "
            "cache changes only the steps after it, so it cannot halve the time to the first "
            "token.")


def _vllm_args() -> set[str]:
    data = json.loads((ROOT / "code" / "inferbook" / "data" / "vllm_args.json").read_text())
    names = set()

    def walk(x):
        if isinstance(x, dict):
            for key, value in x.items():
                if isinstance(key, str) and key.startswith("--"):
                    names.add(key)
                walk(value)
        elif isinstance(x, list):
            for value in x:
                walk(value)
        elif isinstance(x, str) and x.startswith("--"):
            names.add(x)

    walk(data)
    return names


def _ch8_use_flash_attention() -> str:
    flags = _vllm_args()
    assert "--use-flash-attention" not in flags and "--attention-backend" in flags
    return ("vLLM has no such argument (it is not among the 0.33.0 engine arguments in "
            "`code/inferbook/data/vllm_args.json`); vLLM picks its attention backend itself, "
            "overridable with `--attention-backend`. The rest of that `EngineArgs` call "
            "(`enable_chunked_prefill`, `max_num_batched_tokens`, `max_num_seqs`, "
            "`gpu_memory_utilization`, `tensor_parallel_size`) is real.")


def _ch8_generate_async() -> str:
    return ("vLLM's `LLM` class has no `generate_async` (`vllm/entrypoints/llm.py` in 0.33.0) "
            "{cite:p}`vllm_v0_33`; `LLM.generate` is synchronous, and asynchronous serving is the "
            "OpenAI-compatible server (`vllm serve`).")


def _ch8_hf_env() -> str:
    return ("Transformers reads no such environment variable; the attention implementation is the "
            "`attn_implementation` argument {cite:p}`wolf2020transformers`.")


def _ch8_fa2_t4() -> str:
    return ("The first half is right (sm80+). On a T4 the practical choice is "
            "`attn_implementation=\"sdpa\"`: PyTorch's scaled-dot-product attention runs its "
            "memory-efficient kernel on sm50 and newer (its flash kernel needs sm80) "
            "{cite:p}`pytorch_sdp_utils`.")


def _ch8_fa3_hopper() -> str:
    return ("`flash_attention_2` is real; on Hopper the value is `\"flash_attention_3\"` (it needs "
            "the separately installed FlashAttention-3 build). Transformers 5 deprecates "
            "`torch_dtype` in favour of `dtype` (it still works, with a warning).")


def _ch8_vllm_serve() -> str:
    flags = _vllm_args()
    used = ["--tensor-parallel-size", "--max-model-len", "--enable-prefix-caching",
            "--kv-cache-dtype"]
    assert all(f in flags for f in used)
    return ("All four flags are real (`code/inferbook/data/vllm_args.json`). Whether TP = 4 is the "
            "right degree, and whether an fp8 KV cache is safe for the task, are the decisions "
            "chapter 8's recommender makes and explains; an fp8 KV cache should only be enabled "
            "after checking quality on the task.")


ENTRIES: tuple[Entry, ...] = (
    # chapter 1
    Entry(1, "Lesson", "两个优化——都来自 Dao 等人", "Two optimisations, both from Dao et al.",
          _ch1_dao),
    Entry(1, "Lesson", "推理是串行的，并且受内存带宽限制", "Inference is serial and bound by memory "
          "bandwidth.", _ch1_bandwidth_bound),
    Entry(1, "Lesson", "对于一个 4K token 的回复，这意味着 1600 万次 attention 运算",
          "A naive decoder does O(N²) work to generate N tokens; for a 4K-token reply that means "
          "16 million attention operations.", _ch1_16_million),
    Entry(1, "Lesson", "朴素方式：O(N²) = 5050。缓存方式：O(N) = 100",
          "Build step 3, for 100 tokens: naive O(N²) = 5050; cached O(N) = 100.", _ch1_5050),
    Entry(1, "Lesson", "代码会把两者都打印出来", "Build step 3: the code prints both counts.",
          _ch1_demo_program),
    Entry(1, "Blog", "生成 100 个 token，就要计算 4950 次注意力（100×99÷2）",
          "Generating 100 tokens computes attention 4950 times (100×99÷2).", _ch1_4950),
    Entry(1, "Blog", "时间复杂度 O(n²)，n是序列长度",
          "`naive_attention(query, keys, values)`: time complexity O(n²), n the sequence length.",
          _ch1_blog_naive_complexity),
    Entry(1, "Blog", "k_full = torch.cat([self.k_cache, k], dim=-2)", "", _ch1_blog_torch_cat),
    # chapter 2
    Entry(2, "Lesson", "bytes_per_token_per_layer = 2 * d_head * dtype_size", "",
          _ch2_per_head),
    Entry(2, "Lesson", "per 32K context = 512 MB",
          "7B, 32 layers, 32 heads, d_head = 128, fp16: 512 bytes per token per layer, 16 KB per "
          "token, 512 MB per 32K context.", _ch2_7b),
    Entry(2, "Lesson", "per 32K context = 10.4 GB",
          "Llama 3 70B: 4096 bytes per token per layer, 10.4 GB per 32K context.", _ch2_70b),
    Entry(2, "Lesson", "这 10 GB 就是为什么 Llama 3 70B 在 batch size 为 1、上下文长度为 128K 时，"
          "仅 KV cache 就会吃掉一张 40 GB A100 上的大部分显存",
          "These 10 GB are why Llama 3 70B at batch 1 and 128K context eats most of a 40 GB A100 "
          "with its KV cache alone.", _ch2_128k),
    Entry(2, "Lesson", "如果使用 64 头的 MHA，就会变成 32 GB", "With 64-head MHA it would be 32 GB.",
          _ch2_mha),
    Entry(2, "Lesson", "MLA 还能压得更低", "MLA compresses it further (the course's demo program "
          "prints DeepSeek-V3's MLA cache as 124,928 bytes per token).", _ch2_mla_row),
    Entry(2, "Lesson", "B200 上为 192 GB。带宽约 ~3 TB/s",
          "Key terms, HBM: 80 GB on an H100, 192 GB on a B200; bandwidth about 3 TB/s.",
          _ch2_b200_row),
    Entry(2, "Blog", "7B 模型单请求 KV Cache 可能占用 2-4GB",
          "A 7B model's KV cache can take 2–4 GB for a single request.", _ch2_blog_2_4_gb),
    # chapter 3
    Entry(3, "Lesson", "当 N≥2K 时，attention 往往会先受内存带宽限制，而不是先受 FLOP 限制",
          "When N ≥ 2K, attention is often bound by memory bandwidth before it is bound by "
          "FLOPs.", _ch3_memory_bound_threshold),
    Entry(3, "Lesson", "经典 attention kernel 对现代 GPU 的利用率通常低了 4–10×",
          "Classic attention kernels typically under-use modern GPUs by 4–10×.", _ch3_under_use),
    Entry(3, "Lesson", "它的输出与一次性计算 softmax(qK) V 在比特级上一致",
          "Build step 2: the tiled softmax's output is bit-level identical to computing "
          "softmax(qK)V at once (and: FlashAttention's output is bit-identical to standard "
          "attention, ignoring fp16 non-associativity).", _ch3_bit_identical),
    Entry(3, "Lesson", "一个 N×N 的分数矩阵、一个 N×d 的 softmax 输出",
          "Standard attention writes an N×N score matrix, an N×d softmax output and an N×d "
          "output.", _ch3_p_shape),
    Entry(3, "Lesson", "每个 tile 只需要一次 HBM 往返", "Each tile needs only one HBM round trip.",
          _ch3_one_round_trip),
    Entry(3, "Lesson", "在 A100 上有 2–4× 的实际速度提升；在 H100 + FP8 上可达 5–10×",
          "FlashAttention: 2–4× real speedup on an A100; up to 5–10× on an H100 with FP8.",
          _ch3_unsourced_speedups),
    Entry(3, "Blog", "把 Attention 从 O(n²) 降到了 O(n)",
          "FlashAttention reduces attention from O(n²) to O(n) (its table: time complexity O(n²) "
          "vs O(n)).", _ch3_blog_o_n_time),
    Entry(3, "Blog", "O = correction_O + (torch.exp(S_block - new_m.unsqueeze(-1)) @ V_block) "
          "/ new_l.unsqueeze(-1)", "", _ch3_blog_pseudocode),
    Entry(3, "Blog", "加载 K, V 的一个块（可放入 SRAM / L1 Cache）",
          "Load one block of K and V (it fits in SRAM / L1 cache), then "
          "`S_block = Q @ K_block.T / math.sqrt(d_k)`.", _ch3_blog_score_block),
    # chapter 4
    Entry(4, "Lesson", "H100 每个 SM 约 ~256 KB。带宽约 ~30 TB/s",
          "Key terms, SRAM: about 256 KB per SM on an H100, about 30 TB/s (and: every extra HBM "
          "round trip costs about 10×).", _ch4_sram),
    Entry(4, "Lesson", "A100 上 2×", "Versions table: FlashAttention 2× on A100; FlashAttention-2 "
          "3× on A100.", _ch4_versions),
    Entry(4, "Lesson", "Flash 42026Blackwell 五级流水线",
          "Versions table: FlashAttention-4, 2026, Blackwell five-stage pipeline.",
          _ch4_fa4_year),
    Entry(4, "Lesson", "Flash 4 对 GQA 和 varlen 的支持还在等待中（2026 年中）",
          "FlashAttention-4's support for GQA and varlen is still pending (mid-2026).",
          _ch4_fa4_pending),
    Entry(4, "Lesson", "Flash 4 在发布时只支持前向传播。训练仍然使用 Flash 3",
          "FlashAttention-4 supports only the forward pass at release; training still uses "
          "FlashAttention-3.", _ch4_fa4),
    # chapter 5
    Entry(5, "Lesson", "可消除碎片", "Key terms: PagedAttention eliminates fragmentation (and, in "
          "the text, lets you defragment memory).", _ch5_fragmentation),
    Entry(5, "Lesson", "相比朴素的连续分配，吞吐量可提升 4×",
          "4× throughput over naive contiguous allocation.", _ch5_4x),
    Entry(5, "Lesson", "prefix caching 通常能带来 5× 吞吐量提升",
          "For agent workloads with repeated tool prompts, prefix caching typically gives a 5× "
          "throughput gain.", _ch5_prefix_5x),
    # chapter 6
    Entry(6, "Lesson", "对于典型聊天负载，吞吐量可提升 5–10×",
          "For typical chat workloads throughput rises 5–10×.", _ch6_5_10x),
    # chapter 7
    Entry(7, "Lesson", "如果验证接受了其中 k 个，那你只花了 1 次大模型前向传播，就完成了 k 次生成",
          "If verification accepts k of them, one large-model forward pass has produced k "
          "tokens.", _ch7_k_tokens),
    Entry(7, "Lesson", "在消费级硬件上可获得 2–4× 加速",
          "Draft-model speculation: 2–4× on consumer hardware; EAGLE 2 / Medusa: 2–3×; "
          "lookahead decoding: niche, but nearly free.", _ch7_speedups),
    # chapter 8
    Entry(8, "Blog", "让 Token 生成快 3 倍", "Title: KV Cache + Flash Attention make token "
          "generation 3× faster.", _ch8_title_3x),
    Entry(8, "Blog", "+ Flash Attention\t185", "Qwen2.5-14B on 2×A100 80G: naive 45 → +KV cache "
          "120 → +FlashAttention 185 → +PagedAttention 340 tok/s.", _ch8_table),
    Entry(8, "Blog", "+ KV Cache\t120\t72G\t380ms", "Time to first token: 820 ms naive, 380 ms "
          "with a KV cache.", _ch8_ttft),
    Entry(8, "Blog", "use_flash_attention=True", "", _ch8_use_flash_attention),
    Entry(8, "Blog", "await llm.generate_async(prompts, sampling_params)", "",
          _ch8_generate_async),
    Entry(8, "Blog", "HF_ATTN_BACKEND=flash_attention_2", "", _ch8_hf_env),
    Entry(8, "Blog", "Flash Attention 2 需要 Ampere (A100) 及以上架构，V100/T4 用户只能用 Flash "
          "Attention 1 或回退到 eager 模式", "FlashAttention-2 needs Ampere (A100) or newer; "
          "V100/T4 users can only use FlashAttention-1 or fall back to eager mode.", _ch8_fa2_t4),
    Entry(8, "Lesson", "attn_implementation=\"flash_attention_2\",  # use FA3 if Hopper", "",
          _ch8_fa3_hopper),
    Entry(8, "Lesson", "--kv-cache-dtype fp8", "`vllm serve meta-llama/Llama-3.1-70B-Instruct "
          "--tensor-parallel-size 4 --max-model-len 32768 --enable-prefix-caching "
          "--kv-cache-dtype fp8`", _ch8_vllm_serve),
)


INTRO = """# Errata for the source texts

The book follows two source texts (a lesson and a blog article, see the introduction), both in
Chinese. Both contain errors. Each entry quotes what the source says, in English with the
original words in parentheses, and then computes what is true with the book's package.
This page is generated by `tools/errata.py`, and `tests/test_errata.py` regenerates it and
compares, so no number here is typed.
"""


def render_entry(entry: Entry) -> str:
    if entry.translation:
        quote = f"**{entry.source}: \u201c{entry.translation}\u201d** ({entry.original})"
    else:
        quote = f"**{entry.source}: `{entry.original}`**"
    body = entry.body().strip()
    return f"- {quote}\n  {body}\n"


def render() -> str:
    chapters = sorted({e.chapter for e in ENTRIES})
    parts = [INTRO]
    for chapter in chapters:
        title, where = CHAPTERS[chapter]
        parts.append(f"\n## Chapter {chapter}: {title}\n\nFrom {where}.\n\n")
        parts.extend(render_entry(e) for e in ENTRIES if e.chapter == chapter)
    return "".join(parts)


if __name__ == "__main__":
    page = render()
    if "--write" in sys.argv[1:]:
        ERRATA.write_text(page)
    elif "--check" in sys.argv[1:]:
        sys.exit(0 if ERRATA.read_text() == page else 1)
    else:
        print(page, end="")
