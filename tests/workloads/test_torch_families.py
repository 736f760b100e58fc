"""Models written here, imported through torch.fx and through ONNX export: parameters exact
(unique tensors), and FLOPs against torch's own FLOP counter (math attention backend)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from workloads.importers.torch_import import import_torch  # noqa: E402


class SeparableCNN(nn.Module):
    """Depthwise-separable blocks, group norm, hardswish, SiLU, a transposed convolution."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 3, stride=2, padding=1, bias=False)
        self.bn, self.act = nn.BatchNorm2d(32), nn.Hardswish()
        self.dw = nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False)
        self.pw = nn.Conv2d(32, 64, 1, bias=False)
        self.gn, self.silu = nn.GroupNorm(8, 64), nn.SiLU()
        self.up = nn.ConvTranspose2d(64, 16, 2, stride=2, bias=False)
        self.line = nn.Conv1d(16, 8, 3, bias=False)
        self.fc = nn.Linear(8, 10, bias=False)

    def forward(self, x):  # type: ignore[no-untyped-def]
        x = self.act(self.bn(self.stem(x)))
        x = self.up(self.silu(self.gn(self.pw(self.dw(x)))))
        x = self.line(torch.flatten(x, 2))
        return self.fc(x.mean(dim=2))


class MiniGPT(nn.Module):
    """Token and position embeddings, encoder layers, an output layer tied to the tokens'."""

    def __init__(self, vocab: int = 100, d: int = 64, layers: int = 2) -> None:
        super().__init__()
        self.emb, self.pos = nn.Embedding(vocab, d), nn.Embedding(32, d)
        self.blocks = nn.ModuleList([nn.TransformerEncoderLayer(
            d, 4, 4 * d, batch_first=True, activation="gelu") for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids):  # type: ignore[no-untyped-def]
        x = self.emb(ids) + self.pos(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class SmallViT(nn.Module):
    """Patches by convolution, a class token and positions as bare parameters."""

    def __init__(self, d: int = 48) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, d, 8, stride=8)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.zeros(1, 17, d))
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, 10)

    def forward(self, x):  # type: ignore[no-untyped-def]
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        a, _ = self.attn(x, x, x)
        return self.head(self.norm(x + a)[:, 0])


class LSTMLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(100, 32)
        self.rnn = nn.LSTM(32, 64, num_layers=2, batch_first=True)
        self.out = nn.Linear(64, 100)

    def forward(self, ids):  # type: ignore[no-untyped-def]
        y, _ = self.rnn(self.emb(ids))
        return self.out(y)


def counted(net, x) -> int:  # type: ignore[no-untyped-def]
    """Matrix-product and convolution FLOPs as torch counts them (math attention)."""
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        net(x)
    return counter.get_total_flops()


def imported(net, x):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every op has a formula: no warning
        return import_torch(net, x)


def dense(graph) -> int:  # type: ignore[no-untyped-def]
    return sum(op.flops for op in graph if op.op_class in ("matmul", "conv"))


CASES = [(SeparableCNN, lambda: torch.zeros(2, 3, 32, 32)),
         (MiniGPT, lambda: torch.zeros(2, 16, dtype=torch.long)),
         (SmallViT, lambda: torch.zeros(2, 3, 32, 32)),
         (LSTMLM, lambda: torch.zeros(2, 12, dtype=torch.long))]


@pytest.mark.parametrize(("model", "example"), CASES, ids=lambda c: getattr(c, "__name__", ""))
def test_parameters_are_exact_through_fx(model, example) -> None:  # type: ignore[no-untyped-def]
    net = model()
    assert imported(net, example()).params == sum(p.numel() for p in net.parameters())


def test_cnn_convolution_and_product_flops_match_torchs_counter() -> None:
    net, x = SeparableCNN(), torch.zeros(2, 3, 32, 32)
    ours, torchs = dense(imported(net, x)), counted(net, x)
    assert abs(ours - torchs) <= 0.01 * torchs  # no biases: the products alone


@pytest.mark.parametrize(("model", "example", "extra"), [
    (MiniGPT, lambda: torch.zeros(2, 16, dtype=torch.long), 0.05),
    (SmallViT, lambda: torch.zeros(2, 3, 32, 32), 0.05)], ids=["MiniGPT", "SmallViT"])
def test_transformer_flops_are_torchs_products_plus_their_own_maths(model, example,
                                                                    extra) -> None:  # type: ignore[no-untyped-def]
    # Layers imported whole also charge their biases, softmax, norms and activation:
    # beyond torch's products by a few percent, never below them.
    net, x = model(), example()
    ours, torchs = dense(imported(net, x)), counted(net, x)
    assert torchs <= ours <= (1 + extra) * torchs


def test_an_lstm_language_model_imports_alike_through_onnx(tmp_path: Path) -> None:
    pytest.importorskip("onnx", reason="the onnx extra is not installed")
    from workloads.importers import import_onnx

    net, x = LSTMLM().eval(), torch.zeros(2, 12, dtype=torch.long)
    path = tmp_path / "lm.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's own notes
        torch.onnx.export(net, (x,), str(path), dynamo=False)
    via_onnx, via_fx = import_onnx(path), imported(net, x)
    assert via_onnx.params == via_fx.params == sum(p.numel() for p in net.parameters())
    assert [op.kind for op in via_onnx if op.kind == "lstm"] == ["lstm", "lstm"]
    # one LSTM op per layer in ONNX, one for both in torch: the same products and maths
    lstm = sum(op.flops for op in via_onnx if op.kind == "lstm")
    assert lstm == via_fx.op("rnn").flops


def test_a_whole_transformer_encoder_is_one_op_with_its_layers_cost() -> None:
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 3, norm=nn.LayerNorm(32), enable_nested_tensor=False)
    x = torch.zeros(2, 5, 32)
    whole = imported(encoder, x)
    assert whole.params == sum(p.numel() for p in encoder.parameters())
    (op,) = [o for o in whole if o.kind == "transformer_layer"]
    assert counted(encoder, x) <= op.flops <= 1.1 * counted(encoder, x)


class PlainCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 32, 3, stride=2)
        self.up = nn.ConvTranspose2d(32, 8, 2, stride=2)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):  # type: ignore[no-untyped-def]
        x = self.up(torch.relu(self.c2(torch.relu(self.c1(x)))))
        return self.fc(x.mean(dim=(2, 3)))


@pytest.mark.parametrize(("model", "example", "within"), [
    (PlainCNN, lambda: torch.zeros(2, 3, 32, 32), 0.02),
    (SmallViT, lambda: torch.zeros(2, 3, 32, 32), 0.02),
    (MiniGPT, lambda: torch.zeros(2, 16, dtype=torch.long), 0.05)],
    ids=["PlainCNN", "SmallViT", "MiniGPT"])
def test_a_training_step_matches_torchs_forward_and_backward(model, example,
                                                            within) -> None:  # type: ignore[no-untyped-def]
    # Backward products: one forward's worth per gradient computed (each activation
    # operand's, the weights'). Torch's counter overcounts grouped convolutions' weight
    # gradients (it ignores the groups), so the depthwise CNN is left out here.
    from workloads import training_graph

    net, x = model(), example()
    step = training_graph(imported(net, x), "sgd")
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        net(x).float().sum().backward()
    torchs = counter.get_total_flops()
    assert abs(dense(step) - torchs) <= within * torchs


@pytest.mark.parametrize("whole", [
    lambda: nn.TransformerDecoderLayer(32, 4, 64, batch_first=True),
    lambda: nn.TransformerDecoder(nn.TransformerDecoderLayer(32, 4, 64, batch_first=True), 2,
                                  norm=nn.LayerNorm(32)),
], ids=["layer", "stack"])
def test_a_transformer_decoder_is_one_op_with_its_layers_cost(whole) -> None:  # type: ignore[no-untyped-def]
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dec = whole()

        def forward(self, tgt, memory):  # type: ignore[no-untyped-def]
            return self.dec(tgt, memory)

    net, tgt, memory = Net(), torch.zeros(2, 5, 32), torch.zeros(2, 7, 32)
    g = imported(net, (tgt, memory))
    assert g.params == sum(p.numel() for p in net.parameters())
    (op,) = [o for o in g if o.kind == "transformer_layer"]
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        net(tgt, memory)
    # torch's products, plus biases, softmax, activation, norms and sums (under 10% here)
    assert counter.get_total_flops() <= op.flops <= 1.1 * counter.get_total_flops()


def test_a_whole_nn_transformer_counts_its_encoder_over_the_source() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.t = nn.Transformer(32, 4, num_encoder_layers=2, num_decoder_layers=1,
                                    dim_feedforward=64, batch_first=True)

        def forward(self, src, tgt):  # type: ignore[no-untyped-def]
            return self.t(src, tgt)

    net, src, tgt = Net(), torch.zeros(2, 9, 32), torch.zeros(2, 4, 32)
    g = imported(net, (src, tgt))
    assert g.params == sum(p.numel() for p in net.parameters())
    (op,) = [o for o in g if o.kind == "transformer_layer"]
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        net(src, tgt)
    assert counter.get_total_flops() <= op.flops <= 1.1 * counter.get_total_flops()


def test_a_plain_rnn_is_one_op_with_its_products_counted() -> None:
    import torch.nn.functional as F

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.RNN(16, 24, num_layers=2, batch_first=True)
            self.head = nn.Linear(24, 5)

        def forward(self, x):  # type: ignore[no-untyped-def]
            y, _ = self.rnn(x)
            return self.head(y)

    net, x = Net(), torch.zeros(4, 6, 16)
    g = imported(net, x)
    rnn = g.op("rnn")
    assert rnn.kind == "rnn" and g.params == sum(p.numel() for p in net.parameters())
    batch, steps, hidden = 4, 6, 24
    with FlopCounterMode(display=False) as counter:  # the products, unrolled by hand
        for width in (16, 24):
            for _ in range(steps):
                F.linear(torch.zeros(batch, width), torch.zeros(hidden, width))
                F.linear(torch.zeros(batch, hidden), torch.zeros(hidden, hidden))
    extras = 2 * steps * batch * hidden * (3 + 4)  # sum, two biases, the tanh
    assert rnn.flops == counter.get_total_flops() + extras


def test_a_plain_rnn_imports_alike_through_onnx(tmp_path: Path) -> None:
    pytest.importorskip("onnx", reason="the onnx extra is not installed")
    from workloads.importers import import_onnx

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.RNN(16, 24, num_layers=2, batch_first=True)

        def forward(self, x):  # type: ignore[no-untyped-def]
            return self.rnn(x)[0]

    net, x = Net().eval(), torch.zeros(3, 5, 16)
    path = tmp_path / "rnn.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's own notes
        torch.onnx.export(net, (x,), str(path), dynamo=False)
    via_onnx, via_fx = import_onnx(path), imported(net, x)
    assert via_onnx.params == via_fx.params == sum(p.numel() for p in net.parameters())
    assert sum(op.flops for op in via_onnx if op.kind == "rnn") == via_fx.op("rnn").flops


@pytest.mark.parametrize(("model", "example"), [
    (MiniGPT, lambda: torch.zeros(2, 16, dtype=torch.long)),
    (SmallViT, lambda: torch.zeros(2, 3, 32, 32))], ids=["MiniGPT", "SmallViT"])
def test_transformers_import_through_onnx_once_constants_fold(model, example,
                                                               tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # The exporter computes attention's weight slices from shapes: folded at import, the
    # graph has every dimension. Its parameters are the file's: the exporter keeps only
    # the rows of a parameter the example reads (positions) and folds a class token.
    onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed")
    from onnx import numpy_helper

    from workloads.importers import import_onnx

    net, x = model().eval(), example()
    path = tmp_path / "m.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's own notes
        torch.onnx.export(net, (x,), str(path), dynamo=False, do_constant_folding=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every operator has a formula
        g = import_onnx(path)
    stored = sum(numpy_helper.to_array(i).size for i in onnx.load(str(path)).graph.initializer
                 if numpy_helper.to_array(i).dtype.kind == "f")
    assert stored <= g.params <= stored + 8  # plus the scalar literals ops read
    assert abs(dense(g) - counted(net, x)) <= 0.01 * counted(net, x)


def test_whole_layers_carry_the_settings_a_kernel_needs() -> None:
    from workloads import Graph

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1, groups=1)
            self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
            self.gn = nn.GroupNorm(2, 4, eps=1e-3)
            self.rnn = nn.GRU(4, 6, num_layers=2, batch_first=True, bidirectional=True)
            self.att = nn.MultiheadAttention(12, 3, batch_first=True)

        def forward(self, x):  # type: ignore[no-untyped-def]
            y = self.gn(self.up(self.conv(x)))          # (2, 4, 8, 8)
            seq = y.flatten(2).transpose(1, 2)          # (2, 64, 4)
            h, _ = self.rnn(seq)                        # (2, 64, 12)
            a, _ = self.att(h, h, h)
            return a

    g = imported(Net(), torch.zeros(2, 3, 8, 8))
    assert {k: g.op("conv").attrs[k] for k in ("kernel", "stride", "padding", "groups")} == {
        "kernel": (3, 3), "stride": (2, 2), "padding": (1, 1), "groups": 1}
    assert g.op("up").attrs["output_padding"] == (0, 0)
    assert (g.op("gn").attrs["groups"], g.op("gn").attrs["eps"]) == (2, 1e-3)
    rnn = g.op("rnn").attrs
    assert (rnn["hidden"], rnn["layers"], rnn["bidirectional"], rnn["batch_first"]) == (
        6, 2, True, True)
    assert (g.op("att").attrs["heads"], g.op("att").attrs["embed"]) == (3, 12)
    again = Graph.from_json(g.to_json())
    assert again.op("conv").attrs["stride"] in ((2, 2), [2, 2])
    assert again.params == g.params


class SelfAttend(nn.Module):
    """Attention of a tensor to itself (q, k and v one tensor), or after projections."""

    def __init__(self, project: bool) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48) if project else None

    def forward(self, x):  # type: ignore[no-untyped-def]
        if self.qkv is None:
            return F.scaled_dot_product_attention(x, x, x, is_causal=True)
        q, k, v = self.qkv(x).split(16, dim=-1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@pytest.mark.parametrize("project", [False, True], ids=["qkv-one-tensor", "projected"])
def test_fused_attentions_backward_is_twice_its_forward_as_torch_counts(project) -> None:  # type: ignore[no-untyped-def]
    from workloads import training_graph

    x = torch.zeros(2, 64, 16, requires_grad=True)
    net = SelfAttend(project)
    step = training_graph(imported(net, x), "sgd")
    fwd = step.op("scaled_dot_product_attention")
    back = step.op("scaled_dot_product_attention.backward")
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        q = k = v = x
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        forward_only = counter.get_total_flops()
        out.sum().backward()
    assert counter.get_total_flops() - forward_only == 2 * forward_only  # torch's ratio
    assert back.flops == 2 * fwd.flops
