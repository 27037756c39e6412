"""Mobile CNNs: MobileNet V1 (paper), and torchvision's MobileNetV2/V3, ShuffleNetV2 and EfficientNet-B0."""

from __future__ import annotations

from engine.graph import OpKind
from engine.zoo._builder import Net

# MobileNetV3 blocks (torchvision): input, kernel, expanded, output, squeeze-excite, activation, stride
V3_LARGE = ((16, 3, 16, 16, False, "Relu", 1), (16, 3, 64, 24, False, "Relu", 2), (24, 3, 72, 24, False, "Relu", 1),
            (24, 5, 72, 40, True, "Relu", 2), (40, 5, 120, 40, True, "Relu", 1), (40, 5, 120, 40, True, "Relu", 1),
            (40, 3, 240, 80, False, "HardSwish", 2), (80, 3, 200, 80, False, "HardSwish", 1),
            (80, 3, 184, 80, False, "HardSwish", 1), (80, 3, 184, 80, False, "HardSwish", 1),
            (80, 3, 480, 112, True, "HardSwish", 1), (112, 3, 672, 112, True, "HardSwish", 1),
            (112, 5, 672, 160, True, "HardSwish", 2), (160, 5, 960, 160, True, "HardSwish", 1),
            (160, 5, 960, 160, True, "HardSwish", 1))
V3_SMALL = ((16, 3, 16, 16, True, "Relu", 2), (16, 3, 72, 24, False, "Relu", 2), (24, 3, 88, 24, False, "Relu", 1),
            (24, 5, 96, 40, True, "HardSwish", 2), (40, 5, 240, 40, True, "HardSwish", 1),
            (40, 5, 240, 40, True, "HardSwish", 1), (40, 5, 120, 48, True, "HardSwish", 1),
            (48, 5, 144, 48, True, "HardSwish", 1), (48, 5, 288, 96, True, "HardSwish", 2),
            (96, 5, 576, 96, True, "HardSwish", 1), (96, 5, 576, 96, True, "HardSwish", 1))
# EfficientNet-B0 stages (torchvision): expand ratio, kernel, stride, input, output, layers
B0_STAGES = ((1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
             (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1))


def make_divisible(v: float, divisor: int = 8) -> int:
    """torchvision's `_make_divisible`: round channels to a multiple of 8, never below 90% of `v`."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def cna(net: Net, x: str, name: str, cout: int, kernel: int, *, stride=1, groups=1, dilation=1, act="Relu") -> str:
    """torchvision's Conv2dNormActivation: conv (no bias) `name.0`, BatchNorm `name.1`, activation."""
    pad = (kernel - 1) // 2 * dilation
    return net.conv(x, f"{name}.0", cout, kernel, stride=stride, padding=pad, dilation=dilation, groups=groups,
                    bn=f"{name}.1", act=act)


def mobilenet_v1(net: Net) -> None:
    """MobileNet V1, width 1.0, 224x224 (Howard et al., 2017, Table 1); layer names as in Keras' MobileNet."""
    x = net.input((3, 224, 224))
    x = net.conv(x, "conv1", 32, 3, stride=2, padding=1, bn="conv1_bn", act="Relu")
    for i, (cout, stride) in enumerate(((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1),
                                        (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1)), start=1):
        c = net.shape(x)[1]
        x = net.conv(x, f"conv_dw_{i}", c, 3, stride=stride, padding=1, groups=c, bn=f"conv_dw_{i}_bn", act="Relu")
        x = net.conv(x, f"conv_pw_{i}", cout, 1, bn=f"conv_pw_{i}_bn", act="Relu")
    x = net.flatten(net.global_pool(x, "global_pool"))
    net.linear(x, "fc", 1000)


def mobilenet_v2(net: Net) -> None:
    """torchvision `mobilenet_v2` (Sandler et al., 2018, Table 2)."""
    x = net.input((3, 224, 224))
    x = cna(net, x, "features.0", 32, 3, stride=2, act="Clip")
    i = 1
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1)):
        for b in range(n):
            x = _inverted_residual_v2(net, x, f"features.{i}", c, s if b == 0 else 1, t)
            i += 1
    x = cna(net, x, f"features.{i}", 1280, 1, act="Clip")
    x = net.flatten(net.global_pool(x, "avgpool"))
    net.linear(x, "classifier.1", 1000)


def _inverted_residual_v2(net: Net, x: str, name: str, cout: int, stride: int, expand: int) -> str:
    cin = net.shape(x)[1]
    hidden = cin * expand
    y, j = x, 0
    if expand != 1:
        y, j = cna(net, y, f"{name}.conv.0", hidden, 1, act="Clip"), 1
    y = cna(net, y, f"{name}.conv.{j}", hidden, 3, stride=stride, groups=hidden, act="Clip")
    y = net.conv(y, f"{name}.conv.{j + 1}", cout, 1, bn=f"{name}.conv.{j + 2}")
    return net.eltwise((x, y), f"{name}.add") if stride == 1 and cin == cout else y


def squeeze_excite(net: Net, x: str, name: str, squeeze: int, act: str, gate: str) -> str:
    """torchvision's SqueezeExcitation: global pool, fc1 (1x1 conv), act, fc2, gate, then input * scale."""
    c = net.shape(x)[1]
    s = net.global_pool(x, f"{name}.avgpool")
    s = net.conv(s, f"{name}.fc1", squeeze, 1, bias=True, act=act)
    s = net.conv(s, f"{name}.fc2", c, 1, bias=True, act=gate)
    return net.eltwise((s, x), f"{name}.mul", "Mul")


def mobilenet_v3_features(net: Net, x: str, blocks, *, dilated: bool = False, taps=()) -> tuple[str, dict]:
    """torchvision's MobileNetV3 `features`; `dilated` is the segmentation variant (last stage dilation 2).

    Returns the last feature map and the outputs of the `features.<i>` indices listed in `taps`.
    """
    x = cna(net, x, "features.0", 16, 3, stride=2, act="HardSwish")
    tapped = {}
    for i, (cin, k, exp, cout, se, act, stride) in enumerate(blocks, start=1):
        dilation = 2 if dilated and i >= len(blocks) - 2 else 1
        name = f"features.{i}.block"
        y, j = x, 0
        if exp != cin:
            y, j = cna(net, y, f"{name}.0", exp, 1, act=act), 1
        y = cna(net, y, f"{name}.{j}", exp, k, stride=1 if dilation > 1 else stride, groups=exp, dilation=dilation,
                act=act)
        j += 1
        if se:
            y, j = squeeze_excite(net, y, f"{name}.{j}", make_divisible(exp // 4), "Relu", "HardSigmoid"), j + 1
        y = cna(net, y, f"{name}.{j}", cout, 1, act=None)
        x = net.eltwise((y, x), f"features.{i}.add") if stride == 1 and cin == cout else y
        if i in taps:
            tapped[i] = x
    x = cna(net, x, f"features.{len(blocks) + 1}", 6 * blocks[-1][3], 1, act="HardSwish")
    return x, tapped


def mobilenet_v3_small(net: Net) -> None:
    """torchvision `mobilenet_v3_small` (Howard et al., 2019, Table 2)."""
    x, _ = mobilenet_v3_features(net, net.input((3, 224, 224)), V3_SMALL)
    x = net.flatten(net.global_pool(x, "avgpool"))
    x = net.linear(x, "classifier.0", 1024, act="HardSwish")
    net.linear(x, "classifier.3", 1000)


def shufflenet_v2_x1_0(net: Net) -> None:
    """torchvision `shufflenet_v2_x1_0` (Ma et al., 2018, Table 5); `x.mean([2, 3])` is a global average pool."""
    x = net.input((3, 224, 224))
    x = net.conv(x, "conv1.0", 24, 3, stride=2, padding=1, bn="conv1.1", act="Relu")
    x = net.pool(x, "maxpool", "MaxPool", 3, stride=2, padding=1)
    for stage, (repeats, cout) in enumerate(((4, 116), (8, 232), (4, 464)), start=2):
        for b in range(repeats):
            x = _shuffle_unit(net, x, f"stage{stage}.{b}", cout, 2 if b == 0 else 1)
    x = net.conv(x, "conv5.0", 1024, 1, bn="conv5.1", act="Relu")
    x = net.flatten(net.global_pool(x, "mean"))
    net.linear(x, "fc", 1000)


def _shuffle_unit(net: Net, x: str, name: str, cout: int, stride: int) -> str:
    half = cout // 2
    if stride == 1:
        x1, x2 = net.split(x, f"{name}.chunk", (net.shape(x)[1] // 2,) * 2)
    else:
        cin = net.shape(x)[1]
        b1 = net.conv(x, f"{name}.branch1.0", cin, 3, stride=2, padding=1, groups=cin, bn=f"{name}.branch1.1")
        x1 = net.conv(b1, f"{name}.branch1.2", half, 1, bn=f"{name}.branch1.3", act="Relu")
        x2 = x
    y = net.conv(x2, f"{name}.branch2.0", half, 1, bn=f"{name}.branch2.1", act="Relu")
    y = net.conv(y, f"{name}.branch2.3", half, 3, stride=stride, padding=1, groups=half, bn=f"{name}.branch2.4")
    y = net.conv(y, f"{name}.branch2.5", half, 1, bn=f"{name}.branch2.6", act="Relu")
    out = net.concat((x1, y), f"{name}.cat")
    n, c, h, w = net.shape(out)
    net.reshape(out, f"{name}.shuffle.view", (n, 2, c // 2, h, w))  # channel_shuffle(x, 2)
    out = net.unary(out, f"{name}.shuffle.transpose", "Transpose", OpKind.RESHAPE, (n, c // 2, 2, h, w))
    return net.reshape(out, f"{name}.shuffle.flatten", (n, c, h, w))


def efficientnet_b0(net: Net) -> None:
    """torchvision `efficientnet_b0` (Tan & Le, 2019, Table 1); SiLU is ONNX Swish."""
    x = net.input((3, 224, 224))
    x = cna(net, x, "features.0", 32, 3, stride=2, act="Swish")
    for stage, (expand, k, stride, _cin, cout, layers) in enumerate(B0_STAGES, start=1):
        for b in range(layers):
            x = _mbconv(net, x, f"features.{stage}.{b}", expand, k, stride if b == 0 else 1, cout)
    x = cna(net, x, "features.8", 1280, 1, act="Swish")
    x = net.flatten(net.global_pool(x, "avgpool"))
    net.linear(x, "classifier.1", 1000)


def _mbconv(net: Net, x: str, name: str, expand: int, kernel: int, stride: int, cout: int) -> str:
    cin = net.shape(x)[1]
    exp = make_divisible(cin * expand)
    y, j = x, 0
    if exp != cin:
        y, j = cna(net, y, f"{name}.block.0", exp, 1, act="Swish"), 1
    y = cna(net, y, f"{name}.block.{j}", exp, kernel, stride=stride, groups=exp, act="Swish")
    y = squeeze_excite(net, y, f"{name}.block.{j + 1}", max(1, cin // 4), "Swish", "Sigmoid")
    y = cna(net, y, f"{name}.block.{j + 2}", cout, 1, act=None)
    return net.eltwise((y, x), f"{name}.add") if stride == 1 and cin == cout else y
