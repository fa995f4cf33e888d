"""The HBM/SRAM traffic counter: exact counts on small cases, Theorem 2's orders on a grid."""

import math

import numpy as np
import pytest

from inferbook.flash import attention_flops, flash_attention_forward
from inferbook.io_model import (
    Sram,
    SramOverflow,
    flash_attention_io,
    standard_attention_io,
    theorem2_flash_bound,
    theorem2_standard_bound,
)

D = 64


def test_flash_counts_match_the_closed_form():
    n, m = 1000, 6 * D * 10  # B_r = 10 query rows, B_c = 10 key rows
    count = flash_attention_io(n, D, m)
    block_q = 10
    q_tiles = math.ceil(n / block_q)
    assert count.reads == n * D + q_tiles * 2 * n * D  # Q once; K and V once per Q tile
    assert count.writes == n * D + n  # O and its logsumexp, once
    assert count.flops == attention_flops(n, n, D)
    assert count.peak_sram <= m


def test_the_counter_visits_the_same_tiles_as_the_numpy_kernel():
    n, m = 200, 6 * 16 * 8  # d = 16: B_r = 8, B_c = 8
    for causal in (False, True):
        tiles = []
        q = np.zeros((1, 1, n, 16), dtype=np.float32)
        flash_attention_forward(q, q, q, causal=causal, block_q=8, block_k=8, on_tile=tiles.append)
        count = flash_attention_io(n, 16, m, causal=causal)
        k_tile_loads = (count.reads - n * 16) // (2 * 8 * 16)
        assert k_tile_loads == len(tiles)


def test_standard_attention_round_trips_the_n_by_n_matrices():
    n = 512
    count = standard_attention_io(n, D, 2**14)
    # S written, S read, P written, P read: at least 4 n^2, whatever the tiling
    assert count.total >= 4 * n * n
    assert count.writes == n * n + n * n + n * D
    assert count.flops == attention_flops(n, n, D)
    assert count.peak_sram <= 2**14


@pytest.mark.parametrize("m", [2**13, 2**15, 2**17])
def test_theorem2_orders_hold_on_a_grid(m):
    ns = [512, 1024, 2048, 4096]
    flash = [flash_attention_io(n, D, m).total / theorem2_flash_bound(n, D, m) for n in ns]
    standard = [standard_attention_io(n, D, m).total / theorem2_standard_bound(n, D) for n in ns]
    # Theta(.): the ratio to the bound stays within constant factors as N grows
    assert max(flash) / min(flash) < 2.0 and 10 <= min(flash) and max(flash) <= 30
    assert max(standard) / min(standard) < 2.5 and min(standard) >= 4


def test_flash_traffic_halves_when_sram_doubles_and_quadruples_when_n_doubles():
    base = flash_attention_io(4096, D, 2**15).total
    assert 0.45 < flash_attention_io(4096, D, 2**16).total / base < 0.6
    assert 3.6 < flash_attention_io(8192, D, 2**15).total / base < 4.1


def test_flash_moves_far_less_than_standard_and_causal_about_half():
    n, m = 4096, 2**15
    flash, standard = flash_attention_io(n, D, m), standard_attention_io(n, D, m)
    assert flash.total < standard.total / 2
    assert flash.flops == standard.flops  # same arithmetic, different traffic
    causal = flash_attention_io(n, D, m, causal=True)
    assert 0.45 < causal.total / flash.total < 0.6
    assert causal.flops < 0.6 * flash.flops


def test_sram_refuses_to_overflow():
    sram = Sram(10)
    sram.load(6)
    with pytest.raises(SramOverflow, match="holds 10 elements"):
        sram.alloc(5)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: flash_attention_io(100, 64, 100), "too small"),
        (lambda: flash_attention_io(0, 64, 4096), "n must be a positive integer"),
        (lambda: standard_attention_io(100, 64, 2.5), "sram_elems must be an integer"),
    ],
)
def test_invalid_sizes_raise(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---- intensity and passes ---------------------------------------------------------------------
def test_standard_intensity_never_reaches_d_over_b():
    from inferbook.io_model import standard_attention_intensity

    values = [standard_attention_intensity(n, 64) for n in (128, 1024, 8192, 2**20)]
    assert values == sorted(values) and all(v < 64 / 2 for v in values)
    assert standard_attention_intensity(4096, 64) == pytest.approx(4096 * 64 / (2 * (4096 + 64)))
    # it is the counted algorithm's intensity up to the matmul tiling's extra reads
    from inferbook.io_model import attention_intensity, standard_attention_io

    counted = attention_intensity(standard_attention_io(2048, 64, 2**15))
    assert 0.5 * standard_attention_intensity(2048, 64) < counted <= standard_attention_intensity(2048, 64)


def test_flash_intensity_grows_with_n_and_beats_standard():
    from inferbook.io_model import (attention_intensity, flash_attention_io,
                                    standard_attention_intensity)

    flash = [attention_intensity(flash_attention_io(n, 64, 2**15)) for n in (256, 1024, 4096)]
    assert flash == sorted(flash) and flash[0] < flash[-1]
    assert all(f > standard_attention_intensity(4096, 64) for f in flash[1:])


def test_kv_passes_counts_q_tiles_and_rejects_bad_input():
    from inferbook.io_model import flash_attention_io, kv_passes

    assert kv_passes(4096, 64, 2**15) == 49 and kv_passes(4096, 64, 2**15, rows_divisor=4) == 32
    io = flash_attention_io(4096, 64, 2**15)
    assert io.reads - 4096 * 64 == kv_passes(4096, 64, 2**15) * 2 * 4096 * 64
    for bad in (0, True, 2.0):
        with pytest.raises(ValueError, match="rows_divisor"):
            kv_passes(4096, 64, 2**15, rows_divisor=bad)
    with pytest.raises(ValueError, match="bytes_per_element"):
        from inferbook.io_model import standard_attention_intensity
        standard_attention_intensity(10, 4, 0)
    with pytest.raises(TypeError, match="IOCount"):
        from inferbook.io_model import attention_intensity
        attention_intensity(3)


def test_standard_traffic_is_the_one_model_the_roofline_uses():
    from inferbook.io_model import (
        attention_intensity,
        standard_attention_intensity,
        standard_attention_traffic,
    )

    n, d = 4096, 64
    t = standard_attention_traffic(n, d)
    assert t.total == 4 * n * n + 4 * n * d and t.flops == 4 * n * n * d
    assert t.reads == 2 * n * n + 3 * n * d and t.writes == 2 * n * n + n * d
    assert standard_attention_intensity(n, d) == attention_intensity(t)
    # the counted kernels move at least the model's elements (plus the matmul tiles' re-reads)
    assert standard_attention_io(n, d, 2**15).total >= t.total
    with pytest.raises(ValueError, match="n"):
        standard_attention_traffic(0, d)
