"""torchvision's ConvNeXt-Tiny (Liu et al., 2022): depthwise 7x7 blocks with channels-last LayerNorm and MLP."""

from __future__ import annotations

from engine.graph import OpKind
from engine.zoo._builder import Net

DEPTHS, DIMS = (3, 3, 9, 3), (96, 192, 384, 768)


def _layer_norm_2d(net: Net, x: str, name: str) -> str:
    """torchvision's LayerNorm2d: permute to channels-last, LayerNorm over channels, permute back."""
    x = net.transpose(x, f"{name}.permute_in", (0, 2, 3, 1))
    return net.transpose(net.layer_norm(x, name), f"{name}.permute_out", (0, 3, 1, 2))


def convnext_tiny(net: Net) -> None:
    """torchvision `convnext_tiny` at 224x224 (stochastic depth is the identity at inference)."""
    x = net.input((3, 224, 224))
    x = _layer_norm_2d(net, net.conv(x, "features.0.0", DIMS[0], 4, stride=4, bias=True), "features.0.1")
    for stage, (depth, dim) in enumerate(zip(DEPTHS, DIMS)):
        if stage:
            name = f"features.{2 * stage}"
            x = net.conv(_layer_norm_2d(net, x, f"{name}.0"), f"{name}.1", dim, 2, stride=2, bias=True)
        for i in range(depth):
            x = _block(net, x, f"features.{2 * stage + 1}.{i}", dim)
    x = _layer_norm_2d(net, net.global_pool(x, "avgpool"), "classifier.0")
    net.linear(net.flatten(x, "classifier.1"), "classifier.2", 1000)


def _block(net: Net, x: str, name: str, dim: int) -> str:
    """CNBlock: dwconv 7x7, permute, LayerNorm, Linear 4x + GELU, Linear, permute, layer scale, residual add."""
    y = net.conv(x, f"{name}.block.0", dim, 7, padding=3, groups=dim, bias=True)
    y = net.layer_norm(net.transpose(y, f"{name}.block.1", (0, 2, 3, 1)), f"{name}.block.2")
    y = net.linear(net.linear(y, f"{name}.block.3", 4 * dim, act="Gelu"), f"{name}.block.5", dim)
    y = net.transpose(y, f"{name}.block.6", (0, 3, 1, 2))
    y = net.add_op(f"{name}.mul_layer_scale", OpKind.ELTWISE, "Mul", (y,), (net.shape(y),),
                   own=((f"{name}.layer_scale", (dim, 1, 1)),))[0]
    return net.eltwise((y, x), f"{name}.add")
