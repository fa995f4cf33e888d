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
