"""GPU presets: memory, bandwidth, peak tensor throughput, exponential (special-function unit)
throughput and compute capability, each cited.

Numbers are the vendor's datasheet figures for dense (non-sparse) FP16/BF16 tensor-core math
with FP32 accumulation. `cite` is the key of the source in `book/references.bib`.
Where a vendor publishes no figure, the field is `None` rather than a guess.

Two memory figures per GPU:

* `hbm_bytes`: the datasheet's "GB" read as 10**9 bytes, the marketing number, for prose only
  (also `marketing_bytes`).
* `cuda_total_bytes`: the total `torch.cuda.mem_get_info()` reports on that GPU, which is the
  figure vLLM multiplies by `gpu_memory_utilization` (`vllm/v1/worker/utils.py::request_memory`
  in vLLM 0.33.0: ``ceil(init_snapshot.total_memory * gpu_memory_utilization)``). It is what
  every budget in `inferbook.sizing` and both calculators use (`memory_bytes` reads it). NVIDIA's
  capacities are binary gibibytes less what the driver keeps, so the reported total differs from
  the datasheet in both directions (an H100 80GB reports about 79.2 GiB = 85.0e9 bytes, more
  than 80e9; a T4 "16 GB" reports 14.58 GiB = 15.7e9, less than 16e9). Each value is the GiB
  figure a public log printed (vLLM's "total_gpu_memory (x GiB)" / "Free memory on device
  (free/total GiB)" or PyTorch's "GPU 0 has a total capacity of x GiB"), read as x * 2**30 and
  rounded to whole MiB; the comment beside it names the log. Logs print two decimals, so each
  value is known to about +-5 MiB, and driver versions move it by a few tens of MiB.

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
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class GPU:
    """One accelerator. Units are in the field names."""

    name: str
    hbm_bytes: int                    # datasheet capacity, 10**9 x "GB" (marketing; for prose)
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
    # Total device memory CUDA reports (torch.cuda.mem_get_info()[1]); see the module docstring.
    # 0 means "not given" and falls back to hbm_bytes (only for hand-made GPU objects).
    cuda_total_bytes: int = 0
    cuda_total_source: str = ""
    # Exponentials per second of the special-function units (MUFU.EX2, one 2^x per lane and
    # instruction), the third ceiling beside the tensor-core peak and the bandwidth; None where
    # no public figure or derivation exists. `EXP_PER_S` below says where each comes from.
    exp_per_s: float | None = None
    exp_source: str = ""

    def __post_init__(self) -> None:
        for field in ("hbm_bytes", "cuda_total_bytes"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0 \
                    or (field == "hbm_bytes" and value == 0):
                raise ValueError(f"GPU {self.name!r}: {field} must be a positive integer number "
                                 f"of bytes, got {value!r}")
        exp = self.exp_per_s
        if exp is not None and (isinstance(exp, bool) or not isinstance(exp, (int, float))
                                or not 0 < exp < float("inf")):
            raise ValueError(f"GPU {self.name!r}: exp_per_s must be a positive finite number of "
                             f"exponentials per second or None, got {exp!r}")

    @property
    def memory_bytes(self) -> int:
        """Return the total memory CUDA reports (what vLLM's gpu_memory_utilization multiplies);
        every budget uses this figure."""
        return self.cuda_total_bytes or self.hbm_bytes

    @property
    def marketing_bytes(self) -> int:
        """Return the datasheet capacity (10**9 x "GB"), for prose."""
        return self.hbm_bytes

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
MiB = 2**20


def _gib(x: float) -> int:
    """Return x GiB (as a log prints it, two decimals) in bytes, rounded to whole MiB."""
    return round(x * 1024) * MiB


# Total memory CUDA reports, with the public log each value is read from.
CUDA_TOTAL = {
    # PyTorch OOM on 4x Tesla T4: "GPU 0 has a total capacty of 14.58 GiB"
    # https://github.com/datawhalechina/self-llm/issues/162
    "T4": (_gib(14.58), "https://github.com/datawhalechina/self-llm/issues/162"),
    # No public log found for the L4: 22.03 GiB is nvidia-smi's 23,034 MiB less the ~480 MiB the
    # driver keeps on the same-generation 24 GB cards (an estimate, marked as such).
    "L4": (_gib(22.03), "estimate: nvidia-smi 23,034 MiB less the driver reservation"),
    # PyTorch OOM on a 24 GB A10 (GA102, the A10G's board): "total capacity of 22.18 GiB"
    # https://github.com/OpenBMB/MiniCPM-V/issues/640
    "A10G": (_gib(22.18), "https://github.com/OpenBMB/MiniCPM-V/issues/640 (A10, same board)"),
    # PyTorch OOM on an RTX 4090: "23.68 GiB total capacity"
    # https://github.com/zai-org/CogVideo/issues/36
    "RTX 4090": (_gib(23.68), "https://github.com/zai-org/CogVideo/issues/36"),
    # vLLM on 4x A100 40GB: "total_gpu_memory (39.38GiB)"
    # https://github.com/vllm-project/vllm/issues/16570
    "A100 40GB": (_gib(39.38), "https://github.com/vllm-project/vllm/issues/16570"),
    # vLLM logs on A100 80GB: "total_gpu_memory (79.15GiB) x gpu_memory_utilization (0.90)"
    # (committed vLLM start-up logs found with the code search; 81,049 MiB = 79.15 GiB)
    "A100 80GB": (_gib(79.15), "vLLM log 'total_gpu_memory (79.15GiB)', A100 80GB"),
    # vLLM on H100 80GB HBM3: "Free memory on device (78.57/79.18 GiB) on startup"
    # (vLLM PR #10511 prints 79.22 GiB on another driver)
    "H100 SXM": (_gib(79.18), "vLLM log 'Free memory on device (78.57/79.18 GiB)', H100; "
                             "https://github.com/vllm-project/vllm/pull/10511 shows 79.22"),
    # PyTorch on an NVIDIA H200: "GPU 0 has a total capacity of 139.81 GiB" (the same total
    # vLLM prints as "total_gpu_memory (139.81GiB)" in committed start-up logs)
    # https://github.com/sungwon-chae/arxiv_confi (etu_logging.md)
    "H200": (_gib(139.81), "PyTorch OOM message 'total capacity of 139.81 GiB', H200; "
                           "https://github.com/sungwon-chae/arxiv_confi"),
    # cudaGetDeviceProperties on a B200: "Total Global Memory: 178.35 GB" (GiB)
    # https://github.com/pytorch/ao/pull/4002
    "B200": (_gib(178.35), "https://github.com/pytorch/ao/pull/4002"),
    # vLLM on 2x L40S: "total_gpu_memory (44.42GiB)"
    # https://github.com/vllm-project/vllm/issues/15815
    "L40S": (_gib(44.42), "https://github.com/vllm-project/vllm/issues/15815"),
    # vLLM on RTX 3090: "total_gpu_memory=23.58GiB"
    # https://github.com/vllm-project/vllm/issues/10517
    "RTX 3090": (_gib(23.58), "https://github.com/vllm-project/vllm/issues/10517"),
}

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
        # L40S: 48 GB GDDR6, 864 GB/s, 362 TFLOPS FP16 tensor dense (733 with sparsity)
        GPU("L40S", 48 * GB, 864 * GB, 362e12, (8, 9), 142, 100 * KiB, "nvidia_l40s",
            smem_bytes_per_block=99 * KiB, nvlink_bytes_per_s=None, pcie_bytes_per_s=64 * GB),
    ]
}


# Exponential (special-function unit) throughput per GPU, exp2 per second. The CUDA C++
# Programming Guide's table "Throughput of Native Arithmetic Instructions" gives 16 results per
# clock per SM for exp2f/rsqrt/log2 on compute capability 7.x, 8.x and 9.0, and the
# FlashAttention-4 paper the same 16 ops/clock/SM for Blackwell's MUFU beside 8192 dense
# FP16/BF16 tensor-core ops/clock/SM. Where a paper quotes the figure it is used as quoted;
# otherwise it is derived (and marked so) as SMs x 16 x the datasheet's boost clock, or as the
# tensor peak x 16 / (tensor ops per clock per SM) where the SM count is not on record.
SFU_EXP2_PER_CLOCK_PER_SM = 16
EXP_PER_S: dict[str, tuple[float, str]] = {
    "T4": (40 * 16 * 1.59e9, "derived: 40 SMs x 16/clock x 1590 MHz boost (T4 datasheet); "
                             "CUDA C++ Programming Guide, arithmetic instruction throughput"),
    "L4": (58 * 16 * 2.04e9, "derived: 58 SMs x 16/clock x 2040 MHz boost (L4 datasheet); "
                             "CUDA C++ Programming Guide, arithmetic instruction throughput"),
    "RTX 4090": (128 * 16 * 2.52e9, "derived: 128 SMs x 16/clock x 2520 MHz boost (Ada "
                                    "whitepaper); CUDA C++ Programming Guide"),
    "A100 40GB": (108 * 16 * 1.41e9, "derived: 108 SMs x 16/clock x 1410 MHz boost (A100 "
                                     "datasheet); CUDA C++ Programming Guide"),
    "A100 80GB": (108 * 16 * 1.41e9, "derived: 108 SMs x 16/clock x 1410 MHz boost (A100 "
                                     "datasheet); CUDA C++ Programming Guide"),
    "H100 SXM": (3.9e12, "quoted: FlashAttention-3 paper, 'the H100 SXM5 GPU has 989 TFLOPS of "
                         "FP16 matmul but only 3.9 TFLOPS of special functions' (132 SMs x "
                         "16/clock x 1830 MHz = 3.87e12)"),
    "H200": (3.9e12, "derived: the H100 SXM's GH100 chip at the same clocks (the same 989 "
                     "TFLOPS); FlashAttention-3 paper's H100 figure"),
    "B200": (2250e12 * 16 / 8192, "derived: FlashAttention-4 paper, MUFU 16 ops/clock/SM "
                                  "against 8192 tensor ops/clock/SM, times the 2.25 PFLOPS peak"),
    "L40S": (142 * 16 * 2.52e9, "derived: 142 SMs x 16/clock x 2520 MHz boost (L40S "
                                "datasheet); CUDA C++ Programming Guide"),
    # A10G: AWS publishes neither a tensor peak nor a boost clock, so no figure.
}

GPUS = {name: replace(g, cuda_total_bytes=CUDA_TOTAL[name][0],
                        cuda_total_source=CUDA_TOTAL[name][1],
                        exp_per_s=EXP_PER_S.get(name, (None, ""))[0],
                        exp_source=EXP_PER_S.get(name, (None, ""))[1])
        for name, g in GPUS.items()}


# Other names for the presets: the short names people type and what `nvidia-smi` /
# `torch.cuda.get_device_name()` report. Keys are normalised (see `_norm`).
GPU_ALIASES: dict[str, str] = {
    "h100": "H100 SXM", "h100sxm5": "H100 SXM", "h10080gbhbm3": "H100 SXM",
    "a100": "A100 80GB", "a100sxm480gb": "A100 80GB", "a100sxm440gb": "A100 40GB",
    "4090": "RTX 4090", "geforcertx4090": "RTX 4090",
    "teslat4": "T4", "b200": "B200", "h200": "H200", "l40s": "L40S", "l40": "L40S",
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
        raise TypeError(f"name must be a GPU preset name (str) or a GPU, got {type(name).__name__}")
    key = _norm(name)
    key = _norm(GPU_ALIASES.get(key, key))
    for preset_name, value in GPUS.items():
        if _norm(preset_name) == key:
            return value
    raise ValueError(f"name: unknown GPU preset {name!r}; known presets: {', '.join(GPUS)} "
                     f"(aliases: {', '.join(sorted({'H100', 'A100', '4090'}))})")


def require_gpu(value, name: str = "gpu") -> GPU:
    """Return `value` if it is a `GPU`; TypeError otherwise. For the package's inner functions:
    a preset name is resolved once, where the reader's call comes in (`gpu(name)`), and only the
    `GPU` travels further, so a name reaching an inner function is a bug, not an input."""
    if isinstance(value, GPU):
        return value
    from .validate import ArgumentTypeError   # a TypeError (numpy only on this path)
    if isinstance(value, str):
        raise ArgumentTypeError(f"{name} must be a hardware.GPU, got the name {value!r}: resolve "
                                f"it once at the entry point, hardware.gpu({value!r})")
    raise ArgumentTypeError(f"{name} must be a hardware.GPU, got {type(value).__name__}")
