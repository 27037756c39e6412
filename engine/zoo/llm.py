"""Language models: BERT-base, GPT-2 small, Llama-3-8B (prefill and decode) and Orojenesis's GPT-3-6.7B block.

Each follows its Hugging Face config (parameter names are the state-dict keys, weights stored
(in, out) as the MatMul an export runs) and shares the rank-4 attention of `engine.zoo.transformer`.
Token ids (and BERT's token types and positions) are network inputs; an embedding is a Gather
(kind other) owning its table. Decode reads a KV cache: per layer the past keys and values
(N, kv_heads, L, dh) are network inputs, the new token's key and value slices network outputs,
and a Concat on the token axis feeds attention, so the cache is off-chip state priced as traffic.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import EngineError
from engine.graph import OpKind
from engine.zoo._builder import Net
from engine.zoo.transformer import attend, key_transpose, packed_heads, split_heads


def check_length(network: str, what: str, value: int, most: int) -> int:
    """`value` if it is a token count from 1 to `most`, else an EngineError naming the network and the parameter."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise EngineError(f"network '{network}': {what} must be a whole number from 1 to {most} "
                          f"(the model's context), got {value!r}")
    return value


# ---- BERT ------------------------------------------------------------------------
def bert_base(net: Net, seq: int = 128) -> None:
    """HF `BertModel` of bert-base-uncased (Devlin et al., NAACL 2019): 12 layers, 12 heads, width 768, FFN 3072.

    Embeddings (word 30522, position 512, token type 2) with LayerNorm, post-norm layers, and the
    pooler (dense + tanh on the [CLS] token); no padding mask (every token is valid).
    """
    d, heads, ff = 768, 12, 3072
    check_length(net.name, "sequence length", seq, 512)
    ids, types, positions = (net.input((seq,), t) for t in ("input_ids", "token_type_ids", "position_ids"))
    x = net.embedding(ids, "embeddings.word_embeddings", 30522, d)
    x = net.eltwise((x, net.embedding(types, "embeddings.token_type_embeddings", 2, d)), "embeddings.add_token_type")
    x = net.eltwise((x, net.embedding(positions, "embeddings.position_embeddings", 512, d)), "embeddings.add_position")
    x = net.layer_norm(x, "embeddings.LayerNorm")
    for i in range(12):
        name = f"encoder.layer.{i}"
        q, k, v = (net.linear(x, f"{name}.attention.self.{p}", d) for p in ("query", "key", "value"))
        ctx = attend(net, split_heads(net, q, f"{name}.attention.self.query_heads", heads),
                     split_heads(net, k, f"{name}.attention.self.key_heads", heads, key=True),
                     split_heads(net, v, f"{name}.attention.self.value_heads", heads), f"{name}.attention.self")
        y = net.linear(ctx, f"{name}.attention.output.dense", d)
        x = net.layer_norm(net.eltwise((y, x), f"{name}.attention.output.add"), f"{name}.attention.output.LayerNorm")
        y = net.linear(net.linear(x, f"{name}.intermediate.dense", ff, act="Gelu"), f"{name}.output.dense", d)
        x = net.layer_norm(net.eltwise((y, x), f"{name}.output.add"), f"{name}.output.LayerNorm")
    n = net.batch
    cls = net.flatten(net.unary(x, "pooler.first_token", "Slice", OpKind.SPLIT, (n, 1, d)))  # x[:, 0]
    net.linear(cls, "pooler.dense", d, act="Tanh")


# ---- GPT-2 and the GPT-3 block ---------------------------------------------------------
def _gpt_block(net: Net, x: str, name: str, heads: int, ff: int, *, packed: bool, mlp: tuple[str, str]) -> str:
    """A pre-norm GPT block: ln_1, attention, residual, ln_2, GELU MLP (`mlp` names its two layers), residual.

    Attention projects Q/K/V packed in one `attn.c_attn` and projects out with `attn.c_proj` (GPT-2), or
    separately with `attn.q_proj`/`k_proj`/`v_proj` and `attn.out_proj` (the GPT-3 block's Einsums).
    """
    d = net.shape(x)[-1]
    h = net.layer_norm(x, f"{name}.ln_1")
    if packed:
        q, k, v = packed_heads(net, net.linear(h, f"{name}.attn.c_attn", 3 * d), f"{name}.attn.heads", heads, 3)
        kt, out = key_transpose(net, k, f"{name}.attn.k_transpose"), f"{name}.attn.c_proj"
    else:
        q, k, v = (net.linear(h, f"{name}.attn.{p}", d) for p in ("q_proj", "k_proj", "v_proj"))
        q, kt, v = (split_heads(net, q, f"{name}.attn.q_heads", heads),
                    split_heads(net, k, f"{name}.attn.k_heads", heads, key=True),
                    split_heads(net, v, f"{name}.attn.v_heads", heads))
        out = f"{name}.attn.out_proj"
    ctx = attend(net, q, kt, v, f"{name}.attn")
    x = net.eltwise((net.linear(ctx, out, d), x), f"{name}.add_1")
    y = net.linear(net.layer_norm(x, f"{name}.ln_2"), f"{name}.{mlp[0]}", ff, act="Gelu")
    return net.eltwise((net.linear(y, f"{name}.{mlp[1]}", d), x), f"{name}.add_2")


def gpt2(net: Net, seq: int = 1024) -> None:
    """HF `GPT2Model` of gpt2 (Radford et al., 2019, small): 12 layers, 12 heads, width 768, prefill of `seq` tokens.

    Token (50257) and position (1024) embeddings, pre-norm blocks with the packed `c_attn`
    projection, final `ln_f`. The LM head is tied to `wte` (one tensor read by two ops, which the
    IR does not allow), so the graph stops at the hidden states, as `GPT2Model` does.
    """
    d = 768
    check_length(net.name, "sequence length", seq, 1024)
    ids, positions = net.input((seq,), "input_ids"), net.input((seq,), "position_ids")
    x = net.eltwise((net.embedding(ids, "wte", 50257, d), net.embedding(positions, "wpe", 1024, d)), "embed_add")
    for i in range(12):
        x = _gpt_block(net, x, f"h.{i}", 12, 4 * d, packed=True, mlp=("mlp.c_fc", "mlp.c_proj"))
    net.layer_norm(x, "ln_f")


def gpt3_block(net: Net, seq: int = 2048) -> None:
    """One GPT-3-6.7B block as Orojenesis studies it (Huang et al., ISCA 2024, Fig. 19; Brown et al., NeurIPS 2020).

    d = 4096, 32 heads of 128, FFN 16384, `seq` tokens per sequence (the paper's 2048 x 16 is batch 16):
    LayerNorm, Q/K/V projections, bmm QK, softmax, bmm QKV, final projection, residual, LayerNorm,
    mm_1 + GELU, mm_2, residual; biases as in GPT-2 (12 d^2 + 13 d parameters).
    """
    d = 4096
    check_length(net.name, "sequence length", seq, 2048)
    x = net.input((seq, d), "hidden_states")
    _gpt_block(net, x, "block", 32, 4 * d, packed=False, mlp=("mm_1", "mm_2"))


# ---- Llama ---------------------------------------------------------------------------
@dataclass(frozen=True)
class LlamaConfig:
    """The HF config fields the graph depends on (Llama-3-8B: meta-llama/Meta-Llama-3-8B's config.json)."""

    layers: int = 32
    hidden: int = 4096
    heads: int = 32
    kv_heads: int = 8
    ffn: int = 14336
    vocab: int = 128256
    context: int = 8192  # max_position_embeddings


LLAMA3_8B = LlamaConfig()
# meta-llama/Meta-Llama-3-70B's config.json (Llama Team, "The Llama 3 Herd of Models", 2024, Table 3): 80 layers,
# hidden_size 8192, 64 attention heads, 8 key-value heads, intermediate_size 28672; vocabulary and context as 8B's
LLAMA3_70B = LlamaConfig(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672)


def llama_prefill(net: Net, seq: int = 2048, cfg: LlamaConfig = LLAMA3_8B) -> None:
    """HF `LlamaForCausalLM` prefill of `seq` tokens; logits for the last token only, as `generate` asks."""
    check_length(net.name, "sequence length", seq, cfg.context)
    _llama(net, net.input((seq,), "input_ids"), cfg, past=0)


def llama_decode(net: Net, kv: int = 2048, cfg: LlamaConfig = LLAMA3_8B) -> None:
    """HF `LlamaForCausalLM` decoding one token against a KV cache of `kv` tokens per layer."""
    check_length(net.name, "KV-cache length", kv, cfg.context - 1)
    _llama(net, net.input((1,), "input_ids"), cfg, past=kv)


def _llama(net: Net, ids: str, cfg: LlamaConfig, past: int) -> None:
    """Embedding, `cfg.layers` decoder layers (RMSNorm, GQA attention with RoPE, SwiGLU MLP), norm, last-token LM head.

    With `past` > 0 each layer reads `past_key_values.{i}.key/value` (N, kv_heads, past, dh), and the new
    token's key (after RoPE) and value slices (N, kv_heads, 1, dh) are network outputs, written back.
    """
    d, dh = cfg.hidden, cfg.hidden // cfg.heads
    x = net.embedding(ids, "model.embed_tokens", cfg.vocab, d)
    for i in range(cfg.layers):
        name = f"model.layers.{i}"
        h = net.rms_norm(x, f"{name}.input_layernorm")
        q, k, v = (net.linear(h, f"{name}.self_attn.{p}", width, bias=False)
                   for p, width in (("q_proj", d), ("k_proj", cfg.kv_heads * dh), ("v_proj", cfg.kv_heads * dh)))
        q = net.rotary(split_heads(net, q, f"{name}.self_attn.q_heads", cfg.heads), f"{name}.self_attn.q_rotary")
        k = net.rotary(split_heads(net, k, f"{name}.self_attn.k_heads", cfg.kv_heads), f"{name}.self_attn.k_rotary")
        v = split_heads(net, v, f"{name}.self_attn.v_heads", cfg.kv_heads)
        if past:
            k, v = (net.concat((net.input((cfg.kv_heads, past, dh), f"past_key_values.{i}.{part}"), net.output(new)),
                               f"{name}.self_attn.{part}_cache", axis=2) for part, new in (("key", k), ("value", v)))
        ctx = attend(net, q, key_transpose(net, k, f"{name}.self_attn.k_transpose"), v, f"{name}.self_attn")
        x = net.eltwise((net.linear(ctx, f"{name}.self_attn.o_proj", d, bias=False), x), f"{name}.add_1")
        h = net.rms_norm(x, f"{name}.post_attention_layernorm")
        gate = net.linear(h, f"{name}.mlp.gate_proj", cfg.ffn, bias=False, act="Swish")
        up = net.linear(h, f"{name}.mlp.up_proj", cfg.ffn, bias=False)
        y = net.linear(net.eltwise((gate, up), f"{name}.mlp.mul", "Mul"), f"{name}.mlp.down_proj", d, bias=False)
        x = net.eltwise((y, x), f"{name}.add_2")
    x = net.rms_norm(x, "model.norm")
    n, length, _ = net.shape(x)
    if length > 1:
        x = net.unary(x, "last_token", "Slice", OpKind.SPLIT, (n, 1, d))  # x[:, -1:]
    net.linear(x, "lm_head", cfg.vocab, bias=False)
