"""The attributes a kernel needs to run a torch module imported as one op, in the IR's
conventions (what the ONNX importer reads from an operator's attributes).

>>> import torch.nn as nn
>>> module_attrs(nn.Conv2d(3, 8, 3, stride=2, padding=1))
{'kernel': (3, 3), 'stride': (2, 2), 'padding': (1, 1), 'dilation': (1, 1), 'groups': 1}
"""

from __future__ import annotations

from typing import Any

__all__ = ["module_attrs"]


def _pair(value: Any) -> tuple[int, ...]:
    return tuple(value) if isinstance(value, tuple | list) else (int(value), int(value))


def _attention(m: Any) -> dict[str, Any]:
    return {"heads": m.num_heads, "embed": m.embed_dim, "kdim": m.kdim, "vdim": m.vdim,
            "batch_first": bool(m.batch_first)}


def _recurrent(m: Any) -> dict[str, Any]:
    out = {"hidden": m.hidden_size, "layers": m.num_layers,
           "bidirectional": bool(m.bidirectional), "batch_first": bool(m.batch_first),
           "bias": bool(m.bias)}
    if type(m).__name__ == "RNN":
        out["nonlinearity"] = m.nonlinearity
    return out


def _layer(m: Any) -> dict[str, Any]:
    """A transformer encoder or decoder layer (a stack: its first layer and its depth)."""
    layers = getattr(m, "layers", None)
    first = layers[0] if layers is not None else m
    activation = getattr(first, "activation", None)
    name = getattr(activation, "__name__", type(activation).__name__).lower()
    return {**_attention(first.self_attn), "ff": first.linear1.out_features,
            "activation": name, "norm_first": bool(first.norm_first),
            "eps": float(first.norm1.eps), "depth": len(layers) if layers is not None else 1,
            "final_norm": getattr(m, "norm", None) is not None}


def module_attrs(module: Any) -> dict[str, Any]:
    """The settings of ``module`` that executing it needs (empty where it has none)."""
    import torch.nn as nn

    m = module
    if isinstance(m, nn.Conv1d | nn.Conv2d | nn.ConvTranspose2d):
        out = {"kernel": tuple(m.kernel_size), "stride": tuple(m.stride),
               "padding": tuple(m.padding), "dilation": tuple(m.dilation), "groups": m.groups}
        if isinstance(m, nn.ConvTranspose2d):
            out["output_padding"] = tuple(m.output_padding)
        return out
    if isinstance(m, nn.MaxPool2d | nn.AvgPool2d):
        return {"kernel": _pair(m.kernel_size), "stride": _pair(m.stride or m.kernel_size),
                "padding": _pair(m.padding)}
    if isinstance(m, nn.GroupNorm):
        return {"groups": m.num_groups, "eps": float(m.eps)}
    if isinstance(m, nn.LayerNorm | nn.BatchNorm1d | nn.BatchNorm2d):
        return {"eps": float(m.eps)}
    if isinstance(m, nn.Upsample):
        return {"mode": m.mode, "scale": m.scale_factor, "size": m.size,
                "align_corners": m.align_corners}
    if isinstance(m, nn.MultiheadAttention):
        return _attention(m)
    if isinstance(m, nn.LSTM | nn.GRU | nn.RNN):
        return _recurrent(m)
    if isinstance(m, nn.TransformerEncoderLayer | nn.TransformerDecoderLayer |
                  nn.TransformerEncoder | nn.TransformerDecoder):
        return _layer(m)
    if isinstance(m, nn.Transformer):
        return {"encoder": _layer(m.encoder), "decoder": _layer(m.decoder)}
    if isinstance(m, nn.Softmax):
        return {"axis": m.dim}
    return {}
