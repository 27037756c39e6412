"""The project's lint and type settings (pyproject.toml: [tool.ruff], [tool.mypy]) hold: ruff finds nothing in the
engine, dashboard, tests and benchmarks, and mypy nothing in the engine."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(tool: str, *args: str) -> None:
    if importlib.util.find_spec(tool) is None:
        pytest.skip(f"{tool} is not installed (pip install -e '.[test]' brings it)")
    done = subprocess.run([sys.executable, "-m", tool, *args], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, f"{tool} {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"


def test_ruff_clean():
    _run("ruff", "check", "engine", "dashboard", "tests", "benchmarks")


def test_mypy_clean():
    _run("mypy", "engine")
