"""The book's engine, transformers and vLLM's own CPU engine give identical greedy tokens.

Two random-weight checkpoints saved with `save_pretrained` (GPT-2-shaped; Llama-shaped with
grouped-query attention), the same seeded workload with shared prefixes and prompts longer than
the per-step token budget, chunked prefill and prefix caching on in both engines. vLLM runs in
its own environment (`make vllm`) through `tests/vllm_ref.py`; without it this test FAILS with
one line (INFERBOOK_SKIP_VLLM=1 skips it). The workload and models are
`tests/bench/bench_vllm_engine.py`'s, which writes the JSON chapter 6 reads; this test also
checks that the committed JSON records these tokens.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent / "bench"))
import bench_vllm_engine as bench  # noqa: E402
from vllm_ref import run_vllm_script  # noqa: E402

COMMITTED = bench.OUT / "vllm_engine_tokens.json"


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    torch.set_num_threads(1)
    return bench.identity(tmp_path_factory.mktemp("vllm_models"),
                          lambda payload: run_vllm_script("engine_tokens", payload, timeout=900))


@pytest.mark.parametrize("kind", list(bench.SHAPES))
def test_vllm_transformers_and_the_book_engine_give_identical_greedy_tokens(result, kind):
    case = result["cases"][kind]
    assert case["vllm"] == case["transformers"], "vLLM and transformers disagree"
    assert case["book_engine"] == case["vllm"], "the book's engine and vLLM disagree"


@pytest.mark.parametrize("kind", list(bench.SHAPES))
def test_the_workload_exercises_chunks_prefixes_and_varied_tokens(result, kind):
    case, budget = result["cases"][kind], bench.IDENTITY["max_num_batched_tokens"]
    prompts = case["prompts"]
    assert sum(len(p) > budget for p in prompts) >= 2, "no prompt is split into chunks"
    prefix = bench.IDENTITY["shared_prefix"]
    sharing = [p for p in prompts if p[:prefix] == prompts[0][:prefix]]
    assert len(sharing) >= 3 and prefix >= 2 * bench.BLOCK_SIZE, "no full block is shared"
    # greedy tokens that vary: a wrong position, mask or head grouping would change them
    assert len({t for seq in case["vllm"] for t in seq}) > 3 * len(prompts)
    assert all(len(seq) == bench.IDENTITY["new_tokens"] for seq in case["vllm"])


def test_other_weights_give_other_tokens(result):
    """The comparison can fail: the book's engine on another seed's weights disagrees with vLLM."""
    case = result["cases"]["llama_gqa"]
    other = bench.book_model(bench.hf_model("llama_gqa", bench.SHAPES["llama_gqa"], seed=1))
    theirs = bench.book_tokens(other, case["prompts"][:4], bench.IDENTITY["new_tokens"],
                               bench.IDENTITY["max_num_seqs"], bench.IDENTITY["max_num_batched_tokens"])
    assert theirs != case["vllm"][:4]


def test_the_committed_json_records_these_tokens(result):
    """Chapter 6 reads the committed JSON: it must describe what this test just saw."""
    committed = json.loads(COMMITTED.read_text())
    fresh = bench.tokens_record(result)
    for kind, model in fresh["models"].items():
        saved = committed["models"][kind]
        assert saved["all_identical"] and model["all_identical"]
        for key in ("tokens_digest", "prompt_lengths", "identical_requests", "shape"):
            assert saved[key] == model[key], (f"{COMMITTED.name} is stale ({kind}: {key}); run "
                                              f"python tests/bench/bench_vllm_engine.py")


def test_the_throughput_json_records_both_workloads_as_measured():
    """The top-level figures are the small model's (chapter 6 reads them); "gpt2_small" is the
    issue's workload, GPT-2 small with 64 new tokens; each ratio is what its rounds give."""
    import statistics

    t = json.loads((bench.OUT / "vllm_engine_throughput.json").read_text())
    assert t["workload"]["new_tokens"] == bench.THROUGHPUT["new_tokens"] == 32
    assert "3,814,912 parameters" in t["model"]
    g = t["gpt2_small"]
    assert g["workload"] == {k: (list(v) if isinstance(v, tuple) else v) for k, v in bench.GPT2_SMALL.items()}
    assert g["workload"]["new_tokens"] == 64 and "124,439,808 parameters" in g["model"]
    for r in (t, g):
        per_round = [v / b for v, b in zip(r["cpu_seconds"]["vllm"], r["cpu_seconds"]["book_engine"])]
        assert r["book_over_vllm_per_round"] == pytest.approx(per_round)
        assert r["book_over_vllm_median"] == pytest.approx(statistics.median(per_round))
        assert r["alternated"] and len(per_round) == r["repeats"]
