"""Serving metrics: vLLM's definitions (TTFT, TPOT, ITL, E2E, goodput), MLPerf's SLOs."""

import math
import subprocess
import sys

import numpy as np
import pytest

from inferbook import metrics as M
from inferbook.metrics import SLO, RequestMetrics


def rm(i, times, arrival=0.0, finish=None, prompt=4):
    return RequestMetrics.from_times(i, prompt, arrival, times, times[-1] if finish is None else finish)


def test_from_times_follows_vllm_definitions():
    m = rm(7, [1.0, 1.5, 2.5, 3.0], arrival=0.5)
    assert m.ttft == pytest.approx(0.5)
    assert m.itl == pytest.approx((0.5, 1.0, 0.5))
    # vLLM: tpot = (latency − ttft) / (output_len − 1), latency = the last token
    assert m.tpot == pytest.approx((m.e2e - m.ttft) / (m.output_tokens - 1))
    assert m.tpot == pytest.approx(np.mean(m.itl))
    assert (m.output_tokens, m.e2e) == (4, pytest.approx(2.5))


def test_static_batch_wait_counts_in_e2e_not_tpot():
    m = rm(0, [1.0, 2.0], finish=5.0)
    assert m.e2e == 5.0 and m.tpot == 1.0


def test_one_token_request_has_no_tpot_in_summaries_but_counts_as_zero_for_goodput():
    ms = [rm(0, [1.0]), rm(1, [1.0, 3.0])]
    assert M.values(ms, "tpot") == [2.0]
    assert M.values(ms, "itl") == [2.0]
    assert M.good_requests(ms, SLO(tpot=0.5)) == 1  # the one-token request's TPOT is 0


def test_itl_pools_every_gap_of_every_request():
    ms = [rm(0, [0.0, 1.0, 2.0, 3.0]), rm(1, [0.0, 10.0])]
    assert sorted(M.values(ms, "itl")) == [1.0, 1.0, 1.0, 10.0]
    # TPOT is per request; ITL is per gap: the means differ
    assert M.summary(ms, 10.0)["mean_tpot"] == pytest.approx(5.5)
    assert M.summary(ms, 10.0)["mean_itl"] == pytest.approx(13 / 4)


def test_summary_keys_and_values():
    ms = [rm(i, [0.1 * i + 0.2, 0.1 * i + 0.3, 0.1 * i + 0.45], arrival=0.1 * i) for i in range(10)]
    s = M.summary(ms, duration=2.0, slo=SLO(ttft=0.25, tpot=0.2))
    assert s["completed"] == 10 and s["total_output_tokens"] == 30 and s["total_input_tokens"] == 40
    assert s["request_throughput"] == 5.0 and s["output_throughput"] == 15.0
    for name in ("ttft", "tpot", "itl", "e2e"):
        for key in ("mean", "median", "p50", "p90", "p99"):
            assert f"{key}_{name}" in s
    assert s["p90_ttft"] == pytest.approx(0.2)
    assert s["good_requests"] == 10 and s["request_goodput"] == 5.0 and s["goodput_fraction"] == 1.0
    assert s["slo_ttft"] == 0.25 and "slo_itl" not in s
    assert M.summary(ms, 2.0, slo=SLO(tpot=0.1))["good_requests"] == 0


def test_percentile_matches_numpy_and_p90():
    ms = [rm(i, [float(i), float(i) + 1]) for i in range(11)]
    assert M.p90(ms, "ttft") == float(np.percentile(range(11), 90))
    assert M.percentile(ms, "e2e", 50) == 6.0
    assert math.isnan(M.percentile([rm(0, [1.0])], "tpot", 50))


def test_goodput_and_mlperf_meets():
    ms = [rm(i, [1.0, 1.1]) for i in range(98)] + [rm(i, [3.0, 3.1]) for i in (98, 99)]
    slo = M.MLPERF_LLAMA2_70B_SERVER
    assert (slo.ttft, slo.tpot) == (2.0, 0.2)
    assert M.goodput_fraction(ms, slo) == pytest.approx(0.98)
    assert M.goodput(ms, slo, 10.0) == pytest.approx(9.8)
    assert not M.meets(ms, slo)  # p99 TTFT is above 2 s
    assert M.meets(ms[:98], slo) and M.meets(ms, slo, q=90)
    assert M.MLPERF_SLOS[("llama3.1-8b", "interactive")].tpot == 0.03


def test_itl_slo_checks_the_largest_gap():
    m = rm(0, [0.0, 0.1, 1.0])
    assert not SLO(itl=0.5).met_by(m) and SLO(itl=0.9).met_by(m)
    with pytest.raises(ValueError, match="ITL"):
        M.good_requests([RequestMetrics(0, 1, 3, 0.1, 0.1, 0.3)], SLO(itl=1.0))


@pytest.mark.parametrize("call, match", [
    (lambda: M.summary([], 1.0), "metrics"),
    (lambda: M.summary([rm(0, [1.0])], 0.0), "duration"),
    (lambda: M.summary([rm(0, [1.0])], float("inf")), "duration"),
    (lambda: M.summary(rm(0, [1.0]), 1.0), "metrics"),
    (lambda: M.summary([object()], 1.0), r"metrics\[0\]"),
    (lambda: M.percentile([rm(0, [1.0])], "latency", 50), "name"),
    (lambda: M.percentile([rm(0, [1.0])], "ttft", 101), "q"),
    (lambda: M.goodput_fraction([rm(0, [1.0])], (1.0, 2.0)), "slo"),
    (lambda: SLO(), "at least one"),
    (lambda: SLO(ttft=0), "ttft"),
    (lambda: SLO(tpot=float("nan")), "tpot"),
    (lambda: SLO(ttft=True), "ttft"),
    (lambda: RequestMetrics(0, 1, 1, -1.0, 0.0, 1.0), "ttft"),
    (lambda: RequestMetrics(0, 1, 3, 0.1, 0.1, 1.0, 0, (0.1, 0.1, 0.1)), "itl"),
    (lambda: RequestMetrics.from_times(0, 1, 0.0, [], 1.0), "token_times"),
    (lambda: RequestMetrics.from_times(0, 1, 2.0, [1.0], 3.0), "forward"),
    (lambda: RequestMetrics.from_times(0, 1, 0.0, [2.0, 1.0], 3.0), "forward"),
])
def test_bad_input_is_refused_with_the_argument_named(call, match):
    with pytest.raises((TypeError, ValueError), match=match):
        call()


def test_import_leaves_torch_unloaded():
    code = "import sys, inferbook.metrics; assert 'torch' not in sys.modules, 'torch loaded'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_goodput_fraction_takes_two_limits_as_an_slo():
    ms = [rm(0, [0.5, 0.6]), rm(1, [2.0, 2.5])]
    assert M.goodput_fraction(ms, 1.0, 0.2) == M.goodput_fraction(ms, SLO(ttft=1.0, tpot=0.2)) == 0.5
    from inferbook import simulate
    assert not hasattr(simulate, "goodput_fraction") and not hasattr(simulate, "p90")  # no pass-through


def test_a_streamed_chunk_may_carry_several_tokens():
    """vLLM's client records one gap per streamed chunk: 3 tokens in 2 chunks give 1 gap."""
    m = RequestMetrics(0, 1, 3, 0.1, 0.2, 0.5, 0, (0.4,))
    assert M.values([m], "itl") == [0.4] and M.values([m], "tpot") == [0.2]
