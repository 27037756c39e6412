"""Every choice a dashboard user makes, in one `param.Parameterized` (one instance per browser session)."""

from __future__ import annotations

import param

import engine
from engine import zoo
from engine.allocation import METHODS as ALLOCATION_METHODS
from engine.loading import onnx_light_models

KB = 1024  # bytes, on the slider and in every view (STYLE.md, Units)
# Buffer sizes the slider steps through: 8 KB .. 64 MB, two steps per doubling (log scale): the top end is where an
# LLM prefill's whole FFN fuses (docs/fusion.md).
BUFFER_STEPS_KB = sorted({int(8 * 2 ** (i / 2)) for i in range(0, 27)})
FUSION_METHODS = ("none", "dnnvm", "efficient_s", "optimus", "online")
BUDGET_CHOICES = ("M_R", "M_H", "M_P", "bytes")
OP_KINDS = tuple(k.value for k in engine.OpKind)



class Chosen(param.ListSelector):
    """A ListSelector that refuses an empty list: with no fusion method checked there is no plan to show, and
    showing one the user did not ask for would say nothing of why."""

    def _validate(self, val):
        super()._validate(val)
        if val is not None and not len(val):
            raise ValueError(f"{self.name}: check at least one")


class NetworkName(param.Selector):
    """A network's name: one of the choices, or a language model's at another token count
    (`llama3_8b_decode_kv4096`, `engine.zoo.length`), which the engine builds from the name alone."""

    def _validate(self, val):
        named = zoo.length(val) if isinstance(val, str) and val not in self.objects else None
        if named is None or named[2] < 1:
            super()._validate(val)


def network_names() -> list[str]:
    """Zoo names, then the onnx package's light models (always importable)."""
    return list(zoo.names()) + sorted(p.name for p in onnx_light_models().glob("*.onnx"))


class ExplorerState(param.Parameterized):
    """The user's network, accelerator and method choices; the page and the URL both mirror it."""

    network = NetworkName(default="resnet50", objects=network_names(),
                          doc="Built-in network or ONNX light model; a language model's name may carry its token count")
    upload_name = param.String(default="", doc="An uploaded .onnx file in use, as 'content hash/file name'")
    input_shapes = param.String(default="", label="Input shapes (ONNX files)",
                                doc="Comma-separated NAME=DIMS: an input's shape (input_ids=1x128) or a symbolic "
                                    "dimension's size (sequence=128)")
    batch = param.Integer(default=1, bounds=(1, 64), doc="Batch size")
    preset = param.Selector(default="optimus", objects=list(engine.Accelerator.presets()), doc="Accelerator preset")
    buffer_kb = param.Selector(default=128, objects=BUFFER_STEPS_KB, doc="Global buffer size (KB)")
    pe_rows = param.Integer(default=16, label="PE rows", bounds=(1, 256), doc="PE array rows")
    pe_cols = param.Integer(default=16, label="PE columns", bounds=(1, 256), doc="PE array columns")
    rf_bytes = param.Integer(default=64, label="RF bytes per PE", bounds=(1, 4096), doc="Register file bytes per PE")
    word_bits = param.Selector(default=16, objects=[4, 8, 16, 32], doc="Word width (bits)")
    dram_gbps = param.Number(default=6.4, label="DRAM bandwidth (GB/s)", bounds=(0.1, 1000.0), doc="DRAM bandwidth (GB/s)")
    methods = Chosen(default=["dnnvm", "efficient_s", "optimus"], objects=list(FUSION_METHODS),
                     doc="Fusion methods to compare (one at least)")
    access_model = param.Selector(default="mapping", objects=["mapping", "blocking", "dataflow"],
                                  label="Energy and latency from",
                                  doc="One mapping of the plan down to the MACs (each fused group's bands, each op's "
                                      "nest below the buffer), each layer's best blocking alone, or the PE array's "
                                      "dataflow blocks (fast)")
    objective = param.Selector(default="dram_bytes", objects={"DRAM bytes": "dram_bytes", "energy": "energy",
                                                              "latency": "latency", "EDP": "edp"},
                               label="Plans minimise",
                               doc="What each method's plan minimises: DRAM bytes (the searches' own optimum), or the "
                                   "energy, latency or energy-delay product of its mapping (mapping only)")
    alloc_method = param.Selector(default="cosma", label="Allocation method", objects=list(ALLOCATION_METHODS),
                                  doc="COSMA's ILP, or a baseline: (default | MPMF) order, (Belady | greedy) eviction")
    budget = param.Selector(default="M_H", label="Allocation budget", objects=list(BUDGET_CHOICES), doc="Scratchpad budget for allocation")
    budget_kb = param.Integer(default=512, label="Budget (KB) when 'bytes'", bounds=(1, 1024 * 1024), doc="Budget in KB when 'bytes' is chosen")
    cpu_kinds = param.ListSelector(default=[], label="Op kinds left on the CPU", objects=list(OP_KINDS), doc="Op kinds left on the CPU")
    colour_by = param.Selector(default="fused group", objects=["fused group", "CPU/accelerator part", "module"],
                               label="Colour the DAG by", doc="What the DAG's node colours show")
    selected_op = param.String(default="", doc="Op clicked in the DAG (layer detail)")

    @param.depends("preset", watch=True)
    def _load_preset(self):
        """Choosing a preset resets every accelerator field to the preset's values; a buffer size that is not a
        slider step (Eyeriss: 108 KB) becomes one while the preset is chosen, so the slider shows the size in use
        (it showed the nearest step, 128, while 108 KB was used)."""
        acc = engine.Accelerator.preset(self.preset)
        kb = acc.buffer_bytes // KB
        self.param.buffer_kb.objects = sorted({*BUFFER_STEPS_KB, kb})  # this session's parameter, not the class's
        self.param.update(buffer_kb=kb, pe_rows=acc.pe_rows, pe_cols=acc.pe_cols, rf_bytes=acc.rf_bytes,
                          word_bits=acc.word_bits, dram_gbps=acc.dram_bandwidth / 1e9)

    @param.depends("network", watch=True)
    def _forget_upload(self):
        """A network chosen by name replaces the uploaded file."""
        self.upload_name = ""

    @param.depends("network", "upload_name", watch=True)
    def _forget_selection(self):
        """A new network has other ops: the layer detail starts empty."""
        self.selected_op = ""

    def accelerator(self, buffer_kb: int | None = None) -> engine.Accelerator:
        """The accelerator the fields describe (a preset, edited), or the same at another slider step.

        Raises AcceleratorError on bad values.
        """
        acc = engine.Accelerator.preset(self.preset)
        kb = self.buffer_kb if buffer_kb is None else buffer_kb
        if kb * KB != acc.buffer_bytes:  # the slider moved off the preset's size
            acc = acc.with_buffer(kb * KB)
        return (acc.with_pe_array(self.pe_rows, self.pe_cols).with_rf(self.rf_bytes)
                .with_word_bits(self.word_bits).with_bandwidth(self.dram_gbps * 1e9))
