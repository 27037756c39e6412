"""Video CNNs from torchvision.models.video on 16-frame clips: R(2+1)D-18 (112x112) and S3D (224x224)."""

from __future__ import annotations

from engine.zoo._builder import Net


def r2plus1d_18(net: Net) -> None:
    """torchvision `r2plus1d_18` (Tran et al., 2018): each 3x3x3 conv split into 1x3x3 then 3x1x1 convs."""
    x = net.input((3, 16, 112, 112))
    x = net.conv(x, "stem.0", 45, (1, 7, 7), stride=(1, 2, 2), padding=(0, 3, 3), bn="stem.1", act="Relu")
    x = net.conv(x, "stem.3", 64, (3, 1, 1), padding=(1, 0, 0), bn="stem.4", act="Relu")
    inplanes = 64
    for i, planes in enumerate((64, 128, 256, 512)):
        for b in range(2):
            stride = 2 if i > 0 and b == 0 else 1
            name = f"layer{i + 1}.{b}"
            mid = inplanes * planes * 27 // (inplanes * 9 + 3 * planes)
            y = _conv2plus1d(net, x, f"{name}.conv1.0", mid, planes, stride)
            y = net.conv(y, f"{name}.conv1.0.3", planes, (3, 1, 1), stride=(stride, 1, 1), padding=(1, 0, 0),
                         bn=f"{name}.conv1.1", act="Relu")
            y = _conv2plus1d(net, y, f"{name}.conv2.0", mid, planes, 1)
            y = net.conv(y, f"{name}.conv2.0.3", planes, (3, 1, 1), padding=(1, 0, 0), bn=f"{name}.conv2.1")
            if stride != 1 or inplanes != planes:
                x = net.conv(x, f"{name}.downsample.0", planes, 1, stride=stride, bn=f"{name}.downsample.1")
            x = net.eltwise((y, x), f"{name}.add", act="Relu")
            inplanes = planes
    x = net.flatten(net.global_pool(x, "avgpool"))
    net.linear(x, "fc", 400)


def _conv2plus1d(net: Net, x: str, name: str, mid: int, planes: int, stride: int) -> str:
    """The spatial half of torchvision's Conv2Plus1D (1x3x3 conv, BN, ReLU); the caller adds the temporal conv."""
    return net.conv(x, f"{name}.0", mid, (1, 3, 3), stride=(1, stride, stride), padding=(0, 1, 1), bn=f"{name}.1",
                    act="Relu")


def s3d(net: Net) -> None:
    """torchvision `s3d` (Xie et al., 2018): separable 3-D Inception; the final `mean` is a global average pool."""
    x = net.input((3, 16, 224, 224))
    x = _sep_conv(net, x, "features.0", 64, 7, 2, 3)
    x = net.pool(x, "features.1", "MaxPool", (1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1))
    x = _cna3d(net, x, "features.2", 64, 1)
    x = _sep_conv(net, x, "features.3", 192, 3, 1, 1)
    x = net.pool(x, "features.4", "MaxPool", (1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1))
    blocks = {5: (64, 96, 128, 16, 32, 32), 6: (128, 128, 192, 32, 96, 64), 7: ((3, 3, 3), 2, 1),
              8: (192, 96, 208, 16, 48, 64), 9: (160, 112, 224, 24, 64, 64), 10: (128, 128, 256, 24, 64, 64),
              11: (112, 144, 288, 32, 64, 64), 12: (256, 160, 320, 32, 128, 128), 13: ((2, 2, 2), 2, 0),
              14: (256, 160, 320, 32, 128, 128), 15: (384, 192, 384, 48, 128, 128)}
    for i, spec in blocks.items():
        if len(spec) == 3:
            x = net.pool(x, f"features.{i}", "MaxPool", spec[0], stride=spec[1], padding=spec[2])
        else:
            x = _sep_inception(net, x, f"features.{i}", *spec)
    x = net.pool(x, "avgpool", "AveragePool", (2, 7, 7), stride=1)
    x = net.conv(x, "classifier.1", 400, 1, bias=True)
    net.flatten(net.global_pool(x, "mean"))


def _cna3d(net: Net, x: str, name: str, cout: int, kernel, *, stride=1, padding=0) -> str:
    """torchvision's Conv3dNormActivation: conv `name.0` (no bias), BatchNorm3d `name.1`, ReLU."""
    return net.conv(x, f"{name}.0", cout, kernel, stride=stride, padding=padding, bn=f"{name}.1", act="Relu")


def _sep_conv(net: Net, x: str, name: str, cout: int, k: int, s: int, p: int) -> str:
    """torchvision's TemporalSeparableConv: a 1xkxk conv then a kx1x1 conv, each with BN and ReLU."""
    x = _cna3d(net, x, f"{name}.0", cout, (1, k, k), stride=(1, s, s), padding=(0, p, p))
    return _cna3d(net, x, f"{name}.1", cout, (k, 1, 1), stride=(s, 1, 1), padding=(p, 0, 0))


def _sep_inception(net: Net, x: str, name: str, b0, b1_mid, b1, b2_mid, b2, b3) -> str:
    y0 = _cna3d(net, x, f"{name}.branch0", b0, 1)
    y1 = _sep_conv(net, _cna3d(net, x, f"{name}.branch1.0", b1_mid, 1), f"{name}.branch1.1", b1, 3, 1, 1)
    y2 = _sep_conv(net, _cna3d(net, x, f"{name}.branch2.0", b2_mid, 1), f"{name}.branch2.1", b2, 3, 1, 1)
    p = net.pool(x, f"{name}.branch3.0", "MaxPool", 3, stride=1, padding=1)
    y3 = _cna3d(net, p, f"{name}.branch3.1", b3, 1)
    return net.concat((y0, y1, y2, y3), f"{name}.cat")
