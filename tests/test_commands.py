"""Every emitted command starts: the pinned engines' flags, value types and start-up validation,
SGLang's own memory fraction, fp8 only where SGLang runs it, and the CLI's error messages.

The engines' argument data (flags, choices) were read from the pinned wheels
(`data/vllm_args.json`, `data/sglang_args.json`); the validation rules `check_command` applies
quote their source lines. With `SGLANG_SRC` (or `VLLM_SRC`) pointing at the unpacked wheel,
`test_sglang_quotes_are_in_the_wheel` re-reads each quoted line at its stated line number.
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest

from inferbook import sglang_rules
from inferbook.cli import main
from inferbook.commands import DATA, check_command
from inferbook.hardware import gpu
from inferbook.models import model
from inferbook.recommend import Workload, recommend

GRID = list(itertools.product(
    ["Llama-3.1-8B", "Qwen2.5-7B", "Llama-3.1-70B", "Mixtral-8x7B", "DeepSeek-V3", "Gemma-2-9B",
     "DeepSeek-V2-Lite"],
    ["1xT4", "1xL4", "2xA100 40GB", "4xA100", "1xH100", "8xH100", "8xH200", "8xB200"],
    [Workload("chat", context_tokens=8192), Workload("batch", context_tokens=4096),
     Workload("agent", context_tokens=16384, typical_tokens=4096, shared_prefix_tokens=2000,
              concurrency=300),
     Workload("rag", context_tokens=32768, concurrency=20000)]))


def _plans():
    return [p for m, g, w in GRID if (p := recommend(m, g, w)).ok]


PLANS = _plans()


def test_grid_commands_pass_the_engines_checks():
    assert len(PLANS) > 80
    for p in PLANS:
        assert check_command(p.vllm_argv, "vllm") == [], p.vllm_command
        if p.sglang_argv:
            assert check_command(p.sglang_argv, "sglang") == [], p.sglang_command
        assert p.max_num_seqs <= p.max_num_batched_tokens
        for _, alt in p.alternatives:
            if alt.value is not None:
                assert check_command(["vllm", "serve", "m", *alt.value["vllm_flags"]],
                                     "vllm") == []
                assert check_command(["python", "-m", "sglang.launch_server",
                                      *alt.value["sglang_flags"]], "sglang") == []


@pytest.mark.parametrize("argv, engine, words", [
    (["vllm", "serve", "m", "--max-num-seqs", "4096", "--max-num-batched-tokens", "2048"],
     "vllm", "max_num_batched_tokens must be >= max_num_seqs"),
    (["vllm", "serve", "m", "--gpu-memory-utilization", "1.2"], "vllm", "(0, 1]"),
    (["vllm", "serve", "m", "--max-num-seqs", "many"], "vllm", "not an integer"),
    (["vllm", "serve", "m", "--async-scheduling", "--speculative-config",
      '{"method":"suffix"}'], "vllm", "suffix"),
    (["python", "-m", "sglang.launch_server", "--mem-fraction-static", "1.5"], "sglang",
     "(0, 1)"),
    (["python", "-m", "sglang.launch_server", "--tp-size", "4", "--ep-size", "3"], "sglang",
     "divide"),
    (["python", "-m", "sglang.launch_server", "--enable-dp-attention"], "sglang", "deprecated"),
])
def test_checker_rejects_what_the_engines_refuse(argv, engine, words):
    assert any(words in x for x in check_command(argv, engine)), check_command(argv, engine)


def test_sglang_fraction_is_sglangs_own_rule():
    # H100, TP=1, chunked prefill 8192, 1024 running requests: by hand from memory_hook.py
    mib = gpu("H100").cuda_total_bytes / 2**20
    m = sglang_rules.mem_fraction_static(mib, tp=1, chunked_prefill_size=8192,
                                         max_running_requests=1024)
    prefill_buckets = len(sglang_rules.prefill_graph_sizes(8192))
    reserved = 512 + 1.5 * 8192 + 1 / 8 * 1024 + 2 * 256 + 8 * prefill_buckets
    assert m.reserved_mib == pytest.approx(max(reserved, 10 * 1024))
    assert m.mem_fraction_static == round((mib - m.reserved_mib) / mib, 3)
    assert m.mem_fraction_static < 0.92          # not vLLM's utilization
    # a T4 (under 20 GiB): 2048-token chunks, decode graphs up to 8, no 10 GiB floor
    t4 = sglang_rules.mem_fraction_static(gpu("T4").cuda_total_bytes / 2**20, tp=1)
    assert (t4.chunked_prefill_size, t4.decode_graph_max_bs, t4.floor_applied) == (2048, 8,
                                                                                  False)
    p = recommend("Llama-3.1-8B", "1xH100", Workload("chat", context_tokens=8192))
    assert f"--mem-fraction-static {p.sglang.value.mem_fraction_static:.3f}" in p.sglang_command


def test_no_fp8_for_sglang_below_sm80():
    t4 = recommend("Qwen2.5-7B", "1xT4", Workload("chat", context_tokens=8192))
    assert t4.quantization == "fp8_per_tensor" and t4.sglang_argv == ()
    assert "sm80" in t4.sglang.reason and any("no SGLang command" in x for x in t4.warnings)
    for p in PLANS:
        if p.sglang_argv and gpu(p.gpu).compute_capability < (8, 0):
            assert "fp8" not in " ".join(p.sglang_argv)


def test_qwen_instruct_context_limit():
    short = recommend("Qwen2.5-7B", "1xH100", Workload("chat", context_tokens=32768))
    assert "--hf-overrides" not in short.vllm_argv
    long = recommend("Qwen2.5-7B", "1xH100", Workload("chat", context_tokens=65536))
    rope = json.loads(long.hf_overrides)["rope_parameters"]
    assert rope["rope_type"] == "yarn" and rope["original_max_position_embeddings"] == 32768
    assert "--json-model-override-args" in long.sglang_argv
    too_long = recommend("Qwen2.5-7B", "1xH100", Workload("chat", context_tokens=131073))
    assert not too_long.ok
    base = recommend("Qwen2.5-7B", "1xH100", Workload("batch", context_tokens=65536),
                     base_model=True)
    assert base.served_model == "Qwen/Qwen2.5-7B" and base.hf_overrides is None
    # SGLang drops the YaRN factor when original_max_position_embeddings is present
    # (srt/utils/hf_transformers/common.py:683-684): the override carries the scaled length
    sg = json.loads(long.sglang_argv[long.sglang_argv.index("--json-model-override-args") + 1])
    assert sg["max_position_embeddings"] == 65536
    assert sg["rope_parameters"]["original_max_position_embeddings"] == 32768


def test_async_scheduling_under_model_runner_v2():
    from inferbook import rules
    assert rules.decide_async_scheduling(None, 2).value is True       # V2 overlaps PP
    assert rules.max_concurrent_batches(2, True) == 3
    assert rules.decide_async_scheduling("eagle3", 1).value is True
    assert rules.decide_async_scheduling("suffix", 1).value is False  # V2 has no suffix drafting
    agent = recommend("Llama-3.1-8B", "1xH100", Workload("agent", context_tokens=8192))
    assert agent.speculation.method == "suffix" and "--async-scheduling" not in agent.vllm_argv


def test_refusals_suggest_only_what_would_work():
    r = recommend("Llama-3.1-405B", "2xA100", Workload("chat", context_tokens=8192))
    assert not r.ok
    assert not any("max-model-len" in s for s in r.suggestions)   # weights alone exceed it
    for s in r.suggestions:
        if s.startswith("at least"):
            n = int(s.split()[2].split("x")[0])
            assert recommend("Llama-3.1-405B", f"{n}xA100",
                             Workload("chat", context_tokens=8192)).ok


def test_dp_attention_alternative_for_moe_and_mla():
    from inferbook import vllm_logs
    qwen3_moe = vllm_logs.log_model("Qwen/Qwen3-30B-A3B-Instruct-2507")   # official config
    for m, g in (("DeepSeek-V3", "8xH200"), ("Mixtral-8x7B", "4xH100"), (qwen3_moe, "4xH100")):
        p = recommend(m, g, Workload("chat", context_tokens=16384, concurrency=256))
        alts = dict(p.alternatives)
        if p.expert_parallel > 1:   # DP+EP won the main ranking: TP is the alternative
            assert "--enable-expert-parallel" in p.vllm_argv and "--attn-dp-size" in p.sglang_argv
            alt = alts["tensor parallel"]
        else:
            alt = alts["dp attention + expert parallel"]
            assert "--enable-expert-parallel" in alt.value["vllm_flags"]
            assert "--attn-dp-size" in alt.value["sglang_flags"]
        assert alt.value is not None and alt.value["held"] > 0 and alt.value["tokens_per_s"] > 0


def test_cli_errors_name_the_flags(capsys):
    assert main(["--model", "Llama-3.1-8B", "--gpu", "H100", "--context", "-5"]) == 2
    err = capsys.readouterr().err
    assert "--context" in err and "context_tokens" not in err
    assert main(["--model", "Llama-3.1-8B", "--gpu", "H100", "--typical", "99999"]) == 2
    err = capsys.readouterr().err
    assert "--typical" in err and "--context" in err and "_tokens" not in err
    assert main(["--model", "Llama-3.1-8B", "--gpu", "H100", "--num-gpus", "0"]) == 2
    assert "--num-gpus" in capsys.readouterr().err
    assert main(["--model", "Llama-3.1-8B", "--gpu", "Z9"]) == 2
    assert "--gpu" in capsys.readouterr().err


def test_update_skill_with_a_missing_path_is_an_error_not_a_traceback(capsys, tmp_path):
    assert main(["--update-skill", str(tmp_path / "missing.md")]) == 2
    err = capsys.readouterr().err
    assert "--update-skill" in err and "Traceback" not in err
    other = tmp_path / "other.md"
    other.write_text("no generated blocks here\n")
    assert main(["--update-skill", str(other)]) == 2
    assert other.read_text() == "no generated blocks here\n"      # a rejected call changes nothing


@pytest.mark.skipif(not os.environ.get("SGLANG_SRC"), reason="SGLANG_SRC: the unpacked wheel")
def test_sglang_quotes_are_in_the_wheel():
    root = Path(os.environ["SGLANG_SRC"])
    for r in json.loads((DATA / "sglang_rules.json").read_text())["rules"]:
        lines = (root / r["file"]).read_text().split("\n")
        assert r["quote"] in lines[r["line"] - 1], r


@pytest.mark.skipif(not (os.environ.get("SGLANG_SRC") or os.environ.get("VLLM_SRC")),
                    reason="SGLANG_SRC / VLLM_SRC: the unpacked wheels")
def test_numeric_flag_types_match_the_wheels():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "extract_engine_rules", Path(__file__).resolve().parents[1] / "tools"
        / "extract_engine_rules.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    src = {k: Path(os.environ[k]) if os.environ.get(k) else None
           for k in ("VLLM_SRC", "SGLANG_SRC")}
    assert tool.check_types(src["VLLM_SRC"], src["SGLANG_SRC"]) == []


@pytest.mark.parametrize("bad, name", [
    (lambda: recommend("Llama-3.1-8B", "1xH100", served_model=5), "served_model"),
    (lambda: Workload("chat", fp8_kv_quality_checked="yes"), "fp8_kv_quality_checked"),
    (lambda: Workload("chat", draft_model=3), "draft_model"),
    (lambda: Workload("chat", allow_quantization=None), "allow_quantization"),
    (lambda: recommend("Llama-3.1-8B", ("H100", 2.0)), "GPU count"),
    (lambda: recommend("Llama-3.1-8B", "1xH100", gpu_memory_utilization="0.9"),
     "gpu_memory_utilization"),
])
def test_bad_input_names_the_argument(bad, name):
    with pytest.raises((TypeError, ValueError), match=name):
        bad()


@pytest.mark.parametrize("argv", [
    ["vllm", "serve", "m", "-tp", "2", "--max-num-seqs=8", "--max-num-batched-tokens", "32k"],
    ["vllm", "serve", "m", "--tensor_parallel_size", "2", "--no-async-scheduling",
     "--disable-prefix-caching", "--max-model-len", "1K"],
    ["vllm", "serve", "m", "--max-model-len=auto", "-sc", '{"method":"ngram",'
     '"num_speculative_tokens":2,"prompt_lookup_max":4}'],
    ["python", "-m", "sglang.launch_server", "--tp-size=2", "--nnodes", "2", "--node-rank", "1",
     "--dist-init-addr", "10.0.0.1:5000"],
])
def test_checker_reads_every_form_the_engines_accept(argv):
    engine = "vllm" if argv[0] == "vllm" else "sglang"
    assert check_command(argv, engine) == []


def test_checker_reads_values_as_the_engine_does():
    from inferbook.commands import read_command
    v, problems = read_command(["vllm", "serve", "m", "-tp=4", "--max-num-batched-tokens", "32k",
                                "--max-model-len", "2K", "--no-async-scheduling",
                                "--disable-prefix-caching"], "vllm")
    assert problems == []
    assert v["--tensor-parallel-size"] == 4 and v["--max-num-batched-tokens"] == 32000
    assert v["--max-model-len"] == 2048 and v["--enable-prefix-caching"] is False
    assert v["--async-scheduling"] is False


@pytest.mark.parametrize("argv, words", [
    (["vllm", "serve", "m", "--max-num-seqs=512", "--max-num-batched-tokens=256"], ">= max_num_seqs"),
    (["vllm", "serve", "m", "--gpu-memory-utilization", "nan"], "(0, 1]"),
    (["vllm", "serve", "m", "--gpu-memory-utilization=inf"], "(0, 1]"),
    (["vllm", "serve", "m", "--speculative-config", '{"method": "ngram",'], "not valid JSON"),
    (["vllm", "serve", "m", "--speculative-config",
      '{"method":"eagle3","num_speculative_tokens":3,'
      '"num_speculative_tokens_per_batch_size":[[1,4,3],[3,8,9]]}'], "row"),
    (["vllm", "serve", "m", "--speculative-config", '{"method":"ngram","num_speculative_tokens":0}'],
     "positive integer"),
    (["vllm", "serve", "m", "--enable-prefix-caching=yes"], "takes no value"),
    (["vllm", "serve", "m", "-tp", "3", "--nnodes", "2"], "evenly divide"),
    (["python", "-m", "sglang.launch_server", "--nnodes", "2"], "--dist-init-addr"),
])
def test_checker_refuses_what_the_engines_refuse_in_every_form(argv, words):
    engine = "vllm" if argv[0] == "vllm" else "sglang"
    problems = check_command(argv, engine)
    assert any(words in x for x in problems), problems


def test_every_plan_names_parsers_from_the_registries():
    from inferbook import checkpoints
    sflags = commands_index("sglang")
    for _, found in checkpoints.FAMILY_PARSERS:
        for name in (found.sglang_tool,):
            assert name is None or name in sflags["--tool-call-parser"]["choices"]
        for name in (found.sglang_reasoning,):
            assert name is None or name in sflags["--reasoning-parser"]["choices"]
    agent = recommend("Llama-3.1-8B", "1xH100", Workload("agent"))
    assert agent.parsers.vllm_tool == "llama3_json"
    assert "--enable-auto-tool-choice" in agent.vllm_argv and "--tool-call-parser" in agent.sglang_argv
    chat = recommend("Llama-3.1-8B", "1xH100", Workload("chat"))
    assert chat.parsers is None and "--tool-call-parser" not in chat.vllm_argv


def commands_index(engine):
    from inferbook.commands import engine_args
    return {n: f for f in engine_args(engine)["flags"] for n in f.get("names", [])}


def test_sglang_running_requests_never_exceed_its_pool():
    """SGLang sizes its decode CUDA graphs and request slots from --max-running-requests: the
    plan caps it at what SGLang's own KV pool (static memory - weights) holds."""
    for m, g, ctx in (("Llama-3.1-70B", "4xH100", 32768), ("Llama-3.1-8B", "1xL4", 8192),
                      ("Qwen2.5-14B", "2xA100", 8192), ("DeepSeek-V3", "8xH200", 8192)):
        p = recommend(m, g, Workload("chat", context_tokens=ctx))
        if not p.sglang_argv:
            continue
        argv = list(p.sglang_argv)
        running = int(argv[argv.index("--max-running-requests") + 1])
        # a global cap: each attention-DP worker gets running // attn_dp_size
        dp = int(argv[argv.index("--attn-dp-size") + 1]) if "--attn-dp-size" in argv else 1
        lay = p.decision("parallelism").value["layout"]
        pool = p.sglang.value.static_bytes - p.memory.weight_bytes
        per_worker = running // dp
        assert 1 <= per_worker <= max(1, pool // lay.kv_bytes(model(m), p.workload.sizing_tokens))
        assert per_worker <= p.max_num_seqs


def test_cli_plans_from_a_config_file(tmp_path, capsys):
    from inferbook.cli import main
    from inferbook import vllm_logs
    cfg = vllm_logs.model_configs()["openai/gpt-oss-20b"]["config"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert main(["--config", str(tmp_path), "--model", "openai/gpt-oss-20b", "--gpu", "2xH100",
                 "--workload", "agent"]) == 0
    out = capsys.readouterr().out
    assert "vllm serve openai/gpt-oss-20b" in out and "--tool-call-parser openai" in out
    assert main(["--config", str(tmp_path / "nope.json"), "--gpu", "H100"]) == 2
    assert "--config" in capsys.readouterr().err
    assert main(["--model", "Llama-3.1-8B", "--gpu", "4xH100", "--num-gpus", "2"]) == 2
    assert "--gpu '4xH100' already gives a count" in capsys.readouterr().err


def test_sglang_attention_backend_is_sglangs_default():
    """SGLang 0.5.23 get_default_attn_backend (srt/arg_groups/model_override_base.py:277-335):
    FlashInfer (a dependency of the wheel) below Hopper, sm75 included; fa3 on Hopper;
    trtllm_mha on sm100; MLA: triton below Hopper, FlashInfer on Blackwell. The skill file's
    backend table says the same."""
    want = {("Qwen2.5-7B", "T4"): "flashinfer", ("Qwen2.5-7B", "A100"): "flashinfer",
            ("Qwen2.5-7B", "H100"): "fa3", ("Qwen2.5-7B", "B200"): "trtllm_mha",
            ("DeepSeek-V2-Lite", "A100"): "triton", ("DeepSeek-V2-Lite", "B200"): "flashinfer"}
    from inferbook import rules
    for (m, g), backend in want.items():
        d = rules.decide_attention_backend(model(m), gpu(g), "bf16")
        assert d.value["sglang"] == backend, (m, g)
    skill = (Path(__file__).resolve().parent.parent / "outputs"
             / "skill-inference-optimizer.md").read_text()
    row = next(x for x in skill.splitlines() if x.startswith("| sm75 (T4)"))
    assert "`flashinfer`" in row


def test_a_public_eagle3_head_is_named_where_one_exists():
    from inferbook import checkpoints
    p = recommend("Llama-3.1-8B", "1xH100", Workload("chat"))
    assert p.speculation is None
    head = checkpoints.EAGLE3_HEADS["meta-llama/Llama-3.1-8B-Instruct"]
    assert head in p.decision("speculative decoding").reason
