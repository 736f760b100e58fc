"""PyTorch modules as placelab graphs, through torch.fx (needs the ``torch`` extra).

The module is traced symbolically and run once on the example inputs to record every
intermediate shape (``torch.fx.passes.shape_prop``). Modules, functions and methods map to
op kinds with cost formulas; parameters and buffers belong to the op that owns them (a
``get_attr`` constant to its first reader). Anything without a formula is imported as
``opaque`` (costed by the bytes it moves) and named in one warning.
"""

from __future__ import annotations

import math
import operator
import warnings
from collections.abc import Sequence
from typing import Any

from workloads.errors import GraphError
from workloads.graph import Graph, Op, Tensor
from workloads.importers.formulas import (
    attention_flops,
    interpolation_flops,
    recurrent_flops,
)
from workloads.importers.torch_attrs import module_attrs

__all__ = ["import_torch"]

_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64",
           "int64": "int64", "int32": "int32", "int8": "int8", "bool": "bool"}

# Elementwise callables and methods, by name: (kind, FLOPs per output element).
_ELEMENTWISE = {"relu": ("relu", 1), "relu6": ("relu6", 2), "silu": ("silu", 5),
                "hardswish": ("hardswish", 4), "hardsigmoid": ("hardsigmoid", 3),
                "gelu": ("gelu", 8), "sigmoid": ("sigmoid", 4),
                "tanh": ("tanh", 4), "add": ("add", 1), "iadd": ("add", 1),
                "mul": ("mul", 1), "sub": ("add", 1), "truediv": ("mul", 1),
                "div": ("mul", 1), "dropout": ("dropout", 0)}
# Layout changes that copy nothing.
_VIEWS = {"view", "reshape", "flatten", "contiguous", "unsqueeze", "squeeze", "expand",
          "getitem"}
_MOVES = {"transpose", "permute", "cat", "concat", "chunk", "split"}
# Functions that make a tensor from no tensor (its shape from plain numbers).
_CREATORS = {"arange", "zeros", "ones", "full", "empty", "eye", "ones_like", "zeros_like",
             "tril", "triu"}


def _tensor(name: str, meta: Any) -> Tensor | None:
    shape = getattr(meta, "shape", None)
    if shape is None:
        return None
    dtype = _DTYPES.get(str(meta.dtype).replace("torch.", ""), "fp32")
    return Tensor(name, tuple(max(int(d), 1) for d in shape) or (1,), dtype)


def _numel(t: Tensor) -> int:
    return math.prod(t.shape)


def _module_cost(module: Any, out: Tensor, ins: list[Tensor]) -> tuple[str, str, int]:
    import torch.nn as nn

    if isinstance(module, nn.Linear):
        bias = _numel(out) if module.bias is not None else 0
        return "linear", "matmul", 2 * _numel(out) * module.in_features + bias
    if isinstance(module, nn.Conv1d | nn.Conv2d):
        per_out = module.in_channels // module.groups * math.prod(module.kernel_size)
        bias = _numel(out) if module.bias is not None else 0
        return "conv2d", "conv", 2 * _numel(out) * per_out + bias
    if isinstance(module, nn.ConvTranspose2d):
        # each input element scattered through the kernel to its group's output channels
        per_in = module.out_channels // module.groups * math.prod(module.kernel_size)
        bias = _numel(out) if module.bias is not None else 0
        return "conv_transpose2d", "conv", 2 * _numel(ins[0]) * per_in + bias
    if isinstance(module, nn.GroupNorm):
        return "groupnorm", "reduction", 8 * _numel(out)
    if isinstance(module, nn.Upsample):
        return "resize", "elementwise", interpolation_flops(module.mode, ins[0].shape, out.shape)
    if isinstance(module, nn.TransformerEncoderLayer):
        return "transformer_layer", "matmul", _encoder_layer(module, out)
    if isinstance(module, nn.TransformerEncoder):
        norm = 8 * _numel(out) if module.norm is not None else 0
        return "transformer_layer", "matmul", norm + sum(
            _encoder_layer(layer, out) for layer in module.layers)
    if isinstance(module, nn.TransformerDecoderLayer | nn.TransformerDecoder):
        return "transformer_layer", "matmul", _decoder(module, out, ins[1])
    if isinstance(module, nn.Transformer):  # encoder over ins[0], decoder over ins[1]
        memory = ins[0]
        encoder = module.encoder
        flops = sum(_encoder_layer(layer, memory) for layer in encoder.layers)
        flops += 8 * _numel(memory) if encoder.norm is not None else 0
        return "transformer_layer", "matmul", flops + _decoder(module.decoder, out, memory)
    if isinstance(module, nn.BatchNorm2d | nn.BatchNorm1d):
        return "batchnorm", "elementwise", 2 * _numel(out)
    if isinstance(module, nn.LayerNorm):
        return "layernorm", "reduction", 8 * _numel(out)
    if isinstance(module, nn.MaxPool2d | nn.AvgPool2d):
        k = module.kernel_size
        window = k * k if isinstance(k, int) else math.prod(k)
        kind = "max_pool2d" if isinstance(module, nn.MaxPool2d) else "avg_pool2d"
        return kind, "reduction", _numel(out) * window
    if isinstance(module, nn.AdaptiveAvgPool2d):
        return "avg_pool2d", "reduction", _numel(ins[0]) if ins else _numel(out)
    if isinstance(module, nn.Embedding):
        return "embedding", "data_movement", 0
    if isinstance(module, nn.Softmax):
        return "softmax", "reduction", 5 * _numel(out)
    name = type(module).__name__.lower()
    if name in _ELEMENTWISE:
        kind, per = _ELEMENTWISE[name]
        return kind, "elementwise", per * _numel(out)
    raise KeyError(type(module).__name__)


def _function_cost(target: str, out: Tensor, ins: list[Tensor]) -> tuple[str, str, int]:
    if target in ("matmul", "bmm", "mm"):
        return "matmul", "matmul", 2 * _numel(out) * ins[0].shape[-1]
    if target == "linear":
        return "linear", "matmul", 2 * _numel(out) * ins[0].shape[-1]
    if target == "softmax":
        return "softmax", "reduction", 5 * _numel(out)
    if target in ("sum", "mean") and ins:  # one sum per input element (mean: and a scale)
        return "reduce", "reduction", _numel(ins[0]) + (_numel(out) if target == "mean" else 0)
    if target in ("layer_norm", "group_norm"):
        return target.replace("_", ""), "reduction", 8 * _numel(out)
    if target == "interpolate":
        return "resize", "elementwise", interpolation_flops("nearest", ins[0].shape, out.shape)
    if target == "scaled_dot_product_attention":  # q (..., L, d), k (..., S, d), v (..., S, dv)
        q, k = ins[0], ins[1] if len(ins) > 1 else ins[0]
        scores = _numel(q) // q.shape[-1] * k.shape[-2]  # one per (batch, head, query, key)
        # Q.K^T and A.V as torch's FLOP counter counts them, then scaling and softmax
        return ("attention", "matmul",
                2 * scores * q.shape[-1] + 2 * scores * out.shape[-1] + 6 * scores)
    if target in _ELEMENTWISE:
        kind, per = _ELEMENTWISE[target]
        return kind, "elementwise", per * _numel(out)
    if target in _MOVES:
        return ("concat" if target in ("cat", "concat") else "transpose"), "data_movement", 0
    raise KeyError(target)


def _encoder_layer(layer: Any, out: Tensor) -> int:
    """A transformer encoder layer, imported whole (its fast path defeats tracing): self
    attention, the two feed-forward products with their biases and activation, two layer
    norms and two residual sums."""
    attention = layer.self_attn
    e = attention.embed_dim
    tokens = _numel(out) // e
    length = out.shape[1] if attention.batch_first else out.shape[0]
    batch = tokens // length
    ff = layer.linear1.out_features
    flops = attention_flops(batch=batch, length=length, source=length, embed=e, kdim=e,
                            vdim=e, heads=attention.num_heads)
    flops += 4 * tokens * e * ff + tokens * (ff + e)  # feed-forward products and biases
    flops += 8 * tokens * ff  # activation (gelu's rate; relu is cheaper)
    return flops + 2 * 8 * tokens * e + 2 * tokens * e  # norms, residual sums


def _decoder(module: Any, out: Tensor, memory: Tensor) -> int:
    """A transformer decoder layer (or a stack and its final norm) reading ``memory``:
    self attention over the target, cross attention into the memory, the feed-forward
    block, three layer norms and three residual sums."""
    import torch.nn as nn

    if isinstance(module, nn.TransformerDecoder):
        norm = 8 * _numel(out) if module.norm is not None else 0
        return norm + sum(_decoder(layer, out, memory) for layer in module.layers)
    attention = module.self_attn
    e = attention.embed_dim
    tokens = _numel(out) // e
    length = out.shape[1] if attention.batch_first else out.shape[0]
    source = memory.shape[1] if attention.batch_first else memory.shape[0]
    batch = tokens // length
    ff = module.linear1.out_features
    flops = attention_flops(batch=batch, length=length, source=length, embed=e, kdim=e,
                            vdim=e, heads=attention.num_heads)
    flops += attention_flops(batch=batch, length=length, source=source, embed=e, kdim=e,
                             vdim=e, heads=module.multihead_attn.num_heads)
    flops += 4 * tokens * e * ff + tokens * (ff + e)  # feed-forward products and biases
    flops += 8 * tokens * ff  # activation (gelu's rate; relu is cheaper)
    return flops + 3 * 8 * tokens * e + 3 * tokens * e  # norms, residual sums


class _Tracer:
    """torch.fx's tracer with the layers imported whole kept as leaves."""

    @staticmethod
    def whole() -> tuple[type, ...]:
        import torch.nn as nn

        return (nn.Transformer, nn.TransformerEncoder, nn.TransformerEncoderLayer,
                nn.TransformerDecoder, nn.TransformerDecoderLayer, nn.MultiheadAttention,
                nn.LSTM, nn.GRU, nn.RNN)

    @staticmethod
    def make() -> Any:
        import torch.fx as fx

        whole = _Tracer.whole()

        class Tracer(fx.Tracer):  # type: ignore[misc]
            def is_leaf_module(self, m: Any, qualname: str) -> bool:
                return isinstance(m, whole) or super().is_leaf_module(m, qualname)

        return Tracer()

    @staticmethod
    def wrapped(module: Any, inputs: int) -> tuple[Any, dict[str, None] | None]:
        """The module to trace and the arguments to hold fixed: ``module`` itself, or, where
        it is a layer imported whole, a module calling it with its ``inputs`` inputs (the
        root of a trace is traced through, never a leaf)."""
        import torch.nn as nn

        if not isinstance(module, _Tracer.whole()):
            return module, None

        class Whole(nn.Module):
            def __init__(self, inner: Any) -> None:
                super().__init__()
                self.layer = inner

            def forward(self, x: Any, y: Any = None, z: Any = None) -> Any:
                return self.layer(*(x, y, z)[:inputs])

        # fx makes an input of every parameter of forward: the unused ones are held at None
        unused = ("y", "z")[inputs - 1:] if inputs < 3 else ()
        return Whole(module), dict.fromkeys(unused)


def values_itemsize(t: Tensor) -> int:
    """Bytes per element of a constant read by an op producing ``t`` (same dtype)."""
    return {"fp16": 2, "bf16": 2, "fp64": 8}.get(t.dtype, 4)


def _target_name(node: Any) -> str:
    target = node.target
    if isinstance(target, str):
        return target
    if target in (operator.add, operator.iadd):
        return "add"
    if target is operator.mul:
        return "mul"
    if target is operator.getitem:
        return "getitem"
    return getattr(target, "__name__", str(target)).lower()


def import_torch(module: Any, example_inputs: Any, *,
                 name: str | None = None) -> Graph:
    """Trace ``module`` on ``example_inputs`` (a tensor or a sequence of tensors) into a
    Graph.

    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
    >>> g = import_torch(net, [torch.zeros(2, 8)])
    >>> g.params, [op.kind for op in g]
    (36, ['input', 'linear', 'relu'])
    """
    try:
        import torch.fx as fx
        from torch.fx.passes.shape_prop import ShapeProp
    except ImportError as err:
        raise GraphError("torch import needs PyTorch: pip install 'placelab[torch]'") from err
    import torch

    if isinstance(example_inputs, torch.Tensor):  # one input given bare: the usual slip
        example_inputs = (example_inputs,)
    if not isinstance(example_inputs, Sequence) or not all(
            isinstance(x, torch.Tensor) for x in example_inputs):
        raise GraphError(f"torch module {type(module).__name__}: example_inputs must be a "
                         f"tensor or a sequence of tensors, got "
                         f"{type(example_inputs).__name__}")
    try:
        root, fixed = _Tracer.wrapped(module, len(example_inputs))
        graph = _Tracer.make().trace(root, concrete_args=fixed)
        traced = fx.GraphModule(root, graph, type(module).__name__)
        ShapeProp(traced).propagate(*example_inputs)
    except Exception as err:  # tracing raises many unrelated types
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise GraphError(f"torch module {type(module).__name__}: cannot trace it: "
                         f"{type(err).__name__}: {first}") from None
    return _convert(traced, name or type(module).__name__.lower())


def _convert(traced: Any, graph_name: str) -> Graph:
    ops: list[Op] = []
    values: dict[str, Tensor] = {}
    # get_attr node -> (elements if trainable else 0, bytes): a parameter counts as one;
    # a buffer or a constant (an int64 index table, a mask) is state only
    constants: dict[str, tuple[int, int]] = {}
    owners: dict[str, str] = {}
    unknown: dict[str, int] = {}
    tuples: dict[str, list[Any]] = {}  # node -> its tuple of results, as output tensors
    modules = dict(traced.named_modules())
    for node in traced.graph.nodes:
        meta = node.meta.get("tensor_meta")
        out = _tensor(node.name, meta) if meta is not None else None
        item = _tuple_item(node, tuples)
        if item is not None:  # an item of a layer's tuple of results: that output itself
            if isinstance(item, Tensor):
                values[node.name] = item
            else:
                tuples[node.name] = item
            continue
        if isinstance(meta, tuple | list) and not hasattr(meta, "shape") \
                and node.op.startswith("call_"):
            if node.op == "call_module" or _target_name(node) not in _MOVES:
                # A layer with several results (attention, recurrent layers): one op with
                # an output per result, read through getitem.
                tuples[node.name] = _leaves(node.name, meta)
                ops.append(_tuple_op(node, tuples[node.name], values, modules, owners,
                                     unknown))
                continue
            # A tuple of tensors (chunk, split): its items are read through getitem, so
            # the op reading an item depends on whatever produced the tuple's input.
            sources = [values[a.name] for a in node.all_input_nodes if a.name in values]
            if sources:
                values[node.name] = sources[0]
            continue
        if node.op == "placeholder" and out is not None:
            ops.append(Op(node.name, "input", "source", outputs=(out,)))
            values[node.name] = out
        elif node.op == "get_attr" and out is not None:
            constants[node.name] = _constant(traced, node.target, out)
        elif node.op == "call_function" and _target_name(node) in _CREATORS \
                and not any(a.name in values for a in node.all_input_nodes):
            continue  # a tensor made from nothing (positions, masks): not work to place
        elif node.op in ("call_module", "call_function", "call_method") and out is not None:
            op = _node_op(node, out, values, constants, owners, modules, unknown)
            ops.append(op)
            values[node.name] = out
    if unknown:
        warnings.warn("torch import: no cost formula (bytes only) for "
                      + ", ".join(f"{k} x{v}" for k, v in sorted(unknown.items())),
                      stacklevel=3)
    results = [a.name for node in traced.graph.nodes if node.op == "output"
               for a in node.all_input_nodes if a.name in values]
    outputs = [values[name].name for name in results]
    return Graph(graph_name, ops, outputs or None)


def _own_parameters(parameters: Any, node: str,
                    owners: dict[str, str]) -> tuple[list[Any], str | None]:
    """The parameters ``node`` holds first, and the op it shares any others with: a tied
    parameter (a GPT's embedding and output layer) is counted once, with its first user."""
    own, shares = [], None
    for p in parameters:
        key = f"param:{id(p)}"
        if key in owners:
            shares = shares or owners[key]
        else:
            owners[key] = node
            own.append(p)
    return own, shares


def _leaves(name: str, meta: Any) -> list[Any]:
    """The output tensors of a tuple of results, nested as the tuple is (LSTM's
    ``(output, (h, c))``); an item that is not a tensor is None."""
    out: list[Any] = []
    for i, item in enumerate(meta):
        if hasattr(item, "shape"):
            out.append(_tensor(f"{name}.{i}", item))
        elif isinstance(item, tuple | list):
            out.append(_leaves(f"{name}.{i}", item))
        else:
            out.append(None)
    return out


def _flat(tree: list[Any]) -> list[Tensor]:
    return [t for item in tree for t in (_flat(item) if isinstance(item, list) else [item])
            if t is not None]


def _tuple_item(node: Any, tuples: dict[str, list[Any]]) -> Any:
    """What ``tuple[i]`` reads when ``node`` indexes a layer's tuple of results."""
    if node.op != "call_function" or node.target is not operator.getitem:
        return None
    source, index = node.args[0], node.args[1]
    if getattr(source, "name", None) not in tuples or not isinstance(index, int):
        return None
    return tuples[source.name][index]


def _tuple_op(node: Any, tree: list[Any], values: dict[str, Tensor], modules: dict[str, Any],
              owners: dict[str, str], unknown: dict[str, int]) -> Op:
    outs = _flat(tree)
    ins = [values[a.name] for a in node.all_input_nodes if a.name in values]
    params = state_bytes = 0
    target = _target_name(node)
    try:
        if node.op != "call_module":
            raise KeyError(target)
        module = modules[node.target]
        # a layer's sub-layers' parameters (attention's out_proj) too
        own, _ = _own_parameters(module.parameters(), node.name, owners)
        params = sum(p.numel() for p in own if p.requires_grad)  # trainable only
        state_bytes = sum(t.numel() * t.element_size() for t in [*own, *module.buffers()])
        kind, flops = _layer_cost(module, outs, ins)
        settings = module_attrs(module)
    except KeyError as err:
        label = err.args[0]
        unknown[label] = unknown.get(label, 0) + 1
        kind, flops, settings = "opaque", 0, {}
    return Op(name=node.name, kind=kind, op_class="data_movement" if kind == "opaque"
              else "matmul", inputs=tuple(dict.fromkeys(t.name for t in ins)),
              outputs=tuple(outs), attrs={"torch": f"{node.op}:{target}", **settings},
              flops=int(flops),
              params=params, param_bytes=state_bytes,
              bytes_read=sum(t.nbytes for t in ins) + state_bytes,
              bytes_written=sum(t.nbytes for t in outs))


def _layer_cost(module: Any, outs: list[Tensor], ins: list[Tensor]) -> tuple[str, int]:
    """FLOPs of a whole attention or recurrent layer: its matrix products (as
    ``torch.utils.flop_counter`` counts them) plus its biases, softmax and gate maths."""
    import torch.nn as nn

    if isinstance(module, nn.MultiheadAttention):
        q, kv = ins[0], (ins[1] if len(ins) > 1 else ins[0])
        # an unbatched input, (L, E), has no batch axis whatever batch_first says
        length = q.shape[1] if module.batch_first and len(q.shape) == 3 else q.shape[0]
        source = kv.shape[1] if module.batch_first and len(kv.shape) == 3 else kv.shape[0]
        return "attention", attention_flops(
            batch=_numel(q) // module.embed_dim // length, length=length, source=source,
            embed=module.embed_dim, kdim=module.kdim, vdim=module.vdim,
            heads=module.num_heads)
    if isinstance(module, nn.LSTM | nn.GRU | nn.RNN):
        gates = 4 if isinstance(module, nn.LSTM) else 3 if isinstance(module, nn.GRU) else 1
        x = ins[0]
        if len(x.shape) == 2:  # unbatched, (L, H_in), whatever batch_first says
            steps, batch = x.shape[0], 1
        else:
            steps, batch = (x.shape[1], x.shape[0]) if module.batch_first else x.shape[:2]
        flops = recurrent_flops(gates, steps=steps, batch=batch, input_size=module.input_size,
                                hidden=module.hidden_size, layers=module.num_layers,
                                directions=2 if module.bidirectional else 1,
                                proj=getattr(module, "proj_size", 0))
        return {4: "lstm", 3: "gru", 1: "rnn"}[gates], flops
    raise KeyError(type(module).__name__)


def _constant(traced: Any, target: str, out: Tensor) -> tuple[int, int]:
    """(trainable elements, bytes) of the attribute a ``get_attr`` node reads."""
    import torch

    value: Any = traced
    for part in target.split("."):
        value = getattr(value, part, None)
    if not isinstance(value, torch.Tensor):
        return _numel(out), _numel(out) * values_itemsize(out)
    trainable = isinstance(value, torch.nn.Parameter) and value.requires_grad
    return (value.numel() if trainable else 0), value.numel() * value.element_size()


def _node_op(node: Any, out: Tensor, values: dict[str, Tensor],
             constants: dict[str, tuple[int, int]],
             owners: dict[str, str], modules: dict[str, Any], unknown: dict[str, int]) -> Op:
    args = [a for a in node.all_input_nodes]
    ins = [values[a.name] for a in args if a.name in values]
    params = state_bytes = 0
    shares = None
    for a in args:
        if a.name in constants:
            if a.name in owners:
                shares = owners[a.name]
            else:
                owners[a.name] = node.name
                params += constants[a.name][0]
                state_bytes += constants[a.name][1]
    target = _target_name(node)
    view = target in _VIEWS
    settings: dict[str, Any] = {}
    try:
        if node.op == "call_module":
            module = modules[node.target]
            # a leaf's sub-layers too (a transformer layer imported whole holds them)
            own, tied = _own_parameters(module.parameters(), node.name, owners)
            shares = shares or tied
            params += sum(p.numel() for p in own if p.requires_grad)  # trainable only
            state_bytes += sum(t.numel() * t.element_size() for t in [*own, *module.buffers()])
            kind, op_class, flops = _module_cost(module, out, ins)
            settings = module_attrs(module)
            if kind == "dropout":
                view = True
        elif view:
            kind, op_class, flops = "reshape", "data_movement", 0
        else:
            kind, op_class, flops = _function_cost(target, out, ins)
    except KeyError as err:
        label = err.args[0]
        unknown[label] = unknown.get(label, 0) + 1
        kind, op_class, flops = "opaque", "data_movement", 0
    param_bytes = state_bytes
    hard = {"alpha": 1.0 / 6.0, "beta": 0.5} if kind == "hardsigmoid" else {}  # torch's
    return Op(name=node.name, kind=kind, op_class=op_class,
              inputs=tuple(dict.fromkeys(t.name for t in ins)), outputs=(out,),
              attrs={"torch": f"{node.op}:{target}", **hard, **settings,
                     **({"shares": shares} if shares else {})},
              flops=int(flops), params=params, param_bytes=param_bytes,
              bytes_read=0 if view else sum(t.nbytes for t in ins) + param_bytes,
              bytes_written=0 if view else out.nbytes)
