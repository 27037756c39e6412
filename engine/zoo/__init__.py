"""Built-in networks, each built by code exactly as its reference definition (torchvision, else the paper).

`names()` lists them; `build(name, batch)` returns the cached Graph. No weights, no downloads:
only the structure, in the IR the ONNX importer produces, so `save_onnx` then `load_network`
gives back an identical graph. Figures per network are in docs/zoo.md.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from functools import cache, partial

from engine.errors import EngineError, UnknownNameError
from engine.graph import Graph
from engine.zoo import classic, convnext, llm, mobile, nas, resnet, segmentation, transformer, video
from engine.zoo._builder import Net

# network name -> function that writes it into a Net
_BUILDERS: dict[str, Callable[..., None]] = {
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
    "bert_base": llm.bert_base,
    "bert_base_512": partial(llm.bert_base, seq=512),
    "gpt2": llm.gpt2,
    "gpt3_6.7b_block": llm.gpt3_block,
    "llama3_8b_prefill": llm.llama_prefill,
    "llama3_8b_decode": llm.llama_decode,
    "llama3_8b_decode_kv8191": partial(llm.llama_decode, kv=8191),
}
# networks with a token count in the name, `<name>_seq<N>` or `<name>_kv<N>`: name -> (suffix, builder keyword)
LENGTHS = {"bert_base": ("seq", "seq"), "gpt2": ("seq", "seq"), "gpt3_6.7b_block": ("seq", "seq"),
           "llama3_8b_prefill": ("seq", "seq"), "llama3_8b_decode": ("kv", "kv")}
_LENGTH_NAME = re.compile(r"(?P<base>.+)_(?P<suffix>seq|kv)(?P<count>-?\d+)")


def names() -> tuple[str, ...]:
    """Every zoo network name, sorted."""
    return tuple(sorted(_BUILDERS))


def length(name: str) -> tuple[str, str, int] | None:
    """(base name, suffix, token count) of a language model's name, for choosing another count:
    `llama3_8b_decode_kv4096` -> ('llama3_8b_decode', 'kv', 4096), `gpt2` -> ('gpt2', 'seq', 1024) (its builder's
    default); None for a network without a token count in `LENGTHS`. The count is not checked against the model's
    context (`build` does that)."""
    m = _LENGTH_NAME.fullmatch(name)
    if m and LENGTHS.get(m["base"], ("",))[0] == m["suffix"]:
        return m["base"], m["suffix"], int(m["count"])
    if name in LENGTHS:
        suffix, keyword = LENGTHS[name]
        return name, suffix, inspect.signature(_BUILDERS[name]).parameters[keyword].default
    return None


def build(name: str, batch: int = 1) -> Graph:
    """The zoo network `name` at batch size `batch` (built once per (name, batch), then cached).

    Besides `names()`, a language model takes its token count in the name: `bert_base_seq384`,
    `llama3_8b_prefill_seq512`, `llama3_8b_decode_kv4096` (the KV-cache length), as `LENGTHS` lists.
    """
    _builder(name)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise EngineError(f"batch must be a positive whole number, got {batch!r}")
    return _build(name, batch)


def _builder(name: str):
    """The function that writes network `name` into a Net."""
    if name in _BUILDERS:
        return _BUILDERS[name]
    m = _LENGTH_NAME.fullmatch(name)
    if m and LENGTHS.get(m["base"], ("",))[0] == m["suffix"]:
        return partial(_BUILDERS[m["base"]], **{LENGTHS[m["base"]][1]: int(m["count"])})
    raise UnknownNameError("network", name, [*_BUILDERS, *(f"{b}_{s}<N>" for b, (s, _) in LENGTHS.items())])


@cache
def _build(name: str, batch: int) -> Graph:
    net = Net(name, batch)
    _builder(name)(net)
    return net.graph()
