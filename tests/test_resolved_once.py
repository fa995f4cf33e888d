"""Issue 34, "resolved once": a GPU or a model given by name is resolved at the entry point,
never in each module. The entry points below keep accepting names (a chapter, an exercise, the
CLI or the recommender calls them with one) and resolve them once; every other function takes a
resolved `GPU` / `ModelSpec` only and refuses a name with a TypeError saying where to resolve it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from inferbook import (capacity, cost_model, hardware, models, roofline, simulate, sizing,
                       vllm_memory)
from inferbook.hardware import gpu
from inferbook.models import model

PKG = Path(__file__).resolve().parents[1] / "code" / "inferbook"

# Every function (or dataclass) whose annotations admit a name (`str | GPU`, `ModelSpec | str`),
# with why it is an entry point. Notebooks: the chapter or exercise solution that calls it with
# a string (found by tracing every chapter and solution notebook's calls, and by grep).
ENTRY_POINTS = {
    "hardware.gpu": "the GPU resolver itself (models.model / models.as_spec resolve models)",
    "sizing.kv_bytes": "chapter 2 (kv_bytes(\"Llama-3.1-8B\", ...)) and Exercise 2's solution",
    "sizing.kv_bytes_per_token": "chapters 2 and 8 (kv_bytes_per_token(\"Mistral-7B-v0.1\"))",
    "sizing.kv_bytes_per_gpu": "chapter 2 (kv_bytes_per_gpu(name, n_gpus=8, ...) over names)",
    "sizing.weight_bytes": "chapters 2 and 8 (weight_bytes(\"DeepSeek-V3\", \"fp8\"))",
    "sizing.valid_tp_degrees": "chapter 2 (valid_tp_degrees(name, 8) over preset names)",
    "sizing.fits": "chapter 2 (fits(v3, \"H200\", ...) and its calculator widget's GPU name)",
    "sizing.max_batch": "chapter 2's calculator and Exercise 2's solution (GPU names)",
    "sizing.max_context": "chapter 2's calculator widget (a GPU name from its dropdown)",
    "sizing.min_tp_degree": "chapter 2's calculator widget and its GPU grid (GPU names)",
    "sglang_rules.nvidia_smi_total_mib": "chapter 8 (nvidia_smi_total_mib(\"H100\"))",
    "cost_model.FittedGPUModel.cost_model": "chapter 9 (FIT.cost_model(spec, \"H100 SXM\"))",
    "simulate.Deployment": "chapter 9 (sim.Deployment(spec, \"H100 SXM\", ...)); resolved in "
                           "__post_init__, its fields then hold the objects",
    "capacity.decide_capacity": "chapter 9 (decide_capacity(spec, \"H100 SXM\", ...))",
    "recommend.recommend": "the planner's front door: chapter 8, the CLI and render.run_example",
    "vllm_fit.vllm_fit": "chapter 2's KV calculator widget (model and GPU names from its menus)",
    "vllm_fit.vllm_min_tp_degree": "chapter 2's KV calculator widget (names from its menus)",
    "recommend.resolve_gpus": "recommend's \"4xH100\" / (\"H100\", 4) parser",
}

# Where a resolver (hardware.gpu, models.model, models.as_spec) may be called: the entry points
# above, the resolvers themselves, and the readers of names that come from data.
RESOLVING = set(ENTRY_POINTS) | {
    "simulate.Deployment.__post_init__",     # simulate.Deployment's resolution
    "models.as_spec",                        # the model resolver (calls models.model)
    "vllm_logs._gpu_for",                    # a GPU name read from a published log record
}

NAME_ANNOTATION = re.compile(r"\bstr\b.*\b(GPU|ModelSpec)\b|\b(GPU|ModelSpec)\b.*\bstr\b")
RESOLVERS = {("hardware", "gpu"), ("models", "model"), ("models", "as_spec")}


def _modules():
    for path in sorted(PKG.glob("*.py")):
        yield path.stem, ast.parse(path.read_text())


def _functions(tree: ast.Module):
    """Yield (qualified name, node) of every function, method and class, outermost first."""
    def walk(body, prefix):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                yield prefix + node.name, node
                if isinstance(node, ast.ClassDef):
                    yield from walk(node.body, prefix + node.name + ".")
    yield from walk(tree.body, "")


def _name_annotations() -> dict[str, int]:
    """Return {module.qualname: how many annotations admit a name} over the package."""
    found: dict[str, int] = {}
    for mod, tree in _modules():
        for qual, node in _functions(tree):
            if isinstance(node, ast.ClassDef):
                anns = [n.annotation for n in node.body if isinstance(n, ast.AnnAssign)]
            else:
                a = node.args
                anns = [x.annotation for x in a.posonlyargs + a.args + a.kwonlyargs
                        + [a.vararg, a.kwarg] if x is not None and x.annotation is not None]
            n = sum(bool(NAME_ANNOTATION.search(ast.unparse(x))) for x in anns)
            if n:
                found[f"{mod}.{qual}"] = n
    return found


def test_names_are_admitted_only_by_the_entry_points():
    found = _name_annotations()
    assert set(found) == set(ENTRY_POINTS), (
        f"annotations admitting a name outside the entry points: {sorted(set(found) - set(ENTRY_POINTS))}; "
        f"entry points without one: {sorted(set(ENTRY_POINTS) - set(found))}")
    # the count the issue tracks (21 `str | GPU` and 29 `str | ModelSpec` before): one per name
    # argument of an entry point
    assert sum(found.values()) == 28, found


def _resolver_aliases(mod: str, tree: ast.Module) -> tuple[set[str], set[str]]:
    """Return (local names bound to a resolver, local names bound to hardware / models)."""
    names, modules = set(), set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            for alias in node.names:
                local = alias.asname or alias.name
                if (node.module, alias.name) in RESOLVERS:
                    names.add(local)
                if node.module is None and alias.name in ("hardware", "models"):
                    modules.add(local)
    if mod == "hardware":
        names.add("gpu")
    if mod == "models":
        names |= {"model", "as_spec"}
    return names, modules


def test_names_are_resolved_only_at_the_entry_points():
    """No function below the entry points calls hardware.gpu / models.model / models.as_spec."""
    calls = []
    for mod, tree in _modules():
        names, modules = _resolver_aliases(mod, tree)
        for qual, node in _functions(tree):
            if isinstance(node, ast.ClassDef) or f"{mod}.{qual}" in RESOLVING:
                continue
            for sub in ast.walk(node):
                if not isinstance(sub, ast.Call):
                    continue
                f = sub.func
                if (isinstance(f, ast.Name) and f.id in names) or (
                        isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                        and f.value.id in modules and f.attr in ("gpu", "model", "as_spec")):
                    calls.append(f"{mod}.{qual}:{sub.lineno}")
    # a nested function is walked with its parent too: report each call once
    assert not sorted(set(calls)), f"names resolved below the entry points: {sorted(set(calls))}"


SPEC, H100 = model("Llama-3.1-8B"), gpu("H100")
TAKE_A_MODEL = {   # inner functions: a ModelSpec, never a name
    "sizing.tp_problem": lambda s: sizing.tp_problem(s, 2),
    "sizing.weight_bytes_per_gpu": lambda s: sizing.weight_bytes_per_gpu(s, 2),
    "sizing.with_kv_heads": lambda s: sizing.with_kv_heads(s, 1),
    "sizing.sequences_that_fit": lambda s: sizing.sequences_that_fit(10**10, s, 1, 1024),
    "sizing.memory_budget": lambda s: sizing.memory_budget(s, H100),
    "vllm_memory.vllm_kv_cache": lambda s: vllm_memory.vllm_kv_cache(
        s, available_bytes=2**30, max_model_len=1024),
    "vllm_memory.vllm_runtime_memory": lambda s: vllm_memory.vllm_runtime_memory(
        s, max_num_batched_tokens=2048, max_num_seqs=256),
    "vllm_memory.vllm_memory_budget": lambda s: vllm_memory.vllm_memory_budget(
        s, H100, max_num_batched_tokens=2048, max_num_seqs=256),
    "vllm_memory.EngineLayout": lambda s: vllm_memory.EngineLayout(s, H100),
    "vllm_memory.vllm_startup": lambda s: vllm_memory.vllm_startup(s, H100, max_model_len=4096),
    "cost_model.CostModel.for_gpu": lambda s: cost_model.CostModel.for_gpu(s, H100),
    "cost_model.decode_step_time": lambda s: cost_model.decode_step_time(s, H100, 1, 4, 100),
    "simulate.kv_blocks": lambda s: simulate.kv_blocks(s, H100, 1),
    "models.param_count": lambda s: models.param_count(s),
}
TAKE_A_GPU = {     # inner functions: a GPU, never a name
    "sizing.memory_budget": lambda g: sizing.memory_budget(SPEC, g),
    "vllm_memory.vllm_memory_budget": lambda g: vllm_memory.vllm_memory_budget(
        SPEC, g, max_num_batched_tokens=2048, max_num_seqs=256),
    "vllm_memory.vllm_runtime_memory": lambda g: vllm_memory.vllm_runtime_memory(
        SPEC, max_num_batched_tokens=2048, max_num_seqs=256, gpu=g),
    "vllm_memory.EngineLayout": lambda g: vllm_memory.EngineLayout(SPEC, g),
    "vllm_memory.vllm_startup": lambda g: vllm_memory.vllm_startup(SPEC, g, max_model_len=4096),
    "vllm_memory.vllm_default_caps": lambda g: vllm_memory.vllm_default_caps(g),
    "cost_model.CostModel.for_gpu": lambda g: cost_model.CostModel.for_gpu(SPEC, g),
    "cost_model.decode_step_time": lambda g: cost_model.decode_step_time(SPEC, g, 1, 4, 100),
    "cost_model.roofline_decode_seconds": lambda g: cost_model.roofline_decode_seconds(
        SPEC, g, 1, 4, 1e9, 1e8),
    "simulate.kv_blocks": lambda g: simulate.kv_blocks(SPEC, g, 1),
    "roofline.attainable_flops": lambda g: roofline.attainable_flops(g, 10.0),
    "roofline.step_seconds": lambda g: roofline.step_seconds(g, roofline.ForwardCost(1e12, 1e9)),
}


@pytest.mark.parametrize("call", TAKE_A_MODEL.values(), ids=TAKE_A_MODEL)
def test_an_inner_function_refuses_a_model_name_and_says_where_to_resolve_it(call):
    call(SPEC)   # the resolved object: fine
    with pytest.raises(TypeError, match=r"must be a ModelSpec, got the name 'Llama-3.1-8B': "
                                        r"resolve it once at the entry point, "
                                        r"models\.model\('Llama-3.1-8B'\)"):
        call("Llama-3.1-8B")


@pytest.mark.parametrize("call", TAKE_A_GPU.values(), ids=TAKE_A_GPU)
def test_an_inner_function_refuses_a_gpu_name_and_says_where_to_resolve_it(call):
    call(H100)
    with pytest.raises(TypeError, match=r"must be a hardware\.GPU, got the name 'H100': resolve "
                                        r"it once at the entry point, hardware\.gpu\('H100'\)"):
        call("H100")


def test_the_entry_points_resolve_names_to_the_same_objects():
    assert hardware.require_gpu(H100) is H100 and models.require_spec(SPEC) is SPEC
    dep = simulate.Deployment("Llama-3.1-8B", "H100", max_num_seqs=64)
    assert dep == simulate.Deployment(SPEC, H100, max_num_seqs=64)
    assert dep.spec is SPEC and dep.gpu is gpu("H100 SXM")
    assert cost_model.FITTED.cost_model("Llama-3.1-8B", "H100") == cost_model.FITTED.cost_model(
        SPEC, H100)
    assert sizing.max_batch("Llama-3.1-8B", "H100", 1, 8192) == sizing.max_batch(SPEC, H100, 1, 8192)
    with pytest.raises(TypeError, match="config.json dict is not a ModelSpec"):
        models.require_spec({"hidden_size": 8})
    with pytest.raises(TypeError, match=r"gpu must be a hardware\.GPU, got int"):
        hardware.require_gpu(3)
    assert capacity.decide_capacity.__annotations__["gpu_name"] == "GPU | str"
