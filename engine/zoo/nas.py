"""Cell networks found by architecture search: NASNet-A Mobile, PNASNet-5 Large, AmoebaNet-D and DARTS.

torchvision has none of them, so each follows a published PyTorch reference implementation, with op
and weight names taken from its modules and state-dict keys (docs/zoo.md cites each one and how its
figures were measured). Every `nn.ReLU` call is written where the reference calls it; one that is the
only reader of its input folds into that input's op, as the ONNX importer folds it.

The Cadene ports of NASNet and PNASNet emulate TensorFlow's asymmetric "SAME" padding of stride-2
layers by zero-padding the top and left, running the layer and cropping the first row and column.
Here that is one conv or pool with uneven pads (begin `p + 1 - s`, end `p`), the TensorFlow network
itself; the ports run the first separable conv of such a branch (depthwise and pointwise) on one extra
row and column before cropping, which the reference MAC figures in the tests leave out. FactorizedReduce's shifted path
(`x[:, :, 1:, 1:]`, zero-padded at the bottom and right) is a Slice followed by a layer with end pad 1.
"""

from __future__ import annotations

from engine.graph import OpKind
from engine.zoo._builder import Net

# AmoebaNet-D genotype as torchgpipe defines it (benchmarks/models/amoebanet/genotype.py):
# (input state, operation) pairs, two per new state, and the states each cell concatenates
AMOEBA_NORMAL = ((1, "conv_1x1"), (1, "max_pool_3x3"), (1, "none"), (0, "conv_1x7_7x1"), (0, "conv_1x1"),
                 (0, "conv_1x7_7x1"), (2, "max_pool_3x3"), (2, "none"), (1, "avg_pool_3x3"), (5, "conv_1x1"))
AMOEBA_NORMAL_CONCAT = (0, 3, 4, 6)
AMOEBA_REDUCTION = ((0, "max_pool_2x2"), (0, "max_pool_3x3"), (2, "none"), (1, "conv_3x3"), (2, "conv_1x7_7x1"),
                    (2, "max_pool_3x3"), (3, "none"), (1, "max_pool_2x2"), (2, "avg_pool_3x3"), (3, "conv_1x1"))
AMOEBA_REDUCTION_CONCAT = (4, 5, 6)
# DARTS_V2 genotype (quark0/darts cnn/genotypes.py): (operation, input state) pairs
DARTS_NORMAL = (("sep_conv_3x3", 0), ("sep_conv_3x3", 1), ("sep_conv_3x3", 0), ("sep_conv_3x3", 1),
                ("sep_conv_3x3", 1), ("skip_connect", 0), ("skip_connect", 0), ("dil_conv_3x3", 2))
DARTS_REDUCE = (("max_pool_3x3", 0), ("max_pool_3x3", 1), ("skip_connect", 2), ("max_pool_3x3", 1),
                ("max_pool_3x3", 0), ("skip_connect", 2), ("skip_connect", 2), ("max_pool_3x3", 1))
DARTS_CONCAT = (2, 3, 4, 5)


def _same_pads(kernel: int, stride: int, shifted: bool) -> tuple[int, int, int, int]:
    """2-D pads of a layer with PyTorch padding `kernel // 2`; `shifted` adds Cadene's top-left zero pad + crop."""
    p = kernel // 2
    begin = p + 1 - stride if shifted else p
    return (begin, begin, p, p)


# ---- shared pieces ---------------------------------------------------------------------------------
def _three(prefix: str) -> tuple[str, str, str]:
    """`prefix.0`, `prefix.1`, `prefix.2`: the names of a ReLU, conv and BatchNorm in a row."""
    return f"{prefix}.0", f"{prefix}.1", f"{prefix}.2"


def _relu_conv_bn(net: Net, x: str, relu: str, conv: str, bn: str, cout: int, kernel=1, *, stride=1,
                  padding=0) -> str:
    """ReLU, conv without bias, BatchNorm: NASNet's conv_1x1, PNASNet's ReluConvBn, DARTS' ReLUConvBN."""
    return net.conv(net.activation(x, relu), conv, cout, kernel, stride=stride, padding=padding, bn=bn)


def _separable(net: Net, x: str, dw: str, pw: str, cout: int, kernel: int, *, stride=1, pads=None, dilation=1,
               bn: str) -> str:
    """Depthwise conv then pointwise conv with a BatchNorm: one separable conv of a NAS cell."""
    c = net.shape(x)[1]
    pads = pads if pads is not None else (kernel // 2 * dilation,) * 4
    y = net.conv(x, dw, c, kernel, stride=stride, padding=pads, dilation=dilation, groups=c)
    return net.conv(y, pw, cout, 1, bn=bn)


def _factorized_reduce(net: Net, x: str, name: str, cout: int, *, convs=("conv1", "conv2"), pooled: bool = False,
                       end_pad: int = 1, relu: str = "relu", cat: str = "cat", bn: str = "bn") -> str:
    """ReLU, then two 1x1 convs to `cout // 2` channels each on the map halved at offsets 0 and 1, concat, BatchNorm.

    The second path reads `x[:, :, 1:, 1:]`, zero-padded by `end_pad` at the bottom and right (torchgpipe,
    Cadene) or not (DARTS). `pooled`: Cadene's form, stride-2 1x1 average pools before stride-1 convs.
    """
    x = net.activation(x, f"{name}.{relu}")
    paths = []
    pads: int | tuple[int, int, int, int]
    for i, conv in enumerate(convs):
        y, pads = x, 0
        if i:
            n, c, h, w = net.shape(x)
            y = net.unary(x, f"{name}.slice", "Slice", OpKind.SPLIT, (n, c, h - 1, w - 1))
            pads = (0, 0, end_pad, end_pad)
        if pooled:
            y = net.pool(y, f"{name}.{conv.split('.')[0]}.avgpool", "AveragePool", 1, stride=2, padding=pads)
            paths.append(net.conv(y, f"{name}.{conv}", cout // 2, 1))
        else:
            paths.append(net.conv(y, f"{name}.{conv}", cout // 2, 1, stride=2, padding=pads))
    return net.bn_op(net.concat(paths, f"{name}.{cat}"), f"{name}.{bn}")


def _classifier(net: Net, x: str, pool: str, fc: str, *, kernel: int, stride: int) -> None:
    x = net.pool(x, pool, "AveragePool", kernel, stride=stride)
    net.linear(net.flatten(x, f"{pool}.flatten"), fc, 1000)


# ---- NASNet-A Mobile (Cadene pretrainedmodels nasnet_mobile.py, TF-slim nasnet_mobile) ----------------
def _nas_branch(net: Net, x: str, name: str, cout: int, kernel: int, stride: int = 1, *, mid: int | None = None,
                shifted: bool = False, relus=("relu", "relu1")) -> str:
    """BranchSeparables: ReLU, separable conv (stride), BN, ReLU, separable conv, BN (`mid` channels between)."""
    mid = mid or net.shape(x)[1]
    y = net.activation(x, f"{name}.{relus[0]}")
    y = _separable(net, y, f"{name}.separable_1.depthwise_conv2d", f"{name}.separable_1.pointwise_conv2d", mid,
                   kernel, stride=stride, pads=_same_pads(kernel, stride, shifted), bn=f"{name}.bn_sep_1")
    y = net.activation(y, f"{name}.{relus[1]}")
    return _separable(net, y, f"{name}.separable_2.depthwise_conv2d", f"{name}.separable_2.pointwise_conv2d", cout,
                      kernel, bn=f"{name}.bn_sep_2")


def _nas_pool(net: Net, x: str, name: str, op_type: str, stride: int, shifted: bool = False) -> str:
    return net.pool(x, name, op_type, 3, stride=stride, padding=_same_pads(3, stride, shifted))


def _nasnet_reduction(net: Net, name: str, a: str, b: str, c: int, *, shifted: bool, stem: bool = False) -> str:
    """The NASNet-A reduction cell on hidden states `a` (read by the pools) and `b`.

    `stem`: CellStem0, whose branches on `b` (the stem conv's output) widen to `c` channels in their first conv.
    """
    add = net.eltwise
    sep = {"mid": c} if stem else {}
    c0 = add((_nas_branch(net, a, f"{name}.comb_iter_0_left", c, 5, 2, shifted=shifted),
              _nas_branch(net, b, f"{name}.comb_iter_0_right", c, 7, 2, shifted=shifted, **sep)),
             f"{name}.comb_iter_0")
    c1 = add((_nas_pool(net, a, f"{name}.comb_iter_1_left", "MaxPool", 2, shifted),
              _nas_branch(net, b, f"{name}.comb_iter_1_right", c, 7, 2, shifted=shifted, **sep)),
             f"{name}.comb_iter_1")
    c2 = add((_nas_pool(net, a, f"{name}.comb_iter_2_left", "AveragePool", 2, shifted),
              _nas_branch(net, b, f"{name}.comb_iter_2_right", c, 5, 2, shifted=shifted, **sep)),
             f"{name}.comb_iter_2")
    c3 = add((_nas_pool(net, c0, f"{name}.comb_iter_3_right", "AveragePool", 1), c1), f"{name}.comb_iter_3")
    c4 = add((_nas_branch(net, c0, f"{name}.comb_iter_4_left", c, 3, 1, shifted=shifted),
              _nas_pool(net, a, f"{name}.comb_iter_4_right", "MaxPool", 2, shifted)), f"{name}.comb_iter_4")
    return net.concat((c1, c2, c3, c4), f"{name}.cat")


def _nas_conv_1x1(net: Net, x: str, name: str, cout: int) -> str:
    return _relu_conv_bn(net, x, f"{name}.relu", f"{name}.conv", f"{name}.bn", cout)


def _nasnet_normal(net: Net, name: str, x: str, prev: str, c: int, *, first: bool) -> str:
    """NormalCell, or FirstCell (`first`: the previous state, at twice the resolution, is factorized-reduced)."""
    if first:
        left = _factorized_reduce(net, prev, name, c, convs=("path_1.conv", "path_2.conv"), pooled=True,
                                  cat="path_cat", bn="final_path_bn")
    else:
        left = _nas_conv_1x1(net, prev, f"{name}.conv_prev_1x1", c)
    right = _nas_conv_1x1(net, x, f"{name}.conv_1x1", c)
    add, avg = net.eltwise, (lambda t, n: _nas_pool(net, t, f"{name}.{n}", "AveragePool", 1))
    c0 = add((_nas_branch(net, right, f"{name}.comb_iter_0_left", c, 5),
              _nas_branch(net, left, f"{name}.comb_iter_0_right", c, 3)), f"{name}.comb_iter_0")
    c1 = add((_nas_branch(net, left, f"{name}.comb_iter_1_left", c, 5),
              _nas_branch(net, left, f"{name}.comb_iter_1_right", c, 3)), f"{name}.comb_iter_1")
    c2 = add((avg(right, "comb_iter_2_left"), left), f"{name}.comb_iter_2")
    c3 = add((avg(left, "comb_iter_3_left"), avg(left, "comb_iter_3_right")), f"{name}.comb_iter_3")
    c4 = add((_nas_branch(net, right, f"{name}.comb_iter_4_left", c, 3), right), f"{name}.comb_iter_4")
    return net.concat((left, c0, c1, c2, c3, c4), f"{name}.cat")


def nasnet_a_mobile(net: Net) -> None:
    """NASNet-A Mobile 4 @ 1056 at 224x224 (Zoph et al., 2018, Table 2): Cadene's `nasnetamobile`, 1000 classes."""
    f = 1056 // 24  # filters of the first normal cells; x2 after each reduction
    conv0 = net.conv(net.input((3, 224, 224)), "conv0.conv", 32, 3, stride=2, bn="conv0.bn")
    x1 = _nas_conv_1x1(net, conv0, "cell_stem_0.conv_1x1", f // 4)
    stem0 = _nasnet_reduction(net, "cell_stem_0", x1, conv0, f // 4, shifted=False, stem=True)
    left = _nas_conv_1x1(net, stem0, "cell_stem_1.conv_1x1", f // 2)
    right = _factorized_reduce(net, conv0, "cell_stem_1", f // 2, convs=("path_1.conv", "path_2.conv"), pooled=True,
                               cat="path_cat", bn="final_path_bn")
    prev, x = stem0, _nasnet_reduction(net, "cell_stem_1", left, right, f // 2, shifted=True)
    index = 0
    for stage in range(3):
        c = f << stage
        if stage:
            name = f"reduction_cell_{stage - 1}"
            b = _nas_conv_1x1(net, prev, f"{name}.conv_prev_1x1", c)
            a = _nas_conv_1x1(net, x, f"{name}.conv_1x1", c)
            prev, x = x, _nasnet_reduction(net, name, a, b, c, shifted=True)
            index += 2
        for i in range(4):
            prev, x = x, _nasnet_normal(net, f"cell_{index}", x, prev, c, first=i == 0)
            index += 1
    _classifier(net, net.activation(x, "relu"), "avg_pool", "last_linear", kernel=7, stride=1)
    net.fold_activations()


# ---- DARTS (Liu et al., 2019; quark0/darts cnn/model.py NetworkImageNet, cnn/operations.py) ---------------
def _darts_op(net: Net, x: str, name: str, op: str, stride: int) -> str | None:
    """One DARTS operation on state `x`; None for an identity skip connection (the add reads `x` itself)."""
    c = net.shape(x)[1]
    if op == "skip_connect":
        return None if stride == 1 else _factorized_reduce(net, x, name, c, convs=("conv_1", "conv_2"), end_pad=0)
    if op.endswith("pool_3x3"):
        return net.pool(x, name, "MaxPool" if op.startswith("max") else "AveragePool", 3, stride=stride, padding=1)
    y = net.activation(x, f"{name}.op.0")
    if op == "dil_conv_3x3":
        return _separable(net, y, f"{name}.op.1", f"{name}.op.2", c, 3, stride=stride, dilation=2, bn=f"{name}.op.3")
    y = _separable(net, y, f"{name}.op.1", f"{name}.op.2", c, 3, stride=stride, bn=f"{name}.op.3")
    return _separable(net, net.activation(y, f"{name}.op.4"), f"{name}.op.5", f"{name}.op.6", c, 3, bn=f"{name}.op.7")


def _darts_cell(net: Net, name: str, s0: str, s1: str, c: int, *, reduction: bool, reduction_prev: bool) -> str:
    if reduction_prev:
        s0 = _factorized_reduce(net, s0, f"{name}.preprocess0", c, convs=("conv_1", "conv_2"), end_pad=0)
    else:
        s0 = _relu_conv_bn(net, s0, *_three(f"{name}.preprocess0.op"), c)
    states = [s0, _relu_conv_bn(net, s1, *_three(f"{name}.preprocess1.op"), c)]
    genotype = DARTS_REDUCE if reduction else DARTS_NORMAL
    for step in range(len(genotype) // 2):
        branches = []
        for j in (2 * step, 2 * step + 1):
            op, index = genotype[j]
            y = _darts_op(net, states[index], f"{name}._ops.{j}", op, 2 if reduction and index < 2 else 1)
            branches.append(states[index] if y is None else y)
        states.append(net.eltwise(branches, f"{name}.add{step}"))
    return net.concat([states[i] for i in DARTS_CONCAT], f"{name}.cat")


def darts(net: Net) -> None:
    """DARTS (second order, genotype DARTS_V2) ImageNet network: 14 cells, 48 initial channels, 224x224, no aux head."""
    c, layers = 48, 14
    s0 = net.conv(net.input((3, 224, 224)), "stem0.0", c // 2, 3, stride=2, padding=1, bn="stem0.1")
    s0 = net.conv(net.activation(s0, "stem0.2"), "stem0.3", c, 3, stride=2, padding=1, bn="stem0.4")
    s1 = net.conv(net.activation(s0, "stem1.0"), "stem1.1", c, 3, stride=2, padding=1, bn="stem1.2")
    reduction_prev = True
    for i in range(layers):
        reduction = i in (layers // 3, 2 * layers // 3)
        c *= 2 if reduction else 1
        s0, s1 = s1, _darts_cell(net, f"cells.{i}", s0, s1, c, reduction=reduction, reduction_prev=reduction_prev)
        reduction_prev = reduction
    _classifier(net, s1, "global_pooling", "classifier", kernel=7, stride=7)
    net.fold_activations()


# ---- AmoebaNet-D (Real et al., 2019) as torchgpipe's benchmarks/models/amoebanet defines it -------------
def _amoeba_op(net: Net, x: str, name: str, op: str, stride: int) -> str | None:
    """One AmoebaNet-D operation on state `x` (torchgpipe's operations.py); None for an identity."""
    c = net.shape(x)[1]
    if op == "none":
        return None if stride == 1 else _factorized_reduce(net, x, name, c)
    if op == "max_pool_2x2":
        return net.pool(x, name, "MaxPool", 2, stride=stride)
    if op.endswith("pool_3x3"):  # torchgpipe builds max_pool_3x3 as an average pool too
        return net.pool(x, name, "AveragePool", 3, stride=stride, padding=1)
    for i, (cout, k, s) in enumerate(_amoeba_convs(op, c, stride)):
        x = _relu_conv_bn(net, x, f"{name}.{3 * i}", f"{name}.{3 * i + 1}", f"{name}.{3 * i + 2}", cout, k,
                          stride=s, padding=(k[0] // 2, k[1] // 2))
    return x


def _amoeba_convs(op: str, c: int, s: int) -> tuple:
    """(channels, kernel, stride) of each ReLU-conv-BN layer of a conv operation on `c` channels with stride `s`."""
    if op == "conv_1x1":
        return ((c, (1, 1), (s, s)),)
    if op == "conv_3x3":
        return ((c // 4, (1, 1), (1, 1)), (c // 4, (3, 3), (s, s)), (c, (1, 1), (1, 1)))
    return ((c // 4, (1, 1), (1, 1)), (c // 4, (1, 7), (1, s)), (c // 4, (7, 1), (s, 1)), (c, (1, 1), (1, 1)))


def _amoeba_cell(net: Net, name: str, s1: str, s2: str, c: int, *, reduction: bool, reduction_prev: bool) -> str:
    """torchgpipe's Cell: returns the concatenated states; the caller passes the input on as the next skip."""
    states = [_relu_conv_bn(net, s1, *_three(f"{name}.reduce1"), c)]
    if reduction_prev:
        s2 = _factorized_reduce(net, s2, f"{name}.reduce2", c)
    elif net.shape(s2)[1] != c:
        s2 = _relu_conv_bn(net, s2, *_three(f"{name}.reduce2"), c)
    states.append(s2)
    genotype, concat = ((AMOEBA_REDUCTION, AMOEBA_REDUCTION_CONCAT) if reduction else
                        (AMOEBA_NORMAL, AMOEBA_NORMAL_CONCAT))
    for step in range(len(genotype) // 2):
        branches = []
        for j in (2 * step, 2 * step + 1):
            index, op = genotype[j]
            y = _amoeba_op(net, states[index], f"{name}.operations.{j}.module", op,
                           2 if reduction and index < 2 else 1)
            branches.append(states[index] if y is None else y)
        states.append(net.eltwise(branches, f"{name}.add{step}"))
    return net.concat([states[i] for i in concat], f"{name}.cat")


def amoebanet_d(net: Net, layers: int = 18, filters: int = 208) -> None:
    """AmoebaNet-D (18, 208) at 224x224, 1000 classes: GPipe's Table 1 baseline, torchgpipe's `amoebanetd`."""
    c = filters // 4
    x = net.activation(net.input((3, 224, 224)), "stem1.relu")
    x = net.conv(x, "stem1.conv", c, 3, stride=2, padding=1, bn="stem1.bn")
    s1 = s2 = x
    reduction_prev = False
    plan = [("stem2", True), ("stem3", True), *((f"cell1_normal{i + 1}", False) for i in range(layers // 3)),
            ("cell2_reduction", True), *((f"cell3_normal{i + 1}", False) for i in range(layers // 3)),
            ("cell4_reduction", True), *((f"cell5_normal{i + 1}", False) for i in range(layers // 3))]
    for name, reduction in plan:
        c *= 2 if reduction else 1
        s1, s2 = _amoeba_cell(net, name, s1, s2, c, reduction=reduction, reduction_prev=reduction_prev), s1
        reduction_prev = reduction
    _classifier(net, s1, "classify.pool", "classify.fc", kernel=7, stride=7)
    net.fold_activations()


# ---- PNASNet-5 Large (Liu et al., 2018; Cadene pretrainedmodels pnasnet.py, TF-slim pnasnet) -------------
def _pnas_max_pool(net: Net, x: str, name: str, stride: int, shifted: bool = False) -> str:
    return _nas_pool(net, x, name, "MaxPool", stride, shifted)


def _pnas_branch(net: Net, x: str, name: str, cout: int, kernel: int, stride: int = 1, *, stem: bool = False,
                 shifted: bool = False) -> str:
    """PNASNet's BranchSeparables (`stem`: the first separable conv already widens to `cout`)."""
    return _nas_branch(net, x, name, cout, kernel, stride, mid=cout if stem else None, shifted=shifted,
                       relus=("relu_1", "relu_2"))


def _pnas_relu_conv_bn(net: Net, x: str, name: str, cout: int, stride: int = 1) -> str:
    return _relu_conv_bn(net, x, f"{name}.relu", f"{name}.conv", f"{name}.bn", cout, stride=stride)


def _pnas_cell(net: Net, name: str, left: str, right: str, c: int, *, stem: bool = False, reduction: bool = False,
               shifted: bool = False, factorized: bool = False) -> str:
    """CellStem0 (`stem`) or Cell: the PNASNet-5 cell on the previous-previous (`left`) and previous states.

    `factorized`: `left` has twice the resolution and is halved by a factorized reduction; `shifted`: the
    stride-2 layers use Cadene's zero-pad + crop (TensorFlow's "SAME") padding.
    """
    s = 2 if reduction or stem else 1
    if stem:
        x_left = left
    elif factorized:
        x_left = _factorized_reduce(net, left, f"{name}.conv_prev_1x1", c,
                                    convs=("path_1.conv", "path_2.conv"), pooled=True, bn="final_path_bn")
    else:
        x_left = _pnas_relu_conv_bn(net, left, f"{name}.conv_prev_1x1", c)
    x_right = _pnas_relu_conv_bn(net, right, f"{name}.conv_1x1", c)
    add = net.eltwise
    l0 = _pnas_branch(net, x_left, f"{name}.comb_iter_0_left", c, 5, s, stem=stem, shifted=shifted)
    if stem:  # comb_iter_0_right: max pool, then a 1x1 conv + BN to the branch width
        r0 = _pnas_max_pool(net, x_left, f"{name}.comb_iter_0_right.max_pool", s)
        r0 = net.conv(r0, f"{name}.comb_iter_0_right.conv", c, 1, bn=f"{name}.comb_iter_0_right.bn")
    else:
        r0 = _pnas_max_pool(net, x_left, f"{name}.comb_iter_0_right", s, shifted)
    c0 = add((l0, r0), f"{name}.comb_iter_0")
    c1 = add((_pnas_branch(net, x_right, f"{name}.comb_iter_1_left", c, 7, s, shifted=shifted),
              _pnas_max_pool(net, x_right, f"{name}.comb_iter_1_right", s, shifted)), f"{name}.comb_iter_1")
    c2 = add((_pnas_branch(net, x_right, f"{name}.comb_iter_2_left", c, 5, s, shifted=shifted),
              _pnas_branch(net, x_right, f"{name}.comb_iter_2_right", c, 3, s, shifted=shifted)),
             f"{name}.comb_iter_2")
    c3 = add((_pnas_branch(net, c2, f"{name}.comb_iter_3_left", c, 3),
              _pnas_max_pool(net, x_right, f"{name}.comb_iter_3_right", s, shifted)), f"{name}.comb_iter_3")
    r4 = _pnas_relu_conv_bn(net, x_right, f"{name}.comb_iter_4_right", c, s) if s == 2 else x_right
    c4 = add((_pnas_branch(net, x_left, f"{name}.comb_iter_4_left", c, 3, s, stem=stem, shifted=shifted), r4),
             f"{name}.comb_iter_4")
    return net.concat((c0, c1, c2, c3, c4), f"{name}.cat")


# PNASNet-5 Large cells after the two stems: (branch width, reduction, shifted padding, factorized left input)
PNAS_CELLS = ((216, False, False, True), (216, False, False, False), (216, False, False, False),
              (216, False, False, False), (432, True, True, False), (432, False, False, True),
              (432, False, False, False), (432, False, False, False), (864, True, False, False),
              (864, False, False, True), (864, False, False, False), (864, False, False, False))


def pnasnet5_large(net: Net) -> None:
    """PNASNet-5 Large at 331x331, 1000 classes (Liu et al., 2018, Table 5): Cadene's `pnasnet5large`."""
    conv0 = net.conv(net.input((3, 331, 331)), "conv_0.conv", 96, 3, stride=2, bn="conv_0.bn")
    stem0 = _pnas_cell(net, "cell_stem_0", conv0, conv0, 54, stem=True)
    prev, x = stem0, _pnas_cell(net, "cell_stem_1", conv0, stem0, 108, reduction=True, factorized=True)
    for i, (c, reduction, shifted, factorized) in enumerate(PNAS_CELLS):
        prev, x = x, _pnas_cell(net, f"cell_{i}", prev, x, c, reduction=reduction, shifted=shifted,
                                factorized=factorized)
    _classifier(net, net.activation(x, "relu"), "avg_pool", "last_linear", kernel=11, stride=1)
    net.fold_activations()
