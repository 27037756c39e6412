"""Old home of `save_onnx` and `to_model`, kept so their imports still work: see `engine.onnx`."""

from engine.onnx.export import save_onnx, to_model

__all__ = ["save_onnx", "to_model"]
