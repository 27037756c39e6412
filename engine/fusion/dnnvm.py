"""DNNVM (Xing et al. 2019) as Optimus describes it: fusion that never crosses a branch.

An op with more than one producer op or more than one consumer op is a barrier and
stays alone; the rest form chains, each cut into groups by dynamic programming
under the prior cost model (all fmaps and parameters of a group on chip at once,
see `efficient_s.prior_fits`).
"""

from __future__ import annotations

from engine.fusion.efficient_s import segments
from engine.fusion.model import FusionModel
from engine.fusion.sized import SizedModel


def chains(model: FusionModel) -> list[list[int]]:
    """Maximal producer-consumer chains of non-barrier ops, and every barrier as a chain of one."""
    barrier = [model.pred[i].bit_count() > 1 or model.succ[i].bit_count() > 1 for i in range(model.n)]
    out: list[list[int]] = []
    tail: dict[int, list[int]] = {}  # op -> chain it ends
    for i in range(model.n):
        p = model.pred[i]
        if not barrier[i] and p.bit_count() == 1 and not barrier[prev := p.bit_length() - 1] and prev in tail:
            chain = tail.pop(prev)
            chain.append(i)
        else:
            chain = [i]
            out.append(chain)
        if not barrier[i]:
            tail[i] = chain
    return out


def search(at: SizedModel) -> tuple[list[int], int, bool]:
    """DNNVM's groups: each chain cut optimally under the prior cost model."""
    groups, evaluated, exact = [], 0, True
    for chain in chains(at.model):
        found, count, whole = segments(at, chain)
        groups += found
        evaluated += count
        exact &= whole
    return groups, evaluated, exact
