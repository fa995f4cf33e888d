"""How a Hugging Face checkpoint stores its weights, read from its config.json.

`checkpoint_dtype(config)` returns the storage format `inferbook.models.ModelSpec` records
(`checkpoint_dtype`): bf16 / fp16 / fp32 from `torch_dtype`, or fp8, AWQ/GPTQ 4-bit ("awq"),
int8, compressed-tensors W4A16 ("w4a16"), NVFP4 (ModelOpt or compressed-tensors),
bitsandbytes int4/int8 or MXFP4 from
`quantization_config`. An unknown method is refused naming the field (ValueError).
"""

from __future__ import annotations


def _refuse(field: str, why: str):
    raise ValueError(f"config.json: {field}: {why}; ModelSpec cannot represent it, so it is "
                     "refused rather than sized wrongly")


def checkpoint_dtype(cfg: dict) -> str:
    """Return how the checkpoint stores its weights (see ModelSpec.checkpoint_dtype)."""
    q = cfg.get("quantization_config")
    if q is None:
        torch_dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
        dtypes = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32"}
        if torch_dtype not in dtypes:
            raise ValueError(f"config.json: torch_dtype {torch_dtype!r} is not one of "
                             f"{', '.join(dtypes)}")
        return dtypes[torch_dtype]
    if not isinstance(q, dict):
        raise ValueError(f"config.json: quantization_config must be an object, got {q!r}")
    method = str(q.get("quant_method", "")).lower()
    bits = q.get("bits", q.get("w_bit"))
    if method in ("fp8", "fbgemm_fp8", "modelopt") and q.get("quant_algo", "FP8") == "FP8":
        return "fp8"
    if method in ("modelopt", "modelopt_fp4") and q.get("quant_algo") == "NVFP4":
        return "nvfp4"   # ModelOpt's NVFP4 checkpoints (Blackwell)
    if method == "mxfp4":
        return "mxfp4"
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin", "auto-round", "autoround"):
        if bits in (4, 8):
            return "awq" if bits == 4 else "int8"
        _refuse("quantization_config.bits", f"{method} with bits={bits!r} is not 4 or 8")
    if method == "compressed-tensors":
        groups = q.get("config_groups") or {}
        weights = [g.get("weights") or {} for g in groups.values() if isinstance(g, dict)]
        kinds = {(w.get("num_bits"), w.get("type")) for w in weights}
        if kinds == {(8, "float")}:
            return "fp8"
        if kinds == {(8, "int")}:
            return "int8"
        if kinds == {(4, "int")}:
            return "w4a16"
        if kinds == {(4, "float")}:
            return "nvfp4"   # compressed-tensors NVFP4 (4-bit e2m1, group 16, e4m3 scales)
        _refuse("quantization_config.config_groups", f"compressed-tensors weights {kinds!r}")
    if method == "bitsandbytes":
        if q.get("load_in_4bit"):
            return "int4"
        if q.get("load_in_8bit"):
            return "int8"
    _refuse("quantization_config.quant_method", f"unknown quantization method {method!r}")
