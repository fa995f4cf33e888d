"""Every chapter runs top to bottom the way Colab runs it, simulated on this machine.

What Colab does, and how each part is reproduced here:
- `google.colab` is imported when the kernel starts (that is how the setup cell detects Colab):
  an IPython startup file puts `tests/fake_colab` on `sys.path` and imports it first.
- The setup cell clones the repository and `pip install`s it: it runs unchanged, cloning a
  local bare clone of the committed HEAD (`INFERBOOK_REPO_URL`) into a temporary directory
  (`INFERBOOK_CLONE_DIR`). pip installs into a throw-away target directory (`PIP_TARGET`,
  no dependencies, no index), which is on the kernel's `PYTHONPATH`: the project's own venv
  and its editable install are never touched, and the startup file removes the editable
  install's path from `sys.path`, so the chapter can only import the clone's package.
- Colab ships torch (with triton), numpy, scipy, pandas, matplotlib, ipywidgets and
  transformers, but not myst_nb, jupyter-book, sphinx, nbval or hypothesis. Colab's ipywidgets
  is 7.7.1 (googlecolab/backend-info, pip-freeze.txt of 2026-08-19), not this venv's 8.x: the
  kernel gets 7.7.1 from the wheels in tests/fake_colab/wheels. What Colab lacks is made
  truly absent: the kernel sees this venv's site-packages through a directory of symlinks to
  everything else, so `import` fails and `importlib.util.find_spec` returns None for them,
  as on Colab (a meta-path finder that raised would also break libraries that merely probe
  for them, such as torch._dynamo probing for hypothesis).
- The kernel starts in a scratch directory, as Colab's starts in /content.

So this tests the committed notebooks and package, not the working tree. A chapter fails here
if it needs something the book's build has and Colab lacks.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import textwrap
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
FAKE_COLAB = ROOT / "tests" / "fake_colab"
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
NOT_ON_COLAB = ("myst_nb", "jupyter_book", "sphinx", "nbval", "hypothesis")
COLAB_WHEELS = sorted((FAKE_COLAB / "wheels").glob("*.whl"))   # Colab's versions, not the venv's
REPLACED_ON_COLAB = ("ipywidgets", "ipython_genutils")
# What Colab's image ships (googlecolab/backend-info, pip-freeze.txt, 2026-08-19) of the
# package's dependencies: pip must find every one satisfied, so installing the book upgrades
# nothing Colab has (an upgraded ipywidgets needs a runtime restart and broke widgets once).
COLAB_PINS = {"numpy": "2.1.3", "torch": "2.11.0", "matplotlib": "3.10.0", "ipywidgets": "7.7.1",
              "tqdm": "4.67.3", "transformers": "5.15.0", "scipy": "1.16.3"}
CELL_TIMEOUT_S = 240        # on an idle core of the book's CI; scaled by cell_timeout_s()


def cell_timeout_s() -> int:
    """CELL_TIMEOUT_S times this machine's measured slowness now (the grader's load factor: a
    loaded or slower machine gets a proportionally longer limit, never a flaky one), in whole
    seconds: nbclient's `timeout` is an integer trait and refuses a float."""
    from inferbook.grading_runner import load_factor

    return math.ceil(CELL_TIMEOUT_S * load_factor())

STARTUP = textwrap.dedent("""
    # Runs when the kernel starts, before the first cell: what a Colab kernel already has.
    import os
    import sys

    site, colab_site = os.environ["COLAB_SIM_SITE_PACKAGES"], os.environ["COLAB_SIM_FARM"]
    editable = os.environ["COLAB_SIM_EDITABLE_PATH"]
    sys.path[:] = [colab_site if os.path.abspath(p or ".") == site else p for p in sys.path
                   if os.path.abspath(p or ".") != editable]
    sys.path.insert(0, os.environ["COLAB_SIM_FAKE_COLAB"])
    import google.colab  # noqa: F401  (Colab imports it at start; notebooks test for it)
""")


def _top_name(entry: str) -> str:
    """'hypothesis-6.1.dist-info' -> 'hypothesis', 'myst_nb' -> 'myst_nb', 'six.py' -> 'six'."""
    return entry.split("-")[0].split(".")[0].lower().replace("-", "_")


@pytest.fixture(scope="module")
def colab_site_packages(tmp_path_factory):
    """This venv's site-packages without what Colab lacks, as a directory of symlinks."""
    site = Path(next(p for p in sys.path if p.endswith("site-packages")))
    farm = tmp_path_factory.mktemp("colab_site")
    for entry in site.iterdir():
        if _top_name(entry.name) not in NOT_ON_COLAB + REPLACED_ON_COLAB:
            (farm / entry.name).symlink_to(entry)
    for wheel in COLAB_WHEELS:      # a wheel is a zip of the installed files
        with zipfile.ZipFile(wheel) as z:
            z.extractall(farm)
    return site, farm


PROBE = textwrap.dedent("""
    import sys, inferbook, ipywidgets
    print("COLAB_SIM", "google.colab" in sys.modules, inferbook.__file__,
          sorted(m for m in sys.modules if m.split(".")[0] in {blocked!r}), ipywidgets.__version__)
""")


@pytest.fixture(scope="module")
def bare_repo(tmp_path_factory):
    """A bare clone of the committed HEAD: what the setup cell clones from."""
    bare = tmp_path_factory.mktemp("colab") / "book.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(ROOT), str(bare)], check=True)
    return bare


def colab_env(bare: Path, scratch: Path, site_packages: tuple[Path, Path]) -> dict[str, str]:
    """The kernel's environment: clone/install targets, startup file, blocked modules."""
    site, ipython = scratch / "site", scratch / "ipython"
    site.mkdir()
    startup = ipython / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-colab.py").write_text(STARTUP)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    env.update(
        INFERBOOK_REPO_URL=str(bare), INFERBOOK_CLONE_DIR=str(scratch / "llm-inference-book"),
        # pip reads PIP_NO_BUILD_ISOLATION inverted: "0" means build without isolation,
        # with this venv's setuptools, so nothing is fetched from an index.
        PIP_TARGET=str(site), PIP_NO_DEPS="1", PIP_NO_INDEX="1", PIP_NO_BUILD_ISOLATION="0",
        PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONPATH=str(site), IPYTHONDIR=str(ipython),
        COLAB_SIM_FAKE_COLAB=str(FAKE_COLAB), COLAB_SIM_SITE_PACKAGES=str(site_packages[0]),
        COLAB_SIM_FARM=str(site_packages[1]),
        COLAB_SIM_EDITABLE_PATH=str(ROOT / "code"), OMP_NUM_THREADS="1", MPLBACKEND="Agg",
        # This simulation has no internet, unlike Colab: chapters that fetch public weights
        # when on Colab are asked not to (INFERBOOK_ONLINE=0 overrides the Colab detection).
        INFERBOOK_ONLINE="0",
    )
    env.pop("TRITON_INTERPRET", None)
    return env


def run_like_colab(chapter: Path, bare: Path, scratch: Path,
                   site_packages: tuple[Path, Path]) -> tuple[str | None, str]:
    """Execute one chapter; return (error or None, the probe's line)."""
    nb = nbformat.read(chapter, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE.format(blocked=set(NOT_ON_COLAB))))
    client = NotebookClient(nb, timeout=cell_timeout_s(), kernel_name="python3",
                            allow_errors=False,
                            resources={"metadata": {"path": str(scratch)}})
    try:
        client.execute(env=colab_env(bare, scratch, site_packages), cwd=str(scratch))
    except Exception as err:  # CellExecutionError, timeouts, dead kernels: report them all
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(err))     # no terminal colours
        return f"{type(err).__name__}: {text[-3000:]}", ""
    probe = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    return None, re.sub(r"\x1b\[[0-9;]*m", "", probe).strip()


def test_every_chapter_runs_like_on_colab(bare_repo, colab_site_packages, tmp_path):
    scratches = []
    for chapter in CHAPTERS:
        scratch = tmp_path / chapter.stem
        scratch.mkdir()
        scratches.append(scratch)
    # Two kernels at a time: each chapter is single-threaded (OMP_NUM_THREADS=1).
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(
            lambda a: run_like_colab(a[0], bare_repo, a[1], colab_site_packages),
            zip(CHAPTERS, scratches)))
    failures = []
    for chapter, scratch, (error, probe) in zip(CHAPTERS, scratches, results):
        if error:
            failures.append(f"{chapter.name}: {error}")
            continue
        site = str(scratch / "site" / "inferbook")
        if probe != f"COLAB_SIM True {site}/__init__.py [] {COLAB_PINS['ipywidgets']}":
            failures.append(f"{chapter.name}: not a Colab-like run: {probe!r}")
    # The project's venv still imports the editable package, untouched by the installs.
    editable = subprocess.run([sys.executable, "-c", "import inferbook; print(inferbook.__file__)"],
                              capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert editable.strip() == str(ROOT / "code" / "inferbook" / "__init__.py")
    assert not failures, "\n\n".join(failures)


# ----------------------------------------------------------------------------------------------
# The setup cell cannot strand a reader, and installing the book upgrades nothing Colab ships.

def test_dependencies_accept_colabs_versions():
    import tomllib

    from packaging.requirements import Requirement

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    problems = []
    for dep in map(Requirement, deps):
        have = COLAB_PINS.get(dep.name)
        if have is None:
            problems.append(f"{dep}: is it on Colab? add its version to COLAB_PINS")
        elif not dep.specifier.contains(have, prereleases=True):
            problems.append(f"{dep}: Colab has {have}; pip would replace it")
    assert not problems, "\n".join(problems)
    assert [w.name.split("-")[1] for w in COLAB_WHEELS if w.name.startswith("ipywidgets")] == [
        COLAB_PINS["ipywidgets"]]


def _setup_notebook():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from nbtools import INSTALLED_MARKER, setup_cell_source
    finally:
        sys.path.remove(str(ROOT / "tools"))
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(setup_cell_source()),
                nbformat.v4.new_code_cell("import inferbook\nprint('LATER', inferbook.__file__)")]
    return nb, INSTALLED_MARKER


def _run_setup(env, scratch):
    """Run the template's setup cell and a later cell like Colab's Run all; return
    (error text or None, the notebook)."""
    nb, _ = _setup_notebook()
    client = NotebookClient(nb, timeout=cell_timeout_s(), kernel_name="python3",
                            resources={"metadata": {"path": str(scratch)}})
    try:
        client.execute(env=env, cwd=str(scratch))
    except Exception as err:
        return re.sub(r"\x1b\[[0-9;]*m", "", str(err)), nb
    return None, nb


def _errors(nb):
    return [(i, o.get("ename")) for i, c in enumerate(nb.cells) for o in c.get("outputs", [])
            if o.get("output_type") == "error"]


def test_failed_clone_stops_with_one_clear_message(bare_repo, colab_site_packages, tmp_path):
    env = colab_env(bare_repo, tmp_path, colab_site_packages)
    env["INFERBOOK_REPO_URL"] = str(tmp_path / "no-such-repository.git")   # a fork, a typo
    error, nb = _run_setup(env, tmp_path)
    assert error is not None, "the setup cell must fail when the clone fails"
    assert _errors(nb) == [(0, "RuntimeError")], _errors(nb)   # one error; later cells never ran
    assert "CalledProcessError" not in error and "ModuleNotFoundError" not in error, error
    for words in ("git clone", "INFERBOOK_REPO_URL", "upload the repository", "run this cell again"):
        assert words.lower() in error.lower(), f"{words!r} missing from: {error[-800:]}"


def test_failed_install_is_retried_on_the_next_run(bare_repo, colab_site_packages, tmp_path):
    _, marker = _setup_notebook()
    env = colab_env(bare_repo, tmp_path, colab_site_packages)
    broken = dict(env)
    broken.pop("PIP_NO_BUILD_ISOLATION")   # isolated build needs setuptools from an index: none
    error, nb = _run_setup(broken, tmp_path)
    clone = Path(env["INFERBOOK_CLONE_DIR"])
    assert error is not None and _errors(nb) == [(0, "RuntimeError")], (error, _errors(nb))
    assert "pip install" in error and "INFERBOOK_REPO_URL" in error, error[-800:]
    assert (clone / "pyproject.toml").is_file() and not (clone / marker).exists()
    # the next run finds the clone, installs again (no marker yet) and goes on
    error, nb = _run_setup(env, tmp_path)
    assert error is None, error[-3000:]
    assert (clone / marker).is_file()
    later = "".join(o.get("text", "") for o in nb.cells[1].outputs)
    assert f"LATER {tmp_path / 'site' / 'inferbook'}" in later, later
