"""Serving metrics, defined as `vllm bench serve` defines them: one module for the engine, the
simulator, the benchmarks and the chapters.

Per request (`RequestMetrics`, times in the run's clock units: seconds, or steps):

* TTFT: arrival → the first output token.
* ITL (inter-token latency): the gaps between successive output tokens of the request
  (``output_tokens − 1`` of them); a summary pools the gaps of every request, as vLLM does.
* TPOT (time per output token, excluding the first): ``(e2e − ttft) / (output_tokens − 1)`` for
  a request with more than one token; vLLM leaves one-token requests out of the TPOT summary and
  counts their TPOT as 0 when it checks an SLO. Here ``e2e − ttft`` is taken up to the *last
  token* (``tpot`` = mean ITL): that is vLLM's value whenever the stream ends with the request's
  last token, which is always so except under static batching, where a finished request keeps its
  row until the whole batch ends (that wait counts in `e2e`, not in TPOT).
* E2E: arrival → the request leaves the engine (vLLM's ``latency``, "E2EL").

Over a run (`summary`): mean, median, p90 and p99 of each (NumPy's linear-interpolation
percentiles, as vLLM uses), request and output-token throughput over the run's duration, and
goodput under an `SLO`: requests per clock unit whose TTFT, TPOT (and, where set, ITL and E2E)
all meet the thresholds (vLLM's ``request_goodput``: a request is good when every metric named in
the SLO is ≤ its limit). Source: vLLM, ``vllm/benchmarks/serve.py`` (``calculate_metrics``,
``BenchmarkMetrics``) and ``vllm/benchmarks/lib/endpoint_request_func.py`` (per-request ``ttft``,
``itl``, ``latency``) {cite:p}`vllm_bench_serve`.

The worked SLOs are MLPerf Inference's latency limits for its LLM benchmarks
{cite:p}`mlcommons_inference_rules`: TTFT and TPOT limits per model in the server (called
"conversational" for Llama 3.1 8B) and interactive scenarios, which MLPerf applies to the 99th
percentile of the run (`meets` checks a run that way; `goodput` counts requests one by one, as
vLLM does). torch-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import validate

PERCENTILES = (50.0, 90.0, 99.0)
METRIC_NAMES = ("ttft", "tpot", "itl", "e2e")


@dataclass
class RequestMetrics:
    """One request's latencies in the run's clock units (seconds, or steps with clock="steps").

    ttft: arrival → first token; tpot: (last token − first token) / (output_tokens − 1), 0 for a
    one-token request; e2e: arrival → the request leaves the engine (with static batching, when
    its whole batch is done); itl: the gaps between successive output tokens (empty when not
    recorded, e.g. metrics built by hand; fewer than output_tokens − 1 when a streamed chunk
    carried several tokens, as a `vllm bench serve` client sees when the server merges the
    outputs of steps it has not sent yet); preemptions: times it was preempted and recomputed.
    """

    request_id: int
    prompt_tokens: int
    output_tokens: int
    ttft: float
    tpot: float
    e2e: float
    preemptions: int = 0
    itl: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        validate.integer("request_id", self.request_id)
        validate.non_negative_int("prompt_tokens", self.prompt_tokens)
        validate.non_negative_int("output_tokens", self.output_tokens)
        for name in ("ttft", "tpot", "e2e"):
            validate.finite_float(name, getattr(self, name), minimum=0.0)
        validate.non_negative_int("preemptions", self.preemptions)
        itl = tuple(validate.finite_float(f"itl[{i}]", x, minimum=0.0)
                    for i, x in enumerate(validate.items("itl", self.itl)))
        if len(itl) > max(self.output_tokens - 1, 0):
            raise ValueError(f"itl must hold at most output_tokens − 1 = "
                             f"{max(self.output_tokens - 1, 0)} gaps, got {len(itl)}")
        self.itl = itl

    @classmethod
    def from_times(cls, request_id: int, prompt_tokens: int, arrival: float,
                   token_times, finish: float, preemptions: int = 0) -> "RequestMetrics":
        """Return the metrics of a request that arrived at `arrival`, received its output tokens
        at `token_times` (non-decreasing, at least one) and left at `finish` (≥ the last token)."""
        arrival = validate.finite_float("arrival", arrival)
        times = [validate.finite_float(f"token_times[{i}]", t)
                 for i, t in enumerate(validate.items("token_times", token_times))]
        finish = validate.finite_float("finish", finish)
        if not times:
            raise ValueError("token_times must hold at least one output token's time")
        if times[0] < arrival or any(b < a for a, b in zip(times, times[1:])) or finish < times[-1]:
            raise ValueError(f"times must run forward: arrival {arrival} ≤ token_times "
                             f"(non-decreasing) ≤ finish {finish}; got token_times from {times[0]} "
                             f"to {times[-1]}")
        n = len(times)
        tpot = (times[-1] - times[0]) / (n - 1) if n > 1 else 0.0
        itl = tuple(b - a for a, b in zip(times, times[1:]))
        return cls(request_id, prompt_tokens, n, times[0] - arrival, tpot, finish - arrival,
                   preemptions, itl)


@dataclass(frozen=True)
class SLO:
    """Latency limits a request must meet to count as good (each in the run's clock units; None:
    no limit on that metric). `itl` limits every gap of the request (its largest ITL)."""

    ttft: float | None = None
    tpot: float | None = None
    itl: float | None = None
    e2e: float | None = None
    name: str = ""

    def __post_init__(self) -> None:
        for f in ("ttft", "tpot", "itl", "e2e"):
            if getattr(self, f) is not None:
                validate.positive_float(f, getattr(self, f))
        if not isinstance(self.name, str):
            raise TypeError(f"name must be a string, got {type(self.name).__name__}")
        if all(getattr(self, f) is None for f in ("ttft", "tpot", "itl", "e2e")):
            raise ValueError("an SLO needs at least one limit (ttft, tpot, itl or e2e)")

    def met_by(self, m: RequestMetrics) -> bool:
        """Return whether request `m` meets every limit (vLLM's goodput test for one request)."""
        _check_metrics([m])
        return _good(m, self)


# MLPerf Inference's TTFT/TPOT limits (seconds), applied to the run's 99th percentile
# {cite:p}`mlcommons_inference_rules`.
MLPERF_LLAMA2_70B_SERVER = SLO(ttft=2.0, tpot=0.200, name="MLPerf Llama 2 70B server")
MLPERF_LLAMA2_70B_INTERACTIVE = SLO(ttft=0.450, tpot=0.040, name="MLPerf Llama 2 70B interactive")
MLPERF_LLAMA31_405B_SERVER = SLO(ttft=6.0, tpot=0.175, name="MLPerf Llama 3.1 405B server")
MLPERF_LLAMA31_405B_INTERACTIVE = SLO(ttft=4.5, tpot=0.080, name="MLPerf Llama 3.1 405B interactive")
MLPERF_LLAMA31_8B_SERVER = SLO(ttft=2.0, tpot=0.100, name="MLPerf Llama 3.1 8B server")
MLPERF_LLAMA31_8B_INTERACTIVE = SLO(ttft=0.500, tpot=0.030, name="MLPerf Llama 3.1 8B interactive")
MLPERF_SLOS = {
    ("llama2-70b", "server"): MLPERF_LLAMA2_70B_SERVER,
    ("llama2-70b", "interactive"): MLPERF_LLAMA2_70B_INTERACTIVE,
    ("llama3.1-405b", "server"): MLPERF_LLAMA31_405B_SERVER,
    ("llama3.1-405b", "interactive"): MLPERF_LLAMA31_405B_INTERACTIVE,
    ("llama3.1-8b", "server"): MLPERF_LLAMA31_8B_SERVER,
    ("llama3.1-8b", "interactive"): MLPERF_LLAMA31_8B_INTERACTIVE,
}
MLPERF_PERCENTILE = 99.0


def _check_metrics(metrics) -> list[RequestMetrics]:
    if isinstance(metrics, RequestMetrics) or isinstance(metrics, (str, bytes)):
        raise TypeError("metrics must be a list of RequestMetrics, got a single "
                        f"{type(metrics).__name__}")
    try:
        metrics = list(metrics)
    except TypeError:
        raise TypeError(f"metrics must be a list of RequestMetrics, got {type(metrics).__name__}") from None
    if not metrics:
        raise ValueError("metrics must hold at least one request's RequestMetrics")
    for i, m in enumerate(metrics):
        if not isinstance(m, RequestMetrics):
            raise TypeError(f"metrics[{i}] must be a RequestMetrics, got {type(m).__name__}")
    return metrics


def _check_slo(slo) -> SLO:
    if not isinstance(slo, SLO):
        raise TypeError(f"slo must be a metrics.SLO, got {type(slo).__name__}")
    return slo


def values(metrics, name: str) -> list[float]:
    """Return the values a summary of metric `name` pools: TTFT and E2E of every request, TPOT of
    the requests with more than one token, ITL: every recorded gap of every request (vLLM)."""
    metrics = _check_metrics(metrics)
    validate.one_of("name", name, METRIC_NAMES)
    if name == "itl":
        return [g for m in metrics for g in m.itl]
    if name == "tpot":
        return [m.tpot for m in metrics if m.output_tokens > 1]
    return [getattr(m, name) for m in metrics]


def percentile(metrics, name: str, q: float) -> float:
    """Return the q-th percentile (0–100) of metric `name` over `metrics` (NaN when no request
    has a value, e.g. TPOT of one-token requests only)."""
    q = validate.finite_float("q", q, minimum=0.0, maximum=100.0)
    vals = values(metrics, name)
    return float(np.percentile(vals, q)) if vals else math.nan


def p90(metrics, name: str) -> float:
    """Return the 90th percentile of metric `name` ("ttft", "tpot", "itl", "e2e") over requests."""
    return percentile(metrics, name, 90.0)


def _good(m: RequestMetrics, slo: SLO) -> bool:
    tpot = m.tpot if m.output_tokens > 1 else 0.0  # vLLM: TPOT of a one-token request counts as 0
    checks = [(slo.ttft, m.ttft), (slo.tpot, tpot), (slo.e2e, m.e2e),
              (slo.itl, max(m.itl, default=0.0))]
    return all(limit is None or value <= limit for limit, value in checks)


def _needs_itl(metrics: list[RequestMetrics], slo: SLO) -> None:
    if slo.itl is not None and any(m.output_tokens > 1 and not m.itl for m in metrics):
        raise ValueError("slo limits ITL but some requests carry no ITL gaps (metrics built "
                         "without token times); give an SLO without itl")


def good_requests(metrics, slo: SLO) -> int:
    """Return how many requests meet every limit of `slo`."""
    metrics, slo = _check_metrics(metrics), _check_slo(slo)
    _needs_itl(metrics, slo)
    return sum(_good(m, slo) for m in metrics)


def goodput_fraction(metrics, slo: SLO, tpot: float | None = None) -> float:
    """Return the fraction of requests that meet every limit of `slo` (SLO attainment).

    ``goodput_fraction(metrics, ttft, tpot)`` (two limits in clock units instead of an `SLO`)
    means ``SLO(ttft=ttft, tpot=tpot)``, the form chapter 9 first used.
    """
    if tpot is not None:
        if isinstance(slo, SLO):
            raise validate.ArgumentTypeError("give either slo (an SLO) or two limits (slo=ttft, tpot), not an SLO and tpot")
        try:
            slo = SLO(ttft=slo, tpot=tpot)
        except (TypeError, ValueError) as e:
            raise type(e)(f"slo (the TTFT limit when tpot is given): {e}") from None
    return good_requests(metrics, slo) / len(_check_metrics(metrics))


def goodput(metrics, slo: SLO, duration: float) -> float:
    """Return good requests per clock unit over a run of `duration` (vLLM's request goodput)."""
    duration = _check_duration(duration)
    return good_requests(metrics, slo) / duration


def meets(metrics, slo: SLO, q: float = MLPERF_PERCENTILE) -> bool:
    """Return whether the run's q-th percentile of every metric `slo` limits is within the limit
    (MLPerf's test: the 99th percentile of TTFT and of TPOT)."""
    metrics, slo = _check_metrics(metrics), _check_slo(slo)
    _needs_itl(metrics, slo)
    for name in METRIC_NAMES:
        limit = getattr(slo, name)
        if limit is not None:
            value = percentile(metrics, name, q)
            if not math.isnan(value) and value > limit:
                return False
    return True


def _check_duration(duration) -> float:
    duration = validate.finite_float("duration", duration)
    if duration <= 0:
        raise ValueError(f"duration must be > 0 (the run's length in clock units), got {duration}")
    return duration


def summary(metrics, duration: float, slo: SLO | None = None,
            percentiles=PERCENTILES) -> dict[str, float]:
    """Return a flat dict of a run's metrics, ready for a benchmark's JSON.

    Keys: ``completed``, ``total_input_tokens``, ``total_output_tokens``, ``duration``,
    ``request_throughput``, ``output_throughput``, ``total_token_throughput`` (per clock unit),
    ``preemptions``; for each of ttft, tpot, itl, e2e: ``mean_<m>``, ``median_<m>`` and
    ``p<q>_<m>`` for each q in `percentiles` (e.g. ``p90_ttft``; NaN where no request has a value,
    e.g. ITL of metrics built without token times); with an `slo`: ``good_requests``,
    ``request_goodput`` (good requests per clock unit), ``goodput_fraction`` and
    ``slo_<m>`` for each limit set.
    """
    metrics = _check_metrics(metrics)
    duration = _check_duration(duration)
    qs = [validate.finite_float("percentiles", q, 0.0, 100.0) for q in validate.items("percentiles", percentiles)]
    out_tokens = sum(m.output_tokens for m in metrics)
    in_tokens = sum(m.prompt_tokens for m in metrics)
    result: dict[str, float] = {
        "completed": len(metrics), "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens, "duration": duration,
        "request_throughput": len(metrics) / duration,
        "output_throughput": out_tokens / duration,
        "total_token_throughput": (in_tokens + out_tokens) / duration,
        "preemptions": sum(m.preemptions for m in metrics),
    }
    for name in METRIC_NAMES:
        vals = values(metrics, name)
        result[f"mean_{name}"] = float(np.mean(vals)) if vals else math.nan
        result[f"median_{name}"] = float(np.median(vals)) if vals else math.nan
        for q in qs:
            result[f"p{q:g}_{name}"] = float(np.percentile(vals, q)) if vals else math.nan
    if slo is not None:
        good = good_requests(metrics, slo)
        result.update(good_requests=good, request_goodput=good / duration,
                      goodput_fraction=good / len(metrics))
        result.update({f"slo_{f}": getattr(slo, f) for f in METRIC_NAMES if getattr(slo, f) is not None})
    return result


# ---------------------------------------------------------------------------------------------
# `vllm bench serve`'s saved results, read and recomputed

VLLM_NAMES = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e": "e2el"}  # ours → vLLM's
VLLM_DETAIL_KEYS = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "errors")


def _vllm_result(result) -> dict:
    if not isinstance(result, dict):
        raise validate.ArgumentTypeError(f"result must be the dict of a `vllm bench serve` JSON, "
                                         f"got {type(result).__name__}")
    missing = [k for k in VLLM_DETAIL_KEYS + ("duration",) if k not in result]
    if missing:
        raise ValueError(f"result lacks {', '.join(missing)}: save it with `vllm bench serve "
                         "--save-result --save-detailed`")
    n = len(result["ttfts"])
    if any(len(result[k]) != n for k in VLLM_DETAIL_KEYS):
        raise ValueError("result's per-request lists (" + ", ".join(VLLM_DETAIL_KEYS)
                         + ") must have one entry per request")
    return result


def from_vllm_bench(result: dict) -> list[RequestMetrics]:
    """Return one `RequestMetrics` per successful request of a `vllm bench serve --save-result
    --save-detailed` JSON (request ids: the positions in its lists), as vLLM's
    ``calculate_metrics`` reads them: TTFT ``ttfts[i]``, E2E ``latencies[i]``, ITL the client's
    gaps ``itls[i]`` (one per streamed chunk), output tokens ``output_lens[i]`` (the server's
    count), and TPOT = (latency − TTFT) / (output tokens − 1), 0 for a one-token reply (vLLM then
    leaves it out of the TPOT summary). A failed request (an error, no output) is left out, as
    vLLM leaves it out of every latency figure."""
    r = _vllm_result(result)
    out = []
    for i, (n_in, n_out, ttft, itl, latency, error) in enumerate(zip(*(r[k] for k in VLLM_DETAIL_KEYS))):
        if error or not n_out:
            continue
        tpot = (latency - ttft) / (n_out - 1) if n_out > 1 else 0.0
        out.append(RequestMetrics(i, int(n_in), int(n_out), ttft, tpot, latency, 0, tuple(itl)))
    return out


def vllm_figures(metrics, duration: float, percentiles=PERCENTILES) -> dict[str, float]:
    """Return the figures `vllm bench serve` prints and saves, under its keys and units
    (milliseconds): ``completed``, ``total_input_tokens``, ``total_output_tokens``,
    ``request_throughput``, ``output_throughput``, ``total_token_throughput`` (per second of
    `duration`, the benchmark's wall time), and for each of ttft, tpot, itl, e2el ``mean_<m>_ms``,
    ``median_<m>_ms``, ``std_<m>_ms`` and ``p<q>_<m>_ms`` (NumPy's mean, median, population std
    and linear percentiles over the values `values` pools, each × 1000, 0 where none, as vLLM).
    The values are pooled in request order, as vLLM pools them, so the figures agree to the
    last bit."""
    metrics = _check_metrics(metrics)
    duration = _check_duration(duration)
    qs = [validate.finite_float("percentiles", q, 0.0, 100.0) for q in validate.items("percentiles", percentiles)]
    out_tokens = sum(m.output_tokens for m in metrics)
    in_tokens = sum(m.prompt_tokens for m in metrics)
    fig: dict[str, float] = {
        "completed": len(metrics), "total_input_tokens": in_tokens, "total_output_tokens": out_tokens,
        "request_throughput": len(metrics) / duration, "output_throughput": out_tokens / duration,
        "total_token_throughput": (in_tokens + out_tokens) / duration}
    for name, vname in VLLM_NAMES.items():
        vals = values(metrics, name) or 0
        fig[f"mean_{vname}_ms"] = float(np.mean(vals) * 1000)
        fig[f"median_{vname}_ms"] = float(np.median(vals) * 1000)
        fig[f"std_{vname}_ms"] = float(np.std(vals) * 1000)
        for q in qs:
            word = str(int(q)) if int(q) == q else str(q)
            fig[f"p{word}_{vname}_ms"] = float(np.percentile(vals, q) * 1000)
    return fig


def vllm_peaks(result: dict) -> tuple[float, int]:
    """Return `vllm bench serve`'s "Peak output token throughput" and "Peak concurrent
    requests" of a saved detailed result: output chunks (the first token, then one per ITL gap)
    and requests in flight, counted in one-second buckets from the first request's start."""
    r = _vllm_result(result)
    if "start_times" not in r or len(r["start_times"]) != len(r["ttfts"]):
        raise ValueError("result lacks start_times: save it with a vLLM whose --save-detailed keeps them")
    ok = [i for i, (n, e) in enumerate(zip(r["output_lens"], r["errors"])) if n and not e]
    if not ok:
        return 0.0, 0
    starts, lat = r["start_times"], r["latencies"]
    first = min(starts[i] for i in ok)
    seconds = int(np.ceil(max(starts[i] + lat[i] for i in ok) - first)) + 1
    tokens, busy = np.zeros(seconds), np.zeros(seconds)
    for i in ok:
        t = starts[i] + r["ttfts"][i]
        times = [t]
        for gap in r["itls"][i]:
            t += gap
            times.append(t)
        for t in times:
            b = int(t - first)
            if 0 <= b < seconds:
                tokens[b] += 1
        for b in range(int(starts[i] - first), int(starts[i] + lat[i] - first) + 1):
            busy[b] += 1
    return float(np.max(tokens)), int(np.max(busy))


__all__ = ["RequestMetrics", "from_vllm_bench", "vllm_figures", "vllm_peaks", "VLLM_NAMES", "SLO", "MLPERF_SLOS", "MLPERF_PERCENTILE", "values", "percentile",
           "p90", "good_requests", "goodput_fraction", "goodput", "meets", "summary",
           "MLPERF_LLAMA2_70B_SERVER", "MLPERF_LLAMA2_70B_INTERACTIVE", "MLPERF_LLAMA31_405B_SERVER",
           "MLPERF_LLAMA31_405B_INTERACTIVE", "MLPERF_LLAMA31_8B_SERVER",
           "MLPERF_LLAMA31_8B_INTERACTIVE"]
