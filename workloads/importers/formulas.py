"""Cost formulas shared by the importers (torch.fx and ONNX) for whole layers."""

from __future__ import annotations

__all__ = ["attention_flops", "interpolation_flops", "recurrent_flops"]

#: Gate maths per hidden unit and step, at the importers' elementwise rates (sigmoid and
#: tanh 4 FLOPs, a product or a sum 1): LSTM 3 sigmoids, 2 tanh, 3 products and 1 sum;
#: GRU 2 sigmoids, 1 tanh, 3 products and 3 sums.
GATE_MATHS = {4: 24, 3: 18, 1: 4}


def recurrent_flops(gates: int, *, steps: int, batch: int, input_size: int, hidden: int,
                    layers: int = 1, directions: int = 1, proj: int = 0) -> int:
    """FLOPs of an LSTM (``gates=4``), GRU (``gates=3``) or plain RNN (``gates=1``, one
    tanh or relu a unit): per step, layer and direction,
    the input and hidden products (``2 * batch * gates * hidden * (width + state)``, as
    ``torch.utils.flop_counter`` counts matrix products; ``state`` is ``hidden``, or an
    LSTM's ``proj`` when it projects its hidden state, which adds that product,
    ``2 * batch * hidden * proj``), their sum and two biases
    (``3 * batch * gates * hidden``), and the gate maths.

    >>> recurrent_flops(4, steps=1, batch=1, input_size=1, hidden=1)  # 16 + 12 + 24
    52
    """
    state = proj or hidden
    total = 0
    for layer in range(layers):
        width = input_size if layer == 0 else state * directions
        per_step = 2 * batch * gates * hidden * (width + state) + 3 * batch * gates * hidden
        per_step += batch * hidden * GATE_MATHS[gates] + 2 * batch * hidden * proj
        total += directions * steps * per_step
    return total


def attention_flops(*, batch: int, length: int, source: int, embed: int, kdim: int,
                    vdim: int, heads: int) -> int:
    """FLOPs of multi-head attention over ``length`` queries and ``source`` keys: the four
    projections and ``Q.K^T``, ``A.V`` (as ``torch.utils.flop_counter`` counts products),
    the projections' biases and the softmax (5 per score).

    >>> attention_flops(batch=1, length=1, source=1, embed=1, kdim=1, vdim=1, heads=1)
    21
    """
    tokens, keys = batch * length, batch * source
    projections = 2 * embed * (2 * tokens * embed + keys * (kdim + vdim))
    scores = 2 * 2 * batch * length * source * embed
    return projections + scores + 5 * batch * heads * length * source + 4 * tokens * embed


def interpolation_flops(mode: str, in_shape: tuple[int, ...],
                        out_shape: tuple[int, ...]) -> int:
    """Nearest copies; (bi/tri)linear and (bi)cubic interpolation weigh 2 and 4 neighbours
    per resized axis, a product and a sum each.

    >>> interpolation_flops("linear", (1, 1, 2, 2), (1, 1, 4, 4))
    128
    """
    axes = sum(1 for a, b in zip(in_shape, out_shape, strict=False) if a != b)
    taps = 4 if "cubic" in mode else 2 if "linear" in mode else 0
    out = 1
    for d in out_shape:
        out *= d
    return 2 * taps * axes * out
