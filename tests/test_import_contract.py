"""engine/ never imports the dashboard's libraries (panel, holoviews, bokeh) or the dashboard."""

import ast
from pathlib import Path

FORBIDDEN = {"panel", "holoviews", "bokeh", "dashboard"}


def test_engine_imports_no_ui_library():
    root = Path(__file__).resolve().parent.parent / "engine"
    offenders = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert not offenders


def test_engine_modules_import_no_cycle():
    """No two engine modules import each other, directly or around a loop, even inside a function.

    A package and its own modules are left out: an `__init__` re-exports what its modules define."""
    import networkx as nx

    root = Path(__file__).resolve().parent.parent
    modules = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
               for p in (root / "engine").rglob("*.py")}
    imports = nx.DiGraph()
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            imports.add_edges_from((name, t) for t in targets if t in modules and t != name
                                   and not name.startswith(f"{t}.") and not t.startswith(f"{name}."))
    assert list(nx.simple_cycles(imports)) == []


def test_old_onnx_module_names_still_work():
    """`engine.onnx_import` and `engine.onnx_export` were the homes of the ONNX functions before `engine.onnx`."""
    import engine
    from engine.onnx_export import save_onnx, to_model
    from engine.onnx_import import load_onnx

    assert load_onnx is engine.onnx.load_onnx is engine.onnx_import.load_onnx
    assert (save_onnx, to_model) == (engine.onnx.save_onnx, engine.onnx.to_model) == (engine.save_onnx, engine.onnx_export.to_model)


def test_old_module_reuse_name_still_works():
    """`engine.modules` was the home of module-based reuse before `engine.module_reuse`."""
    import engine
    from engine.modules import NpuModel, plan_modules

    assert plan_modules is engine.plan_modules is engine.module_reuse.plan_modules is engine.modules.plan_modules
    assert NpuModel is engine.module_reuse.NpuModel


def test_a_limit_curve_loads_neither_numba_nor_networkx():
    """The first limit curve of a process (issue 27: under 1 s with imports) reads the cost model's tables without the
    compiled searches (Numba: 0.25 s to import) or networkx (0.15 s); a fresh interpreter says which were loaded."""
    import subprocess
    import sys

    script = ("import sys, engine\n"
              "engine.limit.curve(engine.load_network('gpt2'), engine.Accelerator.preset('optimus'), [1 << 20])\n"
              "print(sorted({m.split('.')[0] for m in sys.modules} & {'numba', 'networkx', 'pandas', 'scipy'}))\n"
              "print('engine.fusion.core' in sys.modules)")
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.split("\n")[:2] == ["[]", "False"]
