"""Chapter 8's GPU cell: it skips with one line here, and reads real start-up logs right."""

from dataclasses import replace

import pytest
from inferbook import recommend, vllm_logs
from inferbook import vllm_gpu_check as check
from inferbook.hardware import GPUS


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
