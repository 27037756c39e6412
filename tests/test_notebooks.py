"""The teaching notebooks: committed without outputs, and each runs top to bottom.

Each notebook runs in a temporary copy on a kernel of this very interpreter (a kernelspec
written for the test, found first through JUPYTER_PATH), so a fresh clone needs only
`make test`. The notebooks assert their own key figures (paper tables, orderings), so
running them checks what they teach. One kernel runs them all, in turn on one worker, its
namespace emptied before each (so a name one notebook defines is never found by the next):
a kernel's start and its imports were about 4 of the 5-10 CPU s each notebook took.
"""

import json
import sys
import time
from pathlib import Path

import nbformat
import pytest
from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import run_sync
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


@pytest.fixture(scope="module")
def kernel(kernel_path):
    """The notebooks' one kernel (this interpreter's, through `kernel_path`), shut down after the last."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_PATH", str(kernel_path))
        km = AsyncKernelManager(kernel_name="python3")
        run_sync(km.start_kernel)()
    yield km
    run_sync(km.shutdown_kernel)(now=True)


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


@pytest.mark.xdist_group("notebooks")  # one worker: they share the kernel
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, kernel):
    if not run_sync(kernel.is_alive)():  # a notebook before killed it: this one gets a kernel of its own
        run_sync(kernel.restart_kernel)(now=True)
    nb = nbformat.read(path, as_version=4)
    # first, the kernel's namespace emptied and its directory a temporary one, as a kernel of its own would start
    nb.cells.insert(0, nbformat.v4.new_code_cell(f"%reset -f\nimport os\nos.chdir({str(tmp_path)!r})\ndel os"))
    deadline = time.monotonic() + BUDGET_S
    client = NotebookClient(nb, km=kernel, timeout_func=lambda _cell: max(1.0, deadline - time.monotonic()))
    try:
        client.execute()
    except CellTimeoutError:
        pytest.fail(f"{path.name} did not finish within {BUDGET_S} s")
    finally:
        if client.kc is not None:  # the client's channels (the kernel is the fixture's)
            client.kc.stop_channels()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    plots = [o for o in outputs if HOLOVIEWS_MIME in o.get("data", {})]
    assert plots, f"{path.name} drew no HoloViews plot"
    # its own kernel would draw nothing without it: in the shared one, a notebook before may have loaded it
    assert any("hv.extension(" in c.source for c in nb.cells[1:] if c.cell_type == "code"), \
        f"{path.name}: no hv.extension"
