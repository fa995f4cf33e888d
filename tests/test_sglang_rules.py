"""SGLang's rules read nvidia-smi's memory.total, which differs from what CUDA reports."""

import pytest

from inferbook import sglang_rules
from inferbook.hardware import gpu


def test_nvidia_smi_total_is_more_than_cuda_reports():
    # H100 80GB HBM3: nvidia-smi prints 81559 MiB; CUDA reports 79.18 GiB (81080 MiB)
    smi = sglang_rules.nvidia_smi_total_mib("H100")
    assert smi == 81559
    for name in sglang_rules.NVIDIA_SMI_TOTAL_MIB:
        assert sglang_rules.nvidia_smi_total_mib(name) * 2**20 > gpu(name).cuda_total_bytes


def test_nvidia_smi_total_unknown_preset_is_refused():
    with pytest.raises(ValueError, match="no published nvidia-smi"):
        sglang_rules.nvidia_smi_total_mib("B200")
    with pytest.raises(ValueError, match="unknown GPU preset"):
        sglang_rules.nvidia_smi_total_mib("H1000")


def test_fraction_from_smi_memory():
    smi = sglang_rules.nvidia_smi_total_mib("H100")
    m = sglang_rules.mem_fraction_static(smi, tp=1, chunked_prefill_size=8192,
                                         max_running_requests=1024)
    assert m.gpu_mem_mib == smi
    assert m.mem_fraction_static == round((smi - m.reserved_mib) / smi, 3)


def test_attention_dp_graph_reserve_is_per_worker():
    """With attention DP, SGLang reserves 3 MiB per decode-graph batch size per worker (4.5
    above 300), memory_hook.py:357-399; the plain 2 MiB per batch size stays."""
    smi = sglang_rules.nvidia_smi_total_mib("H100")
    one = sglang_rules.mem_fraction_static(smi, tp=8, chunked_prefill_size=8192,
                                           max_running_requests=256)
    dp = sglang_rules.mem_fraction_static(smi, tp=8, chunked_prefill_size=8192,
                                          max_running_requests=256, attn_dp_size=8)
    assert dp.graph_mib - one.graph_mib == 256 * 8 * 3
    big = sglang_rules.mem_fraction_static(smi, tp=8, chunked_prefill_size=8192,
                                           max_running_requests=400, attn_dp_size=8)
    big1 = sglang_rules.mem_fraction_static(smi, tp=8, chunked_prefill_size=8192,
                                            max_running_requests=400)
    assert big.graph_mib - big1.graph_mib == 400 * 8 * 4.5


def test_max_running_requests_is_global_under_attention_dp():
    """SGLang divides --max-running-requests by --attn-dp-size (kv_cache_configurator.py:
    `requested_per_worker = max(1, max_num_reqs // self.attn_dp_size)`): a DP-attention plan
    emits the per-worker count times the workers, each worker's share fits its own pool, and
    the fraction is SGLang's own for the emitted global cap and attn_dp_size."""
    from inferbook.models import model
    from inferbook.recommend import Workload, recommend
    quotes = {r["quote"] for r in sglang_rules.rules_data()["rules"]}
    assert "requested_per_worker = max(1, max_num_reqs // self.attn_dp_size)" in quotes
    seen = 0
    for g in ("16xH100", "8xH200", "8xH100"):
        p = recommend("DeepSeek-V3", g, Workload("chat"))
        if not p.ok or p.expert_parallel == 1 or not p.sglang_argv:
            continue
        seen += 1
        argv = list(p.sglang_argv)
        dp = int(argv[argv.index("--attn-dp-size") + 1])
        running = int(argv[argv.index("--max-running-requests") + 1])
        assert dp == p.expert_parallel and running % dp == 0
        per_worker = max(1, running // dp)
        assert per_worker == p.sglang.extra["per_worker"] >= 1
        lay = p.decision("parallelism").value["layout"]
        mem = sglang_rules.mem_fraction_static(
            lay.budget.gpu_bytes / sglang_rules.MiB, tp=dp, chunked_prefill_size=int(
                argv[argv.index("--chunked-prefill-size") + 1]),
            max_running_requests=running, mla=True, attn_dp_size=dp)
        assert f"{mem.mem_fraction_static:.3f}" == argv[argv.index("--mem-fraction-static") + 1]
        pool = mem.static_bytes - p.memory.weight_bytes
        per_request = lay.kv_bytes(model("DeepSeek-V3"), p.workload.sizing_tokens)
        assert per_worker * per_request <= pool
        # the next cap up no longer fits: the plan takes the largest the rules allow
        if per_worker < p.max_num_seqs:
            more = sglang_rules.mem_fraction_static(
                mem.gpu_mem_mib, tp=dp, chunked_prefill_size=mem.chunked_prefill_size,
                max_running_requests=running + dp, mla=True, attn_dp_size=dp)
            assert (per_worker + 1) * per_request > more.static_bytes - p.memory.weight_bytes
        assert "is global" in p.sglang.reason
    assert seen >= 2


def test_tensor_parallel_alternative_names_no_attention_dp_flag():
    from inferbook.recommend import Workload, recommend
    p = recommend("DeepSeek-V3", "8xH200", Workload("chat"))
    alts = dict(p.alternatives)
    assert p.expert_parallel > 1 and "--tp-size" in alts["tensor parallel"].reason
    assert "dp-attention" not in alts["tensor parallel"].reason
    assert "attn-dp" not in alts["tensor parallel"].reason
