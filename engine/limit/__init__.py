"""The attainable limit: the least DRAM traffic any schedule can reach at a buffer size (the Orojenesis ski-slope).

Per op, `op_curve` gives the exact ski-slope of Huang et al., "Mind the Gap: Attainable Data
Movement and Operational Intensity Bounds for Tensor Algorithms" (ISCA 2024), in the fusion
cost model's conventions; per network, `network` gives the layer-by-layer and the fused
limit, lower bounds on every plan the engine prices (`docs/limit.md` has the argument).
"""

from engine.limit.einsum import Einsum, Rank, at, gemm, ski_slope
from engine.limit.graph_limit import NetworkLimit, curve
from engine.limit.graph_limit import network_limit as network
from engine.limit.ops import op_table


def op_curve(g, op_name: str, word_bits: int = 16) -> tuple[tuple[int, int], ...]:
    """Ski-slope steps `((buffer_bytes, least_traffic_bytes), ...)` of one op run alone, traffic non-increasing.

    At a buffer of S bytes the least traffic is that of the last step with buffer_bytes <= S
    (`engine.limit.at`); below the first step no tiling fits.
    """
    return op_table(g, op_name, word_bits).steps


__all__ = ["Einsum", "NetworkLimit", "Rank", "at", "curve", "gemm", "network", "op_curve", "ski_slope"]
