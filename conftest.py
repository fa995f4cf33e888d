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


CHAPTERS = Path(__file__).resolve().parent / "notebooks"


def pytest_runtest_setup(item):
    """A chapter's figures are checked for the phone column as nbval runs it (the kernel starts
    in the file's setup, after this hook, and inherits the variable); exercises, solutions and
    everything else run without the check, so a learner's own plot never fails their grade."""
    import os

    from inferbook.notebook import CHECK_FIGURES_ENV

    path = Path(str(item.fspath)).resolve()
    if path.suffix == ".ipynb" and path.parent == CHAPTERS:
        os.environ[CHECK_FIGURES_ENV] = "1"
    else:
        os.environ.pop(CHECK_FIGURES_ENV, None)
