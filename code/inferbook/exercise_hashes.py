"""SHA-256 of each exercise's check data (inferbook/data/exercise_<name>.json), written by
tools/make_exercises.py; the grader refuses a copy whose hash differs."""

EXERCISE_SHA256 = {
    "ex01_naive_vs_cached": "7d63717fe4dcbac2edd44189d51830e863c5bd3e8b3eee07f9b04cd32a161c2a",
    "ex02_kv_sizing": "18592a529631ac8f191d218d03737016e94877ee6bfe99f6dff6ddb732a8d9fd",
    "ex03_online_softmax": "29000891f0d47ca1c534df6657d2536f9b373d5d7a9c5344d5fa52daa430ae4c",
    "ex04_triton_kernel": "2e3a904cddac492befad8825ca5c9729dad594b73912cf29a3d911a635119381",
    "ex05a_prefix_caching": "54c7a9170c4b1f148f3c5465c6648d5ccc6e96bef5f25ee3f992ec4fe07bed4f",
    "ex05b_paged_attention": "9136d6b8642e052ace206c8f70101628f744af6a155860fe8c2fb5695418148d",
    "ex06_scheduler": "da834241436cb8899299c04986e957a6c54cd9882439500ffbbc9ee0edf20167",
    "ex07_acceptance": "5dea3ee71cea97285794e02b4c5ea98d181cc53c63d1f01aa0e3383e2ecae7be",
    "ex08_plan_deployment": "c1ca392c932442ef4fea2a02c30531e6aa9f5890e5708147f736acf2b10b7f62",
    "ex09_find_the_knee": "020a91f1227a3e7e376d3837374c0b88b733f03e5819d3daad3434225cfecf89",
}
