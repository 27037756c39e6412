"""`sweep`: every combination of networks x batches x accelerators x buffer sizes x fusion methods, as one tidy table.

Each combination (a `SweepKey`) becomes one row through `evaluate_key`, a pure function of
the key: load the network, give the accelerator preset that buffer, run `engine.fuse`. A
combination that fails leaves its message in the row's `error` column instead of stopping
the sweep. Rows run in parallel with dask, on this machine's cores by default or on a
dask.distributed cluster given its address; with `out=`, finished rows go to a Parquet file
in chunks and a rerun skips the keys already there. pandas and dask are imported inside the
functions that use them, so `import engine` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import numbers
import os
import re
import sys
import threading
import time
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from engine.accelerator import Accelerator
from engine.errors import EngineError, UnknownNameError

if TYPE_CHECKING:
    import pandas as pd

LOCAL_SCHEDULERS = ("processes", "synchronous")  # dask's local schedulers: every core, or one row at a time here
FLUSH_SECONDS = 30.0  # a row that finishes this long after the last write to `out` writes every waiting row
TASK_PREFIX = "sweep-row-"  # dask key prefix of the row tasks

# column -> pandas dtype of a sweep table: the key first, then what the row measured
KEY_COLUMNS = {"network": "string", "batch": "int64", "accelerator": "string", "buffer_bytes": "int64",
               "method": "string"}
RESULT_COLUMNS = {"dram_bytes": "Int64", "fmap_in_bytes": "Int64", "fmap_out_bytes": "Int64", "param_bytes": "Int64",
                  "oracle_bytes": "Int64", "groups": "Int64", "groups_evaluated": "Int64", "seconds": "float64",
                  "status": "string", "error": "string", "finished_at": "datetime64[ns, UTC]"}
COLUMNS = {**KEY_COLUMNS, **RESULT_COLUMNS}

_UNITS = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}  # size suffix -> bytes (KB means 1024 bytes)


@dataclass(frozen=True)
class SweepKey:
    """One combination: which network at which batch, on which accelerator preset with which buffer, by which method."""

    network: str
    batch: int
    accelerator: str
    buffer_bytes: int
    method: str


@dataclass(frozen=True)
class SweepGrid:
    """The axes of a sweep; `keys()` is every combination of their values, one row each.

    Accelerators and methods are checked here, before any work starts; networks are not,
    because a path may exist only where the cluster's workers run: a bad one becomes an
    error row. Repeated values are dropped, keeping the first.
    """

    networks: tuple[str, ...]
    accelerators: tuple[str, ...]
    buffers_bytes: tuple[int, ...]
    methods: tuple[str, ...]
    batches: tuple[int, ...] = (1,)

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            values = (value,) if isinstance(value, (str, Path, numbers.Integral)) else tuple(value)
            if not values:
                raise EngineError(f"sweep grid: '{f.name}' is empty; give at least one value")
            object.__setattr__(self, f.name, tuple(dict.fromkeys(_axis_value(f.name, v) for v in values)))
        from engine.fusion import METHODS

        for method in self.methods:
            if method not in METHODS:
                raise UnknownNameError("fusion method", method, METHODS)
        for name in self.accelerators:
            if name not in Accelerator.presets():
                raise UnknownNameError("accelerator preset", name, Accelerator.presets())

    @classmethod
    def of(cls, grid) -> SweepGrid:
        """`grid` itself, or the grid a mapping with the field names describes."""
        if isinstance(grid, cls):
            return grid
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(grid) - set(names))
        if unknown:
            raise EngineError(f"sweep grid: unknown key(s) {', '.join(unknown)}; the keys are {', '.join(names)}")
        missing = [n for n in names[:4] if n not in grid]
        if missing:
            raise EngineError(f"sweep grid: missing key(s) {', '.join(missing)}")
        return cls(**grid)

    def keys(self) -> tuple[SweepKey, ...]:
        """Every combination, networks varying slowest and methods fastest."""
        axes = (self.networks, self.batches, self.accelerators, self.buffers_bytes, self.methods)
        return tuple(SweepKey(*combo) for combo in itertools.product(*axes))


def _axis_value(axis: str, value):
    """One grid value, checked: names are strings (a network may be a path), sizes positive whole numbers."""
    if axis in ("buffers_bytes", "batches"):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise EngineError(f"sweep grid: {axis} must be positive whole numbers, got {value!r}")
        return int(value)
    if axis == "networks" and isinstance(value, Path):
        return str(value)
    if not isinstance(value, str):
        raise EngineError(f"sweep grid: {axis} must be names (strings), got {value!r}")
    return value


def parse_bytes(text: str) -> int:
    """Bytes in a size like "64K", "1M", "1.5MB" or "131072" (K = 1024, the engine's unit)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]?)(?:I?B)?\s*", str(text), re.IGNORECASE)
    if not match:
        raise EngineError(f"cannot read '{text}' as a size; write bytes or a number with K, M or G (64K, 1M)")
    size = float(match.group(1)) * _UNITS[match.group(2).upper()]
    if size < 1 or size != int(size):
        raise EngineError(f"size '{text}' is not a positive whole number of bytes")
    return int(size)


def evaluate_key(key: SweepKey) -> dict:
    """The row of one combination: `engine.fuse` of the network on the preset with that buffer, and its costs.

    Any failure (unknown network, an op that cannot run on so small a buffer) is caught and
    left as the row's `error`, so one bad combination never stops a sweep.
    """
    from engine.fusion import fuse, oracle_bytes
    from engine.loading import load_network

    row = dict(zip(KEY_COLUMNS, astuple(key)))
    try:
        graph = load_network(key.network, batch=key.batch)
        acc = Accelerator.preset(key.accelerator).with_buffer(key.buffer_bytes)
        plan = fuse(graph, acc, method=key.method)
        row.update(dram_bytes=plan.dram_bytes, fmap_in_bytes=plan.fmap_in_bytes, fmap_out_bytes=plan.fmap_out_bytes,
                   param_bytes=plan.param_bytes, oracle_bytes=oracle_bytes(graph, acc), groups=len(plan.groups),
                   groups_evaluated=plan.groups_evaluated, seconds=plan.search_seconds, status=plan.status)
    except Exception as err:  # every failure, expected or not, is recorded in its row
        row["error"] = _message(err)
    return row


def _message(err: BaseException) -> str:
    """An engine error's own message; anything else prefixed with its type, which is then the useful part."""
    return str(err) if isinstance(err, EngineError) else f"{type(err).__name__}: {err}"


def sweep(grid, *, out=None, scheduler=None, progress: bool = False, chunk_rows: int = 64) -> pd.DataFrame:
    """Evaluate every combination of `grid` (a `SweepGrid` or a dict of its fields) into one tidy pandas DataFrame.

    Rows come in `grid.keys()` order, one per combination (columns: `COLUMNS`). `out`, a
    Parquet path, receives finished rows every `chunk_rows` rows (or `FLUSH_SECONDS`),
    rewritten atomically so the file is whole at every moment; keys already in it are not
    evaluated again, so rerunning an interrupted sweep resumes it. `scheduler`: None or
    "processes" for dask's local process pool on every core, "synchronous" for one row at
    a time in this process, a dask.distributed address ("tcp://HOST:8786") or `Client`.
    `progress` draws dask's progress bar on stdout.
    """
    grid = SweepGrid.of(grid)
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise EngineError(f"chunk_rows must be a positive whole number, got {chunk_rows!r}")
    keys = grid.keys()
    sink = _Sink(Path(out) if out is not None else None, chunk_rows)
    todo = [k for k in keys if astuple(k) not in sink.done]
    try:
        if todo:
            _runner(scheduler)(todo, sink, scheduler, progress)
    finally:
        sink.flush()
    rows = {**sink.done, **sink.rows}
    return _frame([rows[astuple(k)] for k in keys])


class _Sink:
    """Rows finished in this run, and the Parquet file they go to in chunks (the whole file rewritten atomically)."""

    def __init__(self, out: Path | None, chunk_rows: int):
        self.out, self.chunk_rows = out, chunk_rows
        self.saved = read_sweep(out) if out is not None else _frame([])  # every row the file holds
        self.done = {_key_of(r): r for r in self.saved.to_dict("records")}  # key tuple -> row already in the file
        self.rows: dict[tuple, dict] = {}  # key tuple -> row finished in this run
        self.unsaved: list[dict] = []  # rows finished but not yet in the file
        self.last_flush = time.monotonic()

    def add(self, row: dict, *, keep: bool = True) -> None:
        """Record a finished row; `keep=False` (a task the cluster lost) keeps it out of the file for a rerun."""
        import pandas as pd

        row = {**row, "finished_at": pd.Timestamp.now(tz="UTC")}
        self.rows[_key_of(row)] = row
        if keep and self.out is not None:
            self.unsaved.append(row)
            if len(self.unsaved) >= self.chunk_rows or time.monotonic() - self.last_flush >= FLUSH_SECONDS:
                self.flush()

    def flush(self) -> None:
        """Write the unsaved rows after the saved ones: to a temporary file, then renamed over `out`."""
        import pandas as pd

        self.last_flush = time.monotonic()
        if not self.unsaved or self.out is None:  # (rows are kept unsaved only when there is a file)
            return
        frames = [f for f in (self.saved, _frame(self.unsaved)) if len(f)]
        self.saved = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        self.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.out.with_name(self.out.name + ".tmp")
        self.saved.to_parquet(tmp, index=False)
        os.replace(tmp, self.out)
        self.unsaved = []


def _key_of(row: dict) -> tuple:
    """The key tuple of a row, in `KEY_COLUMNS` order, with plain Python values."""
    return tuple(int(row[c]) if dtype == "int64" else str(row[c]) for c, dtype in KEY_COLUMNS.items())


def _frame(rows: list[dict]) -> pd.DataFrame:
    """Rows as a DataFrame with every column of `COLUMNS` in its dtype (missing values as NA)."""
    import pandas as pd

    extra = [c for r in rows for c in r if c not in COLUMNS]
    frame = pd.DataFrame(rows, columns=[*COLUMNS, *dict.fromkeys(extra)])
    return frame.astype(COLUMNS)


def read_sweep(path) -> pd.DataFrame:
    """The rows of an earlier sweep's Parquet file (none where it does not exist yet); EngineError if it is not one."""
    import pandas as pd

    path = Path(path)
    if not path.exists():
        return _frame([])
    try:
        frame = pd.read_parquet(path)
    except Exception as err:
        raise EngineError(f"cannot read '{path}' as a Parquet file ({err}); give another `out` or delete it") from err
    try:
        return sweep_rows(frame)
    except EngineError as err:
        raise EngineError(f"'{path}' is {err}; give another `out` or delete it") from err


def sweep_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """A sweep's rows from a table read elsewhere (e.g. an uploaded file); EngineError if it is not a sweep's."""
    missing = [c for c in KEY_COLUMNS if c not in frame.columns]
    if missing:
        raise EngineError(f"not a sweep file: it lacks the column(s) {', '.join(missing)}")
    return _frame(frame.to_dict("records"))


def _runner(scheduler):
    """The function that evaluates keys on `scheduler`: dask's local scheduler or a dask.distributed cluster."""
    if scheduler is None or scheduler in LOCAL_SCHEDULERS:
        return _run_local
    from distributed import Client

    if (isinstance(scheduler, str) and "://" in scheduler) or isinstance(scheduler, Client):
        return _run_distributed
    raise EngineError(f"scheduler must be one of {', '.join(LOCAL_SCHEDULERS)}, a dask.distributed address "
                      f"such as tcp://HOST:8786, or a distributed.Client; got {scheduler!r}")


def _run_local(keys: list[SweepKey], sink: _Sink, scheduler, progress: bool) -> None:
    """Evaluate `keys` with dask's local scheduler; each row reaches `sink` as soon as its task finishes."""
    import dask
    from dask.callbacks import Callback
    from dask.diagnostics import ProgressBar

    tasks = [dask.delayed(evaluate_key, pure=True)(k, dask_key_name=f"{TASK_PREFIX}{i}") for i, k in enumerate(keys)]

    def posttask(key, result, dsk, state, worker_id):
        if isinstance(key, str) and key.startswith(TASK_PREFIX):
            sink.add(result)

    with Callback(posttask=posttask), ProgressBar() if progress else contextlib.nullcontext():
        # one row per hand-out (dask batches 6): rows differ in cost by 1000x, so batches would leave cores idle
        dask.compute(*tasks, scheduler=scheduler or "processes", chunksize=1)


def _run_distributed(keys: list[SweepKey], sink: _Sink, scheduler, progress: bool) -> None:
    """Evaluate `keys` on a dask.distributed cluster; each row reaches `sink` as soon as its future finishes."""
    from distributed import Client, as_completed
    from distributed.diagnostics.progressbar import TextProgressBar

    with contextlib.ExitStack() as stack:
        client = scheduler if isinstance(scheduler, Client) else stack.enter_context(_connect(scheduler))
        futures = client.map(evaluate_key, keys, pure=True)
        key_of = {f.key: k for f, k in zip(futures, keys)}
        if progress and client.scheduler is not None:  # (None only for a client not started)
            # the console bar blocks until every future is done, so it draws from its own thread
            bar = threading.Thread(target=TextProgressBar, args=(futures,),
                                   kwargs={"scheduler": client.scheduler.address}, daemon=True)
            bar.start()
            stack.callback(bar.join, timeout=5)
        for future, result in as_completed(futures, with_results=True, raise_errors=False):
            if future.status == "finished":
                sink.add(result)
            else:
                lost = dict(zip(KEY_COLUMNS, astuple(key_of[future.key])))
                sink.add({**lost, "error": f"the cluster lost this task: {_message(future.exception())}"}, keep=False)


def _connect(address: str):
    """A client of the dask scheduler at `address`, or an error that says how to start one."""
    from distributed import Client

    try:
        return Client(address, timeout="10s")
    except (OSError, TimeoutError) as err:
        raise EngineError(f"cannot reach a dask scheduler at '{address}' ({err}); start one with `dask scheduler` "
                          "and workers with `dask worker ADDRESS` (docs/sweep.md)") from err


# ---- command line: `python -m engine sweep ...` ----------------------------------

def add_arguments(parser) -> None:
    """The options of the `sweep` subcommand."""
    parser.add_argument("--networks", required=True, help="comma-separated zoo names or .onnx paths")
    parser.add_argument("--accelerators", default="optimus", help="comma-separated preset names (default optimus)")
    parser.add_argument("--buffers", required=True, help="comma-separated buffer sizes: 64K,128K,1M (K = 1024 bytes)")
    parser.add_argument("--methods", default="optimus", help="comma-separated fusion methods (default optimus)")
    parser.add_argument("--batches", default="1", help="comma-separated batch sizes (default 1)")
    parser.add_argument("--out", default=None, help="Parquet file the rows go to; a rerun resumes it")
    parser.add_argument("--scheduler", default=None,
                        help="dask.distributed address (tcp://HOST:8786), or processes | synchronous (default: "
                             "every local core)")
    parser.add_argument("--chunk-rows", type=int, default=64, help="rows per write to --out (default 64)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                        help="draw a progress bar")


def main(args) -> int:
    """Run the sweep the parsed `args` describe and print its table; 1 when some combination failed."""
    try:
        if args.out and not Path(args.out).parent.is_dir():
            raise EngineError(f"--out {args.out}: the folder {Path(args.out).parent} does not exist")
        grid = SweepGrid(networks=_items(args.networks), accelerators=_items(args.accelerators),
                         buffers_bytes=tuple(parse_bytes(b) for b in _items(args.buffers)),
                         methods=_items(args.methods), batches=tuple(_whole(b) for b in _items(args.batches)))
        frame = sweep(grid, out=args.out, scheduler=args.scheduler, progress=args.progress,
                      chunk_rows=args.chunk_rows)
    except EngineError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    shown = frame.drop(columns=["finished_at"])
    print(shown.to_string(index=False, max_rows=60, max_colwidth=60))
    failed = int(frame["error"].notna().sum())
    where = f"; rows in {args.out}" if args.out else ""
    print(f"{len(frame)} combinations, {failed} failed{where}")
    return 1 if failed else 0


def _items(text: str) -> tuple[str, ...]:
    """The non-empty items of a comma-separated option."""
    return tuple(v for v in (s.strip() for s in text.split(",")) if v)


def _whole(text: str) -> int:
    """A batch size from the command line."""
    if not text.isdigit():
        raise EngineError(f"batch sizes are positive whole numbers, got '{text}'")
    return int(text)
