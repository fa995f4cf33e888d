"""SHA-256 of each exercise's check data (inferbook/data/exercise_<name>.json), written by
tools/make_exercises.py; the grader refuses a copy whose hash differs."""

EXERCISE_SHA256 = {
    "ex01_naive_vs_cached": "d85782c403c527c1de0333bf6f4449e8fb4f6d7653f409d6844841c55bf046b6",
    "ex02_kv_sizing": "00a4a5ecaf41a21a203188b2ef1e5e364a6f077479fadb95d5ac87e4a26975b4",
    "ex03_online_softmax": "de1fbf226516c2e94b24868ea99cd9e97c551e2e2d8ef5d098b92639faf64690",
    "ex04_triton_kernel": "f1a451e40e1ce6bc356da8d18fbec098bb5d571af43281d1c123e430bc6c3b3e",
    "ex05a_prefix_caching": "5ac92c776e5a1faba3ab457477269afe5d51f30a7e413a996d88061869407b68",
    "ex05b_paged_attention": "b7d860c547a0238849d0691a558145c5708db8546f1b04051a82c915a7818812",
    "ex06_scheduler": "414707c8501449be3a9c7979b721fa397f8234bdd32361d6209d870453b7e572",
    "ex07_acceptance": "fb62d3afd0ad88772b8e84092d7f3d6556412d5e927140e0fb124909499d1901",
    "ex08_plan_deployment": "b50fd629b0880079b6cf909cb830c2cdce15a5703a68c58b97d1ab6dabb90e2a",
    "ex09_find_the_knee": "0439836bf16c224e3a4b60533dbff9c1317e294a7be60466c40955d55cce0d5b",
}
