"""The torch engine: every zoo model computes what the NumPy engine computes, on one device
and on two; training steps equal torch autograd and ``torch.optim``; each device's thread
budget holds in its threads and the caller's is put back; refusals before anything runs;
the registry, calibration files, the host-slowdown measurement and the CLI."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install "
                                            "'placelab[torch]'): the torch engine needs it")

from policies import plan  # noqa: E402
from runtime import NumpyEngine, TorchEngine, execute  # noqa: E402
from runtime.engine import ENGINES, EngineUnavailable, make_engine  # noqa: E402
from runtime.executor import make_inputs  # noqa: E402
from runtime.training import Call  # noqa: E402
from runtime.weights import weight_arrays  # noqa: E402
from tests.runtime.test_training_steps import MODELS, _torch_op, _torch_steps  # noqa: E402
from workloads import (  # noqa: E402
    Graph,
    GraphError,
    Op,
    PlacelabError,
    Tensor,
    build_model,
    training_graph,
)
from workloads.zoo.sequence import bert_base, gpt2_small, lstm  # noqa: E402

CUDA = pytest.mark.skipif(not torch.cuda.is_available(),
                          reason="no CUDA device here (torch.cuda.is_available() is False)")

#: The zoo models, small (the transformers: two layers of eight tokens, their embeddings and
#: heads full size); VGG-16 is left out for time: AlexNet has all its kinds.
ZOO: dict[str, Callable[[], Graph]] = {
    "mlp": lambda: build_model("mlp", batch=4),
    "lenet5": lambda: build_model("lenet5", batch=2),
    "alexnet": lambda: build_model("alexnet", batch=1),
    "resnet50": lambda: build_model("resnet50", batch=1),
    "inception_v3": lambda: build_model("inception_v3", batch=1),
    "stacked_autoencoder": lambda: build_model("stacked_autoencoder", batch=4),
    "lstm": lambda: build_model("lstm", batch=2, seq_len=3),
    "bert_base": lambda: bert_base(batch=1, seq_len=8, layers=2),
    "gpt2_small": lambda: gpt2_small(batch=1, seq_len=8, layers=2),
}


def _weights(graph: Graph) -> dict[str, dict[str, np.ndarray]]:
    """The weights every run of the seed draws, drawn once for all three runs."""
    return {op.name: weight_arrays(op, 0, np.float32) for op in graph
            if op.params and not op.attrs.get("shares")}


@pytest.mark.parametrize("name", sorted(ZOO))
def test_a_zoo_model_computes_what_the_numpy_engine_does(name: str) -> None:
    graph = ZOO[name]()
    weights = _weights(graph)
    reference = NumpyEngine(devices=1)
    want = execute(plan(graph, reference.cluster(), "single_device"), reference,
                   weights=weights, warmup=0, repeats=1).outputs
    for devices, policy in ((1, "single_device"), (2, "round_robin")):
        engine = TorchEngine(devices=devices)
        p = plan(graph, engine.cluster(), policy)
        assert bool(p.transfers) == (devices == 2)  # two devices: the split crosses them
        got = execute(p, engine, weights=weights, warmup=0, repeats=1).outputs
        assert got.keys() == want.keys() == set(graph.outputs)
        for key, value in want.items():
            assert got[key].dtype == value.dtype
            np.testing.assert_allclose(got[key], value, rtol=1e-4, atol=1e-5,
                                       err_msg=f"{name} on {devices}: {key}")


def test_a_fused_graph_runs_each_stage_with_torch_kernels() -> None:
    from workloads.passes import PassManager

    graph = MODELS["cnn_bn"]()  # convolutions with batch norms and relus folded in
    fused, changed = PassManager(["fuse_elementwise"]).run(graph)
    assert changed and len(fused) < len(graph)
    assert any(k.endswith(".mean") for op in fused for k in weight_arrays(op, 0, np.float64))
    engine = TorchEngine(devices=2)
    plain = execute(plan(graph, engine.cluster(), "heft"), engine, warmup=0, repeats=1)
    folded = execute(plan(fused, engine.cluster(), "heft"), engine, warmup=0, repeats=1)
    for key in fused.outputs:
        np.testing.assert_allclose(folded.outputs[key], plain.outputs[key], rtol=1e-12,
                                   err_msg=key)


# -- training -----------------------------------------------------------------------------


def _steps(step: Graph, devices: int, policy: str, steps: int) -> dict[str, np.ndarray]:
    engine = TorchEngine(devices=devices)
    return execute(plan(step, engine.cluster(), policy), engine, warmup=0,
                   repeats=steps).parameters


OPTIMIZERS = {  # name: (steps, torch.optim)
    "sgd": (1, lambda p: torch.optim.SGD(p, lr=1.0)),
    "momentum": (3, lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9)),
    "adam": (3, lambda p: torch.optim.Adam(p, lr=0.001)),
}


@pytest.mark.parametrize(("model", "optimizer"), [
    *((m, o) for m in ("mlp", "lenet5", "cnn_bn") for o in sorted(OPTIMIZERS)),
    ("gpt2_tiny", "sgd")])
def test_training_steps_equal_torch_autograd_and_optim(model: str, optimizer: str) -> None:
    # float64 throughout; SGD with lr = 1 moves the weights by exactly minus the gradient.
    # gpt2_tiny: a split with several outputs, layer norms and a head tied to the embedding.
    forward = MODELS[model]()
    steps, make = OPTIMIZERS[optimizer]
    lr = {"lr": 1.0} if optimizer == "sgd" else {}
    step = training_graph(forward, optimizer, hyperparameters=lr)
    inputs = make_inputs(step)
    ours = _steps(step, 1, "single_device", steps)
    theirs = _torch_steps(forward, inputs, inputs["labels"], make, steps)
    assert ours.keys() == theirs.keys()
    for name in ours:
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-9, atol=1e-12,
                                   err_msg=f"{model} {optimizer}: {name}")


@pytest.mark.parametrize("model", ["lenet5", "cnn_bn", "gpt2_tiny"])
def test_a_training_step_over_two_devices_is_the_one_device_step(model: str) -> None:
    # Without co-placement weights, gradients and saved activations cross devices. The
    # same engine runs both plans: every device with the same thread budget, so that
    # reductions split alike (another budget may round differently in the last bit).
    step = training_graph(MODELS[model](), "adam", colocate="none")
    engine = TorchEngine(devices=2)
    spread = plan(step, engine.cluster(), "random:seed=4")
    assert any(t.tensor.endswith(".weights") for t in spread.transfers)
    # and updates away from their weights' home: the updated weights are sent back
    assert any(spread.placement[op.name] != spread.placement[step.producer(op.inputs[-1])]
               for op in step if op.kind.endswith("_update"))
    two = execute(spread, engine, warmup=0, repeats=2).parameters
    one = execute(plan(step, engine.cluster(), "single_device"), engine, warmup=0,
                  repeats=2).parameters
    for name in one:
        np.testing.assert_array_equal(two[name], one[name], err_msg=name)


def _lstm_forward(graph: Graph, inputs, weights) -> Any:
    """The unrolled LSTM in torch's functional ops (the other kinds as the NumPy engine's
    training test interprets them)."""
    values: dict[str, Any] = {}
    for name in graph.topological_order():
        op = graph.op(name)
        w = weights.get(op.attrs.get("shares", name), {})
        x = [values[t] for t in op.inputs]
        if op.kind == "lstm_cell":
            hidden = op.outputs[0].shape[-1]
            cell = torch.nn.LSTMCell(4 * hidden, hidden, bias=False, dtype=torch.float64)
            params = {"weight_ih": torch.eye(4 * hidden, dtype=torch.float64),
                      "weight_hh": torch.zeros(4 * hidden, hidden, dtype=torch.float64)}
            zeros = torch.zeros_like(x[2])
            outs = torch.func.functional_call(cell, params, (x[0] + x[1], (zeros, x[2])))
        elif op.kind == "concat":
            outs = (torch.cat(x, dim=op.attrs["axis"]),)
        else:
            outs = _torch_op(op, x, w, inputs)
        values |= dict(zip((t.name for t in op.outputs), outs, strict=True))
    return values[graph.outputs[-1]]


def test_an_lstm_trains_on_the_torch_engine_as_torch_autograd_does(monkeypatch) -> None:
    # the array-API library has no backward for lstm_cell; autograd differentiates it here
    import tests.runtime.test_training_steps as steps_module

    forward = lstm(batch=2, dtype="fp64", seq_len=3, layers=2, hidden=4, vocab=7)
    step = training_graph(forward, "sgd", hyperparameters={"lr": 1.0})
    inputs = make_inputs(step)
    ours = _steps(step, 2, "heft", 1)
    monkeypatch.setattr(steps_module, "_torch_forward", _lstm_forward)
    theirs = _torch_steps(forward, inputs, inputs["labels"],
                          lambda p: torch.optim.SGD(p, lr=1.0), 1)
    for name in theirs:
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-9, atol=1e-12,
                                   err_msg=name)


# -- threads ------------------------------------------------------------------------------


class _Watched(TorchEngine):
    """A torch engine that notes the thread budget every kernel call runs with."""

    seen: list[tuple[str, int, bool]]

    def bind(self, graph: Graph, op: Op) -> Call:
        call = super().bind(graph, op)

        def watched(xp: object, args: Sequence[object], resident: dict) -> tuple:
            self.seen.append((threading.current_thread().name, torch.get_num_threads(),
                              torch.is_grad_enabled()))
            return call(xp, args, resident)

        return watched


def test_each_device_computes_with_its_thread_budget_and_the_caller_s_is_put_back() -> None:
    engine = _Watched(devices=2)
    engine.seen = []
    before = torch.get_num_threads()
    mine = engine.threads + 2  # differs from any device's budget
    torch.set_num_threads(mine)
    try:
        execute(plan(build_model("lenet5", batch=2), engine.cluster(), "round_robin"), engine,
                warmup=0, repeats=2)
        assert torch.get_num_threads() == mine
        later: list[int] = []
        worker = threading.Thread(target=lambda: later.append(torch.get_num_threads()))
        worker.start()
        worker.join()
        assert later == [mine]  # threads started afterwards begin from the caller's budget
    finally:
        torch.set_num_threads(before)
    assert {name.split("-")[0] for name, _, _ in engine.seen} == {"cpu0", "cpu1"}
    assert {threads for _, threads, _ in engine.seen} == {engine.threads}
    assert not any(grad for _, _, grad in engine.seen)  # no autograd while a plan runs


def test_the_host_slowdown_is_measured_on_the_torch_engine_too() -> None:
    from runtime.hosts import side_by_side

    # a ratio of two wall times: on a loaded machine it can be anything positive, so only
    # that it was measured (finite, positive) is asserted, never its size
    ratio = side_by_side(TorchEngine(devices=2), build_model("lenet5", batch=4), repeats=3)
    assert math.isfinite(ratio) and ratio > 0


# -- refusals -----------------------------------------------------------------------------


class _Counting(TorchEngine):
    staged = 0

    def to_device(self, host: np.ndarray, device: str) -> object:
        self.staged += 1
        return super().to_device(host, device)


def test_an_op_no_kernel_runs_is_refused_before_anything_runs() -> None:
    graph = Graph("g", [
        Op("x", "input", "source", outputs=(Tensor("x", (2, 3)),)),
        Op("r", "relu", "elementwise", inputs=("x",), outputs=(Tensor("r", (2, 3)),)),
        Op("mystery", "opaque", "data_movement", inputs=("r",),
           outputs=(Tensor("mystery", (2, 3)),))])
    engine = _Counting(devices=1)
    with pytest.raises(GraphError, match=r"^op 'mystery': kind 'opaque' has no kernel on the "
                                         r"torch engine \(it can be simulated, not run\); "
                                         r"kinds that run: add, avg_pool2d, batchnorm"):
        execute(plan(graph, engine.cluster(), "single_device"), engine)
    assert engine.staged == 0


def test_a_backward_of_an_op_no_kernel_runs_is_refused_in_one_line() -> None:
    from runtime.torch_kernels import bind

    step = Graph("s", [
        Op("x", "input", "source", outputs=(Tensor("x", (2,)),)),
        Op("m", "opaque", "data_movement", inputs=("x",), outputs=(Tensor("m", (2,)),)),
        Op("g", "input", "source", outputs=(Tensor("g", (2,)),)),
        Op("m.backward", "backward", "data_movement", inputs=("g", "x"),
           outputs=(Tensor("x.grad@m", (2,)),), attrs={"of": "m", "grads": 1})])
    with pytest.raises(GraphError, match=r"^op 'm.backward': kind 'opaque' has no backward "
                                         r"kernel on the torch engine \(no forward kernel to "
                                         r"differentiate\); kinds with one: add, "):
        bind(step, step.op("m.backward"))


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"devices": 0}, PlacelabError, r"engine 'torch': devices must be an int >= 1, got 0"),
    ({"devices": True}, PlacelabError, r"engine 'torch': devices must be an int >= 1, got True"),
    ({"device": "tpu"}, PlacelabError,
     r"engine 'torch': device must be one of cpu, cuda, got 'tpu'"),
])
def test_bad_arguments_are_refused(kwargs, error, message) -> None:
    with pytest.raises(error, match=f"^{message}$"):
        TorchEngine(**kwargs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is present: nothing to refuse")
def test_cuda_without_a_gpu_is_unavailable_saying_why() -> None:
    with pytest.raises(EngineUnavailable, match=r"^engine 'torch-cuda': (this PyTorch has no "
                                                r"CUDA support|no CUDA device is usable)"):
        TorchEngine(devices=1, device="cuda")
    with pytest.raises(EngineUnavailable, match="engine 'torch-cuda'"):
        make_engine("torch-cuda")


def test_without_torch_the_module_imports_and_the_engine_says_why() -> None:
    code = ("import sys; sys.modules['torch'] = None\n"
            "import runtime.torch_engine\n"
            "from runtime.engine import EngineUnavailable, make_engine\n"
            "try:\n    make_engine('torch', 2)\n"
            "except EngineUnavailable as err:\n    print(err)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == ("engine 'torch': PyTorch is not installed "
                           "(pip install 'placelab[torch]')")


# -- the registry, calibration, the command line ------------------------------------------


def test_the_registry_makes_the_torch_engine() -> None:
    engine = make_engine("torch", 2)
    assert isinstance(engine, TorchEngine) and engine.name == "torch"
    assert engine.devices == ("cpu0", "cpu1")
    cluster = engine.cluster()
    assert cluster.name == "torch-2"
    assert {d.model for d in cluster.devices} == {"host-cpu-torch"}
    assert dict(cluster.hosts) == {"cpu0": "localhost", "cpu1": "localhost"}
    assert {"torch", "torch-cuda"} <= set(ENGINES.names())


def test_the_command_line_offers_every_builtin_engine() -> None:
    from experiments.cli import ENGINE_NAMES

    assert set(ENGINE_NAMES) == set(ENGINES.names())


def _calibration(path, model: str) -> str:
    """A calibration file as ``placelab calibrate`` writes one: its device ``model`` (the
    engine's device model) and the engine's cluster of it."""
    from hwmodels import Cluster, Device, Link
    from hwmodels.toml_io import dump

    spec = Device(model, "cpu", {"fp32": 1e11}, 2**34, 2e10)
    dump(path, [spec], [Cluster("torch-2-calibrated", (spec.instance("cpu0"),
                                                        spec.instance("cpu1")),
                                (Link("cpu0", "cpu1", 8e9, 2e-6),),
                                hosts={"cpu0": "localhost", "cpu1": "localhost"})])
    return str(path)


def test_a_torch_calibration_is_read_and_a_numpy_one_refused(tmp_path) -> None:
    mine = _calibration(tmp_path / "torch.toml", "host-cpu-torch")
    cluster = TorchEngine(devices=2, calibration=mine).cluster()
    assert cluster.name == "torch-2-calibrated"
    assert cluster.links[0].bandwidth == pytest.approx(8e9, rel=0.01)
    numpy_one = _calibration(tmp_path / "numpy.toml", "host-cpu")
    with pytest.raises(PlacelabError, match=r"numpy.toml: expected a calibration of the torch "
                                            r"engine \(a device 'host-cpu-torch' and its "
                                            r"cluster\), got devices \['host-cpu'\]"):
        TorchEngine(devices=2, calibration=numpy_one).cluster()
    with pytest.raises(PlacelabError, match="calibrated for 2 devices, expected 1"):
        TorchEngine(devices=1, calibration=mine).cluster()


def test_placelab_run_takes_the_torch_engine(capsys) -> None:
    from experiments.cli import main

    code = main(["run", "--model", "mlp", "--engine", "torch", "--devices", "2", "--policy",
                 "round_robin", "--repeats", "1", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["engine"] == "torch" and data["devices"] == ["cpu0", "cpu1"]
    assert data["makespan_s"] > 0


def test_placelab_help_loads_no_engine() -> None:
    code = ("import sys\nfrom experiments.cli import main\n"
            "try:\n    main(['run', '--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'pandas', 'runtime.engine') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "torch-cuda" in out and out.strip().splitlines()[-1] == "[]"


# -- CUDA ---------------------------------------------------------------------------------


@CUDA
def test_on_cuda_a_model_computes_what_the_cpu_does() -> None:
    graph = build_model("lenet5", batch=2)
    cpu = TorchEngine(devices=1)
    want = execute(plan(graph, cpu.cluster(), "single_device"), cpu, warmup=0,
                   repeats=1).outputs
    count = min(2, torch.cuda.device_count())
    engine = TorchEngine(devices=count, device="cuda")
    assert engine.name == "torch-cuda" and engine.devices[0] == "cuda0"
    got = execute(plan(graph, engine.cluster(), "round_robin"), engine, warmup=1,
                  repeats=2).outputs
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-3, atol=1e-5, err_msg=key)


@CUDA
def test_on_cuda_a_training_step_equals_torch_optim() -> None:
    forward = MODELS["cnn_bn"]()
    step = training_graph(forward, "adam")
    inputs = make_inputs(step)
    engine = TorchEngine(devices=1, device="cuda")
    ours = execute(plan(step, engine.cluster(), "single_device"), engine, warmup=0,
                   repeats=3).parameters
    theirs = _torch_steps(forward, inputs, inputs["labels"],
                          lambda p: torch.optim.Adam(p, lr=0.001), 3)
    for name in ours:
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-7, atol=1e-10,
                                   err_msg=name)


@pytest.mark.parametrize("setting", ["ieee", "tf32", "none"])
def test_a_cuda_run_computes_fp32_in_fp32_and_puts_the_caller_s_setting_back(
        setting: str) -> None:
    from runtime.torch_engine import fp32_in_fp32

    knobs = [torch.backends.cuda.matmul, torch.backends.cudnn.conv, torch.backends.cudnn.rnn]
    before = [k.fp32_precision for k in knobs]
    try:
        for k in knobs:
            k.fp32_precision = setting  # the newer API: the older one then raises if read
        with fp32_in_fp32():
            assert [k.fp32_precision for k in knobs] == ["ieee"] * 3
        assert [k.fp32_precision for k in knobs] == [setting] * 3
    finally:
        for k, was in zip(knobs, before, strict=True):
            k.fp32_precision = was
