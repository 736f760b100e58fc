"""Sequence models: an unrolled LSTM language model, BERT-base, GPT-2 small.

Weights shared across time steps (the LSTM's) or tied (GPT-2's output head) are counted
once, on the op that first uses them; later users read them (their ``bytes_read``) but hold
no ``params`` and name the owner in ``attrs["shares"]``.
"""

from __future__ import annotations

from workloads.builder import GraphBuilder
from workloads.dtypes import DTYPE_BYTES
from workloads.errors import GraphError
from workloads.graph import Graph

__all__ = ["bert_base", "gpt2_small", "lstm"]


def _shared_linear(b: GraphBuilder, x: str, out: int, owner: str, *, bias: bool,
                   name: str) -> str:
    """``x @ W (+ b)`` with the weights of op ``owner`` (read, not owned)."""
    *lead, features = b.shape(x)
    rows = 1
    for d in lead:
        rows *= d
    weights = (features * out + (out if bias else 0)) * DTYPE_BYTES[b.dtype]
    return b.add_op("linear", "matmul", (x,), (*lead, out), name=name,
                    flops=2 * rows * features * out + (rows * out if bias else 0),
                    bytes_read=b.nbytes(x) + weights,
                    attrs={"in_features": features, "out_features": out, "bias": bias,
                           "shares": owner})


def lstm(batch: int = 1, dtype: str = "fp32", seq_len: int = 35, layers: int = 2,
         hidden: int = 650, vocab: int = 10000) -> Graph:
    """An LSTM language model unrolled over ``seq_len`` steps (defaults: the "medium"
    model of Zaremba et al. 2014). Each layer has PyTorch's ``nn.LSTM`` parameters,
    ``4 * (in * hidden + hidden * hidden + 2 * hidden)``."""
    b = GraphBuilder("lstm", dtype)
    ids = b.input((batch, seq_len), name="tokens", dtype="int64")
    emb = b.embedding(ids, vocab, hidden, name="embedding")
    xs = b.split(emb, [1] * seq_len, axis=1, squeeze=True, name="embedding.split")
    for layer in range(layers):
        h = b.input((batch, hidden), name=f"h0.{layer}")
        c = b.input((batch, hidden), name=f"c0.{layer}")
        outs = []
        for t, x in enumerate(xs):
            n = f"l{layer}.t{t}"
            if t == 0:
                gx = b.linear(x, 4 * hidden, name=f"{n}.w_ih")
                gh = b.linear(h, 4 * hidden, name=f"{n}.w_hh")
            else:
                gx = _shared_linear(b, x, 4 * hidden, f"l{layer}.t0.w_ih", bias=True,
                                    name=f"{n}.w_ih")
                gh = _shared_linear(b, h, 4 * hidden, f"l{layer}.t0.w_hh", bias=True,
                                    name=f"{n}.w_hh")
            h, c = b.add_multi("lstm_cell", "elementwise", (gx, gh, c),
                               [(batch, hidden), (batch, hidden)], name=f"{n}.cell",
                               flops=30 * batch * hidden)
            outs.append(h)
        xs = outs
    seq = b.concat([b.reshape(h, (batch, 1, hidden)) for h in xs], axis=1, name="outputs")
    b.softmax(b.linear(seq, vocab, name="decoder"), name="softmax")
    return b.build()


def _attention(b: GraphBuilder, q: str, k: str, v: str, heads: int, n: str) -> str:
    batch, seq, dim = b.shape(q)
    hd = dim // heads
    qh = b.transpose(b.reshape(q, (batch, seq, heads, hd), name=f"{n}.q.split"),
                     (0, 2, 1, 3), name=f"{n}.q.heads")
    kt = b.transpose(b.reshape(k, (batch, seq, heads, hd), name=f"{n}.k.split"),
                     (0, 2, 3, 1), name=f"{n}.k.heads")
    vh = b.transpose(b.reshape(v, (batch, seq, heads, hd), name=f"{n}.v.split"),
                     (0, 2, 1, 3), name=f"{n}.v.heads")
    scores = b.scale(b.matmul(qh, kt, name=f"{n}.scores"), hd ** -0.5, name=f"{n}.scale")
    ctx = b.matmul(b.softmax(scores, name=f"{n}.softmax"), vh, name=f"{n}.context")
    ctx = b.transpose(ctx, (0, 2, 1, 3), name=f"{n}.merge")
    return b.reshape(ctx, (batch, seq, dim), name=f"{n}.merged")


def _shard(model: str, tp: int, **sizes: int) -> None:
    """Check ``tp`` splits every size Megatron splits (heads, hidden, feed-forward)."""
    bad = {k: v for k, v in sizes.items() if v % tp}
    if tp < 1 or bad:
        raise GraphError(f"model {model!r}: tp must be >= 1 and divide the heads and widths "
                         f"it splits, got tp={tp} for {bad or sizes}")


def bert_base(batch: int = 1, dtype: str = "fp32", seq_len: int = 128, layers: int = 12,
              dim: int = 768, heads: int = 12, vocab: int = 30522, tp: int = 1) -> Graph:
    """BERT-base encoder with pooler (Devlin et al. 2019; Hugging Face
    ``bert-base-uncased``): 109,482,240 parameters. With ``tp > 1``, one rank's shard of
    Megatron's tensor-parallel split: the query, key, value and first feed-forward layers
    column-split, ``heads / tp`` heads, the attention output and second feed-forward layers
    row-split (their outputs partial sums)."""
    _shard("bert_base", tp, heads=heads, dim=dim)
    b = GraphBuilder("bert_base", dtype)
    ids = b.input((batch, seq_len), name="input_ids", dtype="int64")
    pos = b.input((batch, seq_len), name="position_ids", dtype="int64")
    typ = b.input((batch, seq_len), name="token_type_ids", dtype="int64")
    x = b.add(b.add(b.embedding(ids, vocab, dim, name="embeddings.word"),
                    b.embedding(pos, 512, dim, name="embeddings.position")),
              b.embedding(typ, 2, dim, name="embeddings.token_type"))
    x = b.layernorm(x, eps=1e-12, name="embeddings.ln")
    col, row = ("column", "row") if tp > 1 else (None, None)
    for i in range(layers):
        n = f"layer{i}"
        q, k, v = (b.linear(x, dim // tp, name=f"{n}.{w}", parallel=col)
                   for w in ("query", "key", "value"))
        a = b.linear(_attention(b, q, k, v, heads // tp, f"{n}.attn"), dim,
                     name=f"{n}.attn.out", parallel=row)
        x = b.layernorm(b.add(a, x, name=f"{n}.attn.residual"), eps=1e-12, name=f"{n}.attn.ln")
        up = b.linear(x, 4 * dim // tp, name=f"{n}.ffn.up", parallel=col)
        f = b.linear(b.gelu(up, name=f"{n}.ffn.gelu"), dim, name=f"{n}.ffn.down",
                     parallel=row)
        x = b.layernorm(b.add(f, x, name=f"{n}.ffn.residual"), eps=1e-12, name=f"{n}.ffn.ln")
    (cls,) = b.split(x, [1], axis=1, squeeze=True, name="pooler.cls")
    b.tanh(b.linear(cls, dim, name="pooler.dense"), name="pooler")
    return b.build()


def gpt2_small(batch: int = 1, dtype: str = "fp32", seq_len: int = 1024, layers: int = 12,
               dim: int = 768, heads: int = 12, vocab: int = 50257, tp: int = 1) -> Graph:
    """GPT-2 small decoder (Radford et al. 2019; Hugging Face ``gpt2``), output head tied
    to the token embedding: 124,439,808 parameters. ``tp``: one rank's shard of Megatron's
    split, as in :func:`bert_base`."""
    _shard("gpt2_small", tp, heads=heads, dim=dim)
    b = GraphBuilder("gpt2_small", dtype)
    ids = b.input((batch, seq_len), name="input_ids", dtype="int64")
    pos = b.input((batch, seq_len), name="position_ids", dtype="int64")
    x = b.add(b.embedding(ids, vocab, dim, name="wte"),
              b.embedding(pos, 1024, dim, name="wpe"))
    col, row = ("column", "row") if tp > 1 else (None, None)
    for i in range(layers):
        n = f"h{i}"
        qkv = b.linear(b.layernorm(x, name=f"{n}.ln_1"), 3 * dim // tp,
                       name=f"{n}.attn.c_attn", parallel=col)
        q, k, v = b.split(qkv, [dim // tp] * 3, axis=2, name=f"{n}.attn.split")
        a = b.linear(_attention(b, q, k, v, heads // tp, f"{n}.attn"), dim,
                     name=f"{n}.attn.c_proj", parallel=row)
        x = b.add(x, a, name=f"{n}.attn.residual")
        m = b.linear(b.layernorm(x, name=f"{n}.ln_2"), 4 * dim // tp, name=f"{n}.mlp.c_fc",
                     parallel=col)
        m = b.linear(b.gelu(m, name=f"{n}.mlp.gelu"), dim, name=f"{n}.mlp.c_proj",
                     parallel=row)
        x = b.add(x, m, name=f"{n}.mlp.residual")
    x = b.layernorm(x, name="ln_f")
    b.softmax(_shared_linear(b, x, vocab, "wte", bias=False, name="lm_head"), name="softmax")
    return b.build()
