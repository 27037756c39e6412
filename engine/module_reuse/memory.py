"""Sizes of feature maps, weights and working memory on the NPU of the module-reuse paper (Sec. 4).

The paper's NPU computes OFMs in 4x4 patches, so every feature map occupies whole
patches (its height and width rounded up to a multiple of 4: this reproduces the
paper's naive feature-map bytes of Table 1 exactly); it fetches IFMs in four
channel chunks, makes `parallel_ofm` OFM channels at a time (one per
multiply-accumulate array) from partial weights held in a double buffer. These
give the `Partial` sizes of Alg. 6. The paper gives no formula for the working
memory; we take a strided layer (the NPU works at unit stride on 4x4 patches) to
re-lay its IFM into stride phases in working memory, one IFM-sized copy; other
layers need none (see docs/modules.md).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from engine.accelerator import Accelerator
from engine.errors import EngineError
from engine.graph import Graph, Op, word_bytes


@dataclass(frozen=True)
class NpuModel:
    """The on-chip memory and data layout the module planner assumes (bytes; sizes from the paper's Sec. 4)."""

    mem_bytes: int
    word_bits: int
    patch: int = 4  # OFMs are computed in patch x patch tiles: spatial sizes round up to it
    chunks: int = 4  # IFMs are fetched in this many chunks along channels
    parallel_ofm: int = 16  # OFM channels made at once (one per multiply-accumulate array)
    weight_buffers: int = 2  # partial weights are double-buffered

    def __post_init__(self):
        for name in ("mem_bytes", "word_bits", "patch", "chunks", "parallel_ofm", "weight_buffers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise EngineError(f"NpuModel.{name} must be a positive whole number, got {value!r}")

    @classmethod
    def for_accelerator(cls, acc: Accelerator, **overrides) -> NpuModel:
        """The model for `acc`: its global buffer and word width; a 'PxP-patch' dataflow sets the patch,
        the PE rows (the NPU's multiply-accumulate arrays) the OFM channels made at once."""
        match = re.match(r"(\d+)x\1-patch", acc.dataflow)
        base = dict(mem_bytes=acc.buffer_bytes, word_bits=acc.word_bits,
                    patch=int(match.group(1)) if match else 1, parallel_ofm=acc.pe_rows)
        return cls(**{**base, **overrides})

    # ---- feature maps ------------------------------------------------------
    def elements(self, shape: tuple[int, ...], channels: int | None = None) -> int:
        """Elements a feature map occupies, optionally for only `channels` channels.

        Images (N, C, spatial...) round their spatial dims up to whole patches; other
        tensors (N, D) or (N, L, D) have channels last and no patches.
        """
        if len(shape) < 4:
            return math.prod(shape[:-1]) * (shape[-1] if channels is None else channels)
        spatial = math.prod(-(-d // self.patch) * self.patch for d in shape[2:])
        return shape[0] * (shape[1] if channels is None else channels) * spatial

    def fm_bytes(self, graph: Graph, tensor: str) -> int:
        """Bytes of a whole feature map (Alg. 6's size_FM.Full)."""
        return word_bytes(self.elements(graph.tensor(tensor).shape), self.word_bits)

    def ifm_partial(self, graph: Graph, tensor: str) -> int:
        """One channel chunk of an IFM (Alg. 6's size_IFM.Partial)."""
        shape = graph.tensor(tensor).shape
        return word_bytes(self.elements(shape, -(-_channels(shape) // self.chunks)), self.word_bits)

    def ofm_partial(self, graph: Graph, tensor: str) -> int:
        """The OFM channels made at once (Alg. 6's size_OFM.Partial)."""
        shape = graph.tensor(tensor).shape
        return word_bytes(self.elements(shape, min(_channels(shape), self.parallel_ofm)), self.word_bits)

    # ---- per layer -----------------------------------------------------------
    def weights_partial(self, graph: Graph, op: Op) -> int:
        """Double-buffered weights of `parallel_ofm` output channels (Alg. 6's size_W.Partial)."""
        params = graph.op_params(op.name)
        if not params:
            return 0
        channels = _channels(graph.tensor(op.outputs[0]).shape)
        share = math.ceil(params * min(channels, self.parallel_ofm) / channels)
        return self.weight_buffers * word_bytes(share, self.word_bits)

    def working(self, graph: Graph, op: Op) -> int:
        """Working memory (Alg. 6's size_WM.Partial): a strided layer's IFM re-laid into stride phases."""
        if any(s > 1 for s in op.stride):
            return sum(self.fm_bytes(graph, t) for t in dict.fromkeys(op.inputs))
        return 0


def _channels(shape: tuple[int, ...]) -> int:
    return shape[1] if len(shape) >= 4 else shape[-1]
