"""Reading an ONNX file safely: size limits, tensor sanity, external data kept inside the model's folder, opsets.

External data is never read: only a tensor's declared dims matter to the engine, so a location is checked
(it must stay in the model's folder, symlinks resolved) and then ignored.
"""

from __future__ import annotations

import math
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from engine.errors import ModelFileError

MIN_OPSET = 9  # older files are converted up to it with onnx.version_converter
# The largest file read: protobuf's own ceiling for one message (weights past it live in external data, which the
# engine never reads). A larger file is refused from its size alone; a smaller one only after its top-level
# framing (`_check_framing`) walks cleanly, so a file of garbage is refused without being read whole.
MAX_FILE_BYTES = 2 * 1024**3
MODEL_FIELDS = {1: 0, 2: 2, 3: 2, 4: 2, 5: 0, 6: 2, 7: 2, 8: 2, 14: 2, 20: 2, 25: 2, 26: 2}  # ModelProto: field -> wire type
MAX_TOP_FIELDS = 1 << 16  # top-level fields walked before a file is called garbage (a model has a few dozen)
MAX_TENSOR_ELEMENTS = 1 << 40  # a tensor declared larger than this (a TB of bytes) is not a real network's
MAX_SUBGRAPH_DEPTH = 16  # nesting of If/Loop bodies read before a file is called hostile
FIELD_OF_TYPE = {  # data_type -> the typed TensorProto field that may hold its values instead of raw_data
    onnx.TensorProto.FLOAT: "float_data", onnx.TensorProto.DOUBLE: "double_data", onnx.TensorProto.INT64: "int64_data",
    onnx.TensorProto.UINT64: "uint64_data", onnx.TensorProto.UINT32: "uint64_data",
    onnx.TensorProto.STRING: "string_data",
    onnx.TensorProto.COMPLEX64: "float_data", onnx.TensorProto.COMPLEX128: "double_data",
}
SUB_BYTE = {getattr(onnx.TensorProto, n): b for n, b in (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2),
                                                         ("UINT2", 2)) if hasattr(onnx.TensorProto, n)}


def read_model(path: Path) -> onnx.ModelProto:
    """The parsed model at `path`, with every tensor checked and the default-domain opset at least MIN_OPSET."""
    check_file(path)
    data = path.read_bytes()
    try:
        model = onnx.load_model_from_string(data)
    except (DecodeError, ValueError, RuntimeError, UnicodeDecodeError) as err:
        raise ModelFileError(path, f"not an ONNX model, or the file is truncated ({err.__class__.__name__})") from None
    if not model.graph.node:
        raise ModelFileError(path, "not an ONNX model: the file parsed but holds no graph nodes")
    _check_names(model, path)
    folder = path.resolve().parent
    for owner, tensor in _tensors(model.graph, path, 0):
        check_tensor(tensor, owner, path, folder)
    return _convert_opset(model, path)


def check_file(path: Path) -> None:
    """Refuse a missing, empty or oversized file from its size, and garbage from its framing, before reading it."""
    try:
        if not path.is_file():
            raise ModelFileError(path, "no such file")
        size = path.stat().st_size
    except (OSError, ValueError) as err:  # a NUL or an over-long name
        raise ModelFileError(path, f"cannot open the file ({err.__class__.__name__})") from None
    if size == 0:
        raise ModelFileError(path, "file is empty")
    if size > MAX_FILE_BYTES:
        raise ModelFileError(path, f"file is {size:,} bytes, larger than the {MAX_FILE_BYTES // 1024**3} GB the "
                                   f"engine reads (protobuf's limit; keep weights in external data)")
    _check_framing(path, size)


def _check_framing(path: Path, size: int) -> None:
    """Refuse a file whose top-level protobuf fields are not a ModelProto's, reading only their tags and lengths.

    Each field is a tag (field number, wire type) and a payload; payloads (the graph: nearly all of the file)
    are skipped by seeking, so a gigabyte of garbage is refused after a few bytes and a real model costs a
    handful of reads. Known fields must have their wire type; unknown ones (a newer onnx) any valid one.
    """
    def bad(why: str):
        return ModelFileError(path, f"not an ONNX model ({why} at byte {at:,})")

    with path.open("rb") as f:
        at, fields, graph = 0, 0, False
        while at < size:
            fields += 1
            if fields > MAX_TOP_FIELDS:
                raise bad(f"more than {MAX_TOP_FIELDS:,} top-level fields")
            tag, at = _varint(f, at, size, bad)
            number, wire = tag >> 3, tag & 7
            if number == 0 or wire not in (0, 1, 2, 5) or MODEL_FIELDS.get(number, wire) != wire:
                raise bad(f"field {number} with wire type {wire}")
            graph |= number == 7
            if wire == 0:
                _, at = _varint(f, at, size, bad)
                continue
            length = {1: 8, 5: 4}.get(wire)
            if length is None:
                length, at = _varint(f, at, size, bad)
            if at + length > size:
                raise bad(f"field {number} of {length:,} bytes running past the end")
            at += length
            f.seek(at)
    if not graph:
        raise ModelFileError(path, "not an ONNX model: the file holds no graph")


def _varint(f, at: int, size: int, bad) -> tuple[int, int]:
    """The protobuf varint at byte `at` of `f` (positioned there), and the byte after it."""
    value = shift = 0
    for _ in range(10):
        byte = f.read(1)
        if not byte:
            raise bad("a number cut off by the end")
        value |= (byte[0] & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if byte[0] < 0x80:
            return value, at
    raise bad("a number longer than 10 bytes")


def _check_names(model: onnx.ModelProto, path: Path) -> None:
    """Refuse names that are not UTF-8 text (protobuf hands them over as bytes; they cannot be compared)."""
    g = model.graph
    texts = [(f"node {i}", t) for i, n in enumerate(g.node) for t in (n.name, n.op_type, n.domain, *n.input,
                                                                       *n.output, *(a.name for a in n.attribute))]
    texts += [("a graph input, output or value_info", vi.name) for vi in (*g.input, *g.output, *g.value_info)]
    texts += [("an initializer", t.name) for t in g.initializer]
    texts += [("the metadata", t) for p in model.metadata_props for t in (p.key, p.value)]
    texts += [("an opset import", imp.domain) for imp in model.opset_import]
    bad = next(((where, t) for where, t in texts if not isinstance(t, str)), None)
    if bad is not None:
        raise ModelFileError(path, f"{bad[0]} has a name that is not UTF-8 text: {bad[1][:40]!r}")


def _tensors(graph, path: Path, depth: int):
    """(owner, TensorProto) for every tensor stored in `graph`: initializers and node attributes, subgraphs too."""
    if depth > MAX_SUBGRAPH_DEPTH:
        raise ModelFileError(path, f"subgraphs nest deeper than {MAX_SUBGRAPH_DEPTH} levels")
    for init in graph.initializer:
        yield f"initializer '{init.name}'", init
    for sparse in graph.sparse_initializer:
        yield f"sparse initializer '{sparse.values.name}'", sparse.values
        yield f"sparse initializer '{sparse.values.name}'", sparse.indices
    for node in graph.node:
        for attr in node.attribute:
            owner = f"attribute '{attr.name}' of node '{node.name or node.op_type}'"
            if attr.HasField("t"):
                yield owner, attr.t
            for t in attr.tensors:
                yield owner, t
            if attr.HasField("sparse_tensor"):
                yield owner, attr.sparse_tensor.values
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from _tensors(sub, path, depth + 1)


def check_tensor(tensor, owner: str, path: Path, folder: Path) -> None:
    """Refuse a stored tensor with bad dims, an unknown type, data of the wrong size, or data outside `folder`."""
    if any(d < 0 for d in tensor.dims):
        raise ModelFileError(path, f"{owner} has a negative dimension {list(tensor.dims)}")
    elements = math.prod(tensor.dims)
    if elements > MAX_TENSOR_ELEMENTS:
        raise ModelFileError(path, f"{owner} declares {elements:,} elements, more than any real network holds")
    if tensor.data_type not in onnx.TensorProto.DataType.values() or tensor.data_type == onnx.TensorProto.UNDEFINED:
        raise ModelFileError(path, f"{owner} has undefined or unknown data type {tensor.data_type}")
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        _check_location(tensor, owner, path, folder)
        return
    bits = _bits(tensor.data_type)
    if tensor.raw_data:
        if bits is None or len(tensor.raw_data) != math.ceil(elements * bits / 8):
            raise ModelFileError(path, f"{owner} holds {len(tensor.raw_data)} bytes of data for dims "
                                       f"{list(tensor.dims)}")
        return
    field = FIELD_OF_TYPE.get(tensor.data_type, "int32_data")
    stored = len(getattr(tensor, field))
    per_element = 2 if tensor.data_type in (onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128) else 1
    if (bits is None or bits >= 8) and stored != elements * per_element:
        raise ModelFileError(path, f"{owner} holds {stored} values for dims {list(tensor.dims)}")


def _bits(data_type: int) -> int | None:
    """Bits per element of a numeric ONNX type, None for strings and types numpy cannot hold."""
    if data_type in SUB_BYTE:
        return SUB_BYTE[data_type]
    if data_type == onnx.TensorProto.STRING:
        return None
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(data_type).itemsize * 8
    except (KeyError, TypeError, ValueError):
        return None


def _check_location(tensor, owner: str, path: Path, folder: Path) -> None:
    """External data must name a file inside the model's folder (no absolute path, `..` or symlink out)."""
    location = next((e.value for e in tensor.external_data if e.key == "location"), "")
    try:
        target = (folder / location).resolve()
        outside = not location or "\0" in location or Path(location).is_absolute() or folder not in target.parents
    except (OSError, ValueError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
        outside = True
    if outside:
        shown = repr(location)[1:-1]  # a NUL or a control character escaped, not printed raw
        raise ModelFileError(path, f"external data '{shown}' of {owner} lies outside the model's folder or cannot "
                                   f"be resolved (a symlink loop); refusing to follow it")


def _convert_opset(model: onnx.ModelProto, path: Path) -> onnx.ModelProto:
    """The model with its default-domain opset in MIN_OPSET..latest, converted up when older."""
    latest = onnx.defs.onnx_opset_version()
    versions = [imp.version for imp in model.opset_import if imp.domain in ("", "ai.onnx")]
    if not versions:
        raise ModelFileError(path, "the model imports no default-domain (ai.onnx) opset")
    version = versions[0]
    if version > latest:
        raise ModelFileError(path, f"opset {version} is newer than this onnx package knows ({latest}); "
                                   f"upgrade onnx or export with opset {latest} or older")
    if version >= MIN_OPSET:
        return model
    if version < 1:
        raise ModelFileError(path, f"opset {version} does not exist")
    from onnx import version_converter

    try:
        return version_converter.convert_version(model, MIN_OPSET)
    except Exception as err:  # the converter raises bare RuntimeErrors and others; its text names the op
        reason = (str(err).strip().splitlines() or [err.__class__.__name__])[-1][:300]
        kinds = sorted({n.op_type for n in model.graph.node})
        raise ModelFileError(path, f"opset {version} cannot be converted to opset {MIN_OPSET} ({reason}); ops in the "
                                   f"file: {', '.join(kinds)}") from None
