"""The dashboard page, built per browser session from one ExplorerState.

Fast views (fusion, energy) recompute on every throttled slider move; slow ones
(the what-if curve, the allocation ILP) run off the UI thread, keep showing the last
result meanwhile, and a newer request supersedes an older one.
"""

from __future__ import annotations

import asyncio
import io
import tempfile
from functools import lru_cache
from pathlib import Path

import holoviews as hv
import pandas as pd
import panel as pn
import param

import engine
from dashboard.state import BUFFER_STEPS_KB, KB, ExplorerState
from dashboard.views.curve import curve_view
from dashboard.views.dag import dag_view, layered_layout, node_table
from dashboard.views.energy import energy_bars, latency_bars
from dashboard.views.sweep import sweep_view
from dashboard.views.timeline import timeline_view
from engine.explore import allocate_for_budget, buffer_curve, evaluate

MAX_UPLOAD_BYTES = 200 * 1024 * 1024
# the choices the fusion report depends on
REPORT_PARAMS = ("network", "batch", "preset", "buffer_kb", "pe_rows", "pe_cols", "rf_bytes", "word_bits", "dram_gbps",
                 "methods", "access_model", "upload_name")
URL_PARAMS = ("network", "batch", "preset", "buffer_kb", "pe_rows", "pe_cols", "rf_bytes", "word_bits", "dram_gbps",
              "methods", "access_model", "budget", "budget_kb", "cpu_kinds", "colour_by", "selected_op")


@lru_cache(maxsize=16)
def load_graph(name: str, batch: int, upload_path: str = "") -> engine.Graph:
    """A zoo network or light model by name, or the session's uploaded file."""
    return engine.load_network(upload_path or name, batch=batch)


@lru_cache(maxsize=64)
def fusion_report(graph: engine.Graph, acc: engine.Accelerator, methods: tuple[str, ...], access_model: str):
    return evaluate(graph, acc, methods=methods, access_model=access_model)


def message(err: Exception) -> pn.pane.Alert:
    """An error as the page shows it: the engine's own words, never a traceback."""
    if isinstance(err, engine.EngineError):
        return pn.pane.Alert(str(err), alert_type="danger")
    return pn.pane.Alert(f"internal error ({err.__class__.__name__}): {err}. Please report it with the URL.",
                         alert_type="danger")


class Session(param.Parameterized):
    """One browser session: its state, the current report (computed off the UI thread), and the views."""

    report = param.Parameter(default=None, doc="The Report the views show (the last one that finished)")
    shown_graph = param.Parameter(default=None, doc="The graph of that report; a new one redraws the DAG afresh")
    busy = param.Boolean(default=False, doc="True while a newer report is being computed")
    error = param.String(default="", doc="Why the last request produced no report")

    def __init__(self, state: ExplorerState | None = None, **params):
        super().__init__(**params)
        self.state = state or ExplorerState()
        self.upload_dir = Path(tempfile.mkdtemp(prefix="dnn-explorer-"))
        self.status = pn.pane.Alert("", alert_type="danger", visible=False, sizing_mode="stretch_width")
        self._report_ticket = self._curve_ticket = self._alloc_ticket = 0
        self.state.param.watch(self._request, list(REPORT_PARAMS))
        self.param.watch(self._show_status, "error")
        self.param.watch(self._follow_graph, "report")
        self.refresh()

    # ---- model -------------------------------------------------------------
    def graph(self) -> engine.Graph:
        s = self.state
        upload = str(self.upload_dir / s.upload_name) if s.upload_name else ""
        return load_graph(s.network, s.batch, upload)

    def compute_report(self):
        """The fusion report for the current state (pure and cached; may take seconds on big networks)."""
        s = self.state
        methods = tuple(m for m in ("none", "dnnvm", "efficient_s", "optimus", "online") if m in s.methods)
        return fusion_report(self.graph(), s.accelerator(), methods or ("optimus",), s.access_model)

    def refresh(self):
        """Recompute the report here and now (start-up, tests)."""
        try:
            self.param.update(report=self.compute_report(), error="")
        except Exception as err:  # shown to the user, never raised into Bokeh
            self.error = _text(err)

    def _request(self, *_):
        """A state change: recompute off the UI thread in a server session, at once elsewhere."""
        if pn.state.curdoc is not None and pn.state.curdoc.session_context is not None:
            pn.state.execute(self._refresh_async)
        else:
            self.refresh()

    async def _refresh_async(self):
        """Compute in a worker thread; the last report stays up meanwhile, and a newer request wins."""
        self._report_ticket += 1
        ticket = self._report_ticket
        self.busy = True
        try:
            rep, err = await asyncio.to_thread(self.compute_report), ""
        except Exception as exc:
            rep, err = None, _text(exc)
        if ticket != self._report_ticket:
            return  # superseded by a newer request
        if rep is None:
            self.param.update(error=err, busy=False)
        else:
            self.param.update(report=rep, error="", busy=False)

    def _follow_graph(self, event):
        if event.new is not None and event.new.graph != self.shown_graph:
            self.shown_graph = event.new.graph

    def _show_status(self, event):
        self.status.object, self.status.alert_type, self.status.visible = event.new, "danger", bool(event.new)

    # ---- views (functions of the report) -------------------------------------
    def headline(self, rep):
        if rep is None:
            return pn.pane.Markdown("")
        g, acc = rep.graph, rep.acc
        best = min(rep.plans.values(), key=lambda p: p.dram_bytes)
        lines = [f"### {g.name} (batch {g.batch}) on {acc.name}, {acc.buffer_bytes / KB:,.0f} KB buffer",
                 f"{len(g.ops)} ops, {g.macs / 1e9:.2f} GMACs, {g.params / 1e6:.2f} M parameters. "
                 f"Oracle DRAM traffic {rep.oracle_bytes / 1e6:,.2f} MB; best plan ({best.method}) "
                 f"{best.dram_bytes / 1e6:,.2f} MB in {len(best.groups)} groups."]
        return pn.pane.Markdown("\n\n".join(lines))

    def dag(self, rep, colour_by="fused group", cpu_kinds=()):
        if rep is None:
            return hv.Graph(([], [])).opts(title="(no network loaded)")
        method = "optimus" if "optimus" in rep.plans else next(iter(rep.plans))
        plan = rep.plans[method]
        overlay, title = None, ""
        try:
            if colour_by == "CPU/accelerator part":
                overlay, title = part_overlay(rep.graph, tuple(cpu_kinds or ()), rep.acc.word_bits)
            elif colour_by == "module":
                overlay, title = module_overlay(rep.graph, rep.acc)
        except Exception as err:  # an overlay that cannot be computed leaves the groups and says why
            self.error = _text(err)
        return dag_view(rep.graph, plan.groups, rep.acc.word_bits, [c.dram_bytes for c in plan.costs], overlay, title)

    def dag_pane(self, graph):
        """A DAG plot per network: colours follow every new report, while zoom and pan survive them."""
        dag = hv.DynamicMap(pn.bind(self.dag, self.param.report, self.state.param.colour_by,
                                    self.state.param.cpu_kinds))
        hv.streams.Tap(source=dag, x=None, y=None).add_subscriber(self._select_op)
        return pn.pane.HoloViews(dag, sizing_mode="stretch_width")

    def _select_op(self, x=None, y=None):
        """A click on the DAG selects the op drawn nearest to it (rows are 1 apart, so distance is in rows)."""
        if x is None or y is None:
            return
        pos = layered_layout(self.graph())
        name, (px, py) = min(pos.items(), key=lambda kv: (kv[1][0] - x) ** 2 + (kv[1][1] - y) ** 2)
        if (px - x) ** 2 + (py - y) ** 2 < 0.25:
            self.state.selected_op = name

    def layer_detail(self, selected_op, rep):
        """The clicked op's best blocking on this accelerator: loop nest and per-level accesses and energy."""
        if not selected_op or rep is None:
            return pn.pane.Markdown("Click an op in the DAG to see its loop nest here.")
        try:
            graph, acc = rep.graph, rep.acc
            counts = layer_counts(graph, selected_op, acc)
        except Exception as err:
            return message(err)
        op = graph.op(selected_op)
        head = (f"### {op.name} ({op.kind.value}, {op.macs:,} MACs)\n"
                f"Folded ONNX nodes: {', '.join(f'{n} ({t})' for n, t in op.merged)}")
        if counts is None:
            return pn.pane.Markdown(head + "\n\nThis op has no convolution-like loop nest to block "
                                           "(element-wise, concat, reshape or other): it streams its inputs once.")
        levels = pd.DataFrame([{"level": c.level, "reads": c.reads, "writes": c.writes,
                                "energy_uJ": round(c.energy_pj / 1e6, 3)} for c in counts.levels])
        nest = "\n".join(counts.loop_nest)
        note = "\n\nThe RF cannot hold one element of every tensor: MACs read the buffer." if counts.rf_skipped else ""
        return pn.Column(pn.pane.Markdown(head + note), pn.pane.Markdown(f"```\n{nest}\n```"),
                         pn.widgets.Tabulator(levels, disabled=True, show_index=False))

    def energy(self) -> pn.Row:
        """Energy and latency bars that update in place with each report (no new plot per slider move)."""
        energies = pn.bind(lambda rep: dict(rep.energy) if rep is not None else {}, self.param.report)
        bars = hv.DynamicMap(pn.bind(energy_bars, energies))
        latency = hv.DynamicMap(pn.bind(latency_bars, energies))
        return pn.Row(pn.pane.HoloViews(bars, sizing_mode="stretch_width"),
                      pn.pane.HoloViews(latency, sizing_mode="stretch_width"), sizing_mode="stretch_width")

    def summary_table(self) -> pn.widgets.Tabulator:
        """One table of the methods' DRAM bytes, groups, energy and latency, refilled with each report."""
        table = pn.widgets.Tabulator(pd.DataFrame(), disabled=True, sizing_mode="stretch_width", show_index=False,
                                     formatters={"dram_bytes": {"type": "money", "precision": 0, "symbol": ""}})

        def refill(rep):
            if rep is not None:
                table.value = rep.summary_frame()

        refill(self.report)
        self.param.watch(lambda e: refill(e.new), "report")
        return table

    async def curve(self, network, batch, preset, buffer_kb, pe_rows, pe_cols, rf_bytes, word_bits, dram_gbps,
                    methods, upload_name):
        """The what-if curve, computed off the UI thread; a newer call supersedes this one."""
        self._curve_ticket += 1
        ticket = self._curve_ticket
        yield pn.indicators.LoadingSpinner(value=True, size=40, label="computing the buffer-size curve...")
        try:
            graph, acc = self.graph(), self.state.accelerator()
            wanted = tuple(m for m in methods) or ("optimus",)
            df = await asyncio.to_thread(_curve_cached, graph, acc.with_buffer(KB), wanted)
        except Exception as err:
            yield message(err)
            return
        if ticket != self._curve_ticket:
            return  # superseded
        plot = hv.DynamicMap(lambda: curve_view(df, buffer_kb))
        tap = hv.streams.Tap(source=plot, x=None, y=None)
        tap.add_subscriber(self._jump_to_buffer)
        yield pn.pane.HoloViews(plot, sizing_mode="stretch_width")

    def _jump_to_buffer(self, x=None, y=None):
        if x is None or x <= 0:
            return
        self.state.buffer_kb = min(BUFFER_STEPS_KB, key=lambda k: abs(k - x) / k)

    async def timeline(self, network, batch, word_bits, budget, budget_kb, upload_name):
        """The COSMA allocation's memory timeline, solved off the UI thread with a time limit."""
        self._alloc_ticket += 1
        ticket = self._alloc_ticket
        yield pn.indicators.LoadingSpinner(value=True, size=40, label="solving the allocation ILP...")
        try:
            graph, acc = self.graph(), self.state.accelerator()
            chosen = budget_kb * KB if budget == "bytes" else budget
            alloc, budget_bytes = await asyncio.to_thread(_allocation_cached, graph, acc, chosen)
        except Exception as err:
            yield message(err)
            return
        if ticket != self._alloc_ticket:
            return
        if not alloc.has_plan:  # infeasible, or a time-out before any plan: the solver's own words
            yield pn.pane.Alert(f"{alloc.status}: {alloc.message}", alert_type="warning")
            return
        yield pn.Column(pn.pane.HoloViews(timeline_view(alloc, budget_bytes), sizing_mode="stretch_width"),
                        _download_table(alloc.timeline(), "allocation.csv"))

    def tables(self, rep):
        if rep is None:
            return pn.pane.Markdown("")
        tabs = []
        for method in rep.plans:
            df = rep.groups_frame(method)
            tabs.append((method, _download_table(df, f"{rep.graph.name}-{method}-groups.csv")))
        ops = node_table(rep.graph, rep.plans[next(iter(rep.plans))].groups, rep.acc.word_bits)
        tabs.append(("ops", _download_table(ops.drop(columns=["x", "y", "colour", "overlay"]),
                                            f"{rep.graph.name}-ops.csv")))
        try:
            modules = pd.DataFrame(engine.plan_modules(rep.graph, rep.acc).table())
            tabs.append(("modules", _download_table(modules, f"{rep.graph.name}-modules.csv")))
            cpu = tuple(self.state.cpu_kinds)
            split = engine.partition(rep.graph, lambda op: op.kind.value not in cpu, word_bits=rep.acc.word_bits)
            parts = pd.DataFrame([{"part": i, "device": p.device, "ops": len(p.ops), "first op": p.ops[0],
                                   "inputs": " ".join(p.inputs), "outputs": " ".join(p.outputs),
                                   "crossing_bytes": p.crossing_bytes} for i, p in enumerate(split.parts)])
            tabs.append(("CPU/accelerator parts", _download_table(parts, f"{rep.graph.name}-parts.csv")))
        except Exception as err:
            tabs.append(("modules and parts", message(err)))
        json_button = pn.widgets.FileDownload(callback=lambda: io.StringIO(rep.to_json()),
                                              filename=f"{rep.graph.name}-report.json", color="primary",
                                              label="Download the whole report (JSON)")
        return pn.Column(json_button, pn.Tabs(*tabs, dynamic=True))

    def sweep_tab(self) -> pn.Column:
        """Open a sweep's Parquet file (from `python -m engine sweep --out ...`) and draw its curves."""
        upload = pn.widgets.FileInput(accept=".parquet", label="Open a sweep's .parquet file")
        shown = pn.Column(pn.pane.Markdown("Run a sweep with `python -m engine sweep ... --out sweep.parquet` "
                                           "(see docs/sweep.md), then open the file here."))

        def opened(event):
            if event.new is None:
                return
            path = self.upload_dir / "sweep.parquet"
            path.write_bytes(event.new)
            try:
                from engine.sweep import read_sweep

                rows = read_sweep(path)
                if rows.empty or rows["error"].notna().all():
                    raise engine.EngineError(f"{upload.filename}: the sweep holds no successful rows")
                failed = int(rows["error"].notna().sum())
                note = f"{len(rows)} rows" + (f", {failed} with errors (not drawn)" if failed else "")
                shown[:] = [pn.pane.Markdown(f"**{upload.filename}**: {note}"),
                            pn.pane.HoloViews(sweep_view(rows), sizing_mode="stretch_width", widget_location="top")]
            except Exception as err:
                shown[:] = [message(err)]

        upload.param.watch(opened, "value")
        return pn.Column(upload, shown, sizing_mode="stretch_width")

    # ---- upload --------------------------------------------------------------
    def on_upload(self, event):
        data, filename = event.new, (self._upload.filename or "model.onnx")
        if data is None:
            return
        if len(data) > MAX_UPLOAD_BYTES:
            self._show_error(f"{filename}: {len(data) / 1e6:.0f} MB is over the {MAX_UPLOAD_BYTES // 2**20} MB limit")
            return
        safe = Path(filename).name or "model.onnx"
        (self.upload_dir / safe).write_bytes(data)
        try:
            load_graph(self.state.network, self.state.batch, str(self.upload_dir / safe))
        except engine.ModelFileError as err:  # name the user's file, not our temporary copy
            self._show_error(f"{safe}" + (f", node '{err.node}'" if err.node else "") + f": {err.reason}")
            return
        except Exception as err:
            self._show_error(_text(err))
            return
        self.state.upload_name = safe

    def _show_error(self, text: str):
        self.error = text

    # ---- layout ----------------------------------------------------------------
    def sidebar(self) -> list:
        s = self.state
        network = pn.widgets.AutocompleteInput.from_param(
            s.param.network, options=list(s.param.network.objects), restrict=True, min_characters=0,
            case_sensitive=False, search_strategy="includes", label="Network (type to search)")
        self._upload = pn.widgets.FileInput(accept=".onnx", label="or upload an .onnx file", multiple=False)
        self._upload.param.watch(self.on_upload, "value")
        s.param.watch(lambda e: setattr(s, "upload_name", ""), "network")
        buffer = pn.widgets.DiscreteSlider(label="On-chip buffer (KB, log scale)", options=BUFFER_STEPS_KB,
                                           value=s.buffer_kb)
        buffer.param.watch(lambda e: setattr(s, "buffer_kb", e.new), "value_throttled")
        s.param.watch(lambda e: setattr(buffer, "value", e.new), "buffer_kb")
        return [
            pn.pane.Markdown("#### Network"), network, self._upload,
            pn.widgets.IntInput.from_param(s.param.batch),
            pn.pane.Markdown("#### Accelerator"), pn.widgets.Select.from_param(s.param.preset), buffer,
            pn.Row(pn.widgets.IntInput.from_param(s.param.pe_rows, width=110),
                   pn.widgets.IntInput.from_param(s.param.pe_cols, width=110)),
            pn.widgets.IntInput.from_param(s.param.rf_bytes),
            pn.widgets.Select.from_param(s.param.word_bits),
            pn.widgets.FloatInput.from_param(s.param.dram_gbps),
            pn.pane.Markdown("#### Methods"), pn.widgets.CheckBoxGroup.from_param(s.param.methods, inline=False),
            pn.pane.Markdown("Buffer and RF accesses counted from"),
            pn.widgets.RadioButtonGroup.from_param(s.param.access_model),
            pn.widgets.Select.from_param(s.param.budget),
            pn.widgets.IntInput.from_param(s.param.budget_kb),
            pn.widgets.MultiChoice.from_param(s.param.cpu_kinds),
        ]

    def main(self) -> list:
        s = self.state.param
        fast = [s.network, s.batch, s.preset, s.buffer_kb, s.pe_rows, s.pe_cols, s.rf_bytes, s.word_bits,
                s.dram_gbps, s.methods, s.upload_name]
        rep = self.param.report
        busy = pn.indicators.LoadingSpinner(value=True, size=22, visible=self.param.busy, label="computing...")
        fusion = pn.Column(pn.Row(pn.bind(self.headline, rep), busy),
                           pn.widgets.RadioButtonGroup.from_param(s.colour_by),
                           pn.Row(pn.bind(self.dag_pane, self.param.shown_graph),
                                  pn.Column(pn.bind(self.layer_detail, s.selected_op, rep), width=420)),
                           self.summary_table(), self.energy(), sizing_mode="stretch_width")
        curve = pn.panel(pn.bind(self.curve, *fast), sizing_mode="stretch_width")
        timeline = pn.panel(pn.bind(self.timeline, s.network, s.batch, s.word_bits, s.budget, s.budget_kb,
                                    s.upload_name), sizing_mode="stretch_width")
        tabs = pn.Tabs(("Fusion", fusion), ("What-if curve", curve), ("Memory timeline", timeline),
                       ("Tables", pn.bind(self.tables, rep)), ("Sweep", self.sweep_tab()), dynamic=True,
                       sizing_mode="stretch_width")
        return [self.status, tabs]


@lru_cache(maxsize=64)
def part_overlay(graph, cpu_kinds: tuple[str, ...], word_bits: int):
    """Op -> 'accelerator part i' / 'CPU part i' when the kinds in `cpu_kinds` stay on the CPU."""
    split = engine.partition(graph, lambda op: op.kind.value not in cpu_kinds, word_bits=word_bits)
    overlay = {op: f"{p.device} part {i}" for i, p in enumerate(split.parts) for op in p.ops}
    title = (f"{graph.name}: {len(split.accelerator_parts)} accelerator parts, {len(split.parts)} parts in all, "
             f"{split.crossing_bytes / 1e6:,.2f} MB crossing CPU/accelerator")
    return overlay, title


@lru_cache(maxsize=64)
def module_overlay(graph, acc):
    """Op -> its module's name and processing (NPU paper), for multi-branch blocks."""
    plan = engine.plan_modules(graph, acc)
    overlay = {op: f"{m.name} ({m.processing})" for m in plan.modules for op in m.ops}
    title = (f"{graph.name}: {len(plan.modules)} modules; feature-map traffic {plan.naive.bytes / 1e6:,.2f} MB naive, "
             f"{plan.proposed.bytes / 1e6:,.2f} MB with module reuse")
    return overlay, title


@lru_cache(maxsize=512)
def layer_counts(graph, op: str, acc):
    from engine.blocking import layer_access_counts

    return layer_access_counts(graph, op, acc)


@lru_cache(maxsize=32)
def _curve_cached(graph, acc, methods):
    return buffer_curve(graph, acc, methods)


@lru_cache(maxsize=32)
def _allocation_cached(graph, acc, budget):
    return allocate_for_budget(graph, acc, "cosma", budget, time_limit_s=20)


def _download_table(df: pd.DataFrame, filename: str) -> pn.Column:
    button = pn.widgets.FileDownload(callback=lambda: io.StringIO(df.to_csv(index=False)), filename=filename,
                                     label=f"Download {filename}")
    return pn.Column(button, pn.widgets.Tabulator(df, disabled=True, pagination="remote", page_size=25,
                                                  sizing_mode="stretch_width", show_index=False))


def _text(err: Exception) -> str:
    return str(err) if isinstance(err, engine.EngineError) else f"internal error ({err.__class__.__name__}): {err}"


def build_app(state: ExplorerState | None = None) -> pn.template.BaseTemplate:
    """The page for one session; its state mirrors the URL so a copied link reopens the same view."""
    hv.extension("bokeh")
    session = Session(state)
    if pn.state.location is not None:
        pn.state.location.sync(session.state, {p: p for p in URL_PARAMS})
    template = pn.template.FastListTemplate(title="DNN accelerator memory explorer", sidebar_width=330)
    template.sidebar.extend(session.sidebar())
    template.main.extend(session.main())
    return template
