"""The network DAG in a layered top-to-bottom layout, each fused group (or part, or module) a shaded outline.

The layout is Sugiyama's (`dashboard.views.layout`), computed once per network (in a server, by a worker
process); a new plan only recolours the op boxes and redraws the outlines around them.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from functools import lru_cache

import networkx as nx
import numpy as np
import pandas as pd

from dashboard.state import KB  # the buffer slider's: a KB is 1,024 bytes in every view (STYLE.md, Units)
from dashboard.views import FONT, counted
from dashboard.views.layout import BOX_H, BOX_W, GAP_Y, DagLayout, lay_out
from dashboard.workers import HERE, Runner
from engine.graph import Graph

# Tableau's 10 with two more: distinct hues; the group colouring keeps neighbouring groups apart.
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#9c755f",
           "#bab0ac", "#1f9e89", "#8f6ad9")
GREY = "#cccccc"
NAN = float("nan")  # between the pieces of a tight outline (`tight_outline`)
# CPU/accelerator parts take their device's colour (so the colour says where an op runs), by label prefix
PART_COLOURS = {"accelerator part": "#4e79a7", "CPU part": "#f28e2b"}
PAD = 7.0  # an outline's margin around its ops' boxes
MAX_HEIGHT = 1300  # the DAG plot's pixels
MIN_SPAN_X = 400.0  # layout units across the first view, at least: a ~640-pixel plot stretches a box at most 1.6x
LEGEND_ROWS = 150  # regions the legend lists one by one
# the legend's swatches by class, not by inline style: 90 bytes less per row of a legend sent on every slider move
SWATCHES = (*PALETTE, *PART_COLOURS.values(), GREY)
SWATCH_CSS = "".join(f"span.s{i} {{ background: {c}40; border-color: {c}; }}\n" for i, c in enumerate(SWATCHES))


@dataclass(frozen=True)
class _Anywhere:
    """A runner left out of a cache's key: the layout is the same wherever it was computed."""

    run: Runner = field(compare=False)


def dag_layout(graph: Graph, run: Runner = HERE) -> DagLayout:
    """The graph's layout (`views.layout.lay_out`, cached), computed by `run` the first time: a server page's
    runner computes it in a worker process, where its seconds of pure Python for a big network do not hold the
    server's GIL (and event loop)."""
    return _dag_layout(graph, _Anywhere(run))


@lru_cache(maxsize=32)
def _dag_layout(graph: Graph, where: _Anywhere) -> DagLayout:
    return where.run(lay_out, graph)


def layered_layout(graph: Graph) -> dict[str, tuple[float, float]]:
    """Op -> (x, y) of its box's centre (layout units; the first op on top)."""
    return dag_layout(graph).pos


def edge_paths(graph: Graph) -> tuple[np.ndarray, ...]:
    """One polyline per DAG edge (in `graph.dag.edges()` order), through the slots Sugiyama kept for it in the
    layers it skips, so a residual or a dense concat passes beside the ops between its ends, not over them."""
    return dag_layout(graph).paths


def convex_hull(points: np.ndarray) -> np.ndarray:
    """The convex hull of 2-D points, counter-clockwise (Andrew's monotone chain)."""
    pts = sorted(set(map(tuple, points)))
    if len(pts) < 3:
        return np.array(pts)

    def half(seq):
        out = []
        for p in seq:
            while len(out) >= 2 and ((out[-1][0] - out[-2][0]) * (p[1] - out[-2][1])
                                     - (out[-1][1] - out[-2][1]) * (p[0] - out[-2][0])) <= 0:
                out.pop()
            out.append(p)
        return out

    lower, upper = half(pts), half(reversed(pts))
    return np.array(lower[:-1] + upper[:-1])


def outline(graph: Graph, ops) -> np.ndarray:
    """The shaded shape around a set of ops: the convex hull of their boxes, with a margin; where that hull would
    cover another op's box, the ops' own boxes joined along their edges (`tight_outline`): hulls covered other
    groups' ops (GoogLeNet: 15 pairs of groups; NASNet-A mobile: 143 of its 636 ops)."""
    pos = layered_layout(graph)
    corners = [(x + dx * (BOX_W / 2 + PAD), y + dy * (BOX_H / 2 + PAD))
               for x, y in (pos[op] for op in ops) for dx in (-1, 1) for dy in (-1, 1)]
    hull = convex_hull(np.array(corners))
    return tight_outline(graph, ops) if covers(hull, _other_boxes(graph, ops, hull)) else hull


def _other_boxes(graph: Graph, ops, hull: np.ndarray) -> np.ndarray:
    """(x0, x1, y0, y1) rows of the boxes of the ops not in `ops` that meet the bounding box of `hull`."""
    names, centres = _centres(graph)
    mine = np.isin(names, list(ops))
    x, y = centres[:, 0], centres[:, 1]
    near = (~mine & (x + BOX_W / 2 > hull[:, 0].min()) & (x - BOX_W / 2 < hull[:, 0].max())
            & (y + BOX_H / 2 > hull[:, 1].min()) & (y - BOX_H / 2 < hull[:, 1].max()))
    return np.column_stack([x[near] - BOX_W / 2, x[near] + BOX_W / 2, y[near] - BOX_H / 2, y[near] + BOX_H / 2])


@lru_cache(maxsize=32)
def _centres(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """(op names, their boxes' centres) as arrays, in graph order."""
    pos = layered_layout(graph)
    return np.array([op.name for op in graph.ops]), np.array([pos[op.name] for op in graph.ops])


def covers(hull: np.ndarray, boxes: np.ndarray) -> bool:
    """Whether the convex polygon `hull` (counter-clockwise) overlaps any of `boxes` ((x0, x1, y0, y1) rows): a
    separating axis between them is one of the boxes' two or one of the hull's edges' normals."""
    if not len(boxes):
        return False
    corners = np.stack([boxes[:, [0, 2]], boxes[:, [1, 2]], boxes[:, [1, 3]], boxes[:, [0, 3]]], axis=1)  # n x 4 x 2
    apart = ((boxes[:, 1] <= hull[:, 0].min()) | (boxes[:, 0] >= hull[:, 0].max())
             | (boxes[:, 3] <= hull[:, 1].min()) | (boxes[:, 2] >= hull[:, 1].max()))
    for a, b in zip(hull, np.roll(hull, -1, axis=0)):  # every corner of a box right of an edge: that edge separates
        cross = (b[0] - a[0]) * (corners[..., 1] - a[1]) - (b[1] - a[1]) * (corners[..., 0] - a[0])
        apart |= (cross <= 0).all(axis=1)
    return not apart.all()


BRIDGE = 5.0  # half the width of the band that joins two ops of a tight outline along their edge


def tight_outline(graph: Graph, ops) -> np.ndarray:
    """Each op's box with its margin, and a band along every edge between two of `ops` from one margin to the other,
    as one shape whose pieces (each convex, counter-clockwise) are separated by NaN rows (Bokeh draws them as one
    patch). The bands run through the gaps between layers and the slots of long edges; a band that would still
    cross another op's box (a long edge's slot close beside it) is left out, so the shape covers no other op's box."""
    lay, pos, inside = dag_layout(graph), layered_layout(graph), set(ops)
    w, h = BOX_W / 2 + PAD, BOX_H / 2 + PAD
    pieces = [[(x - w, y - h), (x + w, y - h), (x + w, y + h), (x - w, y + h)] for x, y in (pos[op] for op in ops)]
    for (u, v), path in zip(graph.dag.edges(), lay.paths):
        if u not in inside or v not in inside:
            continue
        points = [tuple(p) for p in path]
        points[0] = _leaving(points[0], points[1], -h)  # from u's margin (below it) ...
        points[-1] = _leaving(points[-1], points[-2], h)  # ... to v's (above it)
        bands = (np.array([(x1 - BRIDGE, y1), (x1 + BRIDGE, y1), (x0 + BRIDGE, y0), (x0 - BRIDGE, y0)])  # (counter-
                 for (x0, y0), (x1, y1) in zip(points, points[1:]))                                 # clockwise: paths
        pieces += [band.tolist() for band in bands if not covers(band, _other_boxes(graph, ops, band))]  # run down)
    rows = [row for piece in pieces for row in (*piece, (NAN, NAN))][:-1]
    return np.array(rows)


def _leaving(centre, towards, dy: float) -> tuple[float, float]:
    """Where the line from a box's `centre` to `towards` crosses the horizontal line `dy` from the centre."""
    (x0, y0), (x1, y1) = centre, towards
    return (x0 + (x1 - x0) * dy / (y1 - y0) if y1 != y0 else x0, y0 + dy)


def region_colours(graph: Graph, regions) -> list[str]:
    """A colour per region (a tuple of ops) such that regions joined by an edge, or whose outlines' boxes
    come within a layer gap of each other, never share one (with overlapping boxes alone, 24 pairs of a Llama
    prefill's groups one gap apart shared a colour and read as one group); a region's colour follows from its first
    op, so a new plan recolours only the regions it changed and their neighbours (a slider move sends the colours of
    those alone)."""
    return list(_region_colours(graph, tuple(tuple(ops) for ops in regions)))


@lru_cache(maxsize=256)
def _region_colours(graph: Graph, regions: tuple[tuple[str, ...], ...]) -> tuple[str, ...]:
    pos = layered_layout(graph)
    region_of = {op: i for i, ops in enumerate(regions) for op in ops}
    adjacency = nx.Graph()
    adjacency.add_nodes_from(range(len(regions)))
    adjacency.add_edges_from((region_of[u], region_of[v]) for u, v in graph.dag.edges()
                             if u in region_of and v in region_of and region_of[u] != region_of[v])
    boxes = []  # each region's outline's bounding box, widened by half a layer gap: regions a gap apart are neighbours
    for ops in regions:
        xs, ys = [pos[op][0] for op in ops], [pos[op][1] for op in ops]
        boxes.append((min(xs) - BOX_W / 2 - PAD - GAP_Y / 2, max(xs) + BOX_W / 2 + PAD + GAP_Y / 2,
                      min(ys) - BOX_H / 2 - PAD - GAP_Y / 2, max(ys) + BOX_H / 2 + PAD + GAP_Y / 2))
    order = sorted(range(len(regions)), key=lambda i: boxes[i][0])  # sweep along x
    for k, i in enumerate(order):
        for j in order[k + 1:]:
            if boxes[j][0] > boxes[i][1]:
                break
            if boxes[i][2] < boxes[j][3] and boxes[j][2] < boxes[i][3]:
                adjacency.add_edge(i, j)
    first = [min(ops, key=graph.position.__getitem__) for ops in regions]
    colour: dict[int, int] = {}
    for i in sorted(range(len(regions)), key=lambda i: graph.position[first[i]]):  # in execution order
        taken = {colour[j] for j in adjacency[i] if j in colour}
        wanted = zlib.crc32(first[i].encode()) % len(PALETTE)  # the same for the same first op in any plan
        colour[i] = next((c % len(PALETTE) for c in range(wanted, wanted + len(PALETTE)) if c % len(PALETTE)
                          not in taken), wanted)
    return tuple(PALETTE[colour[i]] for i in range(len(regions)))


def short_name(name: str, limit: int = 18) -> str:
    """The last dotted parts of an op's name that fit in its box (`layer4.2.conv3` -> `4.2.conv3`)."""
    parts = name.split(".")
    text = parts[-1]
    for part in reversed(parts[:-1]):
        if len(part) + 1 + len(text) > limit:
            break
        text = part + "." + text
    return text if len(text) <= limit else text[: limit - 1] + "…"


def regions_of(graph: Graph, groups, overlay=None) -> tuple[list[str], list[tuple[str, ...]]]:
    """(label, ops) of each outlined region in execution order: the fused groups, or the parts/modules of `overlay`
    (op -> label)."""
    if overlay is None:
        return [f"G{i}" for i in range(len(groups))], [tuple(g) for g in groups]
    members: dict[str, list[str]] = {}
    for op in graph.ops:
        if overlay.get(op.name):
            members.setdefault(overlay[op.name], []).append(op.name)
    return list(members), [tuple(ops) for ops in members.values()]


def colours_of(graph: Graph, labels, members) -> list[str]:
    """Each region's colour: a CPU/accelerator part its device's (PART_COLOURS), any other region one of a colouring
    in which neighbours differ (`region_colours`)."""
    devices = [next((prefix for prefix in PART_COLOURS if label.startswith(prefix + " ")), None) for label in labels]
    if labels and None not in devices:
        return [PART_COLOURS[d] for d in devices]
    return region_colours(graph, members)


def _key(groups, group_bytes, overlay) -> tuple:
    """Hashable forms of a plan's groups, their DRAM bytes and an overlay, to key the tables' caches."""
    return (tuple(map(tuple, groups)), None if group_bytes is None else tuple(group_bytes),
            None if overlay is None else tuple(sorted(overlay.items())))


def node_table(graph: Graph, groups, word_bits: int, group_bytes=None, overlay=None) -> pd.DataFrame:
    """One row per op (in graph order) with what the hover shows: shapes, MACs, bytes, group and its DRAM cost.

    Boxes take their region's colour: the fused group's, or, with `overlay` (op -> label, e.g. its
    CPU/accelerator part or its module), that label's; ops without a label are grey. Cached: the worker
    thread that made a report fills it, so drawing a new network's DAG on the UI thread finds it ready.
    """
    return _node_table(graph, word_bits, *_key(groups, group_bytes, overlay)).copy()


@lru_cache(maxsize=64)
def _node_table(graph: Graph, word_bits: int, groups, group_bytes, overlay_items) -> pd.DataFrame:
    overlay = None if overlay_items is None else dict(overlay_items)
    pos = layered_layout(graph)
    group_of = {op: i for i, grp in enumerate(groups) for op in grp}
    labels, members = regions_of(graph, groups, overlay)
    colours = dict(zip(labels, colours_of(graph, labels, members)))
    rows = []
    for op in graph.ops:
        g = group_of.get(op.name, -1)
        label = overlay.get(op.name, "") if overlay is not None else (f"G{g}" if g >= 0 else "")
        x, y = pos[op.name]
        rows.append({
            "x0": x - BOX_W / 2, "y0": y - BOX_H / 2, "x1": x + BOX_W / 2, "y1": y + BOX_H / 2,
            "x": x, "y": y, "op": op.name, "kind": op.kind.value,
            "label": f"{short_name(op.name)}\n{op.kind.value}",
            "inputs": ", ".join("x".join(map(str, graph.tensors[t].shape)) for t in op.inputs) or "-",
            "output": "x".join(map(str, graph.tensors[op.outputs[0]].shape)),
            "MACs": op.macs, "weight_bytes": graph.weight_bytes(op.name, word_bits),
            "group": g, "group_ops": counted(len(groups[g]) if g >= 0 else 1, "op"),
            "group_dram_bytes": group_bytes[g] if group_bytes is not None and g >= 0 else 0,
            "overlay": label if overlay is not None and label else "-",  # (a group's label is `group`)
            "colour": colours.get(label, GREY),
            "merged": ", ".join(t for _, t in op.merged[1:]) or "-",
        })
    return pd.DataFrame(rows)


def outline_table(graph: Graph, groups, group_bytes=None, overlay=None) -> pd.DataFrame:
    """One row per outlined region: its label, outline, colour, ops and (for fused groups) DRAM bytes (cached, as
    `node_table`)."""
    return _outline_table(graph, *_key(groups, group_bytes, overlay)).copy()


@lru_cache(maxsize=64)
def _outline_table(graph: Graph, groups, group_bytes, overlay_items) -> pd.DataFrame:
    overlay = None if overlay_items is None else dict(overlay_items)
    pos = layered_layout(graph)
    labels, members = regions_of(graph, groups, overlay)
    colours = colours_of(graph, labels, members)
    rows = []
    for i, (label, ops, colour) in enumerate(zip(labels, members, colours)):
        shape = outline(graph, ops)
        # the tag over the region's first op: at its bounding box's corner, regions starting in one layer put their
        # tags on top of each other (ResNet-50's G1 and G2)
        first = pos[min(ops, key=graph.position.__getitem__)]
        top, left = first[1] + BOX_H / 2 + PAD, first[0] - BOX_W / 2 - PAD
        cost = group_bytes[i] if group_bytes is not None and overlay is None else None
        rows.append({"slot": min(graph.position[op] for op in ops),
                     "xs": _listed(shape[:, 0]), "ys": _listed(shape[:, 1]), "region": label, "colour": colour,
                     "size": counted(len(ops), "op"),
                     "ops": ", ".join(ops) if len(ops) <= 6 else f"{', '.join(ops[:3])}, ... {ops[-1]}",
                     "dram_bytes": -1 if cost is None else int(cost), "tag_x": left, "tag_y": top,
                     "line_width": 2.0})
    return pd.DataFrame(rows)


def _listed(values: np.ndarray) -> list[float]:
    """`values` as a list, each NaN the one object NAN: lists of a region a new plan keeps then compare equal (a NaN
    equals only itself), so a slider move does not send them again."""
    return [NAN if v != v else v for v in values.tolist()]


def legend_html(regions: pd.DataFrame, heading: str, max_rows: int = LEGEND_ROWS) -> str:
    """The regions as an HTML table: colour, label, ops and (fused groups) DRAM bytes, in execution order.

    Past `max_rows` regions the rest are named in one last row (their outlines' hover says the same): a
    Llama prefill's 580 groups made a 114 KB table that the browser rebuilt on every slider move.
    """
    import html

    rows = []
    for r in regions.iloc[:max_rows].itertuples():
        cost = "" if r.dram_bytes < 0 else f"{r.dram_bytes / KB:,.1f} KB"
        swatch = (f'class="swatch s{SWATCHES.index(r.colour)}"' if r.colour in SWATCHES else
                  f'class="swatch" style="background:{r.colour}40;border-color:{r.colour}"')
        rows.append(f'<tr><td><span {swatch}></span> {html.escape(r.region)}</td><td>{r.size}: '
                    f'{html.escape(r.ops)}</td><td>{cost}</td></tr>')
    if len(regions) > max_rows:
        rest = regions.iloc[max_rows:]
        total = rest["dram_bytes"].clip(lower=0).sum()
        rows.append(f'<tr><td>{html.escape(rest["region"].iloc[0])} to {html.escape(rest["region"].iloc[-1])}</td>'
                    f'<td>{len(rest)} more (hover a tag for its ops)</td>'
                    f'<td>{"" if total <= 0 else f"{total / KB:,.1f} KB"}</td></tr>')
    return (f"<b>{html.escape(heading)}</b><table class='legend'><tr><th>region</th><th>ops</th>"
            f"<th>DRAM</th></tr>{''.join(rows)}</table>")


EMPTY_SLOT = {"xs": [], "ys": [], "region": "", "colour": GREY, "size": "", "ops": "", "dram_bytes": -1,
              "tag_x": 0.0, "tag_y": 0.0, "line_width": 0.0}  # no outline, no tag, nothing to hover


def region_columns(graph: Graph, regions: pd.DataFrame) -> dict[str, list]:
    """The outlines' data source columns: one row per op slot (graph order), a region's row at its first op's, the
    other rows empty. A region that a new plan keeps keeps its row, and the row count never changes, so a slider
    move patches the changed rows alone (a merge renumbered and moved every later row of one row per region)."""
    columns = {col: [value] * len(graph.ops) for col, value in EMPTY_SLOT.items()}
    for row in regions.to_dict("records"):
        for col in EMPTY_SLOT:
            columns[col][row["slot"]] = row[col]
    return columns


def node_columns(nodes: pd.DataFrame) -> dict[str, list]:
    """The op boxes' data source columns (one row per op, graph order); a group's DRAM bytes are its outline's
    (that column changes on most moves)."""
    return {col: nodes[col].tolist() for col in nodes.columns if col != "group_dram_bytes"}


OP_TOOLTIPS = [("op", "@{op}"), ("kind", "@{kind}"), ("folded", "@{merged}"), ("inputs", "@{inputs}"),
               ("output", "@{output}"), ("MACs", "@{MACs}{0,0}"), ("weights (B)", "@{weight_bytes}{0,0}"),
               ("group", "@{group}{custom} (@{group_ops})"),
               ("part / module", "@{overlay}")]
# the op's group with its DRAM bytes, read from the outlines' source (the boxes' carry no per-plan bytes: a move
# would send them all); `value` is the group's index
GROUP_JS = """
const regions = source.get_column("region"), bytes = source.get_column("dram_bytes");
const i = regions.indexOf("G" + value);
return i >= 0 && bytes[i] >= 0 ? `G${value}: ${bytes[i].toLocaleString("en-US")} B of DRAM traffic` : `G${value}`;
"""
REGION_TOOLTIPS = [("region", "@{region} (@{size})"), ("ops", "@{ops}"), ("DRAM (B)", "@{dram_bytes}{0,0}")]
# The rows of a glyph near the view (the view widened by half its size on each side) that have something to show:
# BokehJS culls neither text nor quads to the view, so it measured and painted all 708 op labels, 580 group tags and
# 708 boxes of a Llama prefill, and parsed all their colours, on every slider move, with ~3% of them in view at the
# first zoom. `bounds` names the columns of each row's extent: numbers, or arrays (an outline's xs and ys).
NEAR_VIEW_JS = """
const w = xr.end - xr.start, h = yr.end - yr.start;
const near = [xr.start - w / 2, xr.end + w / 2, yr.start - h / 2, yr.end + h / 2];
this.near = near;
const [x0, x1, y0, y1] = bounds.map((name) => source.get_column(name));
const shown = source.get_column(text);
const lo = (v) => typeof v === "number" ? v : Math.min(...v.filter(Number.isFinite));  // (NaN between pieces)
const hi = (v) => typeof v === "number" ? v : Math.max(...v.filter(Number.isFinite));
const rows = [];
for (let i = 0; i < shown.length; i++) {
  if (shown[i] && hi(x1[i]) >= near[0] && lo(x0[i]) <= near[1] && hi(y1[i]) >= near[2] && lo(y0[i]) <= near[3]) {
    rows.push(i);
  }
}
return rows;
"""
# Recomputes the filters' rows when the view leaves the area they cover, or is zoomed in more than twice.
VIEW_MOVED_JS = """
const w = xr.end - xr.start, h = yr.end - yr.start;
for (const f of filters) {
  const near = f.near;
  if (near == null || xr.start < near[0] || xr.end > near[1] || yr.start < near[2] || yr.end > near[3]
      || 4 * w < near[1] - near[0] || 4 * h < near[3] - near[2]) f.change.emit();
}
"""


@dataclass(frozen=True)
class DagDrawing:
    """What a DAG figure (`empty_dag_figure`) shows for one network and colouring: its data sources' columns (by
    source name), its first view (ranges, height), its title and its op boxes' hover lines."""

    columns: dict
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    height: int
    title: str
    op_tooltips: tuple


# the columns each data source's glyphs read: an empty figure's sources hold them, empty
DAG_COLUMNS = {"dag-regions": tuple(EMPTY_SLOT), "dag-edges": ("x", "y"),
               "dag-ops": ("x0", "y0", "x1", "y1", "x", "y", "op", "kind", "label", "inputs", "output", "MACs", "weight_bytes",
                           "group", "group_ops", "overlay", "colour", "merged"),
               "dag-labels": ("x", "y", "label")}


def dag_drawing(graph: Graph, groups, word_bits: int, group_bytes=None, overlay=None, title="",
                highlight=()) -> DagDrawing:
    """The DAG of `graph` with each region (fused group, or part/module of `overlay`) outlined, as data: made in
    the worker thread that computed the report, and set into the page's one DAG figure (`draw_dag`)."""
    nodes = node_table(graph, groups, word_bits, group_bytes, overlay)
    regions = outline_table(graph, groups, group_bytes, overlay)
    regions.loc[regions["region"].isin(list(highlight)), "line_width"] = 6.0  # e.g. groups another plan lacks
    lay = dag_layout(graph)
    # the first view shows the network's top at a readable scale, at most MAX_HEIGHT pixels high (the browser
    # repaints the whole canvas per plan: a 3,000-pixel one took twice as long); drag to pan down
    scale = min(1.0, 1100.0 / max(lay.width, 1.0))
    height = int(min(MAX_HEIGHT, max(420, (lay.height + 80) * scale)))
    xs, ys = nodes["x"].to_numpy(), nodes["y"].to_numpy()
    top = float(ys.max()) + BOX_H * 1.5
    # at least MIN_SPAN_X layout units across and the plot's height in units down: a small network is not
    # stretched to fill the plot (a single op's box was drawn half the plot wide and a third of it high)
    middle = (float(xs.min()) + float(xs.max())) / 2
    half = max(float(xs.max() - xs.min()) / 2 + BOX_W, MIN_SPAN_X / 2 / scale)
    # every edge in one array per axis, NaN between edges: one array per edge went to the browser as a websocket
    # frame of its own (3,482 frames, 3 s of the server's UI thread, for a Llama prefill)
    joined = np.concatenate([np.vstack([p, (np.nan, np.nan)]) for p in lay.paths]) if lay.paths else np.empty((0, 2))
    columns = {"dag-regions": region_columns(graph, regions), "dag-edges": {"x": joined[:, 0], "y": joined[:, 1]},
               "dag-ops": node_columns(nodes), "dag-labels": {col: nodes[col].tolist() for col in ("x", "y", "label")}}
    return DagDrawing(columns, (middle - half, middle + half), (top - height / scale, top), height,
                      title or f"{graph.name}: {len(groups)} fused groups (click an op for its loop nest)",
                      tuple(OP_TOOLTIPS if overlay is not None else OP_TOOLTIPS[:-1]))


def empty_dag_figure():
    """A DAG figure with nothing in it, made with the page; each network's drawing is set into it (`draw_dag`).

    Its data sources are named "dag-regions", "dag-edges", "dag-ops" and "dag-labels" (`DagPlot` patches the first
    and third per plan). A figure made per network cost the server's event loop 0.1-0.2 CPU s to attach to the
    page (Bokeh walks the whole document and reads every property of every new model); new data costs it little.
    A Bokeh figure, not a HoloViews element: HoloViews spends seconds turning a few hundred paths and polygons into
    glyphs, Bokeh milliseconds.
    """
    from bokeh.models import (
        CDSView,
        ColumnDataSource,
        CustomJS,
        CustomJSFilter,
        CustomJSHover,
        HoverTool,
        Line,
        Patches,
        Quad,
        Range1d,
        TapTool,
        Text,
    )
    from bokeh.plotting import figure

    # no tool takes the mouse wheel: over a plot up to 1,300 pixels high it zoomed instead of scrolling the page (the
    # wheel-zoom tool is in the toolbar, one click away)
    fig = figure(x_range=Range1d(0, 1), y_range=Range1d(0, 1), min_height=420, height=420,
                 sizing_mode="stretch_width", min_width=300, tools="pan,wheel_zoom,box_zoom,reset,save",
                 active_scroll=None, output_backend="canvas")
    fig.axis.visible = False
    fig.grid.visible = False
    # the title's font set, not themed: with the page's pieces attached by their new models only, the title came in
    # the Fast theme's font (Open Sans, not served: the browser's fallback) or the page's, and its first paint left
    # a copy of it above the figure (docs/dashboard.md, "The DAG's first paint")
    fig.title.update(text_font=FONT, text_font_size="1.15em")
    region_src, edge_src, op_src, label_src = (ColumnDataSource({col: [] for col in cols}, name=name)
                                               for name, cols in DAG_COLUMNS.items())
    ranges = {"xr": fig.x_range, "yr": fig.y_range}

    def near(bounds, text):  # a view of the rows with `text` whose extent (columns x0, x1, y0, y1) is near the view
        return CDSView(filter=CustomJSFilter(args={**ranges, "bounds": bounds, "text": text}, code=NEAR_VIEW_JS))

    views = {"shapes": near(["xs", "xs", "ys", "ys"], "region"), "tags": near(["tag_x", "tag_x", "tag_y", "tag_y"], "region"),
             "boxes": near(["x0", "x1", "y0", "y1"], "op"), "labels": near(["x", "x", "y", "y"], "label")}
    # each glyph added as one model (`add_glyph`), not `figure`'s three (the glyph, its non-selected and muted
    # copies), which Bokeh walks whenever the page's document changes shape; only the boxes are selected, so only
    # they need a non-selected look of their own (the browser derives the others')
    fig.add_glyph(region_src, Patches(xs="xs", ys="ys", fill_color="colour", fill_alpha=0.18, line_color="colour",
                                      line_width="line_width"), view=views["shapes"])
    tags = fig.add_glyph(region_src, Text(x="tag_x", y="tag_y", text="region", text_font_size="8pt",
                                          text_font_style="bold", text_color="colour", text_baseline="bottom"),
                         view=views["tags"])
    fig.add_glyph(edge_src, Line(x="x", y="y", line_color="#777777", line_width=0.8, line_alpha=0.7))
    box = Quad(left="x0", right="x1", bottom="y0", top="y1", fill_color="colour", line_color="#333333", line_width=0.8)
    boxes = fig.add_glyph(op_src, box, view=views["boxes"], nonselection_glyph=box.clone(),
                          selection_glyph=box.clone(line_color="black", line_width=3))
    # the op labels never change with the plan: on a source of their own, a new plan's colours do not make the
    # browser measure every label again (708 of them in a Llama prefill: ~40 ms a move)
    fig.add_glyph(label_src, Text(x="x", y="y", text="label", text_font_size="7pt", text_align="center",
                                  text_baseline="middle", text_color="#111111", text_line_height=1.1),
                  view=views["labels"])
    moved = CustomJS(args={**ranges, "filters": [v.filter for v in views.values()]}, code=VIEW_MOVED_JS)
    for bound in ("start", "end"):
        fig.x_range.js_on_change(bound, moved)
        fig.y_range.js_on_change(bound, moved)
    # one tooltip at a time: an op's names its group and that group's DRAM bytes; a region's ops are its tag's (a
    # hover on the outlines showed the region's tooltip on top of the op's, the op being inside its outline)
    group = CustomJSHover(args={"source": region_src}, code=GROUP_JS)
    fig.add_tools(HoverTool(renderers=[boxes], tooltips=OP_TOOLTIPS[:-1], formatters={"@{group}": group},
                            name="dag-op-hover"),
                  HoverTool(renderers=[tags], tooltips=REGION_TOOLTIPS), TapTool(renderers=[boxes]))
    return fig


def draw_dag(fig, drawing: DagDrawing) -> None:
    """Show `drawing` in a figure made by `empty_dag_figure`: every source's columns anew, the first view, the title
    and the hover lines; no op selected."""
    sources = {r.data_source.name: r.data_source for r in fig.renderers}  # (`select` walks every model's values)
    for name, columns in drawing.columns.items():
        sources[name].data = dict(columns)
    sources["dag-ops"].selected.indices = []
    (x0, x1), (y0, y1) = drawing.x_range, drawing.y_range
    fig.x_range.update(start=x0, end=x1, reset_start=x0, reset_end=x1)
    fig.y_range.update(start=y0, end=y1, reset_start=y0, reset_end=y1)
    fig.update(height=drawing.height, min_height=drawing.height)
    fig.title.text = drawing.title
    hover = next(t for t in fig.tools if t.name == "dag-op-hover")
    if list(hover.tooltips) != list(drawing.op_tooltips):
        hover.tooltips = list(drawing.op_tooltips)


def dag_figure(graph: Graph, groups, word_bits: int, group_bytes=None, overlay=None, title="", highlight=()):
    """A DAG figure showing `graph` (`dag_drawing`'s arguments): the ops as labelled boxes in a layered layout, each
    region a shaded outline tagged with its label; hover names an op, or a region's ops and DRAM bytes."""
    fig = empty_dag_figure()
    draw_dag(fig, dag_drawing(graph, groups, word_bits, group_bytes, overlay, title, highlight))
    return fig


def plan_differences(graph: Graph, plan_a, plan_b) -> pd.DataFrame:
    """Where two plans group the ops differently: the smallest blocks of ops that whole groups of both plans
    cover, one row per block whose groups differ, with each plan's groups and DRAM bytes there (exact: both
    plans' groups inside a block cover exactly its ops)."""
    links = nx.Graph()
    links.add_nodes_from(op.name for op in graph.ops)
    for plan in (plan_a, plan_b):
        for grp in plan.groups:
            links.add_edges_from(zip(grp, grp[1:]))
    index = {op.name: i for i, op in enumerate(graph.ops)}
    rows = []
    for block in sorted(nx.connected_components(links), key=lambda ops: min(index[o] for o in ops)):
        inside = [[(i, grp) for i, grp in enumerate(plan.groups) if grp[0] in block] for plan in (plan_a, plan_b)]
        if {frozenset(g) for _, g in inside[0]} == {frozenset(g) for _, g in inside[1]}:
            continue
        cost = [sum(plan.costs[i].dram_bytes for i, _ in groups) for plan, groups in zip((plan_a, plan_b), inside)]
        rows.append({"ops": len(block), "first op": min(block, key=index.get),
                     f"{plan_a.method} groups": " ".join(f"G{i}" for i, _ in inside[0]),
                     f"{plan_b.method} groups": " ".join(f"G{i}" for i, _ in inside[1]),
                     f"{plan_a.method} bytes": cost[0], f"{plan_b.method} bytes": cost[1],
                     "difference": cost[1] - cost[0]})
    return pd.DataFrame(rows)
