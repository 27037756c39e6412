"""Attention networks: torchvision's ViT-B/16 and the base Transformer of "Attention is all you need".

Multi-head attention is written in the rank-4 form HF/torch ONNX exports emit, shared by every attention
network: projections on (N, L, D), a reshape to (N, L, heads, dh) and a Transpose to (N, heads, L, dh)
(the key to (N, heads, dh, S)), scores (N, heads, L, S) = Q K^T, a softmax, context (N, heads, L, dh) = P V,
a Transpose back and a reshape to (N, L, D), and the output projection. No tensor has rank 5, so the
fusion tile model reads (N, heads, tokens, dh) as (N, C, H, W): rows are tokens. The 1/sqrt(d_head)
scaling is a scalar multiply with no parameter and is not listed.
"""

from __future__ import annotations

from engine.graph import OpKind
from engine.zoo._builder import Net


def split_heads(net: Net, x: str, name: str, heads: int, *, key: bool = False) -> str:
    """(N, L, heads*dh) -> (N, heads, L, dh) by a folded reshape and a Transpose; a key goes to (N, heads, dh, L).

    The key's transpose for Q K^T is the same Transpose node (perm 0, 2, 3, 1), so scores read it directly.
    """
    n, length, d = net.shape(x)
    net.reshape(x, f"{name}.view", (n, length, heads, d // heads))
    return net.transpose(x, name, (0, 2, 3, 1) if key else (0, 2, 1, 3))


def packed_heads(net: Net, x: str, name: str, heads: int, parts: int) -> tuple[str, ...]:
    """A packed projection (N, L, parts*D) -> `parts` tensors (N, heads, L, dh): reshape, Transpose, Split on heads."""
    n, length, d = net.shape(x)
    dh = d // (parts * heads)
    net.reshape(x, f"{name}.view", (n, length, parts * heads, dh))
    return net.split(net.transpose(x, name, (0, 2, 1, 3)), f"{name}.split", (heads,) * parts, axis=1)


def key_transpose(net: Net, k: str, name: str) -> str:
    """K (N, heads, S, dh) -> K^T (N, heads, dh, S), the right operand of the score matmul."""
    return net.transpose(k, name, (0, 1, 3, 2))


def attend(net: Net, q: str, kt: str, v: str, name: str) -> str:
    """Scores Q K^T (N, h, L, S), softmax, context P V (N, h, L, dh), heads merged back to (N, L, h*dh).

    Grouped-query attention (K and V with fewer heads, kv, than Q): Q is viewed as (N, kv, h/kv * L, dh),
    the query heads of a group stacked along the rows, so each matmul is batched over the kv heads
    and reads every key once; the context is viewed back as (N, h, L, dh). MACs are those of h heads.
    """
    n, heads, length, dh = net.shape(q)
    kv = net.shape(kt)[1]
    if kv != heads:
        net.reshape(q, f"{name}.q_groups", (n, kv, heads // kv * length, dh))
    probs = net.unary(net.matmul(q, kt, f"{name}.scores"), f"{name}.softmax", "Softmax", OpKind.SOFTMAX)
    ctx = net.matmul(probs, v, f"{name}.context")
    if kv != heads:
        net.reshape(ctx, f"{name}.ungroup", (n, heads, length, dh))
    ctx = net.transpose(ctx, f"{name}.merge_heads", (0, 2, 1, 3))
    return net.reshape(ctx, f"{name}.merge_view", (n, length, heads * dh))


def attention(net: Net, x: str, name: str, heads: int, memory: str | None = None) -> str:
    """nn.MultiheadAttention on x (N, L, D): self-attention, or cross-attention on `memory` (N, S, D)."""
    d = net.shape(x)[-1]
    w, b = f"{name}.in_proj_weight", f"{name}.in_proj_bias"
    if memory is None:
        qkv = net.linear(x, f"{name}.in_proj", 3 * d, weight=w, bias_name=b)
        q, k, v = packed_heads(net, qkv, f"{name}.heads", heads, 3)
    else:
        q = net.linear(x, f"{name}.q_proj", d, weight=f"{w}.q", bias_name=f"{b}.q")
        q = split_heads(net, q, f"{name}.q_heads", heads)
        kv = net.linear(memory, f"{name}.kv_proj", 2 * d, weight=f"{w}.kv", bias_name=f"{b}.kv")
        k, v = packed_heads(net, kv, f"{name}.kv_heads", heads, 2)
    ctx = attend(net, q, key_transpose(net, k, f"{name}.k_transpose"), v, name)
    return net.linear(ctx, f"{name}.out_proj", d)


def vit_b_16(net: Net) -> None:
    """torchvision `vit_b_16` (Dosovitskiy et al., 2021): 16x16 patches, 12 layers, 12 heads, width 768."""
    x = net.input((3, 224, 224))
    x = net.conv(x, "conv_proj", 768, 16, stride=16, bias=True)
    n, d, h, w = net.shape(x)
    net.reshape(x, "conv_proj.flatten", (n, d, h * w))
    x = net.transpose(x, "conv_proj.permute", (0, 2, 1))
    length = h * w + 1
    x = net.add_op("encoder.cat_class_token", OpKind.CONCAT, "Concat", (x,), ((n, length, d),),
                   own=(("class_token", (1, 1, d)),))[0]
    x = net.add_op("encoder.add_pos_embedding", OpKind.ELTWISE, "Add", (x,), ((n, length, d),),
                   own=(("encoder.pos_embedding", (1, length, d)),))[0]
    for i in range(12):
        name = f"encoder.layers.encoder_layer_{i}"
        y = attention(net, net.layer_norm(x, f"{name}.ln_1"), f"{name}.self_attention", 12)
        x = net.eltwise((y, x), f"{name}.add_1")
        y = net.linear(net.layer_norm(x, f"{name}.ln_2"), f"{name}.mlp.0", 3072, act="Gelu")
        x = net.eltwise((net.linear(y, f"{name}.mlp.3", d), x), f"{name}.add_2")
    x = net.layer_norm(x, "encoder.ln")
    x = net.flatten(net.unary(x, "class_token_out", "Slice", OpKind.SPLIT, (n, 1, d)))  # x[:, 0]
    net.linear(x, "heads.head", 1000)


def transformer(net: Net) -> None:
    """torch.nn.Transformer() defaults (Vaswani et al., 2017, base): 6+6 layers, 8 heads, d_model 512, d_ff 2048.

    Inputs as in COSMA (and the nn.Transformer example): source 10 and target 20 embedded tokens per
    sequence; COSMA's 32 sequences are `batch=32`. Post-norm layers, with final encoder/decoder norms.
    """
    d, heads, ff = 512, 8, 2048
    memory = net.input((10, d), "src")
    x = net.input((20, d), "tgt")
    for i in range(6):
        name = f"encoder.layers.{i}"
        memory = net.layer_norm(net.eltwise((attention(net, memory, f"{name}.self_attn", heads), memory),
                                            f"{name}.add_1"), f"{name}.norm1")
        memory = _feed_forward(net, memory, name, ff, "norm2")
    memory = net.layer_norm(memory, "encoder.norm")
    for i in range(6):
        name = f"decoder.layers.{i}"
        x = net.layer_norm(net.eltwise((attention(net, x, f"{name}.self_attn", heads), x), f"{name}.add_1"),
                           f"{name}.norm1")
        x = net.layer_norm(net.eltwise((attention(net, x, f"{name}.multihead_attn", heads, memory), x),
                                       f"{name}.add_2"), f"{name}.norm2")
        x = _feed_forward(net, x, name, ff, "norm3")
    net.layer_norm(x, "decoder.norm")


def _feed_forward(net: Net, x: str, name: str, ff: int, norm: str) -> str:
    y = net.linear(net.linear(x, f"{name}.linear1", ff, act="Relu"), f"{name}.linear2", net.shape(x)[-1])
    return net.layer_norm(net.eltwise((y, x), f"{name}.add_ff"), f"{name}.{norm}")
