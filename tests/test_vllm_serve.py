"""`inferbook.metrics` against `vllm bench serve`, and the serve sweep's entry point.

vLLM's benchmark client saves, with `--save-result --save-detailed`, every request's start time,
TTFT, ITL gaps, latency and token counts beside the figures it reports. `metrics.from_vllm_bench`
reads the per-request times and `metrics.vllm_figures` / `metrics.vllm_peaks` recompute every
figure vLLM reported (mean, median, std, p50/p90/p99 of TTFT, TPOT, ITL and E2EL, throughputs,
peak output tokens/s and concurrency), which must agree to the last bit:

* on committed results of real runs (outputs/benchmarks/vllm_serve_runs.json, written by
  tests/bench/bench_vllm_serve.py; 32 rates × repeats of 60 requests; and vllm_serve_short.json,
  a run whose replies are 1 to 3 tokens long, so the one-token rule for TPOT is exercised);
* on a live run: `vllm serve` + `vllm bench serve` on 127.0.0.1 through
  tools/vllm_ref/serve_sweep.py (about 1.5–2 minutes on 2 cores, most of it the server's start),
  run by `tests/vllm_ref.py` under `.venv-vllm`; without that environment it FAILS with one line
  (INFERBOOK_SKIP_VLLM=1 skips it), as the other vLLM comparisons do.
"""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from inferbook import metrics as M

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_ref import REF_DIR, run_vllm_script, vllm_python  # noqa: E402

BENCH = Path(__file__).resolve().parents[1] / "outputs" / "benchmarks"
RUNS_FILE = json.loads((BENCH / "vllm_serve_runs.json").read_text())
RUNS = RUNS_FILE["results"]
SHORT = json.loads((BENCH / "vllm_serve_short.json").read_text())["results"]
SHORT_OPTIONS = json.loads((BENCH / "vllm_serve_short.json").read_text())["options"]


def reported_equals_recomputed(result: dict) -> list[str]:
    """Return the figures on which the package and vLLM's saved result differ (none: agree)."""
    ms = M.from_vllm_bench(result)
    fig = M.vllm_figures(ms, result["duration"], (50, 90, 99))
    saved = {k for k in result if k.endswith("_ms")}
    assert saved <= set(fig), f"vLLM reported figures the package does not compute: {saved - set(fig)}"
    wrong = [k for k, v in fig.items() if result[k] != v]
    peaks = M.vllm_peaks(result)
    if peaks != (result["max_output_tokens_per_s"], result["max_concurrent_requests"]):
        wrong.append(f"peaks {peaks}")
    return wrong


@pytest.mark.parametrize("name", sorted(RUNS))
def test_every_figure_of_a_committed_run_is_recomputed_exactly(name):
    assert reported_equals_recomputed(RUNS[name]) == []


def committed_slo() -> M.SLO:
    slo_ms = RUNS_FILE["goodput_slo_ms"]
    return M.SLO(**{k: v / 1000 for k, v in slo_ms.items()})  # vLLM: ms / 1000


@pytest.mark.parametrize("name", sorted(RUNS))
def test_goodput_equals_vllms_request_goodput(name):
    """`vllm bench serve --goodput ttft:.. tpot:..` counted the requests meeting both limits."""
    raw = RUNS[name]
    assert raw["request_goodput"] is not None, "the sweep ran without --goodput"
    assert M.goodput(M.from_vllm_bench(raw), committed_slo(), raw["duration"]) == raw["request_goodput"]


def test_the_goodput_slo_separates_requests():
    # a check that could not fail would be worthless: the SLO must pass some requests and fail
    # others, in some run, on TTFT and on TPOT alike
    slo = committed_slo()
    per_run = [(M.good_requests(M.from_vllm_bench(r), slo), r["completed"]) for r in RUNS.values()]
    assert any(0 < good < n for good, n in per_run)
    ms = [m for r in RUNS.values() for m in M.from_vllm_bench(r)]
    assert any(m.ttft > slo.ttft for m in ms) and any(m.tpot > slo.tpot for m in ms)
    assert any(m.ttft <= slo.ttft and m.tpot <= slo.tpot for m in ms)


def test_a_wrong_goodput_limit_is_caught():
    raw = next(r for r in RUNS.values() if 0 < r["request_goodput"] < r["request_throughput"])
    slo = committed_slo()
    looser = M.SLO(ttft=slo.ttft * 10, tpot=slo.tpot * 10)
    assert M.goodput(M.from_vllm_bench(raw), looser, raw["duration"]) != raw["request_goodput"]


def test_the_committed_runs_cover_the_sweep():
    # every rate of the bench's sweep, each repeated, all requests served
    rates = {r["request_rate"] for r in RUNS.values()}
    assert len(rates) >= 6 and len(RUNS) >= 2 * len(rates)
    assert all(r["completed"] == r["num_prompts"] and r["failed"] == 0 for r in RUNS.values())


@pytest.mark.parametrize("name", sorted(SHORT))
def test_one_token_replies_follow_vllms_tpot_rule(name):
    """One-token replies have no TPOT in vLLM's summary (and count 0 against an SLO)."""
    r = SHORT[name]
    assert 1 in r["output_lens"] and max(r["output_lens"]) > 1, "the run must mix 1-token replies"
    assert reported_equals_recomputed(r) == []
    ms = M.from_vllm_bench(r)
    assert len(M.values(ms, "tpot")) == sum(n > 1 for n in r["output_lens"])
    one = [m for m in ms if m.output_tokens == 1]
    assert all(m.tpot == 0.0 and m.itl == () for m in one)
    assert M.good_requests(one, M.SLO(tpot=1e-9)) == len(one)


def test_a_wrong_time_is_caught():
    """The comparison can fail: one ITL gap moved by a microsecond changes vLLM's figures."""
    r = copy.deepcopy(next(iter(RUNS.values())))
    r["itls"][0][0] += 1e-6
    wrong = reported_equals_recomputed(r)
    assert "mean_itl_ms" in wrong and "mean_tpot_ms" not in wrong  # TPOT uses the latency


def test_streamed_chunks_may_carry_several_tokens():
    """Under load the server merges steps' outputs: a request has fewer gaps than tokens − 1."""
    merged = [r for r in RUNS.values() if any(len(g) < n - 1 for g, n in zip(r["itls"], r["output_lens"]))]
    assert merged, "no committed run has a merged chunk"
    ms = M.from_vllm_bench(merged[0])
    assert any(len(m.itl) < m.output_tokens - 1 for m in ms)


@pytest.mark.parametrize("bad, match", [
    ([], "dict"),
    ({"ttfts": []}, "--save-detailed"),
    ({**{k: [0.1] for k in M.VLLM_DETAIL_KEYS}, "duration": 1.0, "ttfts": [0.1, 0.2]}, "one entry per request"),
])
def test_from_vllm_bench_refuses_what_is_not_a_detailed_result(bad, match):
    with pytest.raises(ValueError, match=match):
        M.from_vllm_bench(bad)


# --- the live run and the entry point ------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_live_vllm_serve_run_is_recomputed_exactly(tmp_path):
    vllm_python()  # fails (or skips) with one line without .venv-vllm
    sweep = run_vllm_script("serve_sweep", dict(SHORT_OPTIONS, out=str(tmp_path / "sweep"),
                                                port=free_port()), timeout=900)
    (result,) = sweep["results"].values()
    assert result["completed"] == SHORT_OPTIONS["num_prompts"] and result["failed"] == 0
    assert 1 in result["output_lens"], "the live run must include one-token replies"
    assert reported_equals_recomputed(result) == []


def run_sweep_cli(python, *args):
    return subprocess.run([str(python), str(REF_DIR / "serve_sweep.py"), *args], cwd=REF_DIR,
                          capture_output=True, text=True, timeout=300)


def one_line_error(done) -> str:
    """Return the sweep's one error line; fail unless it exited 2 with exactly one, no traceback."""
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr
    lines = [x for x in done.stderr.splitlines() if x.startswith("serve_sweep: ")]
    assert len(lines) == 1, done.stderr[-2000:]
    return lines[0]


def test_the_sweep_without_vllm_says_so(tmp_path):
    done = run_sweep_cli(sys.executable, "--out", str(tmp_path))  # the book's venv: no vLLM
    assert "no vLLM" in one_line_error(done)


def test_the_sweep_refuses_bad_options(tmp_path):
    done = run_sweep_cli(sys.executable, "--out", str(tmp_path), "--rates", "2,fast")
    assert "--rates" in one_line_error(done)
    done = run_sweep_cli(sys.executable, "--out", str(tmp_path), "--rates", "0")
    assert "positive" in one_line_error(done)
    for bad in ("ttft:fast", "itl:5", "tpot:-1", "ttft"):
        done = run_sweep_cli(sys.executable, "--out", str(tmp_path), "--goodput", bad)
        assert "--goodput" in one_line_error(done), bad


def test_the_sweep_on_a_busy_port_says_so(tmp_path):
    python = vllm_python()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        done = run_sweep_cli(python, "--out", str(tmp_path), "--port", str(port))
    assert f"port {port}" in one_line_error(done) and "in use" in one_line_error(done)


def test_a_server_that_does_not_start_in_time_is_reported(tmp_path):
    python = vllm_python()
    done = run_sweep_cli(python, "--out", str(tmp_path), "--port", str(free_port()),
                         "--start-timeout", "1")
    line = one_line_error(done)
    assert "did not answer" in line and "/health" in line
