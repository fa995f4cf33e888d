"""Chapter 8's GPU cell: it skips with one line here, and reads real start-up logs right."""

from dataclasses import replace

import pytest
from inferbook import recommend, vllm_logs
from inferbook import vllm_gpu_check as check
from inferbook.hardware import GPUS
from inferbook.hardware import gpu as gpu_preset


def test_without_a_colab_gpu_it_prints_one_line_and_installs_nothing(monkeypatch):
    monkeypatch.delenv("INFERBOOK_RUN_VLLM", raising=False)
    assert check.compare_on_this_gpu() == check.SKIP
    assert check.SKIP.startswith("Skipped:") and "GPU" in check.SKIP
    assert max(len(line) for line in check.SKIP.splitlines()) <= 88   # the page's column


def test_opted_in_without_cuda_it_still_skips(monkeypatch):
    monkeypatch.setenv("INFERBOOK_RUN_VLLM", "1")
    monkeypatch.setattr(check, "runtime_gpu", lambda: None)
    assert check.compare_on_this_gpu() == check.SKIP


def test_the_parser_reads_every_real_log_excerpt():
    """Each committed record's excerpt, as vLLM printed it, gives back the logged numbers."""
    read = 0
    for r in vllm_logs.records():
        text = "\n".join(r["excerpt"])
        got = check.parse_startup_log(text)
        if "KV cache size:" in text:
            assert got["kv_tokens"] == r["logged"]["kv_tokens"], r["id"]
            read += 1
        if "Available KV cache memory:" in text and r["logged"]["available_kv_gib"] is not None:
            assert got["available_gib"] == pytest.approx(r["logged"]["available_kv_gib"]), r["id"]
        if "Maximum concurrency for" in text and r["logged"]["max_concurrency"] is not None:
            assert got["max_concurrency"] == pytest.approx(r["logged"]["max_concurrency"]), r["id"]
            assert got["max_model_len"] == r["max_model_len"], r["id"]
    assert read >= 25


def test_the_side_by_side_table_names_both_columns():
    g = replace(GPUS["T4"], cuda_total_bytes=15_828_320_256)
    spec = check.log_model(check.DEFAULT_MODEL)
    plan = recommend.recommend(spec, g, recommend.Workload("chat", context_tokens=8192))
    pred = check.predicted(spec, g, plan, "0.33.0")
    text = check.side_by_side({"kv_tokens": pred.kv_tokens}, pred, "T4")
    assert "vLLM log" in text and "book" in text and "+0.0 %" in text
    assert f"{pred.kv_tokens:,}" in text


def test_bad_log_is_a_value_error():
    with pytest.raises(ValueError, match="text"):
        check.parse_startup_log(None)


# -- every failure path, with fakes: one clear line, no traceback --------------------------------

def opted_in(monkeypatch, gpu=gpu_preset("T4"), online=True, pip=None, serve=None):
    """Opt in, fake the GPU, the network, pip and `vllm serve`; return the calls made."""
    calls = []
    monkeypatch.setenv("INFERBOOK_RUN_VLLM", "1")
    g = gpu if gpu is None or not isinstance(gpu, str) else replace(
        GPUS[gpu], cuda_total_bytes=15_828_320_256)
    monkeypatch.setattr(check, "runtime_gpu", lambda: g)
    monkeypatch.setattr(check, "_online", lambda *a, **k: online)

    def fake_run(argv, **kw):
        calls.append(("pip", argv))
        if pip is None:
            raise AssertionError("pip must not run")
        return pip(argv, **kw)

    monkeypatch.setattr(check.subprocess, "run", fake_run)
    monkeypatch.setattr(check.importlib.metadata, "version", lambda name: check.VLLM_PIN)
    if serve is not None:
        monkeypatch.setattr(check, "_serve_log", lambda argv, t: (calls.append(("serve", argv)), serve)[1])
    return calls


def pip_says(code, out="", err=""):
    return lambda argv, **kw: __import__("subprocess").CompletedProcess(argv, code, out, err)


def one_line(text):
    assert isinstance(text, str) and "\n" not in text and "Traceback" not in text, text
    return text


def test_no_gpu_skips_and_installs_nothing(monkeypatch):
    calls = opted_in(monkeypatch, gpu=None)
    assert check.compare_on_this_gpu() == check.SKIP and calls == []


def test_a_gpu_below_compute_capability_7_is_refused_before_installing(monkeypatch):
    calls = opted_in(monkeypatch, gpu=replace(GPUS["T4"], name="Tesla P100", compute_capability=(6, 0)))
    text = one_line(check.compare_on_this_gpu())
    assert "compute capability 7.0" in text and "6.0" in text and "Nothing installed" in text
    assert calls == []


def test_no_network_says_so_and_installs_nothing(monkeypatch):
    calls = opted_in(monkeypatch, online=False)
    text = one_line(check.compare_on_this_gpu())
    assert "no network" in text and "T4" in text and calls == []


def test_the_install_is_pinned_and_a_failure_gives_pips_last_line(monkeypatch):
    calls = opted_in(monkeypatch, pip=pip_says(1, err="Collecting vllm\nERROR: No matching distribution\n\n"))
    text = one_line(check.compare_on_this_gpu())
    assert calls[0][1][-1] == f"vllm=={check.VLLM_PIN}" == "vllm==" + check.vllm_memory.VLLM_PINNED
    assert "failed (exit 1)" in text and text.endswith("ERROR: No matching distribution")


def test_a_failed_install_that_printed_nothing_still_gives_one_line(monkeypatch):
    opted_in(monkeypatch, pip=pip_says(2))
    assert one_line(check.compare_on_this_gpu()).endswith("pip printed nothing")


def test_an_install_that_hangs_is_reported(monkeypatch):
    def hang(argv, **kw):
        raise check.subprocess.TimeoutExpired(argv, kw["timeout"])
    opted_in(monkeypatch, pip=hang)
    assert "did not finish" in one_line(check.compare_on_this_gpu())


@pytest.mark.parametrize("outcome", ["exited with status 1", "timed out"])
def test_a_server_that_exits_or_times_out_gives_vllms_last_line(monkeypatch, outcome):
    log = "INFO starting\nValueError: Bfloat16 is only supported on GPUs with compute capability >= 8.0\n"
    calls = opted_in(monkeypatch, pip=pip_says(0), serve=(log, outcome))
    text = one_line(check.compare_on_this_gpu(timeout_s=5))
    assert outcome in text and text.endswith("compute capability >= 8.0") and calls[-1][0] == "serve"


def test_a_working_server_gives_the_table_with_the_pinned_version(monkeypatch):
    log = ("INFO Available KV cache memory: 9.87 GiB\nINFO GPU KV cache size: 92,368 tokens\n"
           "INFO Maximum concurrency for 8,192 tokens per request: 11.28x\n")
    opted_in(monkeypatch, pip=pip_says(0), serve=(log, "ready"))
    text = check.compare_on_this_gpu()
    assert f"vLLM {check.VLLM_PIN}:" in text and "92,368" in text and "rules" not in text


def test_a_later_vllm_is_predicted_with_the_pinned_rules_and_says_so(monkeypatch):
    log = "INFO GPU KV cache size: 92,368 tokens\n"
    opted_in(monkeypatch, pip=pip_says(0), serve=(log, "ready"))
    monkeypatch.setattr(check.importlib.metadata, "version", lambda name: "9.1.0")
    assert f"vLLM 9.1.0 (predicted with {check.VLLM_PIN}'s rules)" in check.compare_on_this_gpu()


# -- the reader itself, on real child processes ----------------------------------------------

def child(code):
    return [__import__("sys").executable, "-c", code]


def test_the_reader_stops_at_the_concurrency_line():
    text, outcome = check._serve_log(child(
        "import time\nprint('a', flush=True)\nprint('Maximum concurrency for 8 tokens per request: 2.00x', flush=True)\n"
        "time.sleep(60)"), 30)
    assert outcome == "ready" and text.endswith("2.00x\n")


def test_the_reader_reports_an_exit_with_its_status():
    text, outcome = check._serve_log(child("print('boom', flush=True); raise SystemExit(3)"), 30)
    assert outcome == "exited with status 3" and check._last_line(text, "") == "boom"


def test_the_deadline_holds_while_the_server_prints_nothing():
    start = __import__("time").monotonic()
    text, outcome = check._serve_log(child("import time\nprint('loading', flush=True)\ntime.sleep(60)"), 2)
    assert outcome == "timed out" and text == "loading\n"
    assert __import__("time").monotonic() - start < 20


def test_a_server_that_cannot_start_is_one_line():
    text, outcome = check._serve_log(["/nonexistent/vllm-binary"], 5)
    assert outcome.startswith("could not be started") and text
