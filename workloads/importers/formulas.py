"""Cost formulas shared by the importers (torch.fx and ONNX) for whole layers."""

from __future__ import annotations

__all__ = ["recurrent_flops"]

#: Gate maths per hidden unit and step, at the importers' elementwise rates (sigmoid and
#: tanh 4 FLOPs, a product or a sum 1): LSTM 3 sigmoids, 2 tanh, 3 products and 1 sum;
#: GRU 2 sigmoids, 1 tanh, 3 products and 3 sums.
GATE_MATHS = {4: 24, 3: 18}


def recurrent_flops(gates: int, *, steps: int, batch: int, input_size: int, hidden: int,
                    layers: int = 1, directions: int = 1) -> int:
    """FLOPs of an LSTM (``gates=4``) or GRU (``gates=3``): per step, layer and direction,
    the input and hidden products (``2 * batch * gates * hidden * (width + hidden)``, as
    ``torch.utils.flop_counter`` counts matrix products), their sum and two biases
    (``3 * batch * gates * hidden``), and the gate maths.

    >>> recurrent_flops(4, steps=1, batch=1, input_size=1, hidden=1)  # 16 + 12 + 24
    52
    """
    total = 0
    for layer in range(layers):
        width = input_size if layer == 0 else hidden * directions
        per_step = 2 * batch * gates * hidden * (width + hidden) + 3 * batch * gates * hidden
        per_step += batch * hidden * GATE_MATHS[gates]
        total += directions * steps * per_step
    return total
