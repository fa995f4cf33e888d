"""SHA-256 of each exercise's check data (inferbook/data/exercise_<name>.json), written by
tools/make_exercises.py; the grader refuses a copy whose hash differs."""

EXERCISE_SHA256 = {
    "ex01_naive_vs_cached": "d85782c403c527c1de0333bf6f4449e8fb4f6d7653f409d6844841c55bf046b6",
    "ex02_kv_sizing": "00a4a5ecaf41a21a203188b2ef1e5e364a6f077479fadb95d5ac87e4a26975b4",
    "ex03_online_softmax": "de1fbf226516c2e94b24868ea99cd9e97c551e2e2d8ef5d098b92639faf64690",
    "ex04_triton_kernel": "99cbc02db346c0c6c92807247035006edd3adfafc07bc58b991891cdec50c4da",
    "ex05a_prefix_caching": "5ac92c776e5a1faba3ab457477269afe5d51f30a7e413a996d88061869407b68",
    "ex05b_paged_attention": "b7d860c547a0238849d0691a558145c5708db8546f1b04051a82c915a7818812",
    "ex06_scheduler": "414707c8501449be3a9c7979b721fa397f8234bdd32361d6209d870453b7e572",
    "ex07_acceptance": "fb62d3afd0ad88772b8e84092d7f3d6556412d5e927140e0fb124909499d1901",
    "ex08_plan_deployment": "e74ae11102d2c83b0a3115c8672159227f8d0a0d0ff12b15d93e3e2491a974a1",
    "ex09_find_the_knee": "09d5c45c2e6e71fb1ab988c3774f01f16f384a5b55377c51332a43c2e86e798b",
}
