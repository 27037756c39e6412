"""Errors the engine raises: one base class, so callers (the dashboard) catch one type."""

from __future__ import annotations

from os import PathLike


class EngineError(Exception):
    """Bad input or an impossible request, with a message a person can act on."""


class ModelFileError(EngineError):
    """A network file that cannot be read: not ONNX, truncated, cyclic, unsafe, or shapeless.

    `path`, `node` and `reason` are kept apart so the dashboard can show them as fields.
    """

    def __init__(self, path: str | PathLike[str], reason: str, node: str | None = None):
        self.path, self.node, self.reason = str(path), node, reason
        where = f"{self.path}" + (f", node '{node}'" if node else "")
        super().__init__(f"{where}: {reason}")


class ShapeError(ModelFileError):
    """A tensor whose shape is dynamic or unknown; the message names the input to fix."""


class GraphError(EngineError):
    """A graph that breaks the IR's rules (a cycle, a tensor with two producers, a dangling name)."""


class AcceleratorError(EngineError):
    """An accelerator description with a zero, negative or absurd value, or an unknown preset."""


class UnknownNameError(EngineError):
    """A name (network, method, preset) outside the known set; the message lists the valid ones."""

    def __init__(self, what: str, name: str, valid):
        self.what, self.name, self.valid = what, name, tuple(sorted(valid))
        super().__init__(f"unknown {what} '{name}'; choose one of: {', '.join(self.valid)}")


class PartialImportWarning(UserWarning):
    """An ONNX file imported without its data-dependent part (detection post-processing); the text names it."""
