"""Real exports (timm, HF transformers, torchvision; torch.onnx.export, opset 17) import with PyTorch's MACs.

The files in tests/data/exports are weight-free copies (`benchmarks/export_zoo.py strip`: the weights point
to an external file that does not exist, and the engine never reads it); zoo.json holds PyTorch's count for
each (`torch.utils.flop_counter`, attention in its math form). Regenerate with benchmarks/export_zoo.py.
XLNet, Whisper's encoder, wav2vec2, SegFormer, Sequencer2D (LSTM), R(2+1)D (Conv3d) and Gemma come from the
untuned set (docs/zoo.md), exported after the importer was written.
"""

import json
from pathlib import Path

import pytest

import engine

EXPORTS = Path(__file__).parent / "data" / "exports"
RECORDS = json.loads((EXPORTS / "zoo.json").read_text())


@pytest.mark.parametrize("record", RECORDS, ids=[r["model"] for r in RECORDS])
def test_export_imports_with_pytorch_macs(record):
    graph = engine.load_network(EXPORTS / record["file"])
    assert graph.macs == pytest.approx(record["torch_macs"], rel=0.01)
    assert graph.inputs and graph.outputs


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


def test_two_stage_detector_counts_its_static_part_exactly():
    """Faster R-CNN's RoI heads run on the proposals NMS keeps (a data-dependent count), so they are left out
    with a warning; what is counted, backbone + FPN + RPN, is PyTorch's count of those modules
    (`FlopCounterMode` per module on a 320x320 image: 581,968,000 + 137,030,400 MACs; its RoI heads add
    2,153,932,800 on 150 proposals)."""
    path = EXPORTS / "torchvision_detection_fasterrcnn_mobilenet_v3_large_320_fpn.onnx"
    with pytest.warns(engine.PartialImportWarning, match="NonZero '/model/rpn/NonZero'"):
        graph = engine.load_network(path)
    assert graph.macs == 581_968_000 + 137_030_400
