"""Real exports (timm, HF transformers, torchvision; torch.onnx.export, opset 17) import with PyTorch's MACs.

The files in tests/data/exports are weight-free copies (`benchmarks/export_zoo.py strip`: the weights point
to an external file that does not exist, and the engine never reads it); zoo.json holds PyTorch's count for
each (`torch.utils.flop_counter`, attention in its math form). Regenerate with benchmarks/export_zoo.py.
XLNet, Whisper's encoder, wav2vec2, SegFormer, Sequencer2D (LSTM), R(2+1)D (Conv3d) and Gemma come from the
untuned set (docs/zoo.md), exported after the importer was written; BEiT (one layer, dynamic height and width,
`interpolate_pos_encoding=True`) and RetinaNet from issue 28's partial imports.
"""

import json
from pathlib import Path

import pytest

import engine

EXPORTS = Path(__file__).parent / "data" / "exports"
RECORDS = json.loads((EXPORTS / "zoo.json").read_text())


@pytest.mark.parametrize("record", RECORDS, ids=[r["model"] for r in RECORDS])
def test_export_imports_with_pytorch_macs(record):
    shapes = {name: tuple(shape) for name, shape in record["inputs"].items()}  # BEiT's height and width are dynamic
    graph = engine.load_network(EXPORTS / record["file"], input_shapes=shapes)
    assert graph.macs == pytest.approx(record["torch_macs"], rel=0.01)
    assert graph.inputs and graph.outputs


@pytest.mark.parametrize("shape, torch_macs", [((1, 3, 224, 224), 213_332_480), ((1, 3, 320, 320), 476_332_544),
                                               ((1, 3, 160, 288), 194_507_264)])
def test_sizes_that_follow_from_the_input_fold_once_it_is_given(shape, torch_macs):
    """HF BEiT exported with dynamic height and width and `interpolate_pos_encoding=True`: its relative position
    bias sits behind Ifs on the input's size and a Resize to it. Given the input's shape, the Ifs' conditions fold
    and the branch taken is imported (PyTorch's count at each size: benchmarks/export_zoo.py's counter)."""
    graph = engine.load_network(EXPORTS / "hf_BeitModel-interpolate.onnx", input_shapes={"pixel_values": shape})
    assert graph.macs == torch_macs and graph.assumptions == ()
    with pytest.raises(engine.ShapeError, match="input 'pixel_values' has a dynamic or missing shape "
                                                r"\[1, 3, 'height', 'width'\]: bind height, width"):
        engine.load_network(EXPORTS / "hf_BeitModel-interpolate.onnx")


def test_one_stage_detectors_count_their_post_processing():
    """RetinaNet's post-processing (per-level score filter, top-k, batched NMS, 300 detections) is counted at
    each data-dependent count's most; it adds no MACs, so the count is PyTorch's exactly."""
    graph = engine.load_network(EXPORTS / "torchvision_detection_retinanet_resnet50_fpn.onnx")
    assert [graph.tensors[t].shape for t in graph.outputs] == [(300, 4), (300,), (300,)]
    assert len(graph.assumptions) == 11 and graph.macs == 151_540_437_248


def test_export_batch_scales_macs():
    record = next(r for r in RECORDS if r["model"] == "deit_tiny_patch16_224")
    one = engine.load_network(EXPORTS / record["file"])
    four = engine.load_network(EXPORTS / record["file"], batch=4)
    assert four.macs == 4 * one.macs == 4 * record["torch_macs"]


def test_declared_input_shape_passed_again_and_a_longer_sequence():
    record = next(r for r in RECORDS if r["model"] == "GPT2Model")
    path = EXPORTS / record["file"]
    assert engine.load_network(path, input_shapes={"input_ids": (1, 128)}).macs == record["torch_macs"]
    assert engine.load_network(path, input_shapes={"input_ids": (1, 256)}).macs > 2 * record["torch_macs"]


FASTER_RCNN = EXPORTS / "torchvision_detection_fasterrcnn_mobilenet_v3_large_320_fpn.onnx"


def test_two_stage_detector_is_counted_whole_at_its_own_proposal_count():
    """Faster R-CNN's RoI heads run on the proposals NMS keeps, a data-dependent count. At each count's most the
    RPN's own `keep[:post_nms_top_n]` cuts them to 150, and the engine's count is PyTorch's on an image where 150
    proposals survive (`FlopCounterMode` per module on a 320x320 image: backbone 581,968,000 + RPN 137,030,400 +
    RoI heads 2,153,932,800 MACs; docs/zoo.md)."""
    graph = engine.load_network(FASTER_RCNN)
    assert graph.macs == 581_968_000 + 137_030_400 + 2_153_932_800
    assert "NonZero '/model/rpn/NonZero' keeps 450 (its most: every one of its input's 450 elements)" in graph.assumptions
    assert [graph.tensors[t].shape for t in graph.outputs] == [(100, 4), (100,), (100,)]  # 100 detections


def test_two_stage_detector_at_fewer_proposals():
    """With every data-dependent count at 60 the RPN keeps 60 proposals: the RoI heads' box head (two FC layers
    of 1024 on 7x7x256 RoIs, then 91 class scores and 364 box deltas) runs on 60 instead of 150."""
    per_roi = 256 * 7 * 7 * 1024 + 1024 * 1024 + 1024 * (91 + 364)
    whole = engine.load_network(FASTER_RCNN).macs
    assert engine.load_network(FASTER_RCNN, data_counts=60).macs == whole - 90 * per_roi
