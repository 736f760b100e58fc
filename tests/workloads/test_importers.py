"""ONNX and torch.fx import, checked against the zoo and against published counts."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from workloads import GraphError, build_model

onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed")
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
# Published parameter counts of the same networks (Caffe/Caffe2 model zoo; torchvision).
PUBLISHED = {"light_resnet50": 25_557_032, "light_vgg19": 143_667_240,
             "light_bvlc_alexnet": 60_965_224, "light_squeezenet": 1_235_496}


def _import(path: Path):
    from workloads.importers import import_onnx

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every operator of these models has a formula
        return import_onnx(path)


@pytest.mark.parametrize("path", sorted(LIGHT.glob("*.onnx")), ids=lambda p: p.stem)
def test_every_shipped_onnx_model_imports(path: Path) -> None:
    g = _import(path)
    assert len(g) > 10 and g.params > 0 and g.flops > 0
    assert all(op.kind != "opaque" for op in g)
    if path.stem in PUBLISHED:
        assert g.params == PUBLISHED[path.stem]


def test_onnx_resnet50_equals_the_zoo_resnet50() -> None:
    imported, zoo = _import(LIGHT / "light_resnet50.onnx"), build_model("resnet50")
    assert imported.params == zoo.params
    assert imported.flops / 2 == pytest.approx(zoo.flops / 2, rel=0.005)


def test_unknown_operator_is_kept_opaque_with_one_warning(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    from workloads.importers import import_onnx

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Celu", ["r"], ["e"], name="celu1"),
             helper.make_node("Celu", ["e"], ["y"], name="celu2")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]))
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    # relu, celu and celu each move 512 bytes: the two celus hold two thirds of them
    with pytest.warns(UserWarning, match=r"without a cost formula \(bytes only\): Celu x2 "
                                         r"\(2 of 4 ops, 66\.7% of the bytes moved\)"):
        g = import_onnx(path, batch=4)
    with pytest.raises(GraphError, match=r"refused under --strict: ops without a cost "
                                         r"formula \(bytes only\): Celu x2"):
        import_onnx(path, batch=4, strict=True)
    celu = g.op("celu1")
    assert celu.kind == "opaque" and celu.bytes_read == 4 * 16 * 4
    assert g.op("relu").output.shape == (4, 16)  # symbolic batch took the given value


def test_malformed_onnx_file_is_a_graph_error(tmp_path: Path) -> None:
    from workloads.importers import import_onnx

    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not a protobuf")
    with pytest.raises(GraphError, match=r"bad.onnx: expected a valid ONNX model, got "
                                         r"DecodeError"):
        import_onnx(bad)
    with pytest.raises(GraphError, match="No such file or directory"):
        import_onnx(tmp_path / "absent.onnx")


def test_empty_and_inconsistent_onnx_models_are_refused(tmp_path: Path) -> None:
    # A 0-byte file parses as an empty model; a MatMul of (2, 3) by (4, 5) is inconsistent.
    import onnx
    from onnx import TensorProto, helper

    from workloads.importers import import_onnx

    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(GraphError, match=r"empty.onnx: expected an ONNX model, got an empty "
                                         r"file"):
        import_onnx(empty)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])], "bad",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [4, 5])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, None)])
    bad = tmp_path / "matmul.onnx"
    onnx.save(helper.make_model(graph), str(bad))
    with pytest.raises(GraphError, match=r"matmul.onnx: expected a valid ONNX model, got "
                                         r"(InferenceError|ValidationError)"):
        import_onnx(bad)
    nodes = helper.make_graph([], "none", [], [])
    no_nodes = tmp_path / "none.onnx"
    onnx.save(helper.make_model(nodes), str(no_nodes))
    with pytest.raises(GraphError, match=r"none.onnx: expected an ONNX model with at least "
                                         r"one node, got none"):
        import_onnx(no_nodes)


def test_torch_modules_import() -> None:
    torch = pytest.importorskip("torch", reason="the torch extra is not installed")
    from torch import nn

    from workloads.importers import import_torch

    class SmallCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.bn = nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16)
            self.c2, self.fc = nn.Conv2d(16, 32, 3, padding=1), nn.Linear(32, 10)
            self.pool, self.gap = nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(1)

        def forward(self, x):
            x = self.pool(torch.relu(self.bn(self.c1(x))))
            return self.fc(self.gap(torch.relu(self.c2(x))).flatten(1))

    class Block(nn.Module):
        def __init__(self, d: int = 64, heads: int = 4) -> None:
            super().__init__()
            self.heads, self.qkv, self.proj = heads, nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.up, self.down, self.act = nn.Linear(d, 4 * d), nn.Linear(4 * d, d), nn.GELU()

        def forward(self, x):
            b, t, d = x.shape
            h = self.heads
            q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
            q = q.view(b, t, h, d // h).transpose(1, 2)
            k = k.view(b, t, h, d // h).transpose(1, 2)
            v = v.view(b, t, h, d // h).transpose(1, 2)
            a = torch.softmax(q @ k.transpose(-2, -1) / 8.0, dim=-1) @ v
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.down(self.act(self.up(self.ln2(x))))

    cnn = SmallCNN()
    g = import_torch(cnn, [torch.zeros(2, 3, 32, 32)])
    assert g.params == sum(p.numel() for p in cnn.parameters())
    c1 = g.op("c1")
    assert c1.flops == 2 * (2 * 16 * 32 * 32) * (3 * 9) + 2 * 16 * 32 * 32
    # weight, bias, running mean and var in fp32; num_batches_tracked in int64
    assert g.op("bn").param_bytes == 4 * 16 * 4 + 8
    block = Block()
    t = import_torch(block, [torch.zeros(2, 16, 64)])
    assert t.params == sum(p.numel() for p in block.parameters())
    matmuls = [op for op in t if op.kind == "matmul"]
    assert [op.flops for op in matmuls] == [2 * 2 * 4 * 16 * 16 * 16] * 2
    # every op after the input is connected to it (the chunk's items depend on qkv)
    assert all(t.predecessors(op.name) for op in t if op.kind != "input")


def test_torch_import_takes_a_bare_tensor_and_names_bad_inputs() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from workloads.importers import import_torch

    net = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
    assert import_torch(net, torch.zeros(2, 8)).params == 36
    with pytest.raises(GraphError, match=r"example_inputs must be a tensor or a sequence of "
                                         r"tensors, got int"):
        import_torch(net, 5)
    with pytest.raises(GraphError, match=r"^torch module Sequential: cannot trace it: "
                                         r"RuntimeError: [^\n]*$"):
        import_torch(net, torch.zeros(2, 9))


def _symbolic(tmp_path: Path) -> Path:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "S", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "S", 8])
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [x], [y]))
    path = tmp_path / "sym.onnx"
    onnx.save(model, str(path))
    return path


def test_symbolic_dimensions_are_bound_by_name_or_refused_naming_them(tmp_path: Path) -> None:
    from workloads.importers import import_onnx

    path = _symbolic(tmp_path)
    g = import_onnx(path, batch=2, dims={"S": 5})
    assert g.op("relu").output.shape == (2, 5, 8)
    assert import_onnx(path, dims={"N": 3, "S": 7}).op("relu").output.shape == (3, 7, 8)
    with pytest.raises(GraphError, match=r"tensor 'x': dimension 1 \('S'\) is unknown; "
                                         r"expected it bound \(--dim S=N"):
        import_onnx(path, batch=2)


@pytest.mark.parametrize(("kwargs", "got"), [
    ({"batch": 10**20}, r"--batch: expected an integer in 1\.\.2147483647, got 10{20}"),
    ({"batch": 0}, r"--batch: expected an integer in 1\.\.2147483647, got 0"),
    ({"dims": {"S": 2**63}}, r"--dim S: expected an integer in 1\.\.2147483647, got 9223"),
    ({"dims": {"S": True}}, r"--dim S: expected an integer in 1\.\.2147483647, got True"),
])
def test_a_dimension_past_int64_or_not_an_integer_is_refused(
        tmp_path: Path, kwargs: dict[str, object], got: str) -> None:
    from workloads.importers import import_onnx

    with pytest.raises(GraphError, match=got):
        import_onnx(_symbolic(tmp_path), **kwargs)  # type: ignore[arg-type]


def test_batch_is_refused_where_the_batch_is_fixed(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    from workloads.importers import import_onnx

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [x], [y]))
    path = tmp_path / "fixed.onnx"
    onnx.save(model, str(path))
    with pytest.raises(GraphError, match="--batch binds a symbolic batch dimension, but "
                                         "every input has a fixed first dimension; got "
                                         "--batch 8"):
        import_onnx(path, batch=8)
    assert import_onnx(path).op("relu").output.shape == (1, 8)


def test_model_import_takes_dims_from_the_command_line(tmp_path: Path, capsys) -> None:
    import json

    from experiments.cli import main

    path = str(_symbolic(tmp_path))
    assert main(["model", "import", path, "--dim", "N=2", "--dim", "S=3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["flops"] == 2 * 3 * 8
    assert main(["model", "import", path, "--dim", "S"]) == 2
    assert "--dim must be NAME=N with N an integer >= 1, got 'S'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        main(["model", "import", path, "--dim", "S=3", "--batch", str(10**20)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "--batch: expected an integer in 1..16777216, got 100000000000000000000" in err
    assert len(err.strip().splitlines()) == 1


def _imported(module, x):  # type: ignore[no-untyped-def]
    import warnings

    from workloads.importers.torch_import import import_torch

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every op here has a cost formula: no warning
        return import_torch(module, x)


@pytest.mark.parametrize("shape", [(3, 7, 32), (7, 32)], ids=["batched", "unbatched"])
def test_torch_attention_is_an_op_with_torchs_flop_count(shape) -> None:  # type: ignore[no-untyped-def]
    # an unbatched input, (L, E), has no batch axis although the layer is batch_first
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from torch import nn
    from torch.utils.flop_counter import FlopCounterMode

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.att = torch.nn.MultiheadAttention(32, 4, batch_first=True)
            self.fc = torch.nn.Linear(32, 32)

        def forward(self, x):  # type: ignore[no-untyped-def]
            a, _ = self.att(x, x, x)
            return self.fc(a)

    block, x = Block(), torch.zeros(*shape)
    g = _imported(block, x)
    att = g.op("att")
    assert att.kind == "attention" and g.op("fc").inputs == ("att.0",)  # nothing dropped
    assert g.params == sum(p.numel() for p in block.parameters())
    with FlopCounterMode(display=False) as counter:
        block.att(x, x, x)
    batch = shape[0] if len(shape) == 3 else 1
    softmax, biases = 5 * batch * 4 * 7 * 7, 4 * batch * 7 * 32  # beyond the products
    assert att.flops == counter.get_total_flops() + softmax + biases


@pytest.mark.parametrize("layer", ["LSTM", "GRU"])
def test_torch_recurrent_layers_are_ops_with_their_products_counted(layer: str) -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed")
    import torch.nn.functional as F
    from torch import nn
    from torch.utils.flop_counter import FlopCounterMode

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = getattr(torch.nn, layer)(16, 24, num_layers=2, batch_first=True)
            self.head = torch.nn.Linear(24, 5)

        def forward(self, x):  # type: ignore[no-untyped-def]
            y, _ = self.rnn(x)
            return self.head(y)

    net, x = Net(), torch.zeros(4, 6, 16)
    g = _imported(net, x)
    rnn = g.op("rnn")
    assert rnn.kind == layer.lower() and g.op("head").inputs == ("rnn.0",)
    assert g.params == sum(p.numel() for p in net.parameters())
    # Reference: the layer's products as torch counts them, unrolled by hand.
    gates, batch, steps, hidden = (4 if layer == "LSTM" else 3), 4, 6, 24
    with FlopCounterMode(display=False) as counter:
        for width in (16, 24):
            for _ in range(steps):
                F.linear(torch.zeros(batch, width), torch.zeros(gates * hidden, width))
                F.linear(torch.zeros(batch, hidden), torch.zeros(gates * hidden, hidden))
    maths = 24 if layer == "LSTM" else 18
    extras = 2 * steps * batch * hidden * (3 * gates + maths)  # sums, biases, gate maths
    assert rnn.flops == counter.get_total_flops() + extras


def test_torch_tuple_results_without_a_formula_are_opaque_never_dropped() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from torch import nn

    from workloads.importers.torch_import import import_torch

    class Net(nn.Module):
        def forward(self, x):  # type: ignore[no-untyped-def]
            values, _ = x.max(dim=1)  # a method returning (values, indices)
            return values * 2

    with pytest.warns(UserWarning, match="no cost formula .* max x1"):
        g = import_torch(Net(), torch.zeros(3, 4))
    assert g.op("max_1").kind == "opaque"
    assert g.op("mul").inputs == ("max_1.0",)


def test_torch_tied_weights_count_once_and_sdpa_is_attention() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed")
    import torch.nn.functional as F
    from torch import nn
    from torch.utils.flop_counter import FlopCounterMode

    class TinyLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(50, 16)
            self.head = torch.nn.Linear(16, 50, bias=False)
            self.head.weight = self.emb.weight  # tied, as GPT-2's output layer is

        def forward(self, x):  # type: ignore[no-untyped-def]
            return self.head(self.emb(x))

    lm = TinyLM()
    g = _imported(lm, torch.zeros(2, 3, dtype=torch.long))
    assert g.params == sum(p.numel() for p in lm.parameters()) == 800
    assert g.op("head").attrs["shares"] == "emb"

    class Attend(nn.Module):
        def forward(self, q, k):  # type: ignore[no-untyped-def]
            return F.scaled_dot_product_attention(q, k, k)

    q, k = torch.zeros(2, 4, 8, 16), torch.zeros(2, 4, 12, 16)
    op = _imported(Attend(), (q, k)).op("scaled_dot_product_attention")
    with FlopCounterMode(display=False) as counter:  # the same maths, written out
        torch.softmax(q @ k.transpose(-1, -2) / 4.0, dim=-1) @ k
    assert op.kind == "attention"
    assert op.flops == counter.get_total_flops() + 6 * 2 * 4 * 8 * 12  # scale, softmax


def test_onnx_layers_once_opaque_have_formulas(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason="torch is the FLOP counter of reference")
    import numpy as np
    import torch.nn.functional as F
    from onnx import TensorProto, helper, numpy_helper
    from torch.utils.flop_counter import FlopCounterMode

    from workloads.importers import import_onnx

    def const(name: str, *shape: int):  # type: ignore[no-untyped-def]
        return numpy_helper.from_array(np.zeros(shape, np.float32), name)

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 5, 5])
    s = helper.make_tensor_value_info("s", TensorProto.FLOAT, [6, 2, 16])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n, shape in (
        ("up", [2, 4, 22, 22]), ("hs", [2, 4, 11, 11]), ("y", [6, 1, 2, 12]),
        ("yh", [1, 2, 12]), ("g", [6, 1, 2, 12]), ("gh", [1, 2, 12]))]
    nodes = [
        helper.make_node("ConvTranspose", ["x", "w", "b"], ["ct"], name="deconv",
                         strides=[2, 2], kernel_shape=[3, 3]),
        helper.make_node("Resize", ["ct", "", "scales"], ["up"], name="up", mode="linear"),
        helper.make_node("HardSwish", ["ct"], ["hs"], name="hs"),
        helper.make_node("LSTM", ["s", "W", "R", "B"], ["y", "yh"], name="lstm",
                         hidden_size=12),
        helper.make_node("GRU", ["s", "Wg", "Rg"], ["g", "gh"], name="gru", hidden_size=12),
    ]
    inits = [const("w", 8, 4, 3, 3), const("b", 4),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
             const("W", 1, 48, 16), const("R", 1, 48, 12), const("B", 1, 96),
             const("Wg", 1, 36, 16), const("Rg", 1, 36, 12)]
    model = helper.make_model(helper.make_graph(nodes, "layers", [x, s], outs, inits))
    path = tmp_path / "layers.onnx"
    onnx.save(model, str(path))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no op without a formula
        g = import_onnx(path)
    with FlopCounterMode(display=False) as counter:
        F.conv_transpose2d(torch.zeros(2, 8, 5, 5), torch.zeros(8, 4, 3, 3), stride=2)
    deconv = g.op("deconv")
    assert deconv.kind == "conv_transpose2d" and deconv.output.shape == (2, 4, 11, 11)
    assert deconv.flops == counter.get_total_flops() + 2 * 4 * 11 * 11  # and its bias
    # linear: 2 neighbours (a product and a sum each) per resized axis; scales: a setting
    assert g.op("up").kind == "resize" and g.op("up").flops == 2 * 2 * 2 * (2 * 4 * 22 * 22)
    assert g.op("up").params == 0
    for name, gates in (("lstm", 4), ("gru", 3)):
        with FlopCounterMode(display=False) as counter:  # the products, unrolled by hand
            for _ in range(6):
                F.linear(torch.zeros(2, 16), torch.zeros(gates * 12, 16))
                F.linear(torch.zeros(2, 12), torch.zeros(gates * 12, 12))
        maths = 24 if gates == 4 else 18
        assert g.op(name).kind == name
        assert g.op(name).flops == counter.get_total_flops() + 6 * 2 * 12 * (3 * gates + maths)


def test_onnx_shape_arithmetic_folds_once_dimensions_are_bound(tmp_path: Path) -> None:
    # x.view(x.size(0), -1) as exporters write it: Shape -> Gather -> Unsqueeze -> Concat ->
    # Reshape. The shape ops are computed on import, never left as ops no device runs.
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from workloads.importers import import_onnx

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 3, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([-1], np.int64), "rest"),
             numpy_helper.from_array(np.zeros((5, 36), np.float32), "w")]
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "zero"], ["n"], name="gather", axis=0),
             helper.make_node("Unsqueeze", ["n", "axes"], ["n1"], name="unsqueeze"),
             helper.make_node("Concat", ["n1", "rest"], ["target"], name="concat", axis=0),
             helper.make_node("Reshape", ["x", "target"], ["flat"], name="reshape"),
             helper.make_node("Gemm", ["flat", "w"], ["y"], name="fc", transB=1)]
    inits.append(numpy_helper.from_array(np.array([0], np.int64), "axes"))
    model = helper.make_model(helper.make_graph(nodes, "view", [x], [y], inits))
    path = tmp_path / "view.onnx"
    onnx.save(model, str(path))
    small, large = import_onnx(path, batch=2), import_onnx(path, batch=8)
    assert [op.kind for op in small] == ["input", "reshape", "linear"]
    assert small.op("reshape").output.shape == (2, 36)
    assert large.flops == 4 * small.flops == 4 * 2 * 2 * 5 * 36


def _relu_model(tmp_path: Path, elem_type: int = 1, shape: tuple[int, ...] = (2, 8),
                node_name: str = "relu", opset: int | None = None,
                op_type: str = "Relu") -> Path:
    from onnx import helper

    x = helper.make_tensor_value_info("x", elem_type, list(shape))
    y = helper.make_tensor_value_info("y", elem_type, list(shape))
    graph = helper.make_graph([helper.make_node(op_type, ["x"], ["y"], name=node_name)],
                              "g", [x], [y])
    model = (helper.make_model(graph) if opset is None else
             helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    return path


def test_a_tensor_of_no_fixed_width_is_refused_not_read_as_fp32(tmp_path: Path) -> None:
    from onnx import TensorProto

    from workloads.importers import import_onnx

    path = _relu_model(tmp_path, TensorProto.STRING, op_type="Identity")
    with pytest.raises(GraphError, match=r"tensor 'x': element type must be a real number "
                                         r"type .* got STRING$"):
        import_onnx(path)
    short = _relu_model(tmp_path, TensorProto.INT16, op_type="Identity")
    with pytest.warns(UserWarning, match=r"2 tensor\(s\) of element type INT16 \(no such "
                                         r"dtype here\) imported as fp32"):
        assert import_onnx(short).op("relu").output.dtype == "fp32"
    wide = _relu_model(tmp_path, TensorProto.UINT64, op_type="Identity")
    assert import_onnx(wide).op("relu").output.dtype == "int64"  # the same width


def test_an_opset_newer_than_onnx_knows_is_refused(tmp_path: Path) -> None:
    from workloads.importers import import_onnx

    newest = onnx.defs.onnx_opset_version()
    with pytest.raises(GraphError, match=rf"opset_import: expected ai\.onnx opset at most "
                                         rf"{newest} \(the installed onnx .*\), got 99$"):
        import_onnx(_relu_model(tmp_path, opset=99))


def test_a_zero_dimension_is_imported_as_one_element_with_a_warning(tmp_path: Path) -> None:
    from workloads.importers import import_onnx

    with pytest.warns(UserWarning, match=r"2 tensor\(s\) with a zero dimension imported as "
                                         r"one element: 'x', 'y'"):
        g = import_onnx(_relu_model(tmp_path, shape=(0, 8)))
    assert g.op("relu").output.shape == (1, 8)


def test_a_node_named_like_a_graph_input_keeps_both(tmp_path: Path) -> None:
    from workloads.importers import import_onnx

    g = import_onnx(_relu_model(tmp_path, node_name="x"))  # valid ONNX: names are apart
    assert [op.name for op in g.ops] == ["x", "x_0"]
    assert g.op("x_0").kind == "relu" and g.op("x_0").inputs == ("x",)


def test_a_convolution_weight_computed_at_run_time_is_counted(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason="torch is the FLOP counter of reference")
    from onnx import TensorProto, helper
    from torch.utils.flop_counter import FlopCounterMode

    from workloads.importers import import_onnx

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 10, 10])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 8, 3, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 8, 8])
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv")], "g", [x, w], [y]))
    path = tmp_path / "conv.onnx"
    onnx.save(model, str(path))
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.conv2d(torch.zeros(2, 8, 10, 10), torch.zeros(4, 8, 3, 3))
    assert import_onnx(path).op("conv").flops == counter.get_total_flops() > 0


def test_weights_stored_beside_the_model_load_from_any_folder(tmp_path: Path,
                                                              monkeypatch) -> None:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from workloads.importers import import_onnx

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 32])
    weight = numpy_helper.from_array(np.ones((64, 32), np.float32), "W")
    model = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], "g", [x], [y], [weight]))
    folder = tmp_path / "model"
    folder.mkdir()
    onnx.save(model, str(folder / "m.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="m.onnx.data", size_threshold=0)
    assert (folder / "m.onnx.data").stat().st_size == 64 * 32 * 4
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    g = import_onnx(folder / "m.onnx")
    assert g.params == 64 * 32 and g.op("mm").flops == 2 * 2 * 32 * 64


@pytest.mark.parametrize("shape", [(4, 6, 16), (6, 16)], ids=["batched", "unbatched"])
def test_torch_lstm_projection_and_unbatched_input_match_torchs_counter(shape) -> None:  # type: ignore[no-untyped-def]
    # An LSTM with proj_size runs unrolled, so torch's counter sees each of its products.
    torch = pytest.importorskip("torch", reason="torch is the FLOP counter of reference")
    from torch import nn
    from torch.utils.flop_counter import FlopCounterMode

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = torch.nn.LSTM(16, 24, num_layers=2, batch_first=True, proj_size=8)

        def forward(self, x):  # type: ignore[no-untyped-def]
            return self.rnn(x)[0]

    from workloads.importers import import_torch

    net, x = Net(), torch.zeros(*shape)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rnn = import_torch(net, x).op("rnn")
        with FlopCounterMode(display=False) as counter:
            net(x)
    # torch's own note (projections do not run on oneDNN) and nothing of placelab's
    assert all("oneDNN" in str(w.message) for w in caught), [str(w.message) for w in caught]
    steps, batch = (6, 4) if len(shape) == 3 else (6, 1)
    extras = 2 * steps * batch * 24 * (3 * 4 + 24)  # two layers' sums, biases, gate maths
    assert counter.get_total_flops() > 0
    assert rnn.flops == counter.get_total_flops() + extras



def test_torch_index_buffers_read_through_get_attr_are_not_parameters() -> None:
    # Swin's relative position bias: a trainable table gathered by an int64 index buffer.
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from torch import nn

    class RelativeBias(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.table = torch.nn.Parameter(torch.zeros(13 * 13, 4))
            self.register_buffer("index", torch.arange(49 * 49) % (13 * 13))
            self.proj = torch.nn.Linear(16, 16)

        def forward(self, x):  # type: ignore[no-untyped-def]
            bias = self.table[self.index].view(49, 49, 4).permute(2, 0, 1)
            return self.proj(x) + bias.sum()

    net = RelativeBias()
    g = _imported(net, torch.zeros(2, 16))
    assert g.params == sum(p.numel() for p in net.parameters()) == 13 * 13 * 4 + 16 * 17
    state = sum(t.numel() * t.element_size() for t in [*net.parameters(), *net.buffers()])
    assert sum(op.param_bytes for op in g) == state  # the index is state, 8 bytes an entry


def test_an_imported_graph_is_named_after_its_file_or_as_asked(tmp_path: Path) -> None:
    from workloads.importers import import_onnx

    path = _relu_model(tmp_path)
    assert import_onnx(path).name == "m" and import_onnx(path, name="net").name == "net"


def test_torch_frozen_weights_are_state_not_parameters_however_they_are_read() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from torch import nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.frozen, self.tuned = torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)
            self.scale = torch.nn.Parameter(torch.ones(8), requires_grad=False)
            self.frozen.requires_grad_(False)

        def forward(self, x):  # type: ignore[no-untyped-def]
            return self.tuned(self.frozen(x) * self.scale)

    net = Net()
    g = _imported(net, torch.zeros(2, 8))
    assert g.params == sum(p.numel() for p in net.parameters() if p.requires_grad) == 36
    assert sum(op.param_bytes for op in g) == 4 * sum(p.numel() for p in net.parameters())


def test_shifted_window_attention_exported_by_torch_imports_and_names_folded_constants(
        tmp_path: Path) -> None:
    # Swin's block as the legacy exporter writes it: the window padding is shape
    # arithmetic over a padded tensor (Shape, Gather, Div), and the relative position bias
    # (a table gathered by an index buffer) and the shift mask are folded into constants.
    torch = pytest.importorskip("torch", reason="torch is not installed")
    import re

    import torch.nn.functional as F
    from torch import nn

    from workloads.importers import import_onnx

    class WindowAttention(nn.Module):
        def __init__(self, dim: int = 32, heads: int = 2, win: int = 4) -> None:
            super().__init__()
            self.heads, self.win, self.shift = heads, win, win // 2
            self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
            self.table = torch.nn.Parameter(torch.randn((2 * win - 1) ** 2, heads))
            ys, xs = torch.meshgrid(torch.arange(win), torch.arange(win), indexing="ij")
            at = torch.stack([ys.flatten(), xs.flatten()])
            rel = (at[:, :, None] - at[:, None, :]).permute(1, 2, 0) + win - 1
            self.register_buffer("index", (rel[..., 0] * (2 * win - 1) + rel[..., 1]).flatten())

        def forward(self, x):  # type: ignore[no-untyped-def]
            b, h, w, c = x.shape
            win, heads, area = self.win, self.heads, self.win * self.win
            x = F.pad(x, (0, 0, 0, (win - w % win) % win, 0, (win - h % win) % win))
            _, ph, pw, _ = x.shape
            n = (ph // win) * (pw // win)
            x = torch.roll(x, shifts=(-self.shift, -self.shift), dims=(1, 2))
            x = x.view(b, ph // win, win, pw // win, win, c).permute(0, 1, 3, 2, 4, 5)
            x = x.reshape(b * n, area, c)
            q, k, v = self.qkv(x).reshape(b * n, area, 3, heads, c // heads).permute(2, 0, 3, 1, 4)
            scores = q @ k.transpose(-2, -1) * (c // heads) ** -0.5
            bias = self.table[self.index].view(area, area, -1).permute(2, 0, 1)
            scores = scores + bias.unsqueeze(0)
            mask = x.new_zeros((ph, pw))
            label = 0
            for hs in ((0, -win), (-win, -self.shift), (-self.shift, None)):
                for ws in ((0, -win), (-win, -self.shift), (-self.shift, None)):
                    mask[hs[0]:hs[1], ws[0]:ws[1]] = label
                    label += 1
            mask = mask.view(ph // win, win, pw // win, win).permute(0, 2, 1, 3).reshape(n, area)
            mask = (mask.unsqueeze(1) - mask.unsqueeze(2)).masked_fill(
                mask.unsqueeze(1) != mask.unsqueeze(2), -100.0)
            scores = scores.view(b, n, heads, area, area) + mask.unsqueeze(1).unsqueeze(0)
            attn = scores.view(-1, heads, area, area).softmax(-1)
            return self.proj((attn @ v).transpose(1, 2).reshape(b * n, area, c))

    net, path = WindowAttention().eval(), tmp_path / "window.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's own notes
        torch.onnx.export(net, (torch.randn(1, 10, 10, 32),), str(path), dynamo=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = import_onnx(path)  # refused over an unknown dimension before
    (note,) = [str(w.message) for w in caught if "exporter may have" in str(w.message)]
    found = re.search(r": ([\d,]+) parameters", note)
    assert found is not None, note
    flagged = int(found.group(1).replace(",", ""))
    trained = sum(p.numel() for p in net.parameters())
    # the gathered bias (16 x 16 per head against a 7 x 7 table) and the mask are counted,
    # and the warning accounts for all of the excess
    assert g.params > trained >= g.params - flagged
    assert "'/Add'" in note


def test_repetitive_constants_outside_weight_inputs_are_named_and_nothing_else(
        tmp_path: Path) -> None:
    from onnx import TensorProto, helper, numpy_helper

    from workloads.importers import import_onnx

    np = pytest.importorskip("numpy")
    inits = [numpy_helper.from_array(np.ones((8, 8), np.float32), "w"),
             numpy_helper.from_array(np.ones(8, np.float32), "b"),
             numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(2, 8), "pos"),
             numpy_helper.from_array(np.tile(np.arange(4, dtype=np.float32), 4).reshape(2, 8),
                                     "table")]
    # a weight, a bias and a position embedding of distinct values: parameters, silently;
    # a constant of four values repeated: named
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Add", ["h", "b"], ["hb"], name="bias"),
             helper.make_node("Add", ["hb", "pos"], ["hp"], name="pos_add"),
             helper.make_node("Add", ["hp", "table"], ["y"], name="folded")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2, 8])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [2, 8])], inits)
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph), str(path))
    with pytest.warns(UserWarning, match=r"m\.onnx: 16 parameters \(15\.4% of 104\) are "
                                         r"constants holding fewer distinct values than half "
                                         r"their elements, read by 1 op\(s\) .*: 'folded' "
                                         r"\(16\)$"):
        g = import_onnx(path)
    assert g.params == 104
