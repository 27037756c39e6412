"""torchvision's semantic segmentation networks (21 classes, no auxiliary head), at 224x224.

Bilinear `F.interpolate` is an ONNX Resize (kind `other`: it moves data but has no MACs the engine models).
"""

from __future__ import annotations

from engine.graph import OpKind
from engine.zoo import mobile, resnet
from engine.zoo._builder import Net

CLASSES = 21


def _resize(net: Net, x: str, name: str, size) -> str:
    n, c = net.shape(x)[:2]
    return net.unary(x, name, "Resize", OpKind.OTHER, (n, c, *size))


def fcn_resnet50(net: Net) -> None:
    """torchvision `fcn_resnet50` (Long et al., 2015): dilated ResNet-50 (output stride 8) + FCNHead."""
    x = net.input((3, 224, 224))
    y = resnet.resnet_trunk(net, x, resnet.DEPTHS["resnet50"], dilate=(False, True, True))
    y = net.conv(y, "classifier.0", 512, 3, padding=1, bn="classifier.1", act="Relu")
    y = net.conv(y, "classifier.4", CLASSES, 1, bias=True)
    _resize(net, y, "upsample", net.shape(x)[2:])


def deeplabv3_resnet50(net: Net) -> None:
    """torchvision `deeplabv3_resnet50` (Chen et al., 2017): dilated ResNet-50 + ASPP (rates 12, 24, 36)."""
    x = net.input((3, 224, 224))
    y = resnet.resnet_trunk(net, x, resnet.DEPTHS["resnet50"], dilate=(False, True, True))
    aspp = "classifier.0"
    branches = [net.conv(y, f"{aspp}.convs.0.0", 256, 1, bn=f"{aspp}.convs.0.1", act="Relu")]
    for i, rate in enumerate((12, 24, 36), start=1):
        branches.append(net.conv(y, f"{aspp}.convs.{i}.0", 256, 3, padding=rate, dilation=rate,
                                 bn=f"{aspp}.convs.{i}.1", act="Relu"))
    p = net.global_pool(y, f"{aspp}.convs.4.0")
    p = net.conv(p, f"{aspp}.convs.4.1", 256, 1, bn=f"{aspp}.convs.4.2", act="Relu")
    branches.append(_resize(net, p, f"{aspp}.convs.4.upsample", net.shape(y)[2:]))
    y = net.concat(branches, f"{aspp}.cat")
    y = net.conv(y, f"{aspp}.project.0", 256, 1, bn=f"{aspp}.project.1", act="Relu")
    y = net.conv(y, "classifier.1", 256, 3, padding=1, bn="classifier.2", act="Relu")
    y = net.conv(y, "classifier.4", CLASSES, 1, bias=True)
    _resize(net, y, "upsample", net.shape(x)[2:])


def lraspp_mobilenet_v3_large(net: Net) -> None:
    """torchvision `lraspp_mobilenet_v3_large` (Howard et al., 2019, Sec. 6.4): dilated MobileNetV3 + LR-ASPP."""
    x = net.input((3, 224, 224))
    high, taps = mobile.mobilenet_v3_features(net, x, mobile.V3_LARGE, dilated=True, taps=(4,))
    low = taps[4]
    y = net.conv(high, "classifier.cbr.0", 128, 1, bn="classifier.cbr.1", act="Relu")
    s = net.global_pool(high, "classifier.scale.0")
    s = net.conv(s, "classifier.scale.1", 128, 1, act="Sigmoid")
    y = net.eltwise((y, s), "classifier.mul", "Mul")
    y = _resize(net, y, "classifier.upsample", net.shape(low)[2:])
    y = net.eltwise((net.conv(low, "classifier.low_classifier", CLASSES, 1, bias=True),
                     net.conv(y, "classifier.high_classifier", CLASSES, 1, bias=True)), "classifier.add")
    _resize(net, y, "upsample", net.shape(x)[2:])
