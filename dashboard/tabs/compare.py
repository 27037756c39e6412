"""Compare mode: a second method's plan drawn under the shown one, the groups that differ outlined thickly,
and each block of ops the two plans group differently with both plans' DRAM bytes there."""

from __future__ import annotations

import panel as pn

from dashboard.tabs.fusion import TABLE_CSS, shown_plan
from dashboard.views.dag import dag_figure, plan_differences

NONE = "(no comparison)"


def difference_html(diff, plan_a, plan_b) -> str:
    """The differing blocks as an HTML table, with the plans' totals above it."""
    total = plan_b.dram_bytes - plan_a.dram_bytes
    head = (f"<b>{plan_b.method} against {plan_a.method}</b>: {len(diff)} blocks of ops grouped differently; "
            f"{plan_b.method} moves {total:+,} bytes of DRAM traffic in all.")
    if diff.empty:
        return head
    return head + diff.to_html(index=False, border=0, classes="methods",
                               formatters={c: "{:+,}".format if c == "difference" else "{:,}".format
                                           for c in diff.columns if c.endswith("bytes") or c == "difference"})


class ComparePanel:
    """A chooser of the method to compare with, its DAG (differing groups outlined thickly) and the differences."""

    def __init__(self, session):
        self.session = session
        self.choice = pn.widgets.Select(label="Compare the DAG's plan with", options=[NONE], value=NONE, width=300)
        self.body = pn.Column(sizing_mode="stretch_width")
        self.choice.param.watch(lambda e: self.show(), "value")
        session.param.watch(lambda e: self.show(), "report")
        self.show()

    def show(self):
        rep = self.session.report
        if rep is None:
            return
        base = shown_plan(rep)
        others = [m for m in rep.plans if m != base.method]
        self.choice.options = [NONE, *others]
        if self.choice.value not in others:
            self.body[:] = []
            return
        other = rep.plans[self.choice.value]
        diff = plan_differences(rep.graph, base, other)
        differing = {g for cell in diff.get(f"{other.method} groups", []) for g in cell.split()}
        title = (f"{rep.graph.name}: {len(other.groups)} groups by {other.method} "
                 f"(thick outline: not a group of {base.method})")
        figure = dag_figure(rep.graph, other.groups, rep.acc.word_bits, [c.dram_bytes for c in other.costs],
                            title=title, highlight=differing)
        self.body[:] = [pn.pane.HTML(difference_html(diff, base, other), stylesheets=[TABLE_CSS],
                                     sizing_mode="stretch_width"),
                        pn.pane.Bokeh(figure, sizing_mode="stretch_width")]

    def panel(self) -> pn.Column:
        return pn.Column(self.choice, self.body, sizing_mode="stretch_width")
