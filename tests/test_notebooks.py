"""The teaching notebooks: committed without outputs, and each runs top to bottom.

Each notebook runs in a temporary copy on a kernel of this very interpreter (a kernelspec
written for the test, found first through JUPYTER_PATH), so a fresh clone needs only
`make test`. The notebooks assert their own key figures (paper tables, orderings), so
running them checks what they teach.
"""

import json
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
BUDGET_S = 600  # per notebook, all cells together: a guard against a hang, not a speed check (5-18 s each)
HOLOVIEWS_MIME = "application/vnd.holoviews_exec.v0+json"


@pytest.fixture(scope="module")
def kernel_path(tmp_path_factory):
    """A JUPYTER_PATH whose 'python3' kernel runs this interpreter (wherever its venv lives)."""
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / "python3"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "engine tests", "language": "python"}))
    return root


def test_notebooks_exist():
    assert [p.name[:2] for p in NOTEBOOKS] == sorted({p.name[:2] for p in NOTEBOOKS})  # one per number
    assert {p.name[:2] for p in NOTEBOOKS} == {"00", "01", "02", "03", "04", "05", "06"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, f"{path.name} has no code"
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not dirty, f"{path.name}: cells {dirty} carry outputs; clear them before committing"
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, kernel_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_path))
    nb = nbformat.read(path, as_version=4)
    deadline = time.monotonic() + BUDGET_S
    client = NotebookClient(nb, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}},
                            timeout_func=lambda _cell: max(1.0, deadline - time.monotonic()))
    try:
        client.execute()
    except CellTimeoutError:
        pytest.fail(f"{path.name} did not finish within {BUDGET_S} s")
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    plots = [o for o in outputs if HOLOVIEWS_MIME in o.get("data", {})]
    assert plots, f"{path.name} drew no HoloViews plot"
