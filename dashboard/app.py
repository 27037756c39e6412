"""The dashboard page: a network picker and the loaded network's summary (grows as engine parts land)."""

import pandas as pd
import panel as pn

import engine
from engine.loading import onnx_light_models


def network_choices() -> list[str]:
    """Zoo names when the zoo is available, then the onnx package's light models."""
    try:
        from engine import zoo

        names = list(zoo.names())
    except ImportError:
        names = []
    return names + sorted(p.name for p in onnx_light_models().glob("*.onnx"))


def summary(name: str, batch: int) -> pn.viewable.Viewable:
    """A network's totals and per-op table, or the loader's message when it cannot be read."""
    try:
        g = engine.load_network(name, batch=batch)
    except engine.EngineError as err:
        return pn.pane.Alert(str(err), alert_type="danger")
    rows = [{"op": op.name, "kind": op.kind.value, "output": "x".join(map(str, g.tensors[op.outputs[0]].shape)),
             "MACs": op.macs, "params": g.op_params(op.name)} for op in g.ops]
    head = pn.pane.Markdown(f"### {g.name}\n{len(g.ops)} ops, {g.macs / 1e9:.3f} GMACs, {g.params:,} parameters, "
                            f"batch {g.batch}")
    return pn.Column(head, pn.widgets.Tabulator(pd.DataFrame(rows), pagination="remote", page_size=20,
                                                  disabled=True, sizing_mode="stretch_width"))


def build_app() -> pn.template.BaseTemplate:
    choices = network_choices()
    network = pn.widgets.Select(name="Network", options=choices, value=choices[0])
    batch = pn.widgets.IntInput(name="Batch", value=1, start=1, end=64)
    template = pn.template.FastListTemplate(title="DNN accelerator memory explorer")
    template.sidebar.extend([network, batch])
    template.main.append(pn.bind(summary, network, batch))
    return template
