"""Plain and multi-branch CNNs as torchvision defines them: AlexNet, VGG, SqueezeNet 1.0, GoogLeNet, Inception-V3."""

from __future__ import annotations

from engine.zoo._builder import Net

VGG_CFG = {
    "vgg16": (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"),
    "vgg19": (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"),
}


def _classifier(net: Net, x: str, widths: tuple[int, ...], first: int) -> str:
    """Linear-ReLU layers of torchvision's AlexNet/VGG heads (dropout is a no-op at inference)."""
    for i, width in enumerate(widths):
        last = i == len(widths) - 1
        x = net.linear(x, f"classifier.{first + 3 * i}", width, act=None if last else "Relu")
    return x


def alexnet(net: Net) -> None:
    """torchvision `alexnet` (the one-tower variant of Krizhevsky et al., 2014's "one weird trick")."""
    x = net.input((3, 224, 224))
    specs = ((0, 64, 11, 4, 2), "M2", (3, 192, 5, 1, 2), "M5", (6, 384, 3, 1, 1), (8, 256, 3, 1, 1),
             (10, 256, 3, 1, 1), "M12")
    for spec in specs:
        if isinstance(spec, str):
            x = net.pool(x, f"features.{spec[1:]}", "MaxPool", 3, stride=2)
        else:
            i, cout, k, s, p = spec
            x = net.conv(x, f"features.{i}", cout, k, stride=s, padding=p, bias=True, act="Relu")
    x = net.flatten(net.pool(x, "avgpool", "AveragePool", 1, stride=1))  # AdaptiveAvgPool2d((6, 6)) on 6x6
    _classifier(net, x, (4096, 4096, 1000), first=1)


def vgg(net: Net, depth: str) -> None:
    """torchvision `vgg16` / `vgg19` (Simonyan & Zisserman configurations D and E, no BatchNorm)."""
    x = net.input((3, 224, 224))
    for i, v in enumerate(VGG_CFG[depth]):
        if isinstance(v, str):  # "M"
            x = net.pool(x, f"features.{_feature_index(VGG_CFG[depth], i)}", "MaxPool", 2, stride=2)
        else:
            x = net.conv(x, f"features.{_feature_index(VGG_CFG[depth], i)}", v, 3, padding=1, bias=True, act="Relu")
    x = net.flatten(net.pool(x, "avgpool", "AveragePool", 1, stride=1))  # AdaptiveAvgPool2d((7, 7)) on 7x7
    _classifier(net, x, (4096, 4096, 1000), first=0)


def _feature_index(cfg, i: int) -> int:
    """Index of cfg entry `i` in torchvision's `features` Sequential (each conv is followed by a ReLU)."""
    return sum(1 if v == "M" else 2 for v in cfg[:i])


def squeezenet1_0(net: Net) -> None:
    """torchvision `squeezenet1_0` (Iandola et al., 2016, Table 1)."""
    x = net.input((3, 224, 224))
    x = net.conv(x, "features.0", 96, 7, stride=2, bias=True, act="Relu")
    fires = {3: (16, 64), 4: (16, 64), 5: (32, 128), 7: (32, 128), 8: (48, 192), 9: (48, 192), 10: (64, 256),
             12: (64, 256)}
    for i in range(2, 13):
        if i in fires:
            x = _fire(net, x, f"features.{i}", *fires[i])
        else:
            x = net.pool(x, f"features.{i}", "MaxPool", 3, stride=2, ceil=True)
    x = net.conv(x, "classifier.1", 1000, 1, bias=True, act="Relu")
    net.flatten(net.global_pool(x, "classifier.3"))


def _fire(net: Net, x: str, name: str, squeeze: int, expand: int) -> str:
    s = net.conv(x, f"{name}.squeeze", squeeze, 1, bias=True, act="Relu")
    e1 = net.conv(s, f"{name}.expand1x1", expand, 1, bias=True, act="Relu")
    e3 = net.conv(s, f"{name}.expand3x3", expand, 3, padding=1, bias=True, act="Relu")
    return net.concat((e1, e3), f"{name}.cat")


def basic_conv(net: Net, x: str, name: str, cout: int, kernel, **kw) -> str:
    """torchvision's BasicConv2d: conv (no bias) + BatchNorm + ReLU."""
    return net.conv(x, f"{name}.conv", cout, kernel, bn=f"{name}.bn", act="Relu", **kw)


def googlenet(net: Net) -> None:
    """torchvision `googlenet` without the auxiliary heads (Szegedy et al., 2015, Table 1, with BatchNorm)."""
    x = net.input((3, 224, 224))
    x = basic_conv(net, x, "conv1", 64, 7, stride=2, padding=3)
    x = net.pool(x, "maxpool1", "MaxPool", 3, stride=2, ceil=True)
    x = basic_conv(net, x, "conv2", 64, 1)
    x = basic_conv(net, x, "conv3", 192, 3, padding=1)
    x = net.pool(x, "maxpool2", "MaxPool", 3, stride=2, ceil=True)
    blocks: dict[str, int | tuple[int, ...]] = {
        "3a": (64, 96, 128, 16, 32, 32), "3b": (128, 128, 192, 32, 96, 64), "maxpool3": 3,
        "4a": (192, 96, 208, 16, 48, 64), "4b": (160, 112, 224, 24, 64, 64), "4c": (128, 128, 256, 24, 64, 64),
        "4d": (112, 144, 288, 32, 64, 64), "4e": (256, 160, 320, 32, 128, 128), "maxpool4": 2,
        "5a": (256, 160, 320, 32, 128, 128), "5b": (384, 192, 384, 48, 128, 128)
    }
    for key, spec in blocks.items():
        if isinstance(spec, int):  # a "maxpool" key: the kernel
            x = net.pool(x, key, "MaxPool", spec, stride=2, ceil=True)
        else:
            x = _googlenet_inception(net, x, f"inception{key}", *spec)
    x = net.flatten(net.global_pool(x, "avgpool"))
    net.linear(x, "fc", 1000)


def _googlenet_inception(net: Net, x: str, name: str, c1, c3r, c3, c5r, c5, pool_proj) -> str:
    b1 = basic_conv(net, x, f"{name}.branch1", c1, 1)
    b2 = basic_conv(net, basic_conv(net, x, f"{name}.branch2.0", c3r, 1), f"{name}.branch2.1", c3, 3, padding=1)
    # torchvision keeps a 3x3 conv in the "5x5" branch (its documented deviation from the paper)
    b3 = basic_conv(net, basic_conv(net, x, f"{name}.branch3.0", c5r, 1), f"{name}.branch3.1", c5, 3, padding=1)
    p = net.pool(x, f"{name}.branch4.0", "MaxPool", 3, stride=1, padding=1, ceil=True)
    b4 = basic_conv(net, p, f"{name}.branch4.1", pool_proj, 1)
    return net.concat((b1, b2, b3, b4), f"{name}.cat")


def inception_v3(net: Net) -> None:
    """torchvision `inception_v3` at 299x299 without the auxiliary head (Szegedy et al., 2016)."""
    x = net.input((3, 299, 299))
    x = basic_conv(net, x, "Conv2d_1a_3x3", 32, 3, stride=2)
    x = basic_conv(net, x, "Conv2d_2a_3x3", 32, 3)
    x = basic_conv(net, x, "Conv2d_2b_3x3", 64, 3, padding=1)
    x = net.pool(x, "maxpool1", "MaxPool", 3, stride=2)
    x = basic_conv(net, x, "Conv2d_3b_1x1", 80, 1)
    x = basic_conv(net, x, "Conv2d_4a_3x3", 192, 3)
    x = net.pool(x, "maxpool2", "MaxPool", 3, stride=2)
    for name, pool_features in (("Mixed_5b", 32), ("Mixed_5c", 64), ("Mixed_5d", 64)):
        x = _inception_a(net, x, name, pool_features)
    x = _inception_b(net, x, "Mixed_6a")
    for name, c7 in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
        x = _inception_c(net, x, name, c7)
    x = _inception_d(net, x, "Mixed_7a")
    x = _inception_e(net, x, "Mixed_7b")
    x = _inception_e(net, x, "Mixed_7c")
    x = net.flatten(net.global_pool(x, "avgpool"))
    net.linear(x, "fc", 1000)


def _chain(net: Net, x: str, name: str, specs) -> str:
    """BasicConv2d layers in sequence: specs are (suffix, cout, kernel, extra kwargs)."""
    for suffix, cout, kernel, kw in specs:
        x = basic_conv(net, x, f"{name}.{suffix}", cout, kernel, **kw)
    return x


def _avg_branch(net: Net, x: str, name: str, cout: int) -> str:
    p = net.pool(x, f"{name}.avg_pool", "AveragePool", 3, stride=1, padding=1)
    return basic_conv(net, p, f"{name}.branch_pool", cout, 1)


P1 = {"padding": 1}
S2 = {"stride": 2}
ROW3, COL3 = {"padding": (0, 1)}, {"padding": (1, 0)}
ROW7, COL7 = {"padding": (0, 3)}, {"padding": (3, 0)}


def _inception_a(net, x, name, pool_features):
    b1 = _chain(net, x, name, (("branch1x1", 64, 1, {}),))
    b5 = _chain(net, x, name, (("branch5x5_1", 48, 1, {}), ("branch5x5_2", 64, 5, {"padding": 2})))
    b3 = _chain(net, x, name, (("branch3x3dbl_1", 64, 1, {}), ("branch3x3dbl_2", 96, 3, P1),
                               ("branch3x3dbl_3", 96, 3, P1)))
    return net.concat((b1, b5, b3, _avg_branch(net, x, name, pool_features)), f"{name}.cat")


def _inception_b(net, x, name):
    b3 = _chain(net, x, name, (("branch3x3", 384, 3, S2),))
    bd = _chain(net, x, name, (("branch3x3dbl_1", 64, 1, {}), ("branch3x3dbl_2", 96, 3, P1),
                               ("branch3x3dbl_3", 96, 3, S2)))
    p = net.pool(x, f"{name}.max_pool", "MaxPool", 3, stride=2)
    return net.concat((b3, bd, p), f"{name}.cat")


def _inception_c(net, x, name, c7):
    b1 = _chain(net, x, name, (("branch1x1", 192, 1, {}),))
    b7 = _chain(net, x, name, (("branch7x7_1", c7, 1, {}), ("branch7x7_2", c7, (1, 7), ROW7),
                               ("branch7x7_3", 192, (7, 1), COL7)))
    bd = _chain(net, x, name, (("branch7x7dbl_1", c7, 1, {}), ("branch7x7dbl_2", c7, (7, 1), COL7),
                               ("branch7x7dbl_3", c7, (1, 7), ROW7), ("branch7x7dbl_4", c7, (7, 1), COL7),
                               ("branch7x7dbl_5", 192, (1, 7), ROW7)))
    return net.concat((b1, b7, bd, _avg_branch(net, x, name, 192)), f"{name}.cat")


def _inception_d(net, x, name):
    b3 = _chain(net, x, name, (("branch3x3_1", 192, 1, {}), ("branch3x3_2", 320, 3, S2)))
    b7 = _chain(net, x, name, (("branch7x7x3_1", 192, 1, {}), ("branch7x7x3_2", 192, (1, 7), ROW7),
                               ("branch7x7x3_3", 192, (7, 1), COL7), ("branch7x7x3_4", 192, 3, S2)))
    p = net.pool(x, f"{name}.max_pool", "MaxPool", 3, stride=2)
    return net.concat((b3, b7, p), f"{name}.cat")


def _inception_e(net, x, name):
    b1 = _chain(net, x, name, (("branch1x1", 320, 1, {}),))
    b3 = _chain(net, x, name, (("branch3x3_1", 384, 1, {}),))
    b3 = net.concat((_chain(net, b3, name, (("branch3x3_2a", 384, (1, 3), ROW3),)),
                     _chain(net, b3, name, (("branch3x3_2b", 384, (3, 1), COL3),))), f"{name}.cat_3x3")
    bd = _chain(net, x, name, (("branch3x3dbl_1", 448, 1, {}), ("branch3x3dbl_2", 384, 3, P1)))
    bd = net.concat((_chain(net, bd, name, (("branch3x3dbl_3a", 384, (1, 3), ROW3),)),
                     _chain(net, bd, name, (("branch3x3dbl_3b", 384, (3, 1), COL3),))), f"{name}.cat_3x3dbl")
    return net.concat((b1, b3, bd, _avg_branch(net, x, name, 192)), f"{name}.cat")


def densenet121(net: Net) -> None:
    """torchvision `densenet121` (Huang et al., 2017, Table 1): every dense layer concatenates all earlier maps.

    A dense layer's BN-ReLU runs in front of its 1x1 conv (pre-activation), so it folds into that conv.
    The first layer of a block reads the block input directly (torchvision's one-tensor `cat` is a copy).
    """
    x = net.input((3, 224, 224))
    x = net.conv(x, "features.conv0", 64, 7, stride=2, padding=3, bn="features.norm0", act="Relu")
    x = net.pool(x, "features.pool0", "MaxPool", 3, stride=2, padding=1)
    for b, layers in enumerate((6, 12, 24, 16), start=1):
        features = [x]
        for j in range(1, layers + 1):
            name = f"features.denseblock{b}.denselayer{j}"
            y = features[0] if len(features) == 1 else net.concat(features, f"{name}.cat")
            pre = (net.bn(f"{name}.norm1", net.shape(y)[1]), net.act(f"{name}.relu1"))
            y = net.conv(y, f"{name}.conv1", 128, 1, pre=pre, bn=f"{name}.norm2", act="Relu")
            features.append(net.conv(y, f"{name}.conv2", 32, 3, padding=1))
        x = net.concat(features, f"features.denseblock{b}.cat")
        if b < 4:
            name = f"features.transition{b}"
            c = net.shape(x)[1]
            x = net.conv(x, f"{name}.conv", c // 2, 1, pre=(net.bn(f"{name}.norm", c), net.act(f"{name}.relu")))
            x = net.pool(x, f"{name}.pool", "AveragePool", 2, stride=2)
    x = net.bn_op(x, "features.norm5", act="Relu")
    x = net.flatten(net.global_pool(x, "avgpool"))
    net.linear(x, "classifier", 1000)
