"""`load_network`: one entry point for zoo names and ONNX files."""

from __future__ import annotations

from pathlib import Path

from engine.errors import EngineError
from engine.graph import Graph


def load_network(name_or_path, *, batch: int | None = None, input_shapes: dict | None = None) -> Graph:
    """Load a built-in network by name, or an .onnx file by path, at the given batch size.

    A zoo network defaults to batch 1; a file keeps the batch it was saved with.
    """
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise EngineError(f"batch must be a positive whole number, got {batch!r}")
    text = str(name_or_path)
    if isinstance(name_or_path, Path) or text.endswith(".onnx") or "/" in text:
        from engine.onnx_import import load_onnx

        return load_onnx(_locate(Path(text)), batch=batch, input_shapes=input_shapes)
    from engine import zoo

    return zoo.build(text, batch=batch or 1)


def onnx_light_models() -> Path:
    """Folder of the onnx package's own light model zoo (nine weight-free classic CNNs)."""
    import onnx

    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _locate(path: Path) -> Path:
    """`path` itself, or, for a bare file name that does not exist here, the onnx package's light model of that name."""
    if not path.exists() and path.parent == Path(".") and (onnx_light_models() / path.name).is_file():
        return onnx_light_models() / path.name
    return path
