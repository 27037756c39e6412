"""A page's pieces as the event loop attaches them (`dashboard.pieces.Piece.show`), in CPU seconds of the thread, with
Bokeh's walk of the whole document after each change and with `walking_only_new_models` (every piece, as served);
one process, a ResNet-18 page built as a server builds it, the best of REPEATS pages each.
Run: `.venv/bin/python -m benchmarks.run page_pieces`."""

from __future__ import annotations

import time
import weakref
from types import SimpleNamespace

import panel as pn
from bokeh.document import Document
from panel.io.state import set_curdoc

from dashboard import pieces
from dashboard.app import build_app

REPEATS = 5


class ServedContext:
    """A page's session context, as far as the dashboard and Panel's `server_doc` read it."""

    id = "bench"
    destroyed = False
    request = SimpleNamespace(arguments={"network": [b"resnet18"]}, headers={}, cookies={})


def attach_seconds(walk_new_only: bool) -> tuple[list[float], list[str], int]:
    """(each piece's attach in thread CPU s, the pieces' names, the page's models at the end)."""
    doc, context = Document(), ServedContext()
    doc._session_context = weakref.ref(context)
    with set_curdoc(doc):
        build_app().server_doc(doc)
        built = next(c for c, _ in pn.state._onload.pop(doc) if getattr(c, "func", None) is pieces.build)
        spent, names = [], []
        for piece in built.args[1]:
            views = piece.make(doc)
            start = time.thread_time()
            piece.show(views, doc if walk_new_only else None)
            spent.append(time.thread_time() - start)
            name = getattr(piece.parts, "func", piece.parts).__name__
            names.append("another tab's" if name == "<lambda>" else name)
    return spent, names, len(doc.models)


def main() -> None:
    attach_seconds(True), attach_seconds(False)  # the imports and caches warm
    runs: dict[bool, list[list[float]]] = {False: [], True: []}
    for _ in range(REPEATS):
        for walk_new_only in (False, True):
            spent, names, models = attach_seconds(walk_new_only)
            runs[walk_new_only].append(spent)
    best = {w: [min(r[i] for r in runs[w]) for i in range(len(names))] for w in runs}
    print("## Dashboard: a page's pieces attached (thread CPU s)\n")
    print(f"A ResNet-18 page's {len(names)} pieces, {models} Bokeh models in all, each attached as the server's event "
          f"loop does (`Piece.show`), best of {REPEATS} pages: Bokeh walking the whole document after each change "
          "(before), and walking only the new models (`dashboard.panel_hooks.walking_only_new_models`, every piece).\n")
    print("| piece | whole document | new models only |")
    print("|---|---|---|")
    for name, before, after in zip(names, best[False], best[True], strict=True):
        print(f"| `{name}` | {before:.4f} | {after:.4f} |")
    print(f"| all | {sum(best[False]):.3f} | {sum(best[True]):.3f} |")


if __name__ == "__main__":
    main()
