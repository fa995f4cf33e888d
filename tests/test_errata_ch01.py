"""The chapter-1 errata entry states computed numbers; regenerate it and check errata.md holds it verbatim."""

from inferbook.decode import cached_counts, naive_counts
from paths import ROOT


def errata_section() -> str:
    rows100, dots100 = naive_counts(1, 100)
    crow100, cdots100 = cached_counts(1, 100)
    rows4k, dots4k = naive_counts(1, 4096)
    crow4k, cdots4k = cached_counts(1, 4096)
    return f"""## Chapter 1, why decoding is slow (the lesson's "problem" section and build step 3; the blog's KV-cache section)

Computed in `notebooks/01_kv_cache.ipynb` with `inferbook.decode`, whose counters count attention
work per layer and head as the model runs; `tests/test_errata_ch01.py` regenerates this entry.

- **Lesson: "a naive decoder does O(N²) work to generate N tokens; for a 4K-token reply that is 16
  million attention operations."** 16 million is 4096² = {4096**2:,}. Counting what is computed:
  the naive decoder computes {rows4k:,} query rows (N(N+1)/2) and {dots4k:,} query-key dot
  products (N(N+1)(N+2)/6, which is O(N³), not O(N²)). The cached decoder computes {crow4k:,} rows
  and {cdots4k:,} dot products: O(N²) in total, O(N) per step.
- **Lesson, build step 3: "naive: O(N²) = 5050; cached: O(N) = 100" for 100 tokens.** Right as
  counts of query rows ({rows100:,} and {crow100:,}), but the cached decoder still computes
  {cdots100:,} query-key dot products, the naive one {dots100:,}. The cache removes the
  recomputation of the prefix, not the attention over it.
- **Blog: "generating 100 tokens computes attention 4950 times (100×99÷2)".** 4,950 is the number
  of pairs of a token with a strictly earlier token ({cdots100 - crow100:,} = {cdots100:,} dot
  products of the cached decoder minus the {crow100} with itself): it is the work that remains
  *with* a KV cache, not the work a cache saves.
"""


def test_errata_entry_is_current():
    errata = (ROOT / "book" / "errata.md").read_text()
    assert errata_section() in errata, "book/errata.md's chapter-1 entry is stale:\n" + errata_section()


def test_numbers_are_the_closed_forms():
    n = 4096
    assert naive_counts(1, n) == (n * (n + 1) // 2, n * (n + 1) * (n + 2) // 6)
    assert cached_counts(1, n) == (n, n * (n + 1) // 2)
