"""Sequence models: an unrolled LSTM language model and transformers, BERT (base and large)
encoders and GPT-2-style decoders (GPT-2 small and large, GPT-3 XL and 2.7B, OPT-1.3B).

Weights shared across time steps (the LSTM's) or tied (GPT-2's output head) are counted
once, on the op that first uses them; later users read them (their ``bytes_read``) but hold
no ``params`` and name the owner in ``attrs["shares"]``.
"""

from __future__ import annotations

from typing import Literal

from workloads.builder import GraphBuilder
from workloads.dtypes import DTYPE_BYTES
from workloads.errors import GraphError
from workloads.graph import Graph

__all__ = ["bert_base", "bert_large", "gpt2_large", "gpt2_small", "gpt3_2_7b", "gpt3_xl", "lstm",
           "opt_1_3b"]


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


def _encoder(model: str, *, batch: int, dtype: str, seq_len: int, layers: int, dim: int,
             heads: int, ffn: int, vocab: int, positions: int, tp: int) -> Graph:
    """A BERT encoder with pooler (Hugging Face ``BertModel``), ``ffn`` wide feed-forward
    layers and ``positions`` learned positions; ``tp`` as in :func:`bert_base`."""
    _shard(model, tp, heads=heads, dim=dim, ffn=ffn)
    b = GraphBuilder(model, dtype)
    ids = b.input((batch, seq_len), name="input_ids", dtype="int64")
    pos = b.input((batch, seq_len), name="position_ids", dtype="int64")
    typ = b.input((batch, seq_len), name="token_type_ids", dtype="int64")
    x = b.add(b.add(b.embedding(ids, vocab, dim, name="embeddings.word"),
                    b.embedding(pos, positions, dim, name="embeddings.position")),
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
        up = b.linear(x, ffn // tp, name=f"{n}.ffn.up", parallel=col)
        f = b.linear(b.gelu(up, name=f"{n}.ffn.gelu"), dim, name=f"{n}.ffn.down",
                     parallel=row)
        x = b.layernorm(b.add(f, x, name=f"{n}.ffn.residual"), eps=1e-12, name=f"{n}.ffn.ln")
    (cls,) = b.split(x, [1], axis=1, squeeze=True, name="pooler.cls")
    b.tanh(b.linear(cls, dim, name="pooler.dense"), name="pooler")
    return b.build()


def _decoder_attention(b: GraphBuilder, x: str, n: str, *, dim: int, heads: int, tp: int,
                       fused_qkv: bool) -> str:
    """Pre-norm self-attention of one decoder layer: GPT-2's fused ``c_attn`` split three
    ways, or OPT's separate ``q_proj``, ``k_proj``, ``v_proj`` (the same weights)."""
    col, row = ("column", "row") if tp > 1 else (None, None)
    h = b.layernorm(x, name=f"{n}.ln_1")
    if fused_qkv:
        qkv = b.linear(h, 3 * dim // tp, name=f"{n}.attn.c_attn", parallel=col)
        q, k, v = b.split(qkv, [dim // tp] * 3, axis=2, name=f"{n}.attn.split")
    else:
        q, k, v = (b.linear(h, dim // tp, name=f"{n}.attn.{w}_proj", parallel=col)
                   for w in "qkv")
    return b.linear(_attention(b, q, k, v, heads // tp, f"{n}.attn"), dim,
                    name=f"{n}.attn.c_proj", parallel=row)


def _decoder(model: str, *, batch: int, dtype: str, seq_len: int, layers: int, dim: int,
             heads: int, ffn: int, vocab: int, positions: int, tp: int,
             activation: Literal["gelu", "relu"] = "gelu", fused_qkv: bool = True) -> Graph:
    """A pre-norm decoder with learned positions (``positions`` rows), a final layer norm
    and an output head tied to the token embedding: GPT-2's layout (Hugging Face
    ``GPT2LMHeadModel``), which OPT shares but for ``activation`` and ``fused_qkv``.
    ``tp`` as in :func:`bert_base`."""
    _shard(model, tp, heads=heads, dim=dim, ffn=ffn)
    b = GraphBuilder(model, dtype)
    act = {"gelu": b.gelu, "relu": b.relu}[activation]
    ids = b.input((batch, seq_len), name="input_ids", dtype="int64")
    pos = b.input((batch, seq_len), name="position_ids", dtype="int64")
    x = b.add(b.embedding(ids, vocab, dim, name="wte"),
              b.embedding(pos, positions, dim, name="wpe"))
    col, row = ("column", "row") if tp > 1 else (None, None)
    for i in range(layers):
        n = f"h{i}"
        a = _decoder_attention(b, x, n, dim=dim, heads=heads, tp=tp, fused_qkv=fused_qkv)
        x = b.add(x, a, name=f"{n}.attn.residual")
        m = b.linear(b.layernorm(x, name=f"{n}.ln_2"), ffn // tp, name=f"{n}.mlp.c_fc",
                     parallel=col)
        m = b.linear(act(m, name=f"{n}.mlp.{activation}"), dim, name=f"{n}.mlp.c_proj",
                     parallel=row)
        x = b.add(x, m, name=f"{n}.mlp.residual")
    x = b.layernorm(x, name="ln_f")
    b.softmax(_shared_linear(b, x, vocab, "wte", bias=False, name="lm_head"), name="softmax")
    return b.build()


def bert_base(batch: int = 1, dtype: str = "fp32", seq_len: int = 128, layers: int = 12,
              dim: int = 768, heads: int = 12, vocab: int = 30522, tp: int = 1) -> Graph:
    """BERT-base encoder with pooler (Devlin et al. 2019; Hugging Face
    ``bert-base-uncased``): 109,482,240 parameters. With ``tp > 1``, one rank's shard of
    Megatron's tensor-parallel split: the query, key, value and first feed-forward layers
    column-split, ``heads / tp`` heads, the attention output and second feed-forward layers
    row-split (their outputs partial sums)."""
    return _encoder("bert_base", batch=batch, dtype=dtype, seq_len=seq_len, layers=layers,
                    dim=dim, heads=heads, ffn=4 * dim, vocab=vocab, positions=512, tp=tp)


def gpt2_small(batch: int = 1, dtype: str = "fp32", seq_len: int = 1024, layers: int = 12,
               dim: int = 768, heads: int = 12, vocab: int = 50257, tp: int = 1) -> Graph:
    """GPT-2 small decoder (Radford et al. 2019; Hugging Face ``gpt2``), output head tied
    to the token embedding: 124,439,808 parameters. ``tp``: one rank's shard of Megatron's
    split, as in :func:`bert_base`."""
    return _decoder("gpt2_small", batch=batch, dtype=dtype, seq_len=seq_len, layers=layers,
                    dim=dim, heads=heads, ffn=4 * dim, vocab=vocab, positions=1024, tp=tp)


# The larger transformers NeuSight (Lee et al., ASPLOS 2025) measured, each with the
# configuration of its ``scripts/asplos/data/DLmodel_configs/*.json`` and, by default, the
# sequence length it measured them at.

def bert_large(batch: int = 1, dtype: str = "fp32", seq_len: int = 512, tp: int = 1) -> Graph:
    """BERT-large encoder with pooler (Devlin et al. 2019; Hugging Face
    ``bert-large-uncased``): 24 layers, hidden 1024, 16 heads, feed-forward 4096.

    >>> bert_large(seq_len=8).params
    335141888
    """
    return _encoder("bert_large", batch=batch, dtype=dtype, seq_len=seq_len, layers=24,
                    dim=1024, heads=16, ffn=4096, vocab=30522, positions=512, tp=tp)


def gpt2_large(batch: int = 1, dtype: str = "fp32", seq_len: int = 1024,
               tp: int = 1) -> Graph:
    """GPT-2 large decoder (Radford et al. 2019; Hugging Face ``gpt2-large``): 36 layers,
    hidden 1280, 20 heads, 1024 positions, output head tied.

    >>> gpt2_large(seq_len=8).params
    774030080
    """
    return _decoder("gpt2_large", batch=batch, dtype=dtype, seq_len=seq_len, layers=36,
                    dim=1280, heads=20, ffn=4 * 1280, vocab=50257, positions=1024, tp=tp)


def gpt3_xl(batch: int = 1, dtype: str = "fp32", seq_len: int = 2048, tp: int = 1) -> Graph:
    """GPT-3 XL (Brown et al. 2020, table 2.1: 1.3B parameters) as a GPT-2-style decoder:
    24 layers, hidden 2048, 16 heads of 128, 2048 positions, output head tied. (The
    table's "24 heads" of 128 do not fit its hidden 2048; 16 of 128 do.)

    >>> gpt3_xl(seq_len=8).params
    1315723264
    """
    return _decoder("gpt3_xl", batch=batch, dtype=dtype, seq_len=seq_len, layers=24,
                    dim=2048, heads=16, ffn=4 * 2048, vocab=50257, positions=2048, tp=tp)


def gpt3_xl_neusight(batch: int = 1, dtype: str = "fp32", seq_len: int = 2048,
                     tp: int = 1) -> Graph:
    """The model NeuSight (Lee et al., ASPLOS'25) measured as "GPT-3 XL": the table's 24
    heads of 128 taken at their word, hidden 3072, 24 layers, 2048 positions — 2.9B
    parameters, not the paper's 1.3B (:func:`gpt3_xl`).

    >>> gpt3_xl_neusight(seq_len=8).params
    2879554560
    """
    return _decoder("gpt3_xl_neusight", batch=batch, dtype=dtype, seq_len=seq_len,
                    layers=24, dim=3072, heads=24, ffn=4 * 3072, vocab=50257,
                    positions=2048, tp=tp)


def gpt3_2_7b(batch: int = 1, dtype: str = "fp32", seq_len: int = 2048,
              tp: int = 1) -> Graph:
    """GPT-3 2.7B (Brown et al. 2020, table 2.1) as a GPT-2-style decoder: 32 layers,
    hidden 2560, 32 heads, 2048 positions, output head tied.

    >>> gpt3_2_7b(seq_len=8).params
    2651553280
    """
    return _decoder("gpt3_2.7b", batch=batch, dtype=dtype, seq_len=seq_len, layers=32,
                    dim=2560, heads=32, ffn=4 * 2560, vocab=50257, positions=2048, tp=tp)


def opt_1_3b(batch: int = 1, dtype: str = "fp32", seq_len: int = 2048, tp: int = 1) -> Graph:
    """OPT-1.3B (Zhang et al. 2022; Hugging Face ``facebook/opt-1.3b``): 24 pre-norm layers,
    hidden 2048, 32 heads, ReLU feed-forward 8192, separate query, key and value
    projections, 2048 learned positions plus OPT's offset of 2 (2050 rows), a final layer
    norm and the output head tied.

    >>> opt_1_3b(seq_len=8).params
    1315758080
    """
    return _decoder("opt_1.3b", batch=batch, dtype=dtype, seq_len=seq_len, layers=24,
                    dim=2048, heads=32, ffn=8192, vocab=50272, positions=2048 + 2, tp=tp,
                    activation="relu", fused_qkv=False)
