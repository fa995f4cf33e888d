"""SHA-256 of each exercise's check data (inferbook/data/exercise_<name>.json), written by
tools/make_exercises.py; the grader refuses a copy whose hash differs."""

EXERCISE_SHA256 = {
    "ex01_naive_vs_cached": "85301e93ba7df09f126576b19d0de50bd540cca42510f0f16319ecce2905bc77",
    "ex02_kv_sizing": "db2927a259d90606a8ac77afad9d5fab7e564b6de0e305ddf4d6dcd353786172",
    "ex03_online_softmax": "bb6b99bf573d06c350e8f4e1ab0af1ee17b7cfc64c2c7065b3bce102f3fb343e",
    "ex04_triton_kernel": "267fea879f901b2cb2a2e181cb3977e183528cade48fa2ba872c5e0e62fa6272",
    "ex05a_prefix_caching": "e5a7e81e01c8ab14125eccb399a56e67a4116134fe54f04bbcc42fba441b13d7",
    "ex05b_paged_attention": "e7904fda609d9ec4a128afa2657b7ce05860d6afc0b69c960c8404abdfe4bf9e",
    "ex06_scheduler": "814f4f72a8a5a28eb8cee89e73c86d6fc7a8f3e8b28e08d715620a797a719bf7",
    "ex07_acceptance": "e1d6cb1322091d31dcb711d4f32ddb5b29534d47b9fec814729f50abf49f469c",
    "ex08_plan_deployment": "0c0298ac7e013639aee2652cb2872d24803f9a4361fae2b7018b5952fd2d88b2",
    "ex09_find_the_knee": "3e4201279d1d47ae6a45252eb3348d81a4552bd366a454d63b35050daa9c2ca9",
}
