"""A non-editable install (`pip install .`) carries the engine's data: accelerator presets and the papers' tables."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_non_editable_install_finds_presets(tmp_path):
    """Install a copy of the project (no .git, no editable link) into a bare folder and load its presets from there.

    pip builds in isolation, as `pip install .` does; the build backend comes from the configured package index.
    """
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for package in ("engine", "dashboard"):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    site = tmp_path / "site"
    built = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site),
                            str(source)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    probe = ("import engine; from engine.blocking import table4; "
             "print(engine.__file__, len(engine.Accelerator.presets()), len(table4()))")
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-P", "-c", probe], cwd=tmp_path, env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    assert Path(out[0]).is_relative_to(site)
    assert int(out[1]) == len(__import__("engine").Accelerator.presets()) > 0
    assert int(out[2]) > 0
