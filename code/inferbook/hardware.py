"""GPU presets: memory, bandwidth, peak tensor throughput and compute capability, each cited.

Numbers are the vendor's datasheet figures for dense (non-sparse) FP16/BF16 tensor-core math
with FP32 accumulation. `cite` is the key of the source in `book/references.bib`.
Where a vendor publishes no figure, the field is `None` rather than a guess.

Memory capacity (`hbm_bytes`) is the datasheet's "GB" read as 10**9 bytes. NVIDIA's capacities
are really binary: CUDA reports more than the decimal reading (an A100 80GB PCIe shows 81,049 MiB
= 85.0e9 bytes total, an A100-SXM4-40GB 42,298,834,944 bytes), so sizing with `hbm_bytes`
is conservative by up to 7 %; the sizing module's reserve fraction is on top of that.

Checked against the datasheets (numbers per GPU, dense, no sparsity):
T4 16 GB GDDR6, 320 GB/s, 65 TFLOPS FP16 mixed precision; L4 24 GB, 300 GB/s, 121 TFLOPS
(242 with sparsity); A10G 24 GB, 600 GB/s (AWS publishes no tensor peak); RTX 4090 24 GB GDDR6X,
1008 GB/s, 165.2 TFLOPS FP16 with FP32 accumulate (Ada whitepaper); A100 40GB 1555 GB/s, A100 80GB
SXM 2039 GB/s, 312 TFLOPS; H100 SXM 80 GB, 3.35 TB/s, 989 TFLOPS; H200 141 GB, 4.8 TB/s,
989 TFLOPS; B200 (HGX/DGX B200, 1,000 W) 8 TB/s, 2.25 PFLOPS. B200 memory: the launch figure was
192 GB of HBM3e per GPU, but the DGX B200 datasheet lists 1,440 GB for eight GPUs, 180 GB each,
which is what a deployment sees, so the preset uses 180 GB.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class GPU:
    """One accelerator. Units are in the field names."""

    name: str
    hbm_bytes: int                    # device memory ("HBM" for short, GDDR on T4/L4/A10G/4090)
    hbm_bytes_per_s: float            # peak device-memory bandwidth
    fp16_tensor_flops: float | None   # dense FP16/BF16 tensor-core peak, FLOP/s
    compute_capability: tuple[int, int]
    num_sms: int | None
    smem_bytes_per_sm: int | None     # max shared memory ("SRAM") one SM can give its blocks
    cite: str
    # Largest shared memory one thread block may use (opt-in maximum; 1 KiB less than per SM on
    # sm80+ because the runtime keeps 1 KiB per block). CUDA C Programming Guide, "Technical
    # Specifications per Compute Capability".
    smem_bytes_per_block: int | None = None
    # GPU-to-GPU bandwidth per GPU, both directions together, as datasheets state it:
    # NVLink where the part has it (None otherwise), and the host PCIe link.
    nvlink_bytes_per_s: float | None = None
    pcie_bytes_per_s: float | None = None

    @property
    def ridge_flops_per_byte(self) -> float:
        """Return the arithmetic intensity (FLOP/byte) above which a kernel is compute-bound."""
        if self.fp16_tensor_flops is None:
            raise ValueError(f"{self.name}: no published FP16 tensor peak, so no roofline ridge")
        return self.fp16_tensor_flops / self.hbm_bytes_per_s

    @property
    def sm_arch(self) -> str:
        """Return the architecture tag, e.g. 'sm80'."""
        major, minor = self.compute_capability
        return f"sm{major}{minor}"


GB = 10**9
TB = 10**12
KiB = 1024

GPUS: dict[str, GPU] = {
    g.name: g
    for g in [
        GPU("T4", 16 * GB, 320 * GB, 65e12, (7, 5), 40, 64 * KiB, "nvidia_t4",
            smem_bytes_per_block=64 * KiB, nvlink_bytes_per_s=None, pcie_bytes_per_s=32 * GB),
        GPU("L4", 24 * GB, 300 * GB, 121e12, (8, 9), 58, 100 * KiB, "nvidia_l4",
            smem_bytes_per_block=99 * KiB, nvlink_bytes_per_s=None, pcie_bytes_per_s=64 * GB),
        GPU("A10G", 24 * GB, 600 * GB, None, (8, 6), 80, 100 * KiB, "aws_g5",
            smem_bytes_per_block=99 * KiB, nvlink_bytes_per_s=None, pcie_bytes_per_s=64 * GB),
        GPU("RTX 4090", 24 * GB, 1008 * GB, 165.2e12, (8, 9), 128, 100 * KiB, "nvidia_ada",
            smem_bytes_per_block=99 * KiB, nvlink_bytes_per_s=None, pcie_bytes_per_s=64 * GB),
        GPU("A100 40GB", 40 * GB, 1555 * GB, 312e12, (8, 0), 108, 164 * KiB, "nvidia_a100",
            smem_bytes_per_block=163 * KiB, nvlink_bytes_per_s=600 * GB, pcie_bytes_per_s=64 * GB),
        GPU("A100 80GB", 80 * GB, 2039 * GB,  # SXM; the PCIe card has 1935 GB/s
            312e12, (8, 0), 108, 164 * KiB, "nvidia_a100",
            smem_bytes_per_block=163 * KiB, nvlink_bytes_per_s=600 * GB, pcie_bytes_per_s=64 * GB),
        GPU("H100 SXM", 80 * GB, 3.35 * TB, 989e12, (9, 0), 132, 228 * KiB, "nvidia_h100",
            smem_bytes_per_block=227 * KiB, nvlink_bytes_per_s=900 * GB, pcie_bytes_per_s=128 * GB),
        GPU("H200", 141 * GB, 4.8 * TB, 989e12, (9, 0), 132, 228 * KiB, "nvidia_h200",
            smem_bytes_per_block=227 * KiB, nvlink_bytes_per_s=900 * GB, pcie_bytes_per_s=128 * GB),
        GPU("B200", 180 * GB, 8.0 * TB, 2250e12, (10, 0), None, 228 * KiB, "nvidia_b200",
            smem_bytes_per_block=227 * KiB, nvlink_bytes_per_s=1800 * GB, pcie_bytes_per_s=128 * GB),
    ]
}


# Other names for the presets: the short names people type and what `nvidia-smi` /
# `torch.cuda.get_device_name()` report. Keys are normalised (see `_norm`).
GPU_ALIASES: dict[str, str] = {
    "h100": "H100 SXM", "h100sxm5": "H100 SXM", "h10080gbhbm3": "H100 SXM",
    "a100": "A100 80GB", "a100sxm480gb": "A100 80GB", "a100sxm440gb": "A100 40GB",
    "4090": "RTX 4090", "geforcertx4090": "RTX 4090",
    "teslat4": "T4", "b200": "B200", "h200": "H200",
}


def _norm(name: str) -> str:
    """Lower-case, drop spaces, hyphens, underscores and a leading "nvidia"."""
    key = re.sub(r"[\s_\-]+", "", name.lower())
    return key[len("nvidia"):] if key.startswith("nvidia") and len(key) > 6 else key


def gpu(name: str | GPU) -> GPU:
    """Return the preset called `name`: case-insensitive, spaces/hyphens ignored, with the
    aliases in `GPU_ALIASES` ("H100" is the "H100 SXM" preset). ValueError lists the known ones."""
    if isinstance(name, GPU):
        return name
    if not isinstance(name, str):
        raise TypeError(f"GPU name must be a str or a GPU, got {type(name).__name__}")
    key = _norm(name)
    key = _norm(GPU_ALIASES.get(key, key))
    for preset_name, value in GPUS.items():
        if _norm(preset_name) == key:
            return value
    raise ValueError(f"unknown GPU preset {name!r}; known presets: {', '.join(GPUS)} "
                     f"(aliases: {', '.join(sorted({'H100', 'A100', '4090'}))})")
