"""Sweeps: one row per combination, the same rows on every scheduler, error rows, resume from the Parquet file."""

import importlib

import pandas as pd
import pytest
from dask.callbacks import Callback
from pandas.testing import assert_frame_equal

import engine
from engine.__main__ import main as cli
from engine.errors import EngineError, UnknownNameError
from engine.sweep import KEY_COLUMNS, SweepGrid, SweepKey, evaluate_key, parse_bytes, sweep

KB = 1024
GRID = {"networks": ["resnet18", "mobilenet_v2", "nosuchnet"], "accelerators": ["optimus"],
        "buffers_bytes": [64 * KB, 256 * KB], "methods": ["optimus", "dnnvm"]}
TIMING = ["seconds", "finished_at"]  # the only columns that differ between two runs of one grid


def same_rows(a, b):
    assert_frame_equal(a.drop(columns=TIMING), b.drop(columns=TIMING))


@pytest.fixture(scope="module")
def serial():
    return sweep(GRID, scheduler="synchronous")


def test_one_row_per_combination_in_grid_order(serial):
    keys = SweepGrid.of(GRID).keys()
    assert len(serial) == len(keys) == 12
    assert [tuple(r) for r in serial[list(KEY_COLUMNS)].itertuples(index=False)] == [
        (k.network, k.batch, k.accelerator, k.buffer_bytes, k.method) for k in keys]


def test_rows_are_the_fusion_plans(serial):
    """Every good row is `engine.fuse` of its key, recomputed; its bytes add up and never beat the Oracle."""
    good = serial[serial["error"].isna()]
    assert len(good) == 8
    for row in good.itertuples(index=False):
        graph = engine.load_network(row.network, batch=row.batch)
        acc = engine.Accelerator.preset(row.accelerator).with_buffer(row.buffer_bytes)
        plan = engine.fuse(graph, acc, method=row.method)
        assert (row.dram_bytes, row.groups, row.status) == (plan.dram_bytes, len(plan.groups), plan.status)
        assert row.dram_bytes == row.fmap_in_bytes + row.fmap_out_bytes + row.param_bytes
        assert row.oracle_bytes == engine.fusion.oracle_bytes(graph, acc) <= row.dram_bytes
    best = good.pivot_table(index=["network", "buffer_bytes"], columns="method", values="dram_bytes")
    assert (best["optimus"] <= best["dnnvm"]).all() and (best["optimus"] < best["dnnvm"]).any()


def test_bad_network_is_an_error_row_not_an_exception(serial):
    bad = serial[serial["network"] == "nosuchnet"]
    assert len(bad) == 4
    assert bad["error"].str.startswith("unknown network 'nosuchnet'; choose one of: alexnet").all()
    assert bad["dram_bytes"].isna().all() and bad["status"].isna().all()
    assert serial.loc[serial["network"] != "nosuchnet", "error"].isna().all()


def test_local_process_pool_gives_identical_rows(serial):
    same_rows(sweep(GRID, scheduler="processes"), serial)


def test_local_cluster_with_two_workers_gives_identical_rows(serial):
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        same_rows(sweep(GRID, scheduler=cluster.scheduler_address, progress=True), serial)
        with Client(cluster) as client:
            same_rows(sweep(GRID, scheduler=client), serial)


def test_rerun_skips_keys_already_in_the_file(tmp_path, serial):
    out = tmp_path / "sweep.parquet"
    first = sweep({**GRID, "networks": ["resnet18"]}, out=out, scheduler="synchronous")
    assert len(pd.read_parquet(out)) == 4
    second = sweep(GRID, out=out, scheduler="synchronous")
    same_rows(second, serial)
    old = second["network"] == "resnet18"
    assert (second.loc[old, "finished_at"].to_numpy() == first["finished_at"].to_numpy()).all()
    assert (second.loc[~old, "finished_at"] > first["finished_at"].max()).all()  # only the 8 new keys ran
    on_disk = pd.read_parquet(out)
    assert len(on_disk) == 12 and not on_disk.duplicated(list(KEY_COLUMNS)).any()
    third = sweep(GRID, out=out, scheduler="synchronous")
    assert_frame_equal(third, second)  # nothing left to run: every row, timestamps included, comes from the file


class Interrupted(Exception):
    pass


def row_counter(rows: list, *, stop_at=None) -> Callback:
    """A dask callback that collects every row a sweep evaluates, and interrupts it after `stop_at` rows."""
    def posttask(key, result, dsk, state, worker_id):
        if isinstance(result, dict):
            rows.append(result)
            if len(rows) == stop_at:
                raise Interrupted
    return Callback(posttask=posttask)


def test_interrupted_sweep_resumes_from_its_chunks(tmp_path, serial):
    """Stop a sweep after 5 rows (chunks of 2 rows): the file keeps what finished, and the rerun runs only the rest."""
    out = tmp_path / "sweep.parquet"
    before, after = [], []
    with row_counter(before, stop_at=5), pytest.raises(Interrupted):
        sweep(GRID, out=out, scheduler="synchronous", chunk_rows=2)
    saved = pd.read_parquet(out)
    assert 4 <= len(saved) <= 5  # the chunks written, plus the unsaved row flushed on the way out
    with row_counter(after):
        resumed = sweep(GRID, out=out, scheduler="synchronous", chunk_rows=2)
    same_rows(resumed, serial)
    assert len(after) == 12 - len(saved)
    ran = {tuple(r[c] for c in KEY_COLUMNS) for r in after}
    assert ran.isdisjoint(saved[list(KEY_COLUMNS)].itertuples(index=False, name=None))


def test_a_file_that_is_not_a_sweep_is_refused(tmp_path):
    out = tmp_path / "other.parquet"
    pd.DataFrame({"x": [1]}).to_parquet(out)
    with pytest.raises(EngineError, match="not a sweep file"):
        sweep(GRID, out=out, scheduler="synchronous")


def test_evaluate_key_records_a_buffer_too_small_to_run():
    row = evaluate_key(SweepKey("vgg16", 1, "optimus", 64, "optimus"))
    assert "cannot run even alone" in row["error"] and "dram_bytes" not in row


@pytest.mark.parametrize("change, error", [
    ({"methods": ["optimus", "fastest"]}, "unknown fusion method 'fastest'"),
    ({"accelerators": ["tpu"]}, "unknown accelerator preset 'tpu'"),
    ({"buffers_bytes": [0]}, "positive whole numbers"),
    ({"batches": [1.5]}, "positive whole numbers"),
    ({"methods": []}, "'methods' is empty"),
    ({"buffer": [1]}, "unknown key"),
])
def test_grid_refuses_bad_axes_before_any_work(change, error):
    with pytest.raises(EngineError, match=error):
        SweepGrid.of({**GRID, **change})


def test_grid_takes_single_values_and_drops_repeats():
    grid = SweepGrid("alexnet", ("optimus",), [64 * KB, 64 * KB, 128 * KB], "none", batches=4)
    assert grid.keys() == (SweepKey("alexnet", 4, "optimus", 64 * KB, "none"),
                           SweepKey("alexnet", 4, "optimus", 128 * KB, "none"))
    with pytest.raises(UnknownNameError):  # an EngineError that lists the valid names
        SweepGrid.of({**GRID, "methods": ["x"]})


@pytest.mark.parametrize("text, size", [("64K", 65536), ("64KB", 65536), ("64kib", 65536), ("1M", 1048576),
                                        ("1.5M", 1572864), ("131072", 131072), ("2G", 2 * 1024 ** 3)])
def test_parse_bytes(text, size):
    assert parse_bytes(text) == size


@pytest.mark.parametrize("text", ["64Q", "0", "1.3", "K", ""])
def test_parse_bytes_refuses(text):
    with pytest.raises(EngineError):
        parse_bytes(text)


def test_engine_sweep_stays_the_function_after_importing_its_module():
    importlib.import_module("engine.sweep")
    assert engine.sweep is sweep


def test_command_line(tmp_path, capsys, serial):
    out = tmp_path / "cli.parquet"
    args = ["sweep", "--networks", "resnet18,mobilenet_v2,nosuchnet", "--accelerators", "optimus",
            "--buffers", "64K,256K", "--methods", "optimus,dnnvm", "--out", str(out), "--scheduler", "synchronous",
            "--no-progress"]
    assert cli(args) == 1  # the nosuchnet rows failed
    assert "12 combinations, 4 failed" in capsys.readouterr().out
    on_disk = pd.read_parquet(out)  # in the order rows finished
    same_rows(serial[list(KEY_COLUMNS)].merge(on_disk, how="left"), serial)
    assert cli(args[:2] + ["alexnet", *args[3:]]) == 0
    assert cli(["sweep", "--networks", "alexnet", "--buffers", "64Q"]) == 2
    assert "cannot read '64Q' as a size" in capsys.readouterr().err
