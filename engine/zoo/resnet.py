"""Residual networks: torchvision's ResNet/ResNeXt family, its dilated segmentation trunk, CIFAR ResNet-1202."""

from __future__ import annotations

from engine.graph import OpKind
from engine.zoo._builder import Net

DEPTHS = {"resnet18": ("basic", (2, 2, 2, 2)), "resnet50": ("bottleneck", (3, 4, 6, 3)),
          "resnet152": ("bottleneck", (3, 8, 36, 3)), "resnext50_32x4d": ("bottleneck", (3, 4, 6, 3))}


def resnet(net: Net, name: str) -> None:
    """torchvision `resnet18` / `resnet50` / `resnet152` / `resnext50_32x4d` at 224x224 (He et al., 2016)."""
    x = net.input((3, 224, 224))
    groups, width = (32, 4) if name.startswith("resnext") else (1, 64)
    x = resnet_trunk(net, x, DEPTHS[name], groups=groups, width_per_group=width)
    x = net.flatten(net.global_pool(x, "avgpool"))
    net.linear(x, "fc", 1000)


def resnet_trunk(net: Net, x: str, spec, *, groups: int = 1, width_per_group: int = 64,
                 dilate=(False, False, False)) -> str:
    """Stem and layer1..layer4 of torchvision's ResNet; `dilate` is `replace_stride_with_dilation`."""
    block, depths = spec
    x = net.conv(x, "conv1", 64, 7, stride=2, padding=3, bn="bn1", act="Relu")
    x = net.pool(x, "maxpool", "MaxPool", 3, stride=2, padding=1)
    inplanes, dilation = 64, 1
    for i, (planes, blocks) in enumerate(zip((64, 128, 256, 512), depths)):
        stride = 1 if i == 0 else 2
        previous = dilation
        if i > 0 and dilate[i - 1]:
            dilation, stride = dilation * stride, 1
        for b in range(blocks):
            name = f"layer{i + 1}.{b}"
            kw = {"stride": stride if b == 0 else 1, "dilation": previous if b == 0 else dilation}
            if block == "basic":
                x, inplanes = _basic(net, x, name, inplanes, planes, **kw), planes
            else:
                x = _bottleneck(net, x, name, inplanes, planes, groups=groups, width_per_group=width_per_group, **kw)
                inplanes = planes * 4
    return x


def _basic(net: Net, x: str, name: str, inplanes: int, planes: int, *, stride: int, dilation: int) -> str:
    y = net.conv(x, f"{name}.conv1", planes, 3, stride=stride, padding=1, bn=f"{name}.bn1", act="Relu")
    y = net.conv(y, f"{name}.conv2", planes, 3, padding=1, bn=f"{name}.bn2")
    if stride != 1 or inplanes != planes:
        x = net.conv(x, f"{name}.downsample.0", planes, 1, stride=stride, bn=f"{name}.downsample.1")
    return net.eltwise((y, x), f"{name}.add", act="Relu")


def _bottleneck(net: Net, x: str, name: str, inplanes: int, planes: int, *, stride: int, dilation: int,
                groups: int, width_per_group: int) -> str:
    width = planes * width_per_group // 64 * groups
    y = net.conv(x, f"{name}.conv1", width, 1, bn=f"{name}.bn1", act="Relu")
    y = net.conv(y, f"{name}.conv2", width, 3, stride=stride, padding=dilation, dilation=dilation, groups=groups,
                 bn=f"{name}.bn2", act="Relu")
    y = net.conv(y, f"{name}.conv3", planes * 4, 1, bn=f"{name}.bn3")
    if stride != 1 or inplanes != planes * 4:
        x = net.conv(x, f"{name}.downsample.0", planes * 4, 1, stride=stride, bn=f"{name}.downsample.1")
    return net.eltwise((y, x), f"{name}.add", act="Relu")


def resnet1202(net: Net) -> None:
    """CIFAR-10 ResNet-1202 (He et al., 2016, Sec. 4.2): 6n+2 layers with n = 200, identity shortcuts (option A).

    Where a stage halves the map, the shortcut subsamples (x[:, :, ::2, ::2], a strided Slice) and zero-pads
    the channels (Pad), so shortcuts carry no parameters, as in the paper.
    """
    n = 200
    x = net.input((3, 32, 32))
    x = net.conv(x, "conv1", 16, 3, padding=1, bn="bn1", act="Relu")
    inplanes = 16
    for i, planes in enumerate((16, 32, 64)):
        for b in range(n):
            name = f"layer{i + 1}.{b}"
            stride = 2 if i > 0 and b == 0 else 1
            y = net.conv(x, f"{name}.conv1", planes, 3, stride=stride, padding=1, bn=f"{name}.bn1", act="Relu")
            y = net.conv(y, f"{name}.conv2", planes, 3, padding=1, bn=f"{name}.bn2")
            if stride != 1 or inplanes != planes:
                n_, c, h, w = net.shape(x)
                x = net.unary(x, f"{name}.shortcut.slice", "Slice", OpKind.SPLIT, (n_, c, h // 2, w // 2))
                x = net.unary(x, f"{name}.shortcut.pad", "Pad", OpKind.OTHER, (n_, planes, h // 2, w // 2))
            x = net.eltwise((y, x), f"{name}.add", act="Relu")
            inplanes = planes
    x = net.flatten(net.global_pool(x, "avgpool"))
    net.linear(x, "linear", 10)
