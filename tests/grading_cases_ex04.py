"""Grading cases of Exercise 4.1 (write the FlashAttention kernel's inner loop in Triton).

Same tables as tests/grading_cases.py, merged into them there:
WRONG: (exercise, answer cell, replacement source, the check that must fail FIRST).
ALTERNATIVES: (exercise, label, {answer cell: source}) — differently written right kernels.
BOUNDARIES: which boundary each check covers.
"""

from grading_helpers import solution_answer

E4 = "ex04_triton_kernel"
CELL = "inner_loop"


def _swap(*pairs):
    """The solution's kernel with each (old, new) replaced (each old must be in it)."""
    source = solution_answer(E4, CELL)
    for old, new in pairs:
        if old not in source:
            raise ValueError(f"{E4}/{CELL}: the solution no longer contains {old!r}")
        source = source.replace(old, new)
    return source


CAUSAL_END = "end = tl.minimum(start_m + BLOCK_M + n_kv - n_q, n_kv)"
CAUSAL_MASK = "visible = visible & (cols[None, :] <= offs_m[:, None] + n_kv - n_q)"
ONE_TILE = "Part 1/one K/V tile, 16 x 16"

BOUNDARIES = {
    E4: {
        "Part 1/your own kernel": "a @triton.jit function using nothing of inferbook (a wrapper of "
                                  "the package's kernel fails)",
        "Part 1/one K/V tile, 16 x 16": "one tile: normalisation (1/l), base-2 scale, natural-log lse",
        "Part 1/large scores": "scores in the thousands, rows of different size (no running max, "
                               "or a max over the wrong axis, overflows)",
        "Part 1/4 K/V tiles, the max grows": "the accumulator rescaled when the max grows",
        "Part 1/ragged, 37 queries x 53 keys": "n_kv not a multiple of BLOCK_N, NaN stored past the "
                                               "last key (an unmasked load shows)",
        "Part 1/causal, 48 x 48": "the causal mask on the diagonal (off by one, missing)",
        "Part 1/causal, 37 queries x 53 keys": "bottom-right alignment with n_q < n_kv, ragged",
        "Part 1/causal, one query x 53 keys (decode)": "n_q = 1 sees the whole cache",
        "Part 1/causal, grouped-query heads (4 per KV head)": "GQA, two batches, head_dim 32",
        "Part 1/causal: K/V tiles past the diagonal never loaded": "the causal skip (NaN beyond it)",
        "Part 1/Q tiles of 32 rows, K/V tiles of 16": "BLOCK_M != BLOCK_N (a skip bound in the "
                                                      "wrong tile size)",
        "Part 1/float16, causal, 37 queries x 53 keys": "float16 inputs, 2x the float16 baseline",
        "Part 2/compiles for … · fits the shared memory of a … block": "sm75, sm80, sm90 at "
                                                                       "head_dim 64, fp16, causal",
    },
}

NO_RESCALE = _swap(("acc = acc * alpha[:, None] + tl.dot", "acc = acc + tl.dot"))
MASK_OFF_BY_ONE = _swap(("cols[None, :] <= offs_m[:, None]", "cols[None, :] < offs_m[:, None]"))
SKIPS_NEEDED_TILES = _swap((CAUSAL_END, "end = tl.minimum(start_m + BLOCK_M, n_kv)"))
NO_SKIP_NO_MASK = _swap((CAUSAL_END, "end = n_kv"), (CAUSAL_MASK, "pass"))
NO_SKIP_MASKED = _swap((CAUSAL_END, "end = n_kv"))
MAX_WRONG_AXIS = _swap(("tl.max(s, 1)", "tl.max(s, 0)"))
NO_ONE_OVER_L = _swap(("o = acc / l_i[:, None]", "o = acc"))
UNMASKED_LOADS = _swap(("mask=key_ok[None, :],\n", ""), ("mask=key_ok[:, None],\n", ""),
                       ("other=0.0,\n", ""), ("visible = key_ok[None, :]", "visible = cols[None, :] >= 0"))
V_UNMASKED = _swap(("mask=key_ok[:, None],\n            other=0.0,\n", ""))
KEY_MASK_OFF_BY_ONE = _swap(("key_ok = cols < n_kv", "key_ok = cols <= n_kv"))
BASE_E_SCALE = _swap(("qk_scale = sm_scale * 1.4426950408889634", "qk_scale = sm_scale"))
LSE_BASE_2 = _swap(("lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453", "lse = m_i + tl.math.log2(l_i)"))
EXP_MIXED = _swap(("p = tl.math.exp2(s - m_new[:, None])", "p = tl.exp(s - m_new[:, None])"))
TOP_LEFT = _swap((CAUSAL_END, "end = tl.minimum(start_m + BLOCK_M, n_kv)"),
                 (CAUSAL_MASK, "visible = visible & (cols[None, :] <= offs_m[:, None])"))
SKIP_BY_BLOCK_N = _swap((CAUSAL_END, "end = tl.minimum(start_m + BLOCK_N + n_kv - n_q, n_kv)"))
PYTHON_GLOBAL = "LOG2E = 1.4426950408889634\n\n\n" + _swap(
    ("qk_scale = sm_scale * 1.4426950408889634", "qk_scale = sm_scale * LOG2E"))

PACKAGE_WRAPPER = '''
import triton
import triton.language as tl
from inferbook.triton_flash import _attend_kv_tiles


@triton.jit
def attend_q_tile(q, k_ptr, v_ptr, stride_kn, stride_vn, start_m, n_q, n_kv, sm_scale,
                  CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  HEAD_DIM: tl.constexpr):
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    acc, m_i, l_i = _attend_kv_tiles(acc, m_i, l_i, q, k_ptr, v_ptr, stride_kn, stride_vn,
                                     offs_m, offs_d, n_kv, 0, n_kv, n_kv - n_q,
                                     sm_scale * 1.4426950408889634, BLOCK_N, HEAD_DIM, True,
                                     CAUSAL, "ieee")
    return acc / l_i[:, None], (m_i + tl.math.log2(l_i)) * 0.6931471805599453
'''

PACKAGE_MODULE = "from inferbook import triton_flash as tf\n\n\n" + _swap(
    ("m_i = m_new\n", "m_i = m_new\n        tf._attend_kv_tiles  # a peek at the book's kernel\n"))

# Rule: the causal loop ends after the last key the tile's last row sees (one key short passes
# every shape whose n_kv - n_q is not 1 more than a multiple of BLOCK_N).
END_ONE_SHORT = _swap((CAUSAL_END, "end = tl.minimum(start_m + BLOCK_M + n_kv - n_q - 1, n_kv)"))
# Rule: value j is at v_ptr + j * stride_vn (K's stride reads the wrong rows of V).
V_WITH_K_STRIDE = _swap(("v_ptr + cols[:, None] * stride_vn", "v_ptr + cols[:, None] * stride_kn"))
# Rule: hidden keys are masked before the running max (a max over every loaded score).
MAX_BEFORE_MASK = _swap(('        s = tl.where(visible, s, float("-inf"))\n        m_new = tl.maximum(m_i, tl.max(s, 1))',
                         '        m_new = tl.maximum(m_i, tl.max(s, 1))\n        s = tl.where(visible, s, float("-inf"))'))
# Rule: the running max starts at -inf (0 underflows a row whose scores are all far below 0).
M_STARTS_AT_ZERO = _swap(('m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)', "m_i = tl.zeros([BLOCK_M], tl.float32)"))
ESCAPES = [
    (E4, CELL, END_ONE_SHORT, "Part 1/causal, 16 queries x 33 keys (one key past a tile)"),
    (E4, CELL, V_WITH_K_STRIDE, "Part 1/V rows 32 values apart, K rows 16"),
    (E4, CELL, MAX_BEFORE_MASK, "Part 1/causal, a hidden key dominating the scores"),
    (E4, CELL, M_STARTS_AT_ZERO, "Part 1/a row whose scores are all far below 0"),
]

# Rule: the reference is computed from the inputs as drawn: a kernel that stores zeros through
# v_ptr (and so outputs zeros) fails; without copies the reference saw the zeroed V and agreed.
ZEROES_V = _swap(("        v = tl.load(",
                  "        tl.store(v_ptr + cols[:, None] * stride_vn + offs_d[None, :],\n"
                  "                 tl.zeros([BLOCK_N, HEAD_DIM], v_ptr.dtype.element_ty), mask=key_ok[:, None])\n"
                  "        v = tl.load("))

WRONG = ESCAPES + [
    # The walls (grading_walls) refuse the package's kernel before the "your own kernel" check
    # runs: compiling it reads its code, which the part forbids, so the answer fails there.
    (E4, CELL, PACKAGE_WRAPPER, "Part 1/checks untouched"),
    (E4, CELL, PACKAGE_MODULE, "Part 1/checks untouched"),
    (E4, CELL, NO_ONE_OVER_L, ONE_TILE),
    (E4, CELL, BASE_E_SCALE, ONE_TILE),
    (E4, CELL, LSE_BASE_2, ONE_TILE),
    (E4, CELL, EXP_MIXED, ONE_TILE),
    (E4, CELL, MAX_WRONG_AXIS, "Part 1/large scores"),
    (E4, CELL, NO_RESCALE, "Part 1/4 K/V tiles, the max grows"),
    (E4, CELL, UNMASKED_LOADS, "Part 1/ragged, 37 queries x 53 keys"),
    (E4, CELL, V_UNMASKED, "Part 1/ragged, 37 queries x 53 keys"),
    (E4, CELL, KEY_MASK_OFF_BY_ONE, "Part 1/ragged, 37 queries x 53 keys"),
    (E4, CELL, MASK_OFF_BY_ONE, "Part 1/causal, 48 x 48"),
    (E4, CELL, NO_SKIP_NO_MASK, "Part 1/causal, 48 x 48"),
    (E4, CELL, SKIPS_NEEDED_TILES, "Part 1/causal, 37 queries x 53 keys"),
    (E4, CELL, TOP_LEFT, "Part 1/causal, 37 queries x 53 keys"),
    (E4, CELL, NO_SKIP_MASKED, "Part 1/causal: K/V tiles past the diagonal never loaded"),
    (E4, CELL, SKIP_BY_BLOCK_N, "Part 1/Q tiles of 32 rows, K/V tiles of 16"),
    (E4, CELL, PYTHON_GLOBAL, "Part 2/compiles for T4 (sm75)"),
    (E4, CELL, ZEROES_V, ONE_TILE),
]

# Two loops (tiles every row sees in full, then the diagonal and the ragged tail) through a helper,
# an additive -inf bias instead of tl.where on the scores, K loaded row-major and transposed,
# a tl.constexpr global, the rescale of acc before the dot that accumulates into it, lse by tl.log.
TWO_LOOPS = '''
LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def fold_tile(acc, m_i, l_i, q, k_ptr, v_ptr, stride_kn, stride_vn, start_n, offs_m, n_q,
              n_kv, qk_scale, CAUSAL: tl.constexpr, MASKED: tl.constexpr,
              BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    cols = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    ok = cols < n_kv
    k = tl.load(k_ptr + cols[:, None] * stride_kn + offs_d[None, :], mask=ok[:, None], other=0.0)
    v = tl.load(v_ptr + cols[:, None] * stride_vn + offs_d[None, :], mask=ok[:, None], other=0.0)
    s = tl.dot(q, tl.trans(k)) * qk_scale
    if MASKED:
        bias = tl.where(ok[None, :], 0.0, float("-inf"))
        if CAUSAL:
            bias = tl.where(cols[None, :] <= offs_m[:, None] + (n_kv - n_q), bias, float("-inf"))
        s = s + bias
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    p = tl.exp2(s - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc)
    l_i = l_i * alpha + tl.sum(p, axis=1)
    return acc, m_new, l_i


@triton.jit
def attend_q_tile(q, k_ptr, v_ptr, stride_kn, stride_vn, start_m, n_q, n_kv, sm_scale,
                  CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  HEAD_DIM: tl.constexpr):
    qk_scale = sm_scale * LOG2E
    offs_m = start_m + tl.arange(0, BLOCK_M)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    if CAUSAL:
        full = tl.maximum((start_m + n_kv - n_q + 1) // BLOCK_N * BLOCK_N, 0)
        end = tl.minimum(start_m + BLOCK_M + n_kv - n_q, n_kv)
    else:
        full = n_kv // BLOCK_N * BLOCK_N
        end = n_kv
    for start_n in range(0, full, BLOCK_N):
        acc, m_i, l_i = fold_tile(acc, m_i, l_i, q, k_ptr, v_ptr, stride_kn, stride_vn, start_n,
                                  offs_m, n_q, n_kv, qk_scale, CAUSAL, False, BLOCK_N, HEAD_DIM)
    for start_n in range(full, end, BLOCK_N):
        acc, m_i, l_i = fold_tile(acc, m_i, l_i, q, k_ptr, v_ptr, stride_kn, stride_vn, start_n,
                                  offs_m, n_q, n_kv, qk_scale, CAUSAL, True, BLOCK_N, HEAD_DIM)
    return acc / l_i[:, None], m_i / LOG2E + tl.log(l_i)
'''

# The K/V tiles walked from the last one down (so a row may see nothing in its first tile: the
# -inf guard), the tile count by tl.cdiv, the weights zeroed by tl.where on P, not on S.
REVERSED = '''
@triton.jit
def attend_q_tile(q, k_ptr, v_ptr, stride_kn, stride_vn, start_m, n_q, n_kv, sm_scale,
                  CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  HEAD_DIM: tl.constexpr):
    qk_scale = sm_scale * 1.4426950408889634
    rows = start_m + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    last = n_kv
    if CAUSAL:
        last = tl.minimum(last, start_m + BLOCK_M + (n_kv - n_q))
    n_tiles = tl.cdiv(last, BLOCK_N)
    for i in range(0, n_tiles):
        keys = (n_tiles - 1 - i) * BLOCK_N + tl.arange(0, BLOCK_N)
        inside = keys < n_kv
        kt = tl.load(k_ptr + keys[None, :] * stride_kn + dims[:, None], mask=inside[None, :],
                     other=0.0)
        v = tl.load(v_ptr + keys[:, None] * stride_vn + dims[None, :], mask=inside[:, None],
                    other=0.0)
        s = tl.dot(q, kt) * qk_scale
        seen = inside[None, :]
        if CAUSAL:
            seen = seen & (keys[None, :] - rows[:, None] <= n_kv - n_q)
        m_new = tl.maximum(m, tl.max(tl.where(seen, s, float("-inf")), 1))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.where(seen, tl.math.exp2(s - shift[:, None]), 0.0)
        scale = tl.math.exp2(m - shift)
        acc = acc * scale[:, None] + tl.dot(p.to(v.dtype), v)
        l = l * scale + tl.sum(p, 1)
        m = m_new
    lse = tl.log(l) + m * 0.6931471805599453
    return acc / l[:, None], lse
'''

ALTERNATIVES = [
    (E4, "two loops through a helper, additive mask, constexpr global", {CELL: TWO_LOOPS}),
    (E4, "K/V tiles walked backwards, -inf guard, P zeroed by tl.where", {CELL: REVERSED}),
]
