"""Exercise notebooks are meant to fail until the learner solves them.

They are collected only when named explicitly (`pytest --nbval notebooks/exercises/ex01_....ipynb`);
a plain `pytest` run skips them, and tests/test_grading.py checks that they fail as they should.
"""

from pathlib import Path


def pytest_ignore_collect(collection_path: Path, config):
    if collection_path.suffix == ".ipynb" and collection_path.parent.name == "exercises":
        explicit = {Path(a.split("::")[0]).resolve() for a in config.args}
        if collection_path.resolve() not in explicit:
            return True
    return None
