"""Count the HBM traffic of attention with an on-chip SRAM of M elements.

A toy two-level memory: a large, slow "HBM" and an `Sram` scratchpad that holds at most
`capacity` elements. Moving data HBM -> SRAM is a read, SRAM -> HBM a write; arithmetic happens
only on data in SRAM, and the `Sram` refuses to hold more than it can. Each function below steps
through the tile loops of one algorithm and counts elements (multiply by bytes per element for
bytes). Theorem 2 of the FlashAttention paper (Dao et al., 2022) says, for head_dim
d <= M <= N d:

    standard attention   Theta(N d + N^2)          HBM accesses
    FlashAttention       Theta(N^2 d^2 / M)        HBM accesses

and both do the same ~4 N^2 d FLOPs. Tile sizes: the paper's Algorithm 1 (K/V-outer loop) uses
B_c = M / 4d and B_r = min(M / 4d, d). Mirroring that for FlashAttention-2's Q-outer loop would
give Q tiles of M / 4d rows; this model uses M / 6d, because its resident Q tile also keeps a
float32-sized output accumulator next to the streamed K and V tiles and the score tile, and
M / 4d rows of all that do not fit in M. So K and V are read ceil(N / (M / 6d)) times, about 1.5x
the ceil(N / (M / 4d)) of the paper's constant (`kv_passes` computes both).

`standard_attention_intensity` and `attention_intensity` turn the counts into FLOPs per byte, the
x-axis of the roofline (`inferbook.roofline`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import validate
from .arith import ceil_div

# The counting functions step through every tile; refuse sizes whose loops would not finish.
MAX_TILE_STEPS = 10**7


class SramOverflow(ValueError):
    """Raised when an algorithm tries to keep more in SRAM than it holds."""


@dataclass
class IOCount:
    """Elements moved between HBM and SRAM, matmul FLOPs, and the most SRAM ever in use."""

    reads: int = 0
    writes: int = 0
    flops: int = 0
    peak_sram: int = 0

    def __post_init__(self) -> None:
        for name in ("reads", "writes", "flops", "peak_sram"):
            setattr(self, name, validate.non_negative_int(name, getattr(self, name)))

    @property
    def total(self) -> int:
        """Return reads + writes (HBM accesses, in elements)."""
        return self.reads + self.writes


class Sram:
    """An on-chip scratchpad of `capacity` elements that counts the traffic to and from HBM."""

    def __init__(self, capacity: int):
        self.capacity = validate.positive_int("capacity", capacity)
        self.used = 0
        self.count = IOCount()

    def load(self, n: int) -> None:
        """Bring n elements from HBM into SRAM."""
        self._room(n)
        self.count.reads += n
        self.alloc(n)

    def alloc(self, n: int) -> None:
        """Reserve n elements of SRAM for a result computed on chip."""
        self._room(n)
        self.used += n
        self.count.peak_sram = max(self.count.peak_sram, self.used)

    def store(self, n: int) -> None:
        """Write n elements that are in SRAM back to HBM (they stay in SRAM until freed)."""
        n = validate.non_negative_int("n", n)
        if n > self.used:
            raise ValueError(f"n={n}: only {self.used} elements are in SRAM to store")
        self.count.writes += n

    def free(self, n: int) -> None:
        """Release n elements of SRAM."""
        n = validate.non_negative_int("n", n)
        if n > self.used:
            raise ValueError(f"n={n}: only {self.used} elements are in SRAM to free")
        self.used -= n

    def _room(self, n) -> None:
        """Raise unless n is a count of elements that fits next to what SRAM already holds."""
        n = validate.non_negative_int("n", n)
        if self.used + n > self.capacity:
            raise SramOverflow(f"SRAM holds {self.capacity} elements; {self.used + n} requested")


def standard_attention_io(n: int, d: int, sram_elems: int) -> IOCount:
    """Return the HBM traffic of unfused attention: S = Q K^T, P = softmax(S), O = P V.

    Each step is its own kernel and round-trips its n x n result through HBM (the lesson's
    "three HBM round trips"). The matmuls are themselves tiled (`_tiled_matmul`); the softmax
    reads a block of whole rows if 2 n <= M, else streams each row twice (an online max/sum
    pass, then a normalising pass).
    """
    n, d, sram_elems = _check(n, d, sram_elems, minimum=3)
    _check_steps(_standard_steps(n, d, sram_elems), n, sram_elems)
    sram = Sram(sram_elems)
    _tiled_matmul(sram, n, n, d)  # S = Q K^T: read Q and K tiles, write S
    if 2 * n <= sram_elems:  # P = softmax(S), whole rows at a time
        rows = sram_elems // (2 * n)
        for i in range(0, n, rows):
            r = min(rows, n - i) * n
            sram.load(r)
            sram.alloc(r)
            sram.store(r)
            sram.free(2 * r)
    else:  # a row does not fit: two streamed passes over it
        chunk = sram_elems // 2
        for _ in range(n):
            for j in range(0, n, chunk):  # pass 1: running max and sum
                c = min(chunk, n - j)
                sram.load(c)
                sram.free(c)
            for j in range(0, n, chunk):  # pass 2: normalise and write
                c = min(chunk, n - j)
                sram.load(c)
                sram.alloc(c)
                sram.store(c)
                sram.free(2 * c)
    _tiled_matmul(sram, n, d, n)  # O = P V: read P and V tiles, write O
    return sram.count


def flash_attention_io(n: int, d: int, sram_elems: int, causal: bool = False) -> IOCount:
    """Return the HBM traffic of the FlashAttention-2 forward (outer loop over Q tiles).

    Q tile of B_r = M // (6 d) rows stays in SRAM with its output accumulator and (m, l); K/V
    tiles of B_c = min(B_r, d) rows stream past it. Q is read once, O and lse written once; K and
    V are read once per Q tile: about 2 n d * n / B_r = 12 n^2 d^2 / M elements.
    With `causal`, K/V tiles above the diagonal are skipped (neither read nor computed).
    """
    n, d, sram_elems = _check(n, d, sram_elems, minimum=6 * d)
    if type(causal) is not bool:
        raise validate.ArgumentTypeError(f"causal must be True or False, got {causal!r}")
    sram = Sram(sram_elems)
    block_q = max(1, sram_elems // (6 * d))
    block_k = min(block_q, d)
    _check_steps(ceil_div(n, block_q) * ceil_div(n, block_k), n, sram_elems)
    for qs in range(0, n, block_q):
        br = min(block_q, n - qs)
        sram.load(br * d)  # Q tile
        sram.alloc(br * d + 2 * br)  # output accumulator, running max and sum
        for ks in range(0, n, block_k):
            if causal and ks > qs + br - 1:
                break
            bc = min(block_k, n - ks)
            sram.load(2 * bc * d)  # K and V tiles
            sram.alloc(br * bc)  # S tile, then P in place
            sram.count.flops += 4 * br * bc * d
            sram.free(2 * bc * d + br * bc)
        sram.store(br * d + br)  # O tile and its logsumexp
        sram.free(2 * br * d + 2 * br)
    return sram.count


def _tiled_matmul(sram: Sram, rows: int, cols: int, inner: int) -> None:
    """Count C[rows, cols] = A[rows, inner] @ B[inner, cols] with b x b output tiles.

    Each output tile stays in SRAM while b x b_k chunks of A and b_k x b chunks of B stream past
    it (b_k = min(inner, b)), then it is written once; b is the largest with
    b^2 + 2 b b_k <= capacity.
    """
    b = _largest(lambda b: b * b + 2 * b * min(inner, b) <= sram.capacity, max(rows, cols))
    bk = min(inner, b)
    for i in range(0, rows, b):
        bi = min(b, rows - i)
        for j in range(0, cols, b):
            bj = min(b, cols - j)
            sram.alloc(bi * bj)
            for k in range(0, inner, bk):
                bkk = min(bk, inner - k)
                sram.load(bi * bkk + bkk * bj)
                sram.count.flops += 2 * bi * bj * bkk
                sram.free(bi * bkk + bkk * bj)
            sram.store(bi * bj)
            sram.free(bi * bj)


def _standard_steps(n: int, d: int, sram_elems: int) -> int:
    """Return about how many tile steps `standard_attention_io` takes (its loops' trip counts)."""
    b = max(1, min(n, math.isqrt(sram_elems // 3)))  # b*b + 2*b*b_k <= M with b_k <= b
    softmax = n if 2 * n <= sram_elems else 2 * n * ceil_div(n, max(1, sram_elems // 2))
    return 2 * ceil_div(n, b) ** 2 * ceil_div(d, min(d, b)) + softmax


def _largest(fits, upper: int) -> int:
    b = 1
    while b < upper and fits(b + 1):
        b += 1
    return b


def _check(n: int, d: int, sram_elems: int, minimum: int) -> None:
    n, d, sram_elems = (validate.positive_int(name, x) for name, x in
                        (("n", n), ("d", d), ("sram_elems", sram_elems)))
    if sram_elems < minimum:
        raise ValueError(
            f"sram_elems={sram_elems} is too small for head_dim d={d}: this algorithm needs at "
            f"least {minimum} elements of SRAM"
        )
    return n, d, sram_elems


def _check_steps(steps: int, n: int, sram_elems: int) -> None:
    """Raise when stepping through `steps` tiles would not finish in reasonable time."""
    if steps > MAX_TILE_STEPS:
        raise ValueError(f"n={n} with sram_elems={sram_elems} needs ~{steps:.2e} tile steps to count "
                         f"(more than {MAX_TILE_STEPS:.0e}); use a smaller n or the theorem2_* bounds")


def theorem2_flash_bound(n: int, d: int, sram_elems: int) -> float:
    """Return n^2 d^2 / M, the order of FlashAttention's HBM accesses (Theorem 2)."""
    n, d, sram_elems = _check(n, d, sram_elems, minimum=1)
    return n * n * d * d / sram_elems


def theorem2_standard_bound(n: int, d: int) -> float:
    """Return n d + n^2, the order of standard attention's HBM accesses (Theorem 2)."""
    n, d, _ = _check(n, d, 1, minimum=1)
    return n * d + n * n


def kv_passes(n: int, d: int, sram_elems: int, rows_divisor: int = 6) -> int:
    """Return how many times K and V are read: once per Q tile of M // (rows_divisor * d) rows.

    rows_divisor=6 is this model's tile (`flash_attention_io`); 4 is the first paper's M / 4d
    mirrored to a Q-outer loop.
    """
    rows_divisor = validate.positive_int("rows_divisor", rows_divisor)
    n, d, sram_elems = _check(n, d, sram_elems, minimum=rows_divisor * d)
    rows = sram_elems // (rows_divisor * d)
    return -(-n // rows)


def standard_attention_traffic(n: int, d: int) -> IOCount:
    """Return the roofline's model of unfused attention's HBM traffic (Theorem 2's terms).

    Q, K, V read and O written once (4 N d elements), S and P each written once and read once
    (4 N^2); 4 N^2 d FLOPs. It is the one traffic model the roofline sections use for standard
    attention: it leaves out the tiled matmuls' re-reads that `standard_attention_io` counts, so
    a time from it is a model time for an ideal unfused kernel, not a bound on a real one.
    """
    n, d, _ = _check(n, d, d, minimum=1)
    return IOCount(reads=3 * n * d + 2 * n * n, writes=n * d + 2 * n * n, flops=4 * n * n * d)


def standard_attention_intensity(n: int, d: int, bytes_per_element: float = 2) -> float:
    """Return FLOPs per HBM byte of standard attention with `standard_attention_traffic`.

    4 N^2 d FLOPs over Q, K, V read and O written (4 N d elements) plus S and P each written and
    read once (4 N^2): N d / (b (N + d)). It approaches d / b from below and never exceeds it,
    whatever N: longer sequences do not make standard attention less memory-bound.
    """
    bytes_per_element = validate.positive_float("bytes_per_element", bytes_per_element)
    return attention_intensity(standard_attention_traffic(n, d), bytes_per_element)


def attention_intensity(count: IOCount, bytes_per_element: float = 2) -> float:
    """Return FLOPs per HBM byte of a counted algorithm: count.flops / (count.total * b)."""
    if not isinstance(count, IOCount):
        raise TypeError(f"count must be an IOCount, got {type(count).__name__}")
    bytes_per_element = validate.positive_float("bytes_per_element", bytes_per_element)
    if count.total == 0:
        raise ValueError("count moves no elements (reads + writes = 0): its intensity is undefined")
    return count.flops / (count.total * bytes_per_element)


__all__ = [
    "IOCount",
    "attention_intensity",
    "kv_passes",
    "standard_attention_intensity",
    "Sram",
    "SramOverflow",
    "flash_attention_io",
    "standard_attention_io",
    "standard_attention_traffic",
    "theorem2_flash_bound",
    "theorem2_standard_bound",
]
