"""Real exports for the import-rate benchmark: export timm, HF transformers and torchvision models, then import them.

Two steps, two environments (torch is not a project dependency):

    python3.11 -m venv /tmp/tv && /tmp/tv/bin/pip install torch==2.14.1 torchvision==0.29.1 timm transformers onnx
    /tmp/tv/bin/python benchmarks/export_zoo.py export /tmp/zoo [MODEL...]  # ONNX files + PyTorch's MACs (zoo.json)
    /tmp/tv/bin/python benchmarks/export_zoo.py export /tmp/zoo_untuned --untuned   # the untuned set
    .venv/bin/python benchmarks/export_zoo.py measure /tmp/zoo [MORE...]   # the engine's import rate against them
    .venv/bin/python benchmarks/export_zoo.py strip /tmp/zoo tests/data/exports FILE...   # weight-free copies

Models are built from their configs with random weights (nothing is downloaded) and exported with
`torch.onnx.export(..., dynamo=False)` (the TorchScript exporter, opset 17, dynamic batch axis, grad enabled so
torchvision's fused attention kernel stays out), the files users have. PyTorch's count is `torch.utils.flop_counter.FlopCounterMode` on the same input, halved
(it counts 2 FLOPs per multiply-accumulate of every matmul and conv; attention is run in its math form so its
two matmuls count as well).
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path

TIMM = ["resnet18", "resnet50", "mobilenetv3_small_100", "mobilenetv2_100", "efficientnet_b0", "tf_efficientnet_b0",
        "convnext_atto", "regnety_002", "vit_small_patch16_224", "deit_tiny_patch16_224",
        "swin_tiny_patch4_window7_224", "xcit_nano_12_p16_224", "crossvit_tiny_240", "coat_lite_tiny",
        "tiny_vit_5m_224", "efficientvit_m0", "mobilevit_xxs", "levit_128s", "poolformer_s12", "ghostnet_100",
        "densenet121", "repvgg_a0", "dla34", "cspresnet50", "inception_v3", "edgenext_xx_small", "pit_ti_224",
        "eva02_tiny_patch14_224", "maxvit_nano_rw_256", "convmixer_768_32", "mixer_s16_224", "resmlp_12_224",
        "hrnet_w18_small", "res2net50_14w_8s", "fastvit_t8", "efficientformer_l1", "gcvit_xxtiny", "vgg11"]
TORCHVISION = ["resnet18", "mobilenet_v3_small", "efficientnet_b0", "vit_b_16", "maxvit_t", "swin_t", "convnext_tiny",
               "regnet_y_400mf", "shufflenet_v2_x1_0", "squeezenet1_0", "googlenet", "densenet121", "mnasnet0_5",
               "segmentation.lraspp_mobilenet_v3_large", "segmentation.deeplabv3_mobilenet_v3_large",
               "segmentation.fcn_resnet50", "detection.ssdlite320_mobilenet_v3_large",
               "detection.fasterrcnn_mobilenet_v3_large_320_fpn", "detection.retinanet_resnet50_fpn",
               "detection.fcos_resnet50_fpn", "detection.maskrcnn_resnet50_fpn"]
SMALL = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024)
HF = {  # model class -> config keyword arguments (small sizes: the patterns, not the size, matter here)
    "BertModel": SMALL, "RobertaModel": SMALL, "DistilBertModel": dict(dim=256, n_layers=4, n_heads=4, hidden_dim=1024),
    "AlbertModel": SMALL, "ElectraModel": SMALL, "DebertaV2Model": SMALL, "DebertaModel": SMALL,
    "GPT2Model": dict(n_embd=256, n_layer=4, n_head=4), "LlamaModel": {**SMALL, "num_key_value_heads": 2},
    "MistralModel": {**SMALL, "num_key_value_heads": 2}, "Qwen2Model": {**SMALL, "num_key_value_heads": 2},
    "PhiModel": SMALL, "ViTModel": SMALL, "MobileBertModel": dict(num_hidden_layers=4),
    "XLMRobertaModel": SMALL,
    "OPTModel": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, ffn_dim=1024, word_embed_proj_dim=256),
}
SEQUENCE = 128
# The untuned set: disjoint from the lists above and exported after the importer was written, to measure the
# import rate on files it was not tuned to (docs/zoo.md reports the rate before and after the fixes it prompted).
UNTUNED_TIMM = ["tf_efficientnetv2_b0", "mobilenetv4_conv_small", "convnextv2_atto", "regnetx_002",
                "seresnext26d_32x4d", "legacy_seresnet18", "selecsls42b", "dpn68", "rexnet_100", "lcnet_050",
                "mixnet_s", "resnest14d", "skresnet18", "nf_resnet26", "cspdarknet53", "ese_vovnet19b_dw",
                "hgnetv2_b0", "repvit_m1", "efficientvit_b0", "mobileone_s0", "deit3_small_patch16_224",
                "cait_xxs24_224", "convit_tiny", "twins_pcpvt_small", "pvt_v2_b0", "visformer_tiny", "volo_d1_224",
                "sequencer2d_s", "gmlp_s16_224", "tnt_s_patch16_224", "mvitv2_tiny", "focalnet_tiny_srf",
                "davit_tiny", "hiera_tiny_224", "efficientformerv2_s0", "nextvit_small",
                "vit_relpos_small_patch16_224", "inception_next_tiny", "ghostnetv2_100", "starnet_s1"]
UNTUNED_TORCHVISION = ["alexnet", "vgg11_bn", "wide_resnet50_2", "resnext50_32x4d", "mobilenet_v2",
                       "efficientnet_v2_s", "regnet_x_400mf", "swin_v2_t", "vit_b_32", "inception_v3",
                       "squeezenet1_1", "segmentation.deeplabv3_resnet50", "detection.ssd300_vgg16",
                       "detection.retinanet_resnet50_fpn_v2", "detection.keypointrcnn_resnet50_fpn",
                       "video.r3d_18", "video.r2plus1d_18", "video.mc3_18", "video.s3d"]
ENCODER = dict(d_model=256, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
               decoder_attention_heads=4, encoder_ffn_dim=1024, decoder_ffn_dim=1024)
UNTUNED_HF = {  # label -> (model class, config keyword arguments, input: ids, image, audio or mel)
    "BartModel": ("BartModel", ENCODER, "ids"),
    "T5EncoderModel": ("T5EncoderModel", dict(d_model=256, num_layers=4, num_heads=4, d_ff=1024, d_kv=64), "ids"),
    "MPNetModel": ("MPNetModel", SMALL, "ids"), "ConvBertModel": ("ConvBertModel", SMALL, "ids"),
    "RoFormerModel": ("RoFormerModel", SMALL, "ids"), "ErnieModel": ("ErnieModel", SMALL, "ids"),
    "SqueezeBertModel": ("SqueezeBertModel", {**SMALL, "embedding_size": 256}, "ids"),
    "XLNetModel": ("XLNetModel", dict(d_model=256, n_layer=4, n_head=4, d_inner=1024), "ids"),
    "BloomModel": ("BloomModel", dict(hidden_size=256, n_layer=4, n_head=4), "ids"),
    "GPTNeoModel": ("GPTNeoModel", dict(hidden_size=256, num_layers=4, num_heads=4, intermediate_size=1024,
                                        attention_types=[[["global", "local"], 2]]), "ids"),
    "GPTJModel": ("GPTJModel", dict(n_embd=256, n_layer=4, n_head=4, rotary_dim=32), "ids"),
    "FalconModel": ("FalconModel", dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                        multi_query=False, new_decoder_architecture=False), "ids"),
    "LlamaModel-MHA": ("LlamaModel", {**SMALL, "num_key_value_heads": 4}, "ids"),
    "MistralModel-MHA": ("MistralModel", {**SMALL, "num_key_value_heads": 4}, "ids"),
    "Qwen2Model-MHA": ("Qwen2Model", {**SMALL, "num_key_value_heads": 4}, "ids"),
    "GemmaModel-MHA": ("GemmaModel", {**SMALL, "num_key_value_heads": 4, "head_dim": 64}, "ids"),
    "CLIPTextModel": ("CLIPTextModel", {**SMALL, "max_position_embeddings": SEQUENCE}, "ids"),
    "CLIPVisionModel": ("CLIPVisionModel", {**SMALL, "image_size": 224, "patch_size": 32}, "image"),
    "SwinModel": ("SwinModel", {}, "image"), "Swinv2Model": ("Swinv2Model", {}, "image"),
    "BeitModel": ("BeitModel", SMALL, "image"), "ConvNextV2Model": ("ConvNextV2Model", {}, "image"),
    "SegformerModel": ("SegformerModel", {}, "image"),
    "Dinov2Model": ("Dinov2Model", {**SMALL, "image_size": 224, "patch_size": 14}, "image"),
    "Wav2Vec2Model": ("Wav2Vec2Model", SMALL, "audio"), "HubertModel": ("HubertModel", SMALL, "audio"),
    "WhisperEncoder": ("WhisperEncoder", dict(d_model=256, encoder_layers=4, encoder_attention_heads=4,
                                              encoder_ffn_dim=1024), "mel"),
}


def export(folder: Path, only=(), *, untuned: bool = False) -> None:
    """Export every model of the tuned (or the untuned) set, or those named in `only`, to `folder` and write
    zoo.json: file, family, PyTorch MACs, input shape (or the error)."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    old = json.loads((folder / "zoo.json").read_text()) if only and (folder / "zoo.json").exists() else []
    records = [r for r in old if r["model"] not in only]
    for family, name, build in _builders(untuned):
        if only and name not in only:
            continue
        file = folder / f"{family}_{name.replace('.', '_')}.onnx"
        started = time.time()
        try:
            model, args, names = build()
            model.eval()
            with torch.enable_grad():  # keeps torch's fused inference kernels (native MHA) out of count and trace
                macs = _torch_macs(model, args)
                torch.onnx.export(model, args, file, dynamo=False, opset_version=17, input_names=names,
                                  dynamic_axes={n: {0: "batch"} for n in names}, do_constant_folding=True)
            records.append({"file": file.name, "family": family, "model": name, "torch_macs": macs,
                            "inputs": {n: list(a.shape) for n, a in zip(names, args)},
                            "seconds": time.time() - started})
        except Exception as err:  # an exporter failure is recorded, not fatal: the rate counts only exported files
            records.append({"file": None, "family": family, "model": name,
                            "error": f"{type(err).__name__}: {err}"[:300]})
        print(records[-1], file=sys.stderr, flush=True)
        (folder / "zoo.json").write_text(json.dumps(records, indent=1))


def _torch_macs(model, args) -> int:
    """PyTorch's count; attention runs as its math form so its two matmuls are counted too (the fused CPU
    kernel is not in the counter's table)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(*args)
    return counter.get_total_flops() // 2


def _builders(untuned: bool):
    import torch

    image = torch.randn(1, 3, 224, 224)
    for name in UNTUNED_TIMM if untuned else TIMM:
        def build(name=name):
            import timm

            model = timm.create_model(name, pretrained=False)
            size = model.pretrained_cfg.get("input_size", (3, 224, 224))
            return model, (torch.randn(1, *size),), ["image"]
        yield "timm", name, build
    for name in UNTUNED_TORCHVISION if untuned else TORCHVISION:
        def build(name=name):
            import torchvision

            module, _, short = name.rpartition(".")
            source = getattr(torchvision.models, module) if module else torchvision.models
            dense = module in ("detection", "segmentation")
            model = getattr(source, short)(**({"weights": None, "weights_backbone": None} if dense else {"weights": None}))
            size = 320 if "320" in short else (299 if short == "inception_v3" else 300 if "ssd300" in short else 224)
            shape = (1, 3, 16, 224 if short == "s3d" else 112, 224 if short == "s3d" else 112) if module == "video" \
                else (1, 3, size, size)
            return _Tensors(model) if dense else model, (torch.randn(*shape),), ["video" if module == "video" else "image"]
        yield "torchvision", name, build
    hf = UNTUNED_HF if untuned else {cls: (cls, kwargs, "image" if cls == "ViTModel" else "ids")
                                     for cls, kwargs in HF.items()}
    for label, (cls, kwargs, kind) in hf.items():
        def build(cls=cls, kwargs=kwargs, kind=kind):
            import transformers

            if cls == "WhisperEncoder":
                from transformers.models.whisper.modeling_whisper import WhisperEncoder as model_cls
            else:
                model_cls = getattr(transformers, cls)
            model = model_cls(model_cls.config_class(**kwargs))
            inputs = {"image": ("pixel_values", image), "audio": ("input_values", torch.randn(1, 16000)),
                      "mel": ("input_features", torch.randn(1, 80, 3000)),
                      "ids": ("input_ids", torch.randint(0, 1000, (1, SEQUENCE)))}
            name, tensor = inputs[kind]
            return _Tensors(model), (tensor,), [name]
        yield "hf", label, build


def _tensors_module():
    import torch

    class Tensors(torch.nn.Module):
        """A model whose output is a dict, list or dataclass, returning its tensors as a flat tuple."""

        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, *args):
            out = self.model(*args)
            return tuple(_flatten(out))

    return Tensors


def _Tensors(model):
    return _tensors_module()(model)


def _flatten(out):
    import torch

    if isinstance(out, torch.Tensor):
        yield out
    elif isinstance(out, dict) or hasattr(out, "to_tuple"):
        for v in (out.values() if isinstance(out, dict) else out.to_tuple()):
            yield from _flatten(v)
    elif isinstance(out, (list, tuple)):
        for v in out:
            yield from _flatten(v)


def measure(folders: list[Path]) -> list[dict]:
    """Import every exported file; each row: model, PyTorch's and the engine's MACs, or the error."""
    import engine

    rows = []
    exported = [(folder, rec) for folder in folders for rec in json.loads((folder / "zoo.json").read_text())]
    for folder, rec in exported:
        if not rec.get("file"):
            continue
        row = {"family": rec["family"], "model": rec["model"], "torch_macs": rec["torch_macs"]}
        started = time.time()
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", engine.PartialImportWarning)
                g = engine.load_network(folder / rec["file"])
            if caught:
                row["left_out"] = str(caught[0].message).partition(": ")[2][:200]
            if g.assumptions:  # data-dependent counts, each at its most (engine.onnx.counts)
                row["assumed_counts"] = len(g.assumptions)
            row["engine_macs"] = g.macs
            row["ok"] = abs(g.macs - rec["torch_macs"]) <= 0.01 * rec["torch_macs"]
        except engine.EngineError as err:
            row["error"], row["ok"] = str(err)[-300:], False
        row["seconds"] = round(time.time() - started, 2)
        rows.append(row)
        print(json.dumps(row), flush=True)
    ok = sum(r["ok"] for r in rows)
    print(f"{ok} of {len(rows)} import with MACs within 1 % ({100 * ok / max(len(rows), 1):.1f} %)")
    return rows


def strip(folder: Path, names: list[str], target: Path) -> None:
    """Weight-free copies of the exports `names` in `target`: weights become external data that is never written
    (the engine reads only their dims), plus zoo.json with PyTorch's MACs. For tests/data/exports."""
    import onnx

    target.mkdir(parents=True, exist_ok=True)
    records = [r for r in json.loads((folder / "zoo.json").read_text()) if r.get("file") in names]
    for rec in records:
        model = onnx.load(folder / rec["file"])
        constants = [a.t for n in model.graph.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"]
        for init in [*model.graph.initializer, *constants]:
            # weights, and tables of more than 1 KB (anchors, relative-position indices): only their dims count
            if (init.data_type == onnx.TensorProto.FLOAT and len(init.raw_data) > 64) or len(init.raw_data) > 1024:
                init.ClearField("raw_data")
                init.data_location = onnx.TensorProto.EXTERNAL
                init.external_data.add(key="location", value="weights.bin")
        onnx.save(model, target / rec["file"])
    kept = json.loads((target / "zoo.json").read_text()) if (target / "zoo.json").exists() else []
    records = [r for r in kept if r["file"] not in names] + records  # copies stripped before stay listed
    (target / "zoo.json").write_text(json.dumps(records, indent=1) + "\n")


if __name__ == "__main__":
    step, where = sys.argv[1], Path(sys.argv[2])
    if step == "strip":
        strip(where, sys.argv[4:], Path(sys.argv[3]))
    else:
        untuned = "--untuned" in sys.argv
        names = [a for a in sys.argv[3:] if a != "--untuned"]
        export(where, names, untuned=untuned) if step == "export" else measure([Path(p) for p in sys.argv[2:]])
