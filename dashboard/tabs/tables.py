"""The Tables tab: groups per method, ops, modules and CPU/accelerator parts as CSV, and the report as JSON."""

from __future__ import annotations

import io

import pandas as pd
import panel as pn
import param

import engine
from dashboard.tabs.common import download_table, message
from dashboard.tabs.fusion import shown_plan
from dashboard.views.dag import node_table


def parts_frame(graph, cpu_kinds: tuple[str, ...], word_bits: int) -> pd.DataFrame:
    """One row per CPU/accelerator part when the kinds in `cpu_kinds` stay on the CPU."""
    split = engine.partition(graph, lambda op: op.kind.value not in cpu_kinds, word_bits=word_bits)
    return pd.DataFrame([{"part": i, "device": p.device, "ops": len(p.ops), "first op": p.ops[0],
                          "inputs": " ".join(p.inputs), "outputs": " ".join(p.outputs),
                          "crossing_bytes": p.crossing_bytes} for i, p in enumerate(split.parts)])


def ops_frame(rep) -> pd.DataFrame:
    """One row per op with its group in the plan the DAG shows, and that group's DRAM bytes."""
    plan = shown_plan(rep)
    ops = node_table(rep.graph, plan.groups, rep.acc.word_bits, [c.dram_bytes for c in plan.costs])
    ops.insert(0, "plan", plan.method)
    return ops.drop(columns=["x0", "y0", "x1", "y1", "x", "y", "label", "colour", "overlay"])


def report_tables(rep, cpu_kinds=()) -> pn.Column:
    """A JSON download of the whole report above one tab per table, each with its CSV download."""
    name = rep.graph.name
    tabs = [(method, download_table(rep.groups_frame(method), f"{name}-{method}-groups.csv")) for method in rep.plans]
    tabs.append(("ops", download_table(ops_frame(rep), f"{name}-ops.csv")))
    try:
        modules = pd.DataFrame(engine.plan_modules(rep.graph, rep.acc).table())
        tabs.append(("modules", download_table(modules, f"{name}-modules.csv")))
        parts = parts_frame(rep.graph, tuple(cpu_kinds), rep.acc.word_bits)
        tabs.append(("CPU/accelerator parts", download_table(parts, f"{name}-parts.csv")))
    except Exception as err:
        tabs.append(("modules and parts", message(err)))
    json_button = pn.widgets.FileDownload(callback=lambda: io.StringIO(rep.to_json()), filename=f"{name}-report.json",
                                          color="primary", label="Download the whole report (JSON)")
    return pn.Column(json_button, pn.Tabs(*tabs, dynamic=True))


def tables_tab(session, active, index: int) -> pn.viewable.Viewable:
    """The tables of the current report, rebuilt only while tab `index` shows (they take a while)."""

    def tables(shown, rep, cpu_kinds):
        if shown != index or rep is None:
            raise param.Skip  # keep what is there; rebuilt when the tab is opened
        return report_tables(rep, tuple(cpu_kinds))

    return pn.panel(pn.bind(tables, active, session.param.report, session.state.param.cpu_kinds), lazy=True,
                    sizing_mode="stretch_width")
