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
