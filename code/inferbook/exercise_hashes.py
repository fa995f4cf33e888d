"""SHA-256 of each exercise's check data (inferbook/data/exercise_<name>.json), written by
tools/make_exercises.py; the grader refuses a copy whose hash differs."""

EXERCISE_SHA256 = {
    "ex01_naive_vs_cached": "7d63717fe4dcbac2edd44189d51830e863c5bd3e8b3eee07f9b04cd32a161c2a",
    "ex02_kv_sizing": "18592a529631ac8f191d218d03737016e94877ee6bfe99f6dff6ddb732a8d9fd",
    "ex03_online_softmax": "29000891f0d47ca1c534df6657d2536f9b373d5d7a9c5344d5fa52daa430ae4c",
    "ex04_triton_kernel": "2e3a904cddac492befad8825ca5c9729dad594b73912cf29a3d911a635119381",
    "ex05a_prefix_caching": "5db84ac0283f1eb920715ec5ff702b7efbc2a4f0482712b31b743514b79b4b07",
    "ex05b_paged_attention": "c7081f43026da636d4fe5ee0ad678999cccecc0dce8803e98cbb2f05f7b4090c",
    "ex06_scheduler": "fe7e407cb104a95ea23f32af042d72b0653f1900296ead8ca115b46b7041534c",
    "ex07_acceptance": "5dea3ee71cea97285794e02b4c5ea98d181cc53c63d1f01aa0e3383e2ecae7be",
    "ex08_plan_deployment": "c1ca392c932442ef4fea2a02c30531e6aa9f5890e5708147f736acf2b10b7f62",
    "ex09_find_the_knee": "020a91f1227a3e7e376d3837374c0b88b733f03e5819d3daad3434225cfecf89",
}
