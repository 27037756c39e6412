"""Old home of `load_onnx`, kept so `engine.onnx_import.load_onnx` and its imports still work: see `engine.onnx`."""

from engine.onnx.load import load_onnx

__all__ = ["load_onnx"]
