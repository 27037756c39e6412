"""The network zoo: every network matches its reference definition's parameters and MACs.

Reference figures and where they come from (docs/zoo.md has the script that re-measures them):
- params: torchvision's published `num_params` (weights meta), except where the zoo follows the issue and
  leaves out an auxiliary head (inception_v3, fcn_resnet50, deeplabv3_resnet50): there the figure is
  measured on the torchvision 0.29.1 model built with `aux_logits=False` / `aux_loss=False`.
- MACs: conv + linear multiply-accumulates measured on torchvision 0.29.1 with forward hooks at the zoo's
  input size, batch 1 (for ResNet-50 this is the published 4.089 GFLOPS). ViT-B/16 is compared with the
  published 17.564 GFLOPS, which includes the attention matmuls.
"""

import math

import pytest

import engine
from engine import zoo
from engine.graph import OpKind

# name -> (parameters, conv + linear MACs at batch 1), measured / published as described above
TORCHVISION = {
    "alexnet": (61_100_840, 714_188_480),
    "vgg16": (138_357_544, 15_470_264_320),
    "vgg19": (143_667_240, 19_632_062_464),
    "googlenet": (6_624_904, 1_498_376_192),
    "squeezenet1_0": (1_248_424, 818_924_576),
    "resnet18": (11_689_512, 1_814_073_344),
    "resnet50": (25_557_032, 4_089_184_256),
    "resnet152": (60_192_808, 11_513_626_624),
    "inception_v3": (23_834_568, 5_713_216_096),
    "densenet121": (7_978_856, 2_834_161_664),
    "resnext50_32x4d": (25_028_904, 4_230_479_872),
    "r2plus1d_18": (31_505_325, 40_519_080_960),
    "s3d": (8_320_048, 17_978_771_456),
    "fcn_resnet50": (32_957_013, 26_484_498_432),
    "deeplabv3_resnet50": (39_638_869, 31_310_548_992),
    "lraspp_mobilenet_v3_large": (3_221_538, 379_281_312),
    "vit_b_16": (86_567_656, 17_564_000_000),
    "mobilenet_v2": (3_504_872, 300_774_272),
    "mobilenet_v3_small": (2_542_856, 56_510_400),
    "shufflenet_v2_x1_0": (2_278_604, 144_907_992),
    "efficientnet_b0": (5_288_548, 385_814_752),
    "convnext_tiny": (28_589_128, 4_455_531_264),
}
ISSUE_NAMES = {"alexnet", "vgg16", "googlenet", "squeezenet1_0", "mobilenet_v1", "resnet18", "resnet50", "resnet152",
               "resnet1202", "inception_v3", "densenet121", "resnext50_32x4d", "r2plus1d_18", "s3d", "fcn_resnet50",
               "lraspp_mobilenet_v3_large", "deeplabv3_resnet50", "transformer", "vit_b_16", "vgg19", "mobilenet_v2",
               "mobilenet_v3_small", "shufflenet_v2_x1_0", "efficientnet_b0", "convnext_tiny", "nasnet_a_mobile",
               "pnasnet5_large", "amoebanet_d", "darts", "bert_base", "bert_base_512", "gpt2", "gpt3_6.7b_block",
               "llama3_8b_prefill", "llama3_8b_decode"}  # issue 18 added the language models (tests/test_zoo_llm.py)


@pytest.mark.parametrize("name", sorted(TORCHVISION))
def test_matches_torchvision(name):
    params, macs = TORCHVISION[name]
    g = zoo.build(name)
    assert g.params == params
    assert g.macs == pytest.approx(macs, rel=0.005)


def test_issue_examples():
    """The figures quoted in issue 3."""
    assert zoo.build("resnet50").params == 25_557_032
    assert zoo.build("resnet50").macs / 1e9 == pytest.approx(4.09, abs=0.005)
    assert zoo.build("vgg16").params == 138_357_544
    assert zoo.build("mobilenet_v2").params == 3_504_872
    assert zoo.build("googlenet").params == 6_624_904
    assert zoo.build("squeezenet1_0").params == 1_248_424


def test_every_issue_network_is_listed():
    assert ISSUE_NAMES <= set(zoo.names())
    assert list(zoo.names()) == sorted(zoo.names())


def test_mobilenet_v1_matches_paper():
    """Howard et al. 2017, Table 1: 569 M mult-adds; 4,231,976 trainable parameters (Keras' MobileNet, alpha 1)."""
    g = zoo.build("mobilenet_v1")
    assert g.params == 4_231_976
    assert g.macs / 1e6 == pytest.approx(569, rel=0.005)
    assert sum(op.kind is OpKind.DWCONV for op in g.ops) == 13


def test_resnet1202_matches_paper():
    """He et al. 2016, Sec. 4.2: 6n+2 = 1202 weighted layers (n = 200), 19.4M parameters, parameter-free shortcuts."""
    g = zoo.build("resnet1202")
    weighted = [op for op in g.ops if op.kind in (OpKind.CONV, OpKind.MATMUL)]
    assert len(weighted) == 1202
    n = 200
    expected = 3 * 16 * 9 + 2 * 16 + 64 * 10 + 10  # stem conv + BN, classifier
    for c in (16, 32, 64):
        expected += n * (2 * c * c * 9 + 4 * c)
    expected -= (16 * 32 + 32 * 64) * 9  # the first conv of stages 2 and 3 reads half as many channels
    assert g.params == expected
    assert round(g.params / 1e6, 1) == 19.4
    assert g.tensors[g.inputs[0]].shape == (1, 3, 32, 32)


def test_transformer_matches_formula():
    """nn.Transformer() (44,140,544 parameters, torch 2.14.1) on 10 source and 20 target tokens.

    MACs by formula: self-attention on L tokens 4*L*d^2 + 2*L^2*d, cross-attention 2*T*d^2 + 2*S*d^2 + 2*T*S*d,
    feed-forward 2*L*d*ff.
    """
    g = zoo.build("transformer")
    assert g.params == 44_140_544
    d, ff, s, t = 512, 2048, 10, 20
    encoder = 4 * s * d * d + 2 * s * s * d + 2 * s * d * ff
    decoder = 4 * t * d * d + 2 * t * t * d + 2 * t * d * d + 2 * s * d * d + 2 * t * s * d + 2 * t * d * ff
    assert g.macs == 6 * (encoder + decoder)
    assert {g.tensors[i].shape for i in g.inputs} == {(1, 10, 512), (1, 20, 512)}
    assert zoo.build("transformer", batch=32).macs == 32 * g.macs


def test_optimus_table5_max_fanout():
    """Max |succ| of Optimus Table 5 for the networks whose structure matches ours."""
    expected = {"vgg16": 1, "resnet50": 2, "resnet152": 2, "resnet1202": 2, "googlenet": 4, "squeezenet1_0": 2}
    assert {name: zoo.build(name).max_fanout for name in expected} == expected


@pytest.mark.parametrize("name", ["resnet50", "inception_v3", "vit_b_16", "r2plus1d_18"])
def test_batch_scales_activations_and_macs(name):
    one, four = zoo.build(name), zoo.build(name, batch=4)
    assert four.batch == 4 and four.params == one.params
    assert four.macs == 4 * one.macs
    for t in four.tensor_list:
        if not t.is_weight:
            assert t.shape[0] == 4 * one.tensors[t.name].shape[0] or t.shape[0] == one.tensors[t.name].shape[0]


def test_cached_and_loaded_by_name():
    assert zoo.build("resnet18") is zoo.build("resnet18")
    assert engine.load_network("resnet18", batch=2) is zoo.build("resnet18", batch=2)


@pytest.mark.parametrize("name", sorted(ISSUE_NAMES))
def test_graph_is_well_formed(name):
    """Every weight belongs to one op, every activation is read or is an output, kinds agree with attributes."""
    g = zoo.build(name)
    owners = {}
    for op in g.ops:
        for w in op.weights:
            assert g.tensors[w].is_weight and w not in owners
            owners[w] = op.name
        if op.kind in (OpKind.CONV, OpKind.DWCONV):
            c_in = g.tensors[op.weights[0]].shape[1] * op.groups
            assert op.macs == math.prod(g.tensors[op.outputs[0]].shape) * c_in // op.groups * math.prod(op.kernel)
            assert (op.kind is OpKind.DWCONV) == (op.groups > 1 and op.groups == c_in)
    assert set(owners) == {t.name for t in g.tensor_list if t.is_weight}
    read = {t for op in g.ops for t in op.inputs}
    for op in g.ops:
        assert all(t in read or t in g.outputs for t in op.outputs)


def test_unknown_name_lists_choices():
    with pytest.raises(engine.UnknownNameError, match="resnet50"):
        zoo.build("resnet51")
    with pytest.raises(engine.EngineError, match="batch"):
        zoo.build("resnet50", batch=0)
