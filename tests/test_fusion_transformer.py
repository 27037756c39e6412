"""Transformer blocks in the tile model: token tiles, streamed K/V, and the search exact over the enlarged space."""

from __future__ import annotations

import random

import pytest

import engine
from engine.errors import EngineError
from engine.fusion import fuse, group_cost, sized
from engine.fusion.cost import Capacity, model_of
from engine.graph import Graph, Op, OpKind, Tensor
from tests.test_fusion_core import _both
from tests.test_fusion_search import brute_force


class _Block:
    """A transformer block written op by op in the rank-4 form of ONNX exports (tokens are rows)."""

    def __init__(self, batch: int):
        self.batch, self.ops, self.tensors = batch, [], {}

    def tensor(self, name: str, shape, weight: bool = False) -> str:
        self.tensors[name] = Tensor(name, tuple(shape), weight)
        return name

    def op(self, name: str, kind: OpKind, inputs, shape, weights=()) -> str:
        self.ops.append(Op(name, kind, tuple(inputs), (self.tensor(name, shape),), tuple(weights)))
        return name

    def linear(self, x: str, name: str, cout: int) -> str:
        n, length, *rest = self.tensors[x].shape  # (N, L, D), or (N, L, heads, d) with the heads merged
        w = self.tensor(f"{name}.w", (cout, rest[0] * (rest[1] if len(rest) > 1 else 1)), True)
        return self.op(name, OpKind.MATMUL, (x,), (n, length, cout), (w,))

    def norm(self, x: str, name: str) -> str:
        d = self.tensors[x].shape[-1]
        return self.op(name, OpKind.NORM, (x,), self.tensors[x].shape, (self.tensor(f"{name}.g", (d,), True),))

    def graph(self, name: str, inputs) -> Graph:
        read = {t for op in self.ops for t in op.inputs}
        outputs = tuple(op.outputs[0] for op in self.ops if op.outputs[0] not in read)
        return Graph.build(name, self.ops, list(self.tensors.values()), tuple(inputs), outputs, batch=self.batch)


def attention_block(n: int, length: int, heads: int, dh: int, *, kv_heads: int | None = None, norm: bool = True,
                    residual: bool = True, k_transpose: bool = True, cache: int = 0) -> Graph:
    """x -> [norm] -> q, k, v projections -> heads -> scores, softmax, context -> merged heads -> out_proj [+ x].

    `kv_heads` fewer than `heads`: grouped-query (K and V repeated to every query head by a view);
    `k_transpose`: K^T by its own transpose of (N, heads, L, d) (else straight from (N, L, D));
    `cache` > 0: decode, K^T and V read from a KV cache of that many tokens (network inputs)."""
    kv = kv_heads or heads
    d = heads * dh
    b = _Block(n)
    x = b.tensor("x", (n, length, d))
    inputs = ["x"]
    h = b.norm(x, "ln") if norm else x
    q = b.op("q_heads", OpKind.RESHAPE, (b.linear(h, "q_proj", d),), (n, heads, length, dh))
    if cache:
        kt = b.tensor("k_cache", (n, kv, dh, cache))
        v = b.tensor("v_cache", (n, kv, cache, dh))
        inputs += ["k_cache", "v_cache"]
        keys = cache
    else:
        k = b.linear(h, "k_proj", kv * dh)
        if k_transpose:
            kt = b.op("k_t", OpKind.RESHAPE, (b.op("k_heads", OpKind.RESHAPE, (k,), (n, kv, length, dh)),),
                      (n, kv, dh, length))
        else:
            kt = b.op("k_t", OpKind.RESHAPE, (k,), (n, kv, dh, length))
        v = b.op("v_heads", OpKind.RESHAPE, (b.linear(h, "v_proj", kv * dh),), (n, kv, length, dh))
        keys = length
    if kv != heads:
        kt = b.op("k_rep", OpKind.RESHAPE, (kt,), (n, heads, dh, keys))
        v = b.op("v_rep", OpKind.RESHAPE, (v,), (n, heads, keys, dh))
    s = b.op("scores", OpKind.MATMUL, (q, kt), (n, heads, length, keys))
    p = b.op("softmax", OpKind.SOFTMAX, (s,), (n, heads, length, keys))
    c = b.op("context", OpKind.MATMUL, (p, v), (n, heads, length, dh))
    m = b.op("merge", OpKind.RESHAPE, (c,), (n, length, heads, dh))  # (N, L, heads, d): heads merged back
    y = b.linear(m, "out_proj", d)
    if residual:
        b.op("add", OpKind.ELTWISE, (y, x), (n, length, d))
    return b.graph("block", inputs)


def ffn_block(n: int, length: int, d: int, ff: int, *, swiglu: bool, act: bool = False, norm: bool = True,
              residual: bool = True, vocab: int = 0) -> Graph:
    """x -> [norm] -> fc1 [, up] -> [activation] -> [product] -> fc2 [+ x]: GPT-2's MLP, or Llama's SwiGLU one.

    `act`: the activation as its own element-wise op (an ONNX export's GELU or SiLU), else folded into fc1;
    `vocab` > 0: x is looked up by token ids in a table of that many rows (an embedding: outside the tile model)."""
    b = _Block(n)
    if vocab:
        ids = b.tensor("ids", (n, length))
        table = b.tensor("table", (vocab, d), True)
        b.ops.append(Op("embed", OpKind.OTHER, (ids,), (b.tensor("x", (n, length, d)),), (table,),
                        source_type="Gather"))
        x = "x"
    else:
        x = b.tensor("x", (n, length, d))
    h = b.norm(x, "ln") if norm else x
    y = b.linear(h, "fc1", ff)
    if act:
        y = b.op("act", OpKind.ELTWISE, (y,), (n, length, ff))
    if swiglu:
        y = b.op("mul", OpKind.ELTWISE, (y, b.linear(h, "up", ff)), (n, length, ff))
    y = b.linear(y, "fc2", d)
    if residual:
        b.op("add", OpKind.ELTWISE, (y, x), (n, length, d))
    return b.graph("mlp", ["ids" if vocab else "x"])


def random_ffn(seed: int) -> Graph:
    rng = random.Random(seed)
    return ffn_block(rng.choice([1, 2]), rng.choice([4, 8, 16]), rng.choice([4, 8]), rng.choice([8, 16, 32]),
                     swiglu=rng.random() < 0.6, act=rng.random() < 0.5, norm=rng.random() < 0.6,
                     residual=rng.random() < 0.6)


def _acc(buffer_bytes: int):
    return engine.Accelerator.preset("optimus").with_buffer(buffer_bytes).with_pe_array(4, 4)


def test_attention_ops_are_in_the_tile_model_and_k_v_stream():
    g = attention_block(1, 16, 2, 4)
    model = model_of(g, _acc(4096))
    covered = {name for name, c in zip(model.names, model.covered) if c}
    assert covered == set(model.names)  # every op of the block, reshapes and softmax included
    streamed = {t for t, s in zip(model.tnames, model.stream) if s}
    assert streamed == {"k_proj", "k_heads", "k_t", "v_proj", "v_heads"}
    assert model.views == {"merge": (1, 16, 8)}  # (N, L, heads, d) read as the token matrix


def test_fused_attention_streams_k_and_v_once_per_token_tile():
    # {scores, softmax, context}: Q (16 x 8) and the context once; K^T and V (each 16 x 8 elements, 256 B
    # at 16 bits) resident when they fit beside the tiles, else loaded once per token tile
    g = attention_block(1, 16, 2, 4)
    ops = ("scores", "softmax", "context")
    big = group_cost(g, ops, _acc(64 * 1024))
    assert big.params_resident and big.row_steps == 1
    assert (big.fmap_in_bytes, big.param_bytes, big.fmap_out_bytes) == (256, 512, 256)
    # 512 B (256 words) leave no room for K and V (256 words) beside the tiles: streamed once per token tile.
    # Scores and probabilities are held T_w = 4 keys wide (online softmax): a query row takes q 8 + scores
    # 2 heads x 4 + probs 2 x (4 + max and sum) + context 8 = 36 words; 6 rows fit (216), so 3 steps
    small = group_cost(g, ops, _acc(512))
    assert not small.params_resident
    assert (small.row_steps, small.subgroups, dict(small.tile_rows)) == (3, 3, {op: 6 for op in ops})
    assert small.footprint_bytes == 36 * 6 * 2
    assert small.dram_bytes == 256 + 256 + 512 * 3
    assert small.streamed == ("k_t", "v_heads") and small.key_tiles == (("softmax", 4),)


def test_scores_softmaxed_without_the_context_take_a_second_pass():
    # {scores, softmax}: the row cannot be normalised before its last key tile, so the scores (2 x 16 x 16
    # words, 1 KB) go out and come back (2 KB more) besides the probabilities written (1 KB)
    g = attention_block(1, 16, 2, 4)
    two = group_cost(g, ("scores", "softmax"), _acc(64 * 1024))
    assert two.fmap_out_bytes == 1024 + 2 * 1024
    three = group_cost(g, ("scores", "softmax", "context"), _acc(64 * 1024))
    assert three.fmap_out_bytes == 256


def test_a_group_that_makes_k_holds_it_whole():
    g = attention_block(1, 16, 2, 4, norm=False, residual=False)
    whole = group_cost(g, ("k_proj", "k_heads", "k_t", "q_proj", "q_heads", "scores"), _acc(64 * 1024))
    assert dict(whole.tile_rows)["k_proj"] == 16  # every token of K before the first score row
    assert whole.fmap_out_bytes == 16 * 2 * 16 * 2  # the scores; K never leaves the chip


def test_decode_reads_the_kv_cache_whole_once_per_token_tile():
    g = attention_block(1, 1, 4, 8, kv_heads=2, cache=64, norm=False, residual=False)
    model = model_of(g, _acc(4096))
    assert all(model.covered)
    cache_bytes = 2 * (2 * 8 * 64 * 2)  # K and V of 2 KV heads, 64 tokens, 16-bit
    plan = fuse(g, _acc(4096))
    assert plan.dram_bytes >= cache_bytes + g.params * 2
    one = group_cost(g, ("k_rep", "v_rep", "scores", "softmax", "context"), _acc(64 * 1024))
    assert one.param_bytes == cache_bytes  # the cache once, GQA: its 2 heads, not 4


def random_block(seed: int) -> Graph:
    rng = random.Random(seed)
    heads = rng.choice([1, 2, 4])
    return attention_block(rng.choice([1, 2]), rng.choice([4, 8, 16]), heads, rng.choice([2, 4, 8]),
                           kv_heads=rng.choice([h for h in (1, 2, heads) if heads % h == 0]),
                           norm=rng.random() < 0.5, residual=rng.random() < 0.5, k_transpose=rng.random() < 0.5,
                           cache=rng.choice([0, 0, 8]))


SMALL = [seed for seed in range(60) if len(random_block(seed).ops) <= 11][:20]  # within the brute force's reach
CASES = [(seed, (1024, 2048, 4096, 8192, 32768)[k % 5]) for k, seed in enumerate(SMALL)]


@pytest.mark.parametrize("seed,buffer", CASES)
def test_optimus_equals_brute_force_on_random_transformer_blocks(seed, buffer):
    _assert_optimus_is_the_brute_force_optimum(random_block(seed), _acc(buffer))


def _assert_optimus_is_the_brute_force_optimum(g, acc):
    plan = fuse(g, acc, method="optimus")
    assert plan.dram_bytes == brute_force(g, acc)
    assert plan.dram_bytes == sum(group_cost(g, grp, acc).dram_bytes for grp in plan.groups)


def test_an_mlp_runs_in_hidden_chunks_and_keeps_its_weights_resident():
    # Llama's MLP on 16 tokens, width 8, FFN 32, a 4x4 PE array (T_c = T_h = 4), 2 KB = 1,024 16-bit words.
    # Finest tiles, 4 tokens: x 4x8 (read by the norm and the residual), the norm's output 4x8, fc1, act, up
    # and mul 4 of the 32 hidden channels each (fc2 accumulates its whole 4x8 tile over the chunks), the add
    # 4x4 (ISOA): 32 + 32 + 4 * 16 + 32 + 16 = 176 words, beside 8 + 3 * 256 = 776 words of weights: they stay
    # (a full-depth act and product would need 2 * (128 - 16) more and stream them). Traffic: x in, out, weights
    g = ffn_block(1, 16, 8, 32, swiglu=True, act=True)
    ops = ("ln", "fc1", "act", "up", "mul", "fc2", "add")
    c = group_cost(g, ops, _acc(2048))
    assert c.isoa == ("fc1", "act", "up", "mul", "add") and c.params_resident
    assert c.footprint_bytes == (176 + 776) * 2
    assert c.dram_bytes == 2 * (16 * 8) * 2 + 776 * 2 == fuse(g, _acc(2048)).dram_bytes


FFN_CASES = [(seed, (256, 512, 1024, 2048, 8192)[seed % 5]) for seed in range(20)]


@pytest.mark.parametrize("seed,buffer", FFN_CASES)
def test_optimus_equals_brute_force_on_random_mlp_blocks(seed, buffer):
    # hidden-dimension chunks: element-wise ops on token matrices pass an ISOA chunk on (`FusionModel.passes`)
    _assert_optimus_is_the_brute_force_optimum(random_ffn(seed), _acc(buffer))


@pytest.mark.parametrize("seed,buffer", FFN_CASES[::3])
def test_lower_bound_never_exceeds_the_optimum_on_mlp_blocks(seed, buffer):
    _assert_bound_never_exceeds_the_optimum(random_ffn(seed), _acc(buffer), budgets=(2, 4, 1 << 20))


def _assert_bound_never_exceeds_the_optimum(g, acc, budgets):
    """The beam's proven bound (engine.fusion.bound) at each budget is at most the optimum `fuse` finds (exact: the
    brute-force tests hold it to every partition)."""
    from engine.fusion.bound import lower_bound

    best = fuse(g, acc).dram_bytes
    model, cap = model_of(g, acc), Capacity.of(acc)
    for budget in budgets:
        assert lower_bound(sized.of(model, cap), budget=budget).bytes <= best


@pytest.mark.parametrize("seed", range(0, 20, 2))
def test_compiled_search_matches_python_on_mlp_blocks(seed):
    g = random_ffn(seed)
    for kb in (0.25, 1, 4):
        python, compiled = _both(g, int(kb * 1024))
        assert compiled == python, f"{kb} KB"


@pytest.mark.parametrize("seed,buffer", CASES[::2])
def test_lower_bound_never_exceeds_the_optimum_on_transformer_blocks(seed, buffer):
    # the beam's proven bound (engine.fusion.bound) on attention blocks: streamed K/V and the softmax's second
    # pass at the windows' borders, with one window and with narrow ones
    _assert_bound_never_exceeds_the_optimum(random_block(seed), _acc(buffer), budgets=(2, 4, 8, 1 << 20))


@pytest.mark.parametrize("seed", range(0, 40, 3))
def test_compiled_search_matches_python_on_transformer_blocks(seed):
    g = random_block(seed)
    for kb in (1, 4, 32):
        python, compiled = _both(g, kb * 1024)
        assert compiled == python, f"{kb} KB"


@pytest.mark.parametrize("name,kb", [("vit_b_16", 128), ("bert_base", 1024), ("gpt2", 8192)])
def test_compiled_search_matches_python_on_zoo_transformers(name, kb):
    python, compiled = _both(engine.zoo.build(name, 1), kb * 1024)
    assert python.evaluated > 1000  # the search really grew groups
    assert compiled == python


def test_a_token_row_that_fits_no_buffer_names_the_op_the_level_and_its_bytes():
    # a softmax row over 512 keys needs all 512 scores of the row on chip (16-bit) beside one output: 1,026 B
    g = attention_block(1, 512, 1, 4, norm=False, residual=False)
    with pytest.raises(EngineError, match=r"op 'softmax' cannot run even alone on 512 bytes .*level 'buffer'.* "
                                          r"at least 1026 bytes"):
        fuse(g, engine.Accelerator.preset("optimus").with_buffer(512))
    with pytest.raises(EngineError, match=r"op 'softmax' .*level 'GlobalBuffer'.* at least 513 bytes"):  # 8-bit
        fuse(g, engine.Accelerator.preset("tpu-v4i").with_buffer(512))


def test_vit_b16_at_8mb_is_within_two_percent_of_the_oracle():
    # before transformer blocks were in the tile model: optimus 351.9 MB, none 388.2 MB, Oracle 173.4 MB
    g = engine.load_network("vit_b_16", batch=1)
    acc = engine.Accelerator.preset("optimus").with_buffer(8 * 1024 * 1024)
    plan = fuse(g, acc)
    assert plan.status == "optimal"
    assert plan.dram_bytes == pytest.approx(176.5e6, rel=1e-3)
    assert plan.dram_bytes <= 1.02 * engine.fusion.oracle_bytes(g, acc)


def test_llama_prefill_traffic_falls_with_the_buffer_and_attention_fuses():
    g = engine.load_network("llama3_8b_prefill", batch=1)
    acc = engine.Accelerator.preset("optimus")
    plans = [fuse(g, acc.with_buffer(kb * 1024)) for kb in (128, 1024, 8192)]
    assert [p.status for p in plans] == ["optimal"] * 3
    assert plans[0].dram_bytes > plans[1].dram_bytes > plans[2].dram_bytes
    assert plans[2].dram_bytes < 0.6 * fuse(g, acc.with_buffer(8192 * 1024), method="none").dram_bytes
    attention = [c for c in plans[2].costs if any(op.endswith("self_attn.context") for op in c.ops)]
    assert len(attention) == 32
    for c in attention:  # scores, softmax and context together: the scores never leave the chip
        assert {op.rsplit(".", 1)[1] for op in c.ops} >= {"scores", "softmax", "context"} and c.key_tiles


def test_a_small_llama_decoder_falls_with_the_buffer_to_the_oracle():
    # hidden 256, 4 layers, 128 tokens (the size of the HF export; matmul chains alone went flat at
    # 67.9 MB from 1 MB up): 28.77 / 22.94 / 22.68 MB against an Oracle of 22.42 MB
    from engine.zoo import llm
    from engine.zoo._builder import Net

    net = Net("small_llama", 1)
    llm.llama_prefill(net, 128, llm.LlamaConfig(layers=4, hidden=256, heads=8, kv_heads=4, ffn=704, vocab=32000))
    g = net.graph()
    acc = engine.Accelerator.preset("optimus")
    traffic = [fuse(g, acc.with_buffer(kb * 1024)).dram_bytes for kb in (128, 1024, 8192)]
    assert traffic[0] > traffic[1] > traffic[2] > engine.fusion.oracle_bytes(g, acc) > 0.98 * traffic[2]


def test_imported_gpt2_attention_runs_flashattention_style():
    # HF's GPT-2 export writes softmax as a Softmax node (so do the BERT, DeBERTa and DeiT exports): all four
    # are attention softmaxes, and at 1 MB each layer's scores, softmax and context share a group with key tiles
    g = engine.load_network("tests/data/exports/hf_GPT2Model.onnx", batch=1)
    acc = engine.Accelerator.preset("optimus").with_buffer(1 << 20)
    assert len(model_of(g, acc).online) == 4
    plan = fuse(g, acc)
    assert plan.status == "optimal" and sum(1 for c in plan.costs if c.key_tiles) == 4


def _gemm_reference(h: int, k: int, n: int, fmap: int, a: int, b: int, out: int) -> int | None:
    """The least DRAM bytes of a batched GEMM alone over every row tile t, column block tw and shape of the tile
    model, costed from the definition (docs/fusion.md, "A lone op"), one head at a time:
    A's t rows whole beside a t x tw output block (A once, B once per row band); one reduction column of A beside
    the block (A once per block); B's k x tw block resident beside one row band of A and of the output (A once per
    block, B once)."""
    best = None
    for t in range(1, h + 1):
        for tw in range(1, n + 1):
            steps, blocks = -(-h // t), -(-n // tw)
            shapes = ((t * (k + tw), a + b * steps), (t * (1 + tw), a * blocks + b * steps),
                      (k * tw + t * (k + tw), a * blocks + b))
            for footprint, cost in shapes:
                if footprint <= fmap and (best is None or cost + out < best):
                    best = cost + out
    return best


@pytest.mark.parametrize("seed", range(12))
def test_a_lone_attention_matmul_takes_the_cheapest_tile_of_the_tile_model(seed):
    # scores (rows x dh x keys) and context (rows x keys x dh) alone, tiled in rows, output columns and reduction:
    # the search over row tiles equals the exhaustive minimum, the kernel agrees, and no tile beats the ski-slope
    from engine.fusion import core
    from engine.fusion.cost import _Lone
    from engine.limit import at, op_curve

    rng = random.Random(seed)
    heads = rng.choice([1, 2, 4])
    g = attention_block(rng.choice([1, 2]), rng.choice([6, 16, 24]), heads, rng.choice([2, 4, 8]),
                        kv_heads=rng.choice([h for h in (1, 2, heads) if heads % h == 0]))
    for nbytes in (16, 40, 96, 256, 1024):
        acc = _acc(nbytes)
        model, cap = model_of(g, acc), Capacity.of(acc)
        lone = core.lone_costs(*core.tables(model), *core.workspace(model, search=False),
                               core.bitset((1 << model.n) - 1, model.n), cap.fmap, cap.param, cap.shared,
                               cap.per_band, model.batch, model.word_bits)
        for name in ("scores", "context"):
            i = model.index[name]
            assert model.gemm_k[i], name
            rows, n = model.gemm_rows[i], max(model.geo(j).w for j in model.outs[i])
            fin, fout, p_elems, _ = model.io(1 << i)
            want = _gemm_reference(rows, model.gemm_k[i], n, cap.fmap, fin, p_elems * 2, fout)
            got = _Lone.of(model, i).gemm(cap.fmap)
            assert (got and got.dram) == want, (seed, nbytes, name)
            alone = group_cost(g, [name], acc)
            assert lone[i] == (alone.dram_bytes if alone else -1)
            if alone is not None:
                assert alone.dram_bytes >= at(op_curve(g, name), nbytes)


def test_a_layout_op_between_two_ops_folds_and_one_at_the_network_edge_materialises():
    # the head split and merge, K's transpose: alone they move nothing (the producer writes and the consumers read
    # in their own addressing); {q_proj}, {q_heads}, {scores ...} moves Q twice, as {q_proj, q_heads}, {scores ...}
    g = attention_block(1, 16, 2, 4)
    acc = _acc(4096)
    for name in ("q_heads", "k_heads", "k_t", "v_heads", "merge"):
        alone = group_cost(g, [name], acc)
        assert (alone.schedule, alone.dram_bytes) == ("folded", 0), name
    q = 16 * 8 * 2  # bytes of Q at 16 bits
    assert group_cost(g, ["q_proj"], acc).fmap_out_bytes == group_cost(g, ["q_proj", "q_heads"], acc).fmap_out_bytes == q
    # a layout op whose layout is the network's (its input a network input, or its output a network output) is priced
    b = _Block(1)
    heads = b.op("heads", OpKind.RESHAPE, (b.tensor("x", (1, 16, 8)),), (1, 2, 16, 4))
    b.op("merge", OpKind.RESHAPE, (b.op("act", OpKind.ELTWISE, (heads,), (1, 2, 16, 4)),), (1, 16, 2, 4))
    edge = b.graph("edge", ["x"])
    for name in ("heads", "merge"):
        alone = group_cost(edge, [name], acc)
        assert alone.schedule != "folded" and alone.dram_bytes == 2 * q, name
    assert engine.limit.network(edge, acc.with_buffer(1 << 20)).layerwise_bytes == 6 * q
