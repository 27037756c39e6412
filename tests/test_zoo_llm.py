"""The language models of the zoo match their Hugging Face references tensor by tensor, MAC for MAC.

Reference figures were measured with transformers 5.24.0 on torch 2.13.0 (docs/zoo.md has the script):
models built from their configs on the meta device, parameters = `sum(p.numel() for p in model.parameters())`,
MACs = `torch.utils.flop_counter.FlopCounterMode` total / 2 with eager attention (every matmul, the
activation-activation ones included), batch 1. The digest is sha256 over the sorted "name:AxB" lines of
`named_parameters()` with each shape's dims sorted (HF's Linear stores (out, in), the zoo's MatMul (in, out)).
"""

import hashlib
import math

import pytest

import engine
from engine import zoo
from engine.fusion import fuse, oracle_bytes
from engine.graph import OpKind

KB = 1024
# name -> (parameters, MACs at batch 1, parameter tensors, digest of their names and shapes)
HF = {
    "bert_base": (109_482_240, 11_174_215_680, 199, "6c2ed93bae07997ad07fc2bbdcad3826432da8d3d9d5546b9233099edfb421d9"),
    "bert_base_512": (109_482_240, 48_318_971_904, 199,
                      "6c2ed93bae07997ad07fc2bbdcad3826432da8d3d9d5546b9233099edfb421d9"),
    "gpt2": (124_439_808, 106_300_440_576, 148, "0d6f60fa63117cefe1922732149852b0731254868deae140a039ab22c7a31218"),
    "llama3_8b_prefill": (8_030_261_248, 15_393_688_125_440, 291,
                          "b6b58828b111bc8c8e8d87424c9a17e5b57d431d8ccd931064c1af3f31d8ba57"),
    "llama3_8b_decode": (8_030_261_248, 8_041_791_488, 291,
                         "b6b58828b111bc8c8e8d87424c9a17e5b57d431d8ccd931064c1af3f31d8ba57"),
    "llama3_8b_decode_kv8191": (8_030_261_248, 9_652_142_080, 291,
                                "b6b58828b111bc8c8e8d87424c9a17e5b57d431d8ccd931064c1af3f31d8ba57"),
}
LANGUAGE = (*HF, "gpt3_6.7b_block")
D, HEADS, KV_HEADS, DH, FFN, VOCAB, LAYERS = 4096, 32, 8, 128, 14336, 128256, 32  # Llama-3-8B


@pytest.mark.parametrize("name", sorted(HF))
def test_matches_hugging_face(name):
    params, macs, count, digest = HF[name]
    g = zoo.build(name)
    assert g.params == params and g.macs == macs
    weights = [t for t in g.tensor_list if t.is_weight]
    text = "\n".join(sorted(f"{t.name}:{'x'.join(map(str, sorted(t.shape)))}" for t in weights))
    assert len(weights) == count
    assert hashlib.sha256(text.encode()).hexdigest() == digest


def test_gpt3_block_matches_formula():
    """Orojenesis's GPT-3-6.7B block: 12 d^2 + 13 d parameters; MACs 4 L d^2 + 2 L^2 d + 2 L d c per sequence."""
    d, c, length = 4096, 16384, 2048
    g = zoo.build("gpt3_6.7b_block", batch=16)
    assert g.params == 12 * d * d + 13 * d == 201_379_840
    assert g.macs == 16 * (4 * length * d * d + 2 * length * length * d + 2 * length * d * c)
    assert g.tensors[g.inputs[0]].shape == (16, length, d)
    assert sum(op.kind is OpKind.MATMUL for op in g.ops) == 8  # Q, K, V, QK, QKV, final, mm_1, mm_2


@pytest.mark.parametrize("kv", [1, 16, 2048, 8191])
def test_decode_macs_follow_the_cache_length(kv):
    """Per layer: projections d (2 d + 2 kv_d), attention 2 h (kv + 1) dh, SwiGLU 3 d ffn; plus the LM head."""
    layer = D * (2 * D + 2 * KV_HEADS * DH) + 2 * HEADS * (kv + 1) * DH + 3 * D * FFN
    assert zoo.build(f"llama3_8b_decode_kv{kv}").macs == LAYERS * layer + D * VOCAB


def test_kv_cache_is_off_chip_state():
    """Decode reads each layer's cache whole (network inputs) and writes the new token's K/V slices (outputs)."""
    kv = 300
    g = zoo.build(f"llama3_8b_decode_kv{kv}", batch=2)
    caches = [t for t in g.inputs if t.startswith("past_key_values.")]
    assert len(caches) == 2 * LAYERS
    for t in caches:
        assert g.tensors[t].shape == (2, KV_HEADS, kv, DH) and not g.tensors[t].is_weight
        (reader,) = g.consumers(t)
        concat = g.op(reader)
        assert concat.kind is OpKind.CONCAT and concat.inputs[0] == t
        assert g.tensors[concat.outputs[0]].shape == (2, KV_HEADS, kv + 1, DH)  # the token axis grows by one
        new = concat.inputs[1]
        assert new in g.outputs and g.tensors[new].shape == (2, KV_HEADS, 1, DH)
    assert len(g.outputs) == 2 * LAYERS + 1  # the slices and the logits
    acc = engine.Accelerator.preset("optimus")
    # the embedding reads only the rows of its 2 token ids, not the whole table (Graph.weight_reads)
    weights = g.params - VOCAB * D + 2 * D
    elements = weights + 2 * LAYERS * 2 * KV_HEADS * (kv + 1) * DH + 2 + 2 * VOCAB  # + ids, logits
    assert oracle_bytes(g, acc) == elements * acc.word_bits // 8


def test_decode_traffic_grows_by_the_cache_it_reads():
    # the cache is priced: a longer one costs at least its extra bytes at any buffer, under any method
    short, long = zoo.build("llama3_8b_decode_kv16"), zoo.build("llama3_8b_decode_kv8191")
    extra = 2 * LAYERS * KV_HEADS * (8191 - 16) * DH * 2  # keys and values, 16-bit words
    for kb in (128, 8192):
        acc = engine.Accelerator.preset("optimus").with_buffer(kb * KB)
        for method in ("none", "optimus"):
            assert fuse(long, acc, method=method).dram_bytes - fuse(short, acc, method=method).dram_bytes >= extra


@pytest.mark.parametrize("name", [*LANGUAGE, "vit_b_16", "transformer"])
def test_attention_is_rank_4_with_tokens_as_rows(name):
    """No tensor of rank 5; every score matrix is (N, heads, queries, keys), every context (N, heads, tokens, dh)."""
    g = zoo.build(name)
    assert max(len(t.shape) for t in g.tensor_list) <= 4
    scores = [op for op in g.ops if op.name.endswith(".scores")]
    assert scores
    for op in scores:
        q, kt = (g.tensors[t].shape for t in op.inputs)
        n, heads, rows, keys = g.tensors[op.outputs[0]].shape
        assert kt[:2] == (n, heads) and kt[3] == keys and op.macs == n * heads * rows * keys * kt[2]
        assert math.prod(q) == n * heads * rows * kt[2]  # Q viewed as (N, kv heads, group x tokens, dh)


def test_grouped_query_attention_reads_each_key_once():
    g = zoo.build("llama3_8b_prefill_seq64")
    scores = g.op("model.layers.0.self_attn.scores")
    assert g.tensors[scores.outputs[0]].shape == (1, KV_HEADS, HEADS // KV_HEADS * 64, 64)
    assert g.tensors[scores.inputs[1]].shape == (1, KV_HEADS, DH, 64)
    assert g.tensors[scores.inputs[0]].shape == (1, HEADS, 64, DH)  # the rotary output, viewed in groups


@pytest.mark.parametrize("name,length", [("bert_base_seq64", 64), ("gpt2_seq7", 7), ("llama3_8b_prefill_seq512", 512),
                                         ("gpt3_6.7b_block_seq128", 128)])
def test_token_count_in_the_name(name, length):
    g = zoo.build(name)
    assert g.tensors[g.inputs[0]].shape[1] == length
    assert zoo.build(name) is g


@pytest.mark.parametrize("name,message", [
    ("llama3_8b_decode_kv0", "KV-cache length"), ("llama3_8b_decode_kv-4", "KV-cache length"),
    ("llama3_8b_decode_kv8192", "KV-cache length .* 1 to 8191"), ("bert_base_seq0", "sequence length"),
    ("bert_base_seq513", "1 to 512"), ("gpt2_seq1025", "1 to 1024"), ("llama3_8b_prefill_seq-1", "sequence length"),
])
def test_bad_token_counts_name_the_parameter(name, message):
    with pytest.raises(engine.EngineError, match=message):
        engine.load_network(name)


@pytest.mark.parametrize("name", ["llama3_8b_decode_seq4", "gpt2_kv4", "resnet50_seq4", "bert_base_seq"])
def test_a_length_on_the_wrong_network_is_an_unknown_name(name):
    with pytest.raises(engine.UnknownNameError, match="llama3_8b_decode_kv<N>"):
        zoo.build(name)


def test_decode_is_weight_and_cache_bound_while_prefill_falls_with_the_buffer():
    # decode reads every weight and the whole cache for one token: its plan stays near the Oracle (parameters +
    # cache) at any buffer; prefill's activations find room on chip as the buffer grows
    decode, prefill = zoo.build("llama3_8b_decode"), zoo.build("llama3_8b_prefill")
    small, large = (engine.Accelerator.preset("optimus").with_buffer(kb * KB) for kb in (128, 8192))
    for acc in (small, large):
        assert oracle_bytes(decode, acc) <= fuse(decode, acc).dram_bytes <= 1.1 * oracle_bytes(decode, acc)
    assert fuse(prefill, large).dram_bytes < 0.5 * fuse(prefill, small).dram_bytes


def test_a_language_models_length_is_read_off_its_name_or_its_builders_default():
    assert zoo.length("llama3_8b_decode_kv4096") == ("llama3_8b_decode", "kv", 4096)
    assert zoo.length("llama3_8b_prefill") == ("llama3_8b_prefill", "seq", 2048)
    assert zoo.length("gpt2") == ("gpt2", "seq", 1024) and zoo.length("bert_base_seq384")[2] == 384
    assert zoo.length("resnet50") is None and zoo.length("llama3_8b_prefill_kv12") is None


@pytest.mark.parametrize("kv", [1, 2048, 8191])
def test_llama3_70b_of_the_size_benchmark_is_the_8b_code_at_meta_llama_3_70b_config(kv):
    """80 layers, d 8192, 64 heads of 128, 8 KV heads, FFN 28672: 70,553,706,496 parameters (Meta-Llama-3-70B's
    count on its model card, 70.6 B: 80 x 855,654,400 + 2 x 128256 x 8192 + 8192), 9 weights a layer plus the
    embedding, the final norm and the LM head, and the decode MACs of the per-layer formula above at its dims."""
    from benchmarks.bench_size import llama3_70b

    d, heads, kv_heads, dh, ffn, layers = 8192, 64, 8, 128, 28672, 80
    g = llama3_70b(-kv)
    assert g.params == 70_553_706_496 == layers * 855_654_400 + 2 * VOCAB * d + d
    assert sum(t.is_weight for t in g.tensor_list) == 9 * layers + 3
    layer = d * (2 * d + 2 * kv_heads * dh) + 2 * heads * (kv + 1) * dh + 3 * d * ffn
    assert g.macs == layers * layer + d * VOCAB
    assert llama3_70b(2048).params == g.params
