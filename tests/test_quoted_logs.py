"""A log quoted in a chapter is the log: the lines a page shows are the record's excerpt.

Where a chapter's markdown links a start-up log the log check reads
(`code/inferbook/data/vllm_logs.json`, a record's `url`) and quotes it in a ```text block, the
quoted text, with line wraps undone, is the record's `excerpt` (what the package's numbers are
checked against), word for word: a number retyped by hand cannot drift from the record.
"""

import json
import re

import pytest

from paths import ROOT

CHAPTERS = sorted((ROOT / "notebooks").glob("0*.ipynb"))
RECORDS = json.loads((ROOT / "code" / "inferbook" / "data" / "vllm_logs.json").read_text())
RECORDS = RECORDS["records"] if isinstance(RECORDS, dict) else RECORDS
BY_URL = {r["url"]: r for r in RECORDS if r.get("url") and r.get("excerpt")}
FENCE = re.compile(r"```text\n(.*?)```", re.S)


def _words(text: str) -> str:
    return " ".join(text.split())


def quotes(markdown: str) -> list[tuple[str, str]]:
    """Return (record url, quoted text) for each ```text block of a cell that links a record."""
    urls = [u for u in BY_URL if u in markdown]
    return [(u, block) for u in urls for block in FENCE.findall(markdown)]


def test_the_rule_catches_a_retyped_number():
    url, record = next(iter(BY_URL.items()))
    good = f"[log]({url})\n\n```text\n" + "\n".join(record["excerpt"]) + "\n```\n"
    assert [_words(q) for _, q in quotes(good)] == [_words(" ".join(record["excerpt"]))]
    bad = good.replace(record["excerpt"][0], record["excerpt"][0] + "1")
    assert _words(quotes(bad)[0][1]) != _words(" ".join(record["excerpt"]))


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_quoted_log_lines_are_the_records_excerpt(path):
    problems = []
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        for url, quoted in quotes("".join(cell["source"])):
            want = _words(" ".join(BY_URL[url]["excerpt"]))
            if _words(quoted) != want:
                problems.append(f"cell {i} quotes {BY_URL[url]['id']} as {_words(quoted)!r}, "
                                f"the record says {want!r}")
    assert not problems, "\n".join(problems)


def test_chapter_8_quotes_a_record():
    text = (ROOT / "notebooks" / "08_putting_it_together.ipynb").read_text()
    assert any(url in text for url in BY_URL)
