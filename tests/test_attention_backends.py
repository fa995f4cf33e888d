"""The FlashAttention-versions table imports without Triton and picks versions by GPU."""

import subprocess
import sys

import pytest

from inferbook import attention_backends as ab
from paths import ROOT


def test_imports_without_triton_or_torch():
    code = ("import sys; import inferbook.attention_backends; "
            "assert 'triton' not in sys.modules and 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_versions_table_is_cited_ordered_and_picks_by_gpu():
    bib = (ROOT / "book/references.bib").read_text()
    years = [v.year for v in ab.FLASH_ATTENTION_VERSIONS]
    assert years == sorted(years) and len(years) == 4
    for v in ab.FLASH_ATTENTION_VERSIONS:
        assert "{" + v.cite + "," in bib, f"{v.name}: bib key {v.cite} missing"

    def names(cc):
        return [v.name for v in ab.flash_versions_for(cc)]

    assert names((7, 5)) == ["FlashAttention"]
    assert names((8, 0)) == ["FlashAttention", "FlashAttention-2"]
    # FA4's CuTe-DSL kernels run on Hopper as well as Blackwell (flash_attn/cute/README.md)
    assert names((9, 0)) == ["FlashAttention-2", "FlashAttention-3", "FlashAttention-4"]
    assert names((10, 0)) == ["FlashAttention-2", "FlashAttention-4"]
    assert names((12, 0)) == ["FlashAttention-2"]
    with pytest.raises(ValueError, match="compute_capability"):
        ab.flash_versions_for((3, 5))


@pytest.mark.parametrize("cc, mla, kv, backend, fa", [
    ((7, 5), False, "fp16", "TRITON_ATTN", None),
    ((8, 0), False, "bf16", "FLASH_ATTN", 2),
    ((8, 0), False, "fp8", "FLASHINFER", None),     # FA2 refuses fp8, FlashInfer takes it
    ((8, 9), False, "fp8", "FLASHINFER", None),
    ((9, 0), False, "bf16", "FLASH_ATTN", 3),
    ((9, 0), False, "fp8", "FLASH_ATTN", 3),        # FA3 reads fp8 on sm90
    ((10, 0), False, "bf16", "FLASHINFER", None),
    ((9, 0), True, "bf16", "FLASH_ATTN_MLA", None),
    ((9, 0), True, "fp8", "FLASHMLA", None),
    ((10, 0), True, "bf16", "FLASHINFER_MLA", None),
    ((8, 0), True, "bf16", "TRITON_MLA", None),
    ((8, 9), True, "fp8", "TRITON_MLA", None),      # Triton MLA reads fp8 from sm89
])
def test_vllm_backend_choice(cc, mla, kv, backend, fa):
    b = ab.vllm_backend(cc, mla=mla, head_dim=128, kv_dtype=kv)
    assert (b.name, b.flash_attention_version) == (backend, fa)


def test_fp8_kv_below_sm80_and_head_dim_upgrade():
    with pytest.raises(ValueError, match="fp8"):
        ab.vllm_backend((7, 5), mla=False, head_dim=128, kv_dtype="fp8")
    assert ab.vllm_backend((9, 0), mla=False, head_dim=512, kv_dtype="bf16").flash_attention_version == 4


def test_mla_fp8_kv_from_sm89_only():
    """vLLM 0.33.0 v1/attention/backends/mla/triton_mla.py: fp8 KV "requires SM89+"."""
    assert ab.fp8_kv_backend((8, 9), mla=True, head_dim=192) == "TRITON_MLA"
    assert ab.fp8_kv_backend((8, 6), mla=True, head_dim=192) is None
    assert ab.fp8_kv_backend((8, 0), mla=True, head_dim=192) is None
    with pytest.raises(ValueError, match="fp8"):
        ab.vllm_backend((8, 0), mla=True, head_dim=192, kv_dtype="fp8")
