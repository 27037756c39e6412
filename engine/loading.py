"""`load_network`: one entry point for zoo names and ONNX files."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

from engine.errors import EngineError
from engine.graph import MAX_BATCH, Graph, valid_batch


def load_network(name_or_path, *, batch: int | None = None, input_shapes: dict | None = None,
                 data_counts=None) -> Graph:
    """Load a built-in network by name, or an .onnx file by path, at the given batch size.

    A zoo network defaults to batch 1; a file keeps the batch it was saved with. A file's graph is cached by
    its content (not its name), so a file rewritten under the same name loads afresh. `data_counts` sets a
    file's data-dependent counts (a detector's NonZero and NMS sizes; engine.onnx.counts): a whole number for
    all, node name -> number, or None for each count's most; `Graph.assumptions` lists those used.
    """
    if batch is not None and not valid_batch(batch):
        raise EngineError(f"batch must be a whole number in 1..{MAX_BATCH}, got {batch!r}")
    text = str(name_or_path)
    if isinstance(name_or_path, Path) or text.endswith(".onnx") or "/" in text:
        from engine.onnx.counts import DataCounts

        path = _locate(Path(text))
        counts = DataCounts.of(data_counts)
        try:
            shapes = tuple(sorted((str(k), v if isinstance(v, int) else tuple(v))
                                  for k, v in dict(input_shapes or {}).items()))
            hash(shapes)
            digest = _digest(path) if path.is_file() else ""
        except (OSError, ValueError, TypeError):  # an unreadable name, or shapes that cannot key a cache
            digest = ""
        if not digest:
            from engine.onnx import load_onnx

            return load_onnx(path, batch=batch, input_shapes=input_shapes, data_counts=counts)
        return _load_file(str(path.absolute()), digest, batch, shapes, counts)
    if data_counts is not None:
        raise EngineError(f"data_counts applies to ONNX files; the built-in network '{text}' has no "
                          f"data-dependent count")
    from engine import zoo

    return zoo.build(text, batch=batch or 1)


@lru_cache(maxsize=32)
def _load_file(path: str, digest: str, batch: int | None, shapes: tuple, counts) -> Graph:
    """The graph of the file at `path` whose content hashes to `digest` (graphs are immutable: safe to share);
    `counts` is a checked, hashable `DataCounts`."""
    from engine.onnx import load_onnx

    return load_onnx(Path(path), batch=batch, input_shapes=dict(shapes), data_counts=counts)


def _digest(path: Path) -> str:
    """SHA-256 of the file at `path`, streamed, after its size and framing pass (garbage is never hashed whole)."""
    from engine.onnx.read import check_file

    check_file(path)
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def onnx_light_models() -> Path:
    """Folder of the onnx package's own light model zoo (nine weight-free classic CNNs)."""
    import onnx

    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _locate(path: Path) -> Path:
    """`path` itself, or, for a bare file name that does not exist here, the onnx package's light model of that name."""
    try:
        if not path.exists() and path.parent == Path(".") and (onnx_light_models() / path.name).is_file():
            return onnx_light_models() / path.name
    except (OSError, ValueError):  # a NUL or an over-long name: the importer names the problem
        pass
    return path
