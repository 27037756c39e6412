"""Dashboard state -> Report -> views, without a browser."""

import holoviews as hv
import panel as pn
import pytest

import engine
from dashboard.app import Session, build_app
from dashboard.state import BUFFER_STEPS_KB, ExplorerState


@pytest.fixture
def session():
    return Session(ExplorerState(network="light_squeezenet.onnx", batch=1))


def test_buffer_steps_are_log_spaced_from_8kb_to_8mb():
    assert BUFFER_STEPS_KB[0] == 8 and BUFFER_STEPS_KB[-1] == 8192
    ratios = [b / a for a, b in zip(BUFFER_STEPS_KB, BUFFER_STEPS_KB[1:])]
    assert all(1.3 < r < 1.6 for r in ratios)


def test_preset_choice_fills_every_accelerator_field():
    s = ExplorerState()
    s.preset = "optimus-config8"
    assert (s.pe_rows, s.pe_cols, s.rf_bytes, s.buffer_kb) == (64, 64, 32, 512)
    acc = s.accelerator()
    assert acc.buffer_bytes == 512 * 1024 and acc.pes == 64 * 64
    s.preset = "diannao"  # a split buffer survives as long as the slider is not moved
    assert s.accelerator().split_buffers


def test_buffer_change_gives_a_new_report(session):
    small = session.report
    session.state.buffer_kb = 2048  # outside a server the report follows at once
    big = session.report
    assert big.acc.buffer_bytes == 2048 * 1024
    assert big.plans["optimus"].dram_bytes < small.plans["optimus"].dram_bytes
    assert big.plans["optimus"].dram_bytes >= big.oracle_bytes
    dag = session.dag(big)
    assert isinstance(dag, hv.Graph)
    groups = {g for g in dag.nodes.data["group"]}
    assert len(groups) == len(big.plans["optimus"].groups)


def test_bad_values_show_a_message_not_a_traceback(session):
    session.state.network = "light_vgg19.onnx"
    session.state.param.update(rf_bytes=4096, pe_rows=1)
    assert session.report.graph.name == "light_vgg19" and not session.status.visible
    session.state.word_bits = 4
    with pytest.raises(Exception):
        engine.Accelerator.preset("optimus").with_buffer(0)
    session.state.upload_name = "missing.onnx"  # a file that is not there: the message, the old report kept
    assert session.status.visible and "no such file" in session.status.object
    assert session.report.graph.name == "light_vgg19"


def test_bad_upload_shows_the_importer_message(session):
    class Upload:
        filename = "broken.onnx"

    session._upload = Upload()

    class Event:
        new = b"not a protobuf at all" * 10

    session.on_upload(Event())
    assert session.status.visible and "not an ONNX model" in session.status.object
    assert session.state.upload_name == ""


def test_whole_page_builds():
    page = build_app(ExplorerState(network="light_squeezenet.onnx"))
    assert len(page.main) == 2 and len(page.sidebar) > 10


def test_dag_overlays_colour_by_part_and_module():
    s = Session(ExplorerState(network="googlenet"))
    by_group = s.dag(s.report).nodes.data
    by_part = s.dag(s.report, colour_by="CPU/accelerator part", cpu_kinds=("pool",)).nodes.data
    pools = by_part["kind"] == "pool"
    assert by_part.loc[pools, "overlay"].str.startswith("cpu part").all()
    assert by_part.loc[~pools, "overlay"].str.startswith("accelerator part").all()
    by_module = s.dag(s.report, colour_by="module").nodes.data
    assert by_module["overlay"].str.startswith("inception").sum() > 40  # GoogLeNet's nine inception modules
    assert by_group["overlay"].str.startswith("group").all()


def test_clicking_an_op_shows_its_loop_nest():
    s = Session(ExplorerState(network="resnet18"))
    assert "Click an op" in s.layer_detail("", s.report).object
    s._select_op(x=0.1, y=-0.05)  # a click next to the first op (the top row, centred)
    assert s.state.selected_op == s.graph().ops[0].name
    detail = s.layer_detail(s.state.selected_op, s.report)
    text = detail[0].object + detail[1].object
    assert "for " in text and "MACs" in text
    levels = detail[2].value
    assert list(levels["level"]) == ["RF", "buffer", "DRAM"]
    assert (levels["reads"] > 0).all()


def test_sweep_file_draws_curves(tmp_path):
    from dashboard.views.sweep import sweep_frame, sweep_view

    rows = engine.sweep({"networks": ["squeezenet1_0", "no_such_net"], "accelerators": ["optimus"],
                         "buffers_bytes": [64 * 1024, 512 * 1024], "methods": ["dnnvm", "optimus"]},
                        scheduler="synchronous", out=tmp_path / "s.parquet")
    from engine.sweep import read_sweep

    back = read_sweep(tmp_path / "s.parquet")
    frame = sweep_frame(back)
    assert set(frame["method"]) == {"dnnvm", "optimus", "oracle"}
    assert set(frame["network"]) == {"squeezenet1_0"}  # the failed network's rows are left out
    view = sweep_view(back)
    assert len(view) == 1 and len(rows) == 8


def test_clicking_the_curve_moves_the_slider_to_the_nearest_step(session):
    session._jump_to_buffer(x=1000.0, y=5.0)
    assert session.state.buffer_kb == 1024
    assert session.report.acc.buffer_bytes == 1024 * 1024


def test_allocation_timeline_for_a_named_budget():
    import asyncio

    s = Session(ExplorerState(network="squeezenet1_0"))

    async def last(gen):
        out = None
        async for item in gen:
            out = item
        return out

    shown = asyncio.run(last(s.timeline(None, None, None, "M_R", None, None)))
    plot, table = shown[0].object, shown[1][1].value
    assert isinstance(plot, hv.Overlay) and "cosma: optimal" in plot.opts.get().kwargs["title"]
    assert {"tensor", "step", "address", "size", "event"} <= set(table.columns)
    tiny = asyncio.run(last(s.timeline(None, None, None, "bytes", 1, None)))  # 1 KB: below M_R
    assert "infeasible" in tiny.object


def test_tables_offer_groups_ops_modules_and_parts_as_csv():
    s = Session(ExplorerState(network="googlenet", cpu_kinds=["pool"]))
    page = s.tables(s.report)
    tabs = page[1]
    names = [tabs._names[i] for i in range(len(tabs))]
    assert names == ["dnnvm", "efficient_s", "optimus", "ops", "modules", "CPU/accelerator parts"]
    modules = tabs[4][1].value
    assert modules["module"].iloc[-1] == "total" and len(modules) == 10  # nine inception modules + total
    parts = tabs[5][1].value
    assert set(parts["device"]) == {"cpu", "accelerator"}
    assert all(isinstance(t[0], pn.widgets.FileDownload) for t in tabs)
    assert '"fusion"' in page[0].callback().read()


def test_access_model_switch_reprices_buffer_and_rf_only(session):
    flow = session.report.energy["optimus"]
    session.state.access_model = "blocking"
    blocked = session.report.energy["optimus"]
    assert blocked.dram_pj == flow.dram_pj and blocked.buffer_pj != flow.buffer_pj
