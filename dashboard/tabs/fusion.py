"""The Fusion tab: headline, DAG, layer detail, method table and energy bars, patched in place per report.

A slider move must reach the browser in well under a second, so nothing here builds a new
plot or pane for a new report: the DAG's figure is drawn once per page, a new network sets its
data, and a new plan only its node colours and outlines; text, tables and bars change their data. All of one report's changes
go out in one message (`pn.io.hold`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache, partial

import pandas as pd
import panel as pn

import engine
from dashboard.state import KB
from dashboard.tabs.common import error_text, one_message, toggles
from dashboard.views import counted
from dashboard.views.dag import (
    PART_COLOURS,
    SWATCH_CSS,
    dag_drawing,
    dag_layout,
    draw_dag,
    empty_dag_figure,
    legend_html,
    node_table,
    outline_table,
    region_columns,
)
from dashboard.views.energy import energy_bars, latency_bars, latency_columns, stacked_columns
from engine.partition import ACCELERATOR

# node columns a new report or colouring changes (the rest: positions, shapes, MACs, stay)
RECOLOURED = ("group", "group_ops", "overlay", "colour")
CLICK_HINT = "Click an op in the DAG to see its loop nest here."
SUMMARY_HEADINGS = {"dram_bytes": "DRAM bytes", "energy_uJ": "energy (µJ)", "latency_ms": "latency (ms)",
                    "x_oracle": "× Oracle", "x_limit": "× limit", "gap": "proven gap"}
SUMMARY_NOTE = ("*× Oracle*: the plan's DRAM traffic over the Oracle's (every tensor and weight crossing once, "
                "a floor no plan reaches below). *status*: `optimal` is a proven optimum, `restricted` the best "
                "plan the method's own rules allow (one pass, or the on-line variant's pruning), `unfused` every op "
                "alone, `refined` a method's plan moved to a local optimum of the chosen objective (energy, latency or "
                "EDP of its mapping), `beam` a search "
                "cut short past its limits (NAS cells), `windowed` a graph of thousands of ops fused window by window "
                "(cut where the least crosses). *proven gap*: how far above a proven lower bound a beam's or a "
                "windowed "
                "plan may be; `-` where there is none to give.")
LEGEND_CSS = """
table.legend { border-collapse: collapse; font-size: 12px; }
table.legend td, table.legend th { padding: 2px 6px; border-bottom: 1px solid rgba(128, 128, 128, 0.35); text-align: left; vertical-align: top; }
table.legend td { overflow-wrap: anywhere; }  /* long op names (model.layers.0.post_attention_layernorm) wrap, bytes stay in view */
table.legend td:last-child, table.legend td:first-child { text-align: right; white-space: nowrap; }
table.legend td:first-child { font-weight: bold; }
span.swatch { display: inline-block; width: 12px; height: 12px; border: 2px solid; border-radius: 3px; }
""" + SWATCH_CSS
TABLE_CSS = """
table.methods { border-collapse: collapse; font-size: 13px; }
table.methods th, table.methods td { padding: 3px 12px; border-bottom: 1px solid rgba(128, 128, 128, 0.35); text-align: right; }
table.methods th:first-child, table.methods td:first-child { text-align: left; }
"""


def headline_text(rep, pending=()) -> str:
    """What the page says first: the network, the accelerator, the Oracle, the best plan, and searches still running."""
    g, acc = rep.graph, rep.acc
    best, tied = best_plan(rep)
    ties = f", tied with {', '.join(tied)}" if tied else ""
    text = (f"### {g.name} (batch {g.batch}) on {acc.name}, {acc.buffer_bytes / KB:,.0f} KB buffer\n\n"
            f"{counted(len(g.ops), 'op')}, {g.macs / 1e9:,.2f} GMACs, {g.params / 1e6:,.2f} M parameters. "
            f"Oracle DRAM traffic {rep.oracle_bytes / 1e6:,.2f} MB; best plan ({best.method}{ties}) "
            f"{best.dram_bytes / 1e6:,.2f} MB in {counted(len(best.groups), 'group')}.")
    if pending:
        text += f"\n\n**{' and '.join(pending)} still searching**: shown so far are the one-pass methods."
    return text


def spinner_styles(busy: bool) -> dict:
    """The spinner's CSS: kept in the layout either way, only made transparent while no report is being computed
    (not `visibility`: Panel's markup sets its own content visible, which overrides an inherited hidden)."""
    return {"opacity": "1" if busy else "0"}


def shown_plan(rep):
    """The plan the DAG colours: Optimus when it was run, else the one with the least DRAM traffic."""
    return rep.plans["optimus"] if "optimus" in rep.plans else min(rep.plans.values(), key=lambda p: p.dram_bytes)


def best_plan(rep):
    """(the plan with the least DRAM traffic, the other methods that tie with it): on a tie, the plan the DAG shows,
    so the headline and the DAG name the same method."""
    least = min(p.dram_bytes for p in rep.plans.values())
    tied = [m for m, p in rep.plans.items() if p.dram_bytes == least]
    shown = shown_plan(rep)
    best = shown if shown.method in tied else rep.plans[tied[0]]
    return best, [m for m in tied if m != best.method]


def groups_title(rep) -> str:
    """The DAG's title when it shows fused groups: how many, and by which method."""
    plan = shown_plan(rep)
    return (f"{rep.graph.name}: {counted(len(plan.groups), 'group')} fused by {plan.method} "
            "(click an op for its loop nest)")


@lru_cache(maxsize=64)
def part_overlay(graph, cpu_kinds: tuple[str, ...], word_bits: int):
    """Op -> 'accelerator part i' / 'CPU part i' when the kinds in `cpu_kinds` stay on the CPU."""
    split = engine.partition(graph, lambda op: op.kind.value not in cpu_kinds, word_bits=word_bits)
    overlay = {op: f"{'accelerator' if p.device == ACCELERATOR else 'CPU'} part {i}"
               for i, p in enumerate(split.parts) for op in p.ops}  # the colours follow these words: PART_COLOURS
    title = (f"{graph.name}: {len(split.accelerator_parts)} accelerator and "
             f"{counted(len(split.parts) - len(split.accelerator_parts), 'CPU part')}, "
             f"{split.crossing_bytes / 1e6:,.2f} MB crossing")
    return overlay, title


@lru_cache(maxsize=64)
def module_overlay(graph, acc):
    """Op -> its module's name and processing (NPU paper), for multi-branch blocks."""
    plan = engine.plan_modules(graph, acc)
    overlay = {op: f"{m.name} ({m.processing})" for m in plan.modules for op in m.ops}
    title = (f"{graph.name}: {len(plan.modules)} modules; feature-map traffic {plan.naive.bytes / 1e6:,.2f} MB naive, "
             f"{plan.proposed.bytes / 1e6:,.2f} MB with module reuse")
    return overlay, title


def dag_colouring(rep, colour_by: str = "fused group", cpu_kinds=()):
    """(overlay, title) for the DAG: None and '' for fused groups, else the parts' or modules' labels."""
    if colour_by == "CPU/accelerator part":
        return part_overlay(rep.graph, tuple(cpu_kinds or ()), rep.acc.word_bits)
    if colour_by == "module":
        return module_overlay(rep.graph, rep.acc)
    return None, ""


def dag_element(rep, colour_by: str = "fused group", cpu_kinds=()):
    """The DAG of a report as a Bokeh figure, outlined and coloured by fused group, part or module."""
    fig = empty_dag_figure()
    draw_dag(fig, report_drawing(rep, colour_by, cpu_kinds))
    return fig


def report_drawing(rep, colour_by: str = "fused group", cpu_kinds=()):
    """What the DAG figure shows for a report (`views.dag.dag_drawing`), outlined by fused group, part or module."""
    plan = shown_plan(rep)
    overlay, title = dag_colouring(rep, colour_by, cpu_kinds)
    return dag_drawing(rep.graph, plan.groups, rep.acc.word_bits, [c.dram_bytes for c in plan.costs], overlay,
                       title or groups_title(rep))


@dataclass(frozen=True)
class Changes:
    """What a data source needs to show new columns: every column anew (the row count changed), or one patch of the
    changed rows. Only these go to the browser: each value sent is parsed and re-applied there."""

    columns: dict
    patches: dict

    def apply(self, source) -> None:
        """Send them to `source` (a Bokeh ColumnDataSource), as one message event: BokehJS rebuilds a glyph's data
        and index once per event, so whole columns and patched rows in two events cost two rebuilds."""
        if self.columns:
            source.data.update(self.columns)
        if self.patches:
            source.patch(self.patches)


def changes(drawn, columns: dict) -> Changes:
    """How `drawn` (a data source's data) becomes `columns`: a patch of each column's changed rows, the whole column
    as one slice where most rows changed; every column anew when the row count differs."""
    rows = {len(values) for values in columns.values()}
    if any(len(drawn.get(col, ())) not in rows for col in columns):
        return Changes(dict(columns), {})
    patches = {}
    for col, values in columns.items():
        changed = [(i, new) for i, (old, new) in enumerate(zip(drawn[col], values)) if old != new]
        if 2 * len(changed) > len(values):
            patches[col] = [(slice(0, len(values)), list(values))]
        elif changed:
            patches[col] = changed
    return Changes({}, patches)


@dataclass(frozen=True)
class DagData:
    """What one plan (or part/module overlay) changes in a drawn DAG: box colours, outlines, legend, title."""

    node_columns: dict  # RECOLOURED column -> values, one per op in graph order
    region_columns: dict  # the outlines' data source, one row per op slot (views.dag.region_columns)
    legend_html: str
    title: str


def dag_data(rep, overlay=None, title: str = "") -> DagData:
    """The DAG's per-plan data for the shown plan, coloured by fused group or by `overlay`."""
    plan = shown_plan(rep)
    costs = [c.dram_bytes for c in plan.costs]
    nodes = node_table(rep.graph, plan.groups, rep.acc.word_bits, costs, overlay)
    regions = outline_table(rep.graph, plan.groups, costs, overlay)
    heading = (f"{plan.method}'s {counted(len(plan.groups), 'fused group')}" if overlay is None else
               "parts: accelerator blue, CPU orange" if regions["region"].str.startswith(tuple(PART_COLOURS)).all()
               else "modules")
    return DagData({col: nodes[col].tolist() for col in RECOLOURED}, region_columns(rep.graph, regions),
                   legend_html(regions, heading), title or groups_title(rep))


@dataclass(frozen=True)
class FusionViewData:
    """What a report changes in the drawn Fusion views, computed off the UI thread (the worker that made the report)."""

    dag: DagData  # for the fused-group colouring
    summary_html: str
    energy_columns: dict
    latency_columns: dict


@lru_cache(maxsize=256)
def fusion_view_data(rep) -> FusionViewData:
    """The data a report patches into the DAG, the method table and the bars (cached per report)."""
    energies = dict(rep.energy)
    return FusionViewData(dag_data(rep), summary_html(rep.summary_frame()), stacked_columns(energies),
                          latency_columns(energies))


def summary_html(summary: pd.DataFrame) -> str:
    """The per-method table as plain HTML: a browser lays it out in well under a millisecond (a Tabulator: ~30 ms)."""
    return summary.rename(columns=SUMMARY_HEADINGS).to_html(
        index=False, border=0, classes="methods", na_rep="-",
        formatters={"DRAM bytes": "{:,}".format, "proven gap": lambda g: "-" if pd.isna(g) else f"{g:.0%}"})


@lru_cache(maxsize=512)
def layer_detail_parts(rep, op_name: str) -> tuple[str, str, pd.DataFrame | None]:
    """(heading with its fused group's proven bound, loop nest, per-level accesses, energy and occupancy) of one op as
    the shown plan maps it.

    With a mapped report the nest sits inside its group's tile loop; otherwise it is the op's best blocking alone.
    The nest is empty and the table None for ops without a convolution-like loop nest.
    """
    from engine.blocking import layer_access_counts

    graph, op = rep.graph, rep.graph.op(op_name)
    # node names as code: Markdown would turn a name like "block.bn" into a link
    head = (f"### {op.name} ({op.kind.value}, {op.macs:,} MACs)\n"
            f"Folded ONNX nodes: {', '.join(f'`{n}` ({t})' for n, t in op.merged)}")
    plan = shown_plan(rep)
    mapped = rep.mappings.get(plan.method) if rep.mappings else None
    if mapped is not None:
        head, nest, levels = _mapped_detail(head, mapped, op_name, rep.acc.word_bits / 8)
        return head + _bound_text(rep, plan, mapped, op_name), nest, levels
    counts = layer_access_counts(graph, op_name, rep.acc)
    if counts is None:
        return (head + "\n\nThis op has no convolution-like loop nest to block "
                       "(element-wise, concat, reshape or other): it streams its inputs once."), "", None
    if counts.rf_skipped:
        head += "\n\nThe RF cannot hold one element of every tensor: MACs read the buffer."
    return head, "```\n" + "\n".join(counts.loop_nest) + "\n```", _levels_frame(counts.levels, rep.acc.word_bits / 8)


def _mapped_detail(head: str, mapped, op_name: str, word_bytes: float) -> tuple[str, str, pd.DataFrame | None]:
    """The op's nest inside its group's tile loop, and each level's words, energy and occupancy."""
    group = mapped.group_of(op_name)
    nest = group.nest(op_name)
    if group.schedule == "fused":
        head += (f"\n\nFused by {mapped.method} with {len(group.ops) - 1} other ops: {group.row_steps} bands x "
                 f"{group.image_tiles} image tiles, the buffer holding {group.footprint_bytes:,} of "
                 f"{group.capacity_bytes:,} bytes; {group.dram_bytes:,} DRAM bytes, bound by {group.bottleneck}. "
                 + ("Halos kept between bands (fusion's line buffer)." if group.halos == "kept" else
                    f"Halos recomputed in every band ({group.recomputed_macs:,} MACs again, "
                    f"{nest.recomputed_macs:,} of them this op's)."))
    elif group.schedule == "bands":
        head += (f"\n\nAlone in its group ({mapped.method}), in fusion's {group.row_steps} row bands, each blocked "
                 f"below the buffer: {group.dram_bytes:,} DRAM bytes, bound by {group.bottleneck}.")
    else:
        head += (f"\n\nAlone in its group ({mapped.method}), blocked on the whole hierarchy: {group.dram_bytes:,} "
                 f"DRAM bytes, bound by {group.bottleneck}.")
    if nest.layer is None:
        return head + "\n\nNo convolution-like loop nest: it streams its tensors through the buffer once.", "", None
    lines = nest.lines if group.schedule == "alone" else (*group.tile_loop(), *("    " + line for line in nest.lines))
    return head, "```\n" + "\n".join(lines) + "\n```", _levels_frame(nest.levels, word_bytes)


def _bound_text(rep, plan, mapped, op_name: str) -> str:
    """The proven least energy of the op's fused group over every schedule its mapping may take, against the mapped
    energy (`engine.mapping.group_bound`: fusion's band counts, and recompute's when the objective allows it)."""
    from engine.mapping import group_bound

    group = mapped.group_of(op_name)
    if group.schedule != "fused":
        return ""
    cost = plan.costs[mapped.groups.index(group)]
    b = group_bound(rep.graph, cost, group, rep.acc, choices=mapped.objective != "dram_bytes")
    gap = b.gap_pj / b.bound_pj if b.bound_pj else 0.0
    return (f"\n\nIts group: mapped {b.mapped_pj / 1e6:,.3f} uJ; proven least over every band count"
            f"{' and recompute schedule' if mapped.objective != 'dram_bytes' else ''}: {b.bound_pj / 1e6:,.3f} uJ "
            f"(gap {gap:.2%}).")


def _levels_frame(levels, word_bytes: float) -> pd.DataFrame:
    """One row per level: words read and written, energy, and the bytes its tiles hold against its capacity."""
    return pd.DataFrame([{"level": c.level, "reads": c.reads, "writes": c.writes,
                          "energy_uJ": round(c.energy_pj / 1e6, 3),
                          "held_bytes": round(c.stored_words * word_bytes) if c.capacity_words else None,
                          "capacity_bytes": round(c.capacity_words * word_bytes) if c.capacity_words else None}
                         for c in levels])


class DrawnLater:
    """A view whose Bokeh figure is made with its piece of the page (`drawn`), not with the page: a report shown before
    is kept and drawn once the figure is made, in the page-building thread (on the event loop, the first report's
    message made both Fusion figures: 0.05-0.08 CPU s). Subclasses make the figure (`_make`) and keep their `show`
    while it is not made (`_kept`)."""

    def __init__(self):
        self.pane = pn.Column(sizing_mode="stretch_width")  # holds the figure's pane once it is made
        self._figure = None
        self._waiting: Callable[[], None] | None = None  # the last `show` while the figure is not made yet

    def _make(self):
        """The figure, empty."""
        raise NotImplementedError

    def drawn(self) -> pn.Column:
        """The figure's pane, the figure made (empty) the first time, with the report shown meanwhile if any."""
        if self._figure is None:
            self._figure = self._make()
            self.pane[:] = [pn.pane.Bokeh(self._figure, sizing_mode="stretch_width")]
            if self._waiting is not None:
                waiting, self._waiting = self._waiting, None
                waiting()
        return self.pane

    def _kept(self, show: Callable[[], None]) -> bool:
        """Whether the figure is not made yet, `show` (a `show` with its arguments) then kept for `drawn`."""
        if self._figure is None:
            self._waiting = show
            return True
        return False


class DagPlot(DrawnLater):
    """The network's DAG: one figure for the page, drawn empty with it; a new network or colouring sets its data and
    view (`draw_dag`), and later reports only patch its boxes' colours, the outlines and the legend.

    Zoom, pan and the clicked op therefore survive every slider move.
    """

    def __init__(self, on_select):
        super().__init__()
        self.legend = pn.pane.HTML("", stylesheets=[LEGEND_CSS], width=330, max_height=900,
                                   styles={"overflow-y": "auto"})
        self._on_select = on_select
        self._key = None
        self._ops = self._regions = None
        self._ready: tuple | None = None  # (key, drawing) made by `prepare`, not drawn yet

    def _make(self):
        figure = empty_dag_figure()
        sources = {r.data_source.name: r.data_source for r in figure.renderers}
        self._ops, self._regions = sources["dag-ops"], sources["dag-regions"]
        self._ops.selected.on_change("indices", self._clicked)
        return figure

    def prepare(self, rep, colour_by: str = "fused group", cpu_kinds=()):
        """In the worker thread that made `rep`: what `show` will draw for it when that is not what is drawn (a new
        network or colouring)."""
        overlay, _ = dag_colouring(rep, colour_by, cpu_kinds)
        key = (rep.graph, overlay is None)  # the hover lines differ with and without an overlay
        ready = self._ready
        if key != self._key and (ready is None or ready[0] != key):
            self._ready = (key, report_drawing(rep, colour_by, cpu_kinds))

    def show(self, rep, colour_by: str = "fused group", cpu_kinds=()):
        """Draw `rep` (kept for `drawn` when the figure is not made yet)."""
        if self._kept(partial(self.show, rep, colour_by, cpu_kinds)):
            return
        overlay, title = dag_colouring(rep, colour_by, cpu_kinds)
        key = (rep.graph, overlay is None)
        if key != self._key:
            ready, self._ready = self._ready, None
            draw_dag(self._figure, ready[1] if ready is not None and ready[0] == key else
                     report_drawing(rep, colour_by, cpu_kinds))
            self._key = key
        data = fusion_view_data(rep).dag if overlay is None else dag_data(rep, overlay, title)
        changes(self._ops.data, data.node_columns).apply(self._ops)
        changes(self._regions.data, data.region_columns).apply(self._regions)
        self._figure.title.text = data.title
        if self.legend.object != data.legend_html:
            self.legend.object = data.legend_html

    def _clicked(self, attr, old, new):
        if new:
            self._on_select(str(self._ops.data["op"][new[0]]))


class BarsPlot(DrawnLater):
    """A bar chart drawn once, empty, when its part of the page is made; each report sets its methods (the x axis),
    bars and y range. (Drawn with the page's first report, the two charts were half of that message's 0.25 CPU s on
    the event loop.)

    `figure(energies)` draws it (a Bokeh figure whose first renderer's data source holds the bars)."""

    def __init__(self, figure, top: str):
        super().__init__()
        self._draw, self._top = figure, top
        self._source = None

    def _make(self):
        figure = self._draw({})
        self._source = next(r for r in figure.renderers if hasattr(r, "data_source")).data_source
        return figure

    def show(self, energies: dict, data: dict):
        """Patch in `data` (the plot's columns for `energies`), the methods on the x axis; the tallest bar ends 5 %
        below the frame (kept for `drawn` when the chart is not made yet)."""
        if self._kept(partial(self.show, energies, data)):
            return
        if list(self._figure.x_range.factors) != list(energies):
            self._figure.x_range.factors = list(energies)
        self._source.data = data
        end = 1.05 * max(data[self._top], default=1.0) or 1.0
        self._figure.y_range.update(start=0, end=end, reset_start=0, reset_end=end)


class LayerDetail:
    """The clicked op's blocking: heading, loop nest and a per-level table, refilled in place."""

    def __init__(self):
        self.head = pn.pane.Markdown(CLICK_HINT)
        self.nest = pn.pane.Markdown("", visible=False)
        self.levels = pn.widgets.Tabulator(pd.DataFrame(), disabled=True, show_index=False, visible=False)
        self.panel = pn.Column(self.head, self.nest, self.levels, width=420)

    def show(self, rep, op_name: str):
        if not op_name or rep is None or op_name not in rep.graph.position:
            self.head.object, self.nest.visible, self.levels.visible = CLICK_HINT, False, False
            return
        try:
            head, nest, levels = layer_detail_parts(rep, op_name)
        except Exception as err:  # the engine's words in the page, never a traceback
            self.head.object, self.nest.visible, self.levels.visible = f"**{error_text(err)}**", False, False
            return
        self.head.object = head
        self.nest.object, self.nest.visible = nest, bool(nest)
        if levels is not None:
            self.levels.value = levels
        self.levels.visible = levels is not None


def fusion_dag(session) -> DagPlot:
    """The Fusion tab's DAG, with what its views derive from a report added to the session's `preparers`: a server's
    page makes it in its shell, so that the first report's views' data are made beside it in the worker thread,
    and the tab itself later, in a piece of the page (`FusionTab(session, dag)`)."""
    state = session.state
    dag = DagPlot(on_select=lambda op: setattr(state, "selected_op", op))
    # the layout first, by the session's runner (a server's worker process): the views' tables read it
    session.preparers.extend([lambda rep: dag_layout(rep.graph, session.run), fusion_view_data,
                              lambda rep: dag.prepare(rep, state.colour_by, tuple(state.cpu_kinds))])
    return dag


class FusionTab:
    """Every fusion view of one session, following its report, colouring and clicked op; `dag` is the session's
    `fusion_dag` when made before (a server's page), else one is made."""

    def __init__(self, session, dag: DagPlot | None = None):
        self.session, state = session, session.state
        self.headline = pn.pane.Markdown("", sizing_mode="stretch_width")
        # shown and hidden through its style: toggling `visible` makes the browser lay out the whole page again
        # (Bokeh's invalidate_layout up to the root: 0.3-0.9 s of a loaded machine's browser per toggle)
        self.busy = pn.indicators.LoadingSpinner(value=True, size=22, label="computing...",
                                                 styles=pn.bind(spinner_styles, session.param.busy))
        self.dag = dag or fusion_dag(session)
        self.detail = LayerDetail()
        self.table = pn.pane.HTML("", stylesheets=[TABLE_CSS], sizing_mode="stretch_width")
        self.energy = BarsPlot(energy_bars, top="top")
        self.latency = BarsPlot(latency_bars, top="latency_ms")
        session.param.watch(lambda e: self.show(e.new), "report")
        state.param.watch(lambda e: self.recolour(), ["colour_by", "cpu_kinds"])
        state.param.watch(lambda e: self.detail.show(session.report, e.new), "selected_op")
        self.show(session.report)

    def show(self, rep):
        """Put a new report into every view, as one message to the browser."""
        if rep is None:
            return
        view = fusion_view_data(rep)
        with one_message():
            self.headline.object = headline_text(rep, self.session.pending)
            self.recolour(rep)
            self.table.object = view.summary_html
            self.energy.show(dict(rep.energy), view.energy_columns)
            self.latency.show(dict(rep.energy), view.latency_columns)
            self.detail.show(rep, self.session.state.selected_op)

    def recolour(self, rep=None):
        rep = rep or self.session.report
        if rep is None:
            return
        state = self.session.state
        try:
            self.dag.show(rep, state.colour_by, tuple(state.cpu_kinds))
        except Exception as err:  # an overlay that cannot be computed: keep the groups and say why
            self.session.error = error_text(err)
            self.dag.show(rep)

    def parts(self, compare: pn.viewable.Viewable | None = None) -> list:
        """The tab's views from the top, `compare` (compare mode's chooser and DAG) right under the DAG: below the
        bars, the second DAG was a page away from the first. Beside the DAG the clicked op's loop nest comes first,
        then the legend: under the legend (up to 900 pixels) it opened below the window."""
        colour_by = toggles(self.session.state.param.colour_by)
        return [pn.Row(self.headline, self.busy), colour_by,
                pn.Row(self.dag.drawn(), pn.Column(self.detail.panel, self.dag.legend)),
                *([compare] if compare is not None else []), self.table,
                pn.pane.Markdown(SUMMARY_NOTE, sizing_mode="stretch_width"),
                pn.Row(self.energy.drawn(), self.latency.drawn(), sizing_mode="stretch_width")]
