"""Built-in networks, each built by code exactly as its reference definition (torchvision, else the paper).

`names()` lists them; `build(name, batch)` returns the cached Graph. No weights, no downloads:
only the structure, in the IR the ONNX importer produces, so `save_onnx` then `load_network`
gives back an identical graph. Figures per network are in docs/zoo.md.
"""

from __future__ import annotations

from functools import cache, partial

from engine.errors import EngineError, UnknownNameError
from engine.graph import Graph
from engine.zoo import classic, convnext, mobile, nas, resnet, segmentation, transformer, video
from engine.zoo._builder import Net

# network name -> function that writes it into a Net
_BUILDERS = {
    "alexnet": classic.alexnet,
    "vgg16": partial(classic.vgg, depth="vgg16"),
    "vgg19": partial(classic.vgg, depth="vgg19"),
    "squeezenet1_0": classic.squeezenet1_0,
    "googlenet": classic.googlenet,
    "inception_v3": classic.inception_v3,
    "densenet121": classic.densenet121,
    "resnet18": partial(resnet.resnet, name="resnet18"),
    "resnet50": partial(resnet.resnet, name="resnet50"),
    "resnet152": partial(resnet.resnet, name="resnet152"),
    "resnext50_32x4d": partial(resnet.resnet, name="resnext50_32x4d"),
    "resnet1202": resnet.resnet1202,
    "mobilenet_v1": mobile.mobilenet_v1,
    "mobilenet_v2": mobile.mobilenet_v2,
    "mobilenet_v3_small": mobile.mobilenet_v3_small,
    "shufflenet_v2_x1_0": mobile.shufflenet_v2_x1_0,
    "efficientnet_b0": mobile.efficientnet_b0,
    "r2plus1d_18": video.r2plus1d_18,
    "s3d": video.s3d,
    "fcn_resnet50": segmentation.fcn_resnet50,
    "deeplabv3_resnet50": segmentation.deeplabv3_resnet50,
    "lraspp_mobilenet_v3_large": segmentation.lraspp_mobilenet_v3_large,
    "vit_b_16": transformer.vit_b_16,
    "transformer": transformer.transformer,
    "convnext_tiny": convnext.convnext_tiny,
    "nasnet_a_mobile": nas.nasnet_a_mobile,
    "darts": nas.darts,
    "amoebanet_d": nas.amoebanet_d,
    "pnasnet5_large": nas.pnasnet5_large,
}


def names() -> tuple[str, ...]:
    """Every zoo network name, sorted."""
    return tuple(sorted(_BUILDERS))


def build(name: str, batch: int = 1) -> Graph:
    """The zoo network `name` at batch size `batch` (built once per (name, batch), then cached)."""
    if name not in _BUILDERS:
        raise UnknownNameError("network", name, _BUILDERS)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise EngineError(f"batch must be a positive whole number, got {batch!r}")
    return _build(name, batch)


@cache
def _build(name: str, batch: int) -> Graph:
    net = Net(name, batch)
    _BUILDERS[name](net)
    return net.graph()
