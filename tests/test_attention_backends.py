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
    assert names((9, 0)) == ["FlashAttention-2", "FlashAttention-3"]
    assert names((10, 0)) == ["FlashAttention-2", "FlashAttention-4"]
    with pytest.raises(ValueError, match="compute_capability"):
        ab.flash_versions_for((3, 5))
