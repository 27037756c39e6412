"""The graph IR enforces its rules and derives its totals."""

import pytest

import engine
from engine.graph import Graph, Op, Tensor, conv_macs


def _chain():
    t = [Tensor("x", (1, 3, 8, 8)), Tensor("a", (1, 4, 8, 8)), Tensor("b", (1, 4, 8, 8)),
         Tensor("w", (4, 3, 3, 3), is_weight=True)]
    ops = [Op("relu", "eltwise", ("a",), ("b",)),  # given out of order on purpose
           Op("conv", "conv", ("x",), ("a",), ("w",), kernel=(3, 3), macs=conv_macs((1, 4, 8, 8), 3, (3, 3)))]
    return Graph.build("chain", ops, t, ("x",), ("b",))


def test_topological_order_and_totals():
    g = _chain()
    assert [op.name for op in g.ops] == ["conv", "relu"]
    assert g.macs == 4 * 64 * 27 and g.params == 108
    assert g.producer("a") == "conv" and g.consumers("a") == ("relu",)
    assert g.dag.edges["conv", "relu"]["tensors"] == ("a",)
    assert g.tensors["a"].nbytes(16) == 512 and g.tensors["a"].nbytes(8) == 256
    assert hash(g) == hash(_chain()) and g == _chain()


def test_rules():
    t = [Tensor("x", (1, 4)), Tensor("y", (1, 4))]
    with pytest.raises(engine.GraphError, match="unknown tensor"):
        Graph.build("g", [Op("a", "eltwise", ("x",), ("z",))], t, ("x",), ("z",))
    with pytest.raises(engine.GraphError, match="produced by both"):
        Graph.build("g", [Op("a", "eltwise", ("x",), ("y",)), Op("b", "eltwise", ("x",), ("y",))], t, ("x",), ("y",))
    with pytest.raises(engine.GraphError, match="cycle"):
        Graph.build("g", [Op("a", "eltwise", ("y",), ("x",)), Op("b", "eltwise", ("x",), ("y",))], t, (), ("y",))
    with pytest.raises(engine.GraphError, match="non-positive"):
        Tensor("bad", (1, 0))
    with pytest.raises(ValueError):
        Op("a", "not-a-kind", ("x",), ("y",))
