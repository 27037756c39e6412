"""Attention networks: torchvision's ViT-B/16 and the base Transformer of "Attention is all you need".

Multi-head attention is written out as ONNX would run it: one packed q/k/v projection, a reshape
to heads, per-head score and context matmuls, a softmax, and the output projection. Tensors are
batch-first; the 1/sqrt(d_head) scaling is a scalar multiply with no parameter and is not listed.
"""

from __future__ import annotations

from engine.graph import OpKind
from engine.zoo._builder import Net


def attention(net: Net, x: str, name: str, heads: int, memory: str | None = None) -> str:
    """nn.MultiheadAttention on x (N, L, D): self-attention, or cross-attention on `memory` (N, S, D)."""
    n, length, d = net.shape(x)
    dh = d // heads
    w, b = f"{name}.in_proj_weight", f"{name}.in_proj_bias"
    if memory is None:
        qkv = net.linear(x, f"{name}.in_proj", 3 * d, weight=w, bias_name=b)
        net.reshape(qkv, f"{name}.split_heads", (n, length, 3, heads, dh))
        q, k, v = net.split(net.transpose(qkv, f"{name}.heads", (2, 0, 3, 1, 4)), f"{name}.qkv", (1, 1, 1), axis=0)
    else:
        s = net.shape(memory)[1]
        q = net.linear(x, f"{name}.q_proj", d, weight=f"{w}.q", bias_name=f"{b}.q")
        net.reshape(q, f"{name}.q_heads", (n, length, 1, heads, dh))
        q = net.transpose(q, f"{name}.q_transpose", (2, 0, 3, 1, 4))
        kv = net.linear(memory, f"{name}.kv_proj", 2 * d, weight=f"{w}.kv", bias_name=f"{b}.kv")
        net.reshape(kv, f"{name}.kv_heads", (n, s, 2, heads, dh))
        k, v = net.split(net.transpose(kv, f"{name}.kv_transpose", (2, 0, 3, 1, 4)), f"{name}.kv", (1, 1), axis=0)
    scores = net.matmul(q, net.transpose(k, f"{name}.k_transpose", (0, 1, 2, 4, 3)), f"{name}.scores")
    probs = net.unary(scores, f"{name}.softmax", "Softmax", OpKind.SOFTMAX)
    ctx = net.transpose(net.matmul(probs, v, f"{name}.context"), f"{name}.merge_heads", (0, 1, 3, 2, 4))
    net.reshape(ctx, f"{name}.merge_view", (n, length, d))
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
