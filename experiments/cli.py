"""The ``placelab`` command line. Every command with ``--json`` prints one JSON object.

Bad input (an unknown name, a malformed file, a bad flag) prints one line on stderr and exits
with status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from experiments.autoparallelcmd import add_autoparallel_command
from experiments.commands import (
    check_outputs,
    cmd_compare,
    cmd_demo,
    cmd_hw_check,
    cmd_hw_list,
    cmd_hw_register,
    cmd_hw_remove,
    cmd_hw_show,
    cmd_list,
    cmd_model_import,
    cmd_model_show,
    cmd_run,
    cmd_simulate,
)
from experiments.measure import cmd_calibrate, cmd_validate
from experiments.profilecmd import add_profile_command
from experiments.sweepcmd import add_sweep_command
from experiments.tenantcmd import add_tenants_command
from sim.options import LINK_MODELS, ORDERS
from workloads.collectives import ALGORITHMS
from workloads.errors import PlacelabError
from workloads.training import COLOCATE, OPTIMIZERS
from workloads.zoo import MAX_BATCH, MAX_SEQ_LEN

__all__ = ["ENGINE_NAMES", "main"]

#: The engines ``run``, ``calibrate`` and ``validate`` take: the builtins of
#: ``runtime.engine.ENGINES``, spelled out so that building the parser imports no engine
#: (``placelab --help`` loads neither torch nor NumPy's engine); a test holds them equal.
ENGINE_NAMES = ("cpu", "gpu", "torch", "torch-cuda")


class _Parser(argparse.ArgumentParser):
    """argparse that reports misuse in one line and exits 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"placelab: error: {message} (see --help)\n")
        raise SystemExit(2)


# -- parser ---------------------------------------------------------------------------------


def _add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _add_workload(p: argparse.ArgumentParser, *, seq_len: bool = True) -> None:
    p.add_argument("--batch", type=_batch, default=1)
    if seq_len:
        p.add_argument("--seq-len", type=_int_at_least(1, MAX_SEQ_LEN), default=None,
                       help="tokens per sequence (sequence models)")
    p.add_argument("--train", action="store_true",
                   help="a whole training step: forward, loss, backward, weight update")
    p.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="sgd",
                   help="optimizer of the training step (default: sgd)")
    p.add_argument("--colocate", choices=COLOCATE, default="ops",
                   help="ops of a training step that must share a device: a forward op "
                   "with its backward, weights and update (ops, the default), a layer's "
                   "weights with its forward op and update (weights), or none")
    p.add_argument("--passes", help="optimizer passes to run first, comma-separated "
                   "(cse, dce, fuse_elementwise)")


def _int_at_least(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``minimum`` (and at most ``maximum``)."""
    wanted = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer {wanted}, got "
                                             f"{text!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"expected an integer {wanted}, got {value}")
        return value
    return parse


_positive_int, _nonnegative_int = _int_at_least(1), _int_at_least(0)
_batch = _int_at_least(1, MAX_BATCH)  # a batch


def _nonnegative_float(text: str) -> float:
    """An argparse type: a finite number >= 0 (NaN and infinity refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="placelab", description="Place deep-learning graphs on hardware, "
                     "simulate the plans, compare the policies.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("list", help="list models, devices, clusters, policies, sharing "
                       "policies, passes, engines, link models, issue orders or cost models")
    p.add_argument("what", choices=("models", "devices", "clusters", "policies", "sharing",
                                    "passes", "engines", "link-models", "issue-orders",
                                    "cost-models"))
    p.add_argument("--params", action="store_true",
                   help="with policies, sharing or passes: each one's parameters, defaults "
                        "and valid values")
    _add_json(p)
    p.set_defaults(func=cmd_list)

    _add_model_commands(sub)
    _add_hw_commands(sub)
    _add_run_commands(sub)
    return parser


def _add_model_commands(sub: Any) -> None:
    model = sub.add_parser("model", help="inspect zoo models")
    msub = model.add_subparsers(dest="model_command", required=True, parser_class=_Parser)
    p = msub.add_parser("show", help="ops, parameters, FLOPs and bytes of a zoo model")
    p.add_argument("name")
    _add_workload(p)
    _add_json(p)
    p.set_defaults(func=cmd_model_show)

    p = msub.add_parser("import", help="the same summary for an ONNX model")
    p.add_argument("file")
    p.add_argument("--batch", type=_batch, default=None,
                   help="value of the inputs' symbolic first (batch) dimension")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=N",
                   help="value of a symbolic dimension, by name (repeatable)")
    p.add_argument("--strict", action="store_true",
                   help="refuse operators without a cost formula instead of warning")
    p.add_argument("--save", help="also write the imported graph as JSON (for --graph)")
    _add_json(p)
    p.set_defaults(func=cmd_model_import)


def _add_hw_commands(sub: Any) -> None:
    hw = sub.add_parser("hw", help="the hardware catalog: list, show, register")
    hsub = hw.add_subparsers(dest="hw_command", required=True, parser_class=_Parser)
    p = hsub.add_parser("list", help="every registered device and cluster, with its source")
    _add_json(p)
    p.set_defaults(func=cmd_hw_list)
    p = hsub.add_parser("show", help="one device or cluster, in the TOML format")
    p.add_argument("name")
    _add_json(p)
    p.set_defaults(func=cmd_hw_show)
    p = hsub.add_parser("check", help="a GPU's predictions against published measurements, "
                        "or its stated uncertainty")
    p.add_argument("name")
    _add_json(p)
    p.set_defaults(func=cmd_hw_check)
    p = hsub.add_parser("register", help="validate a hardware TOML file and store it in "
                        "the user catalog ($PLACELAB_HOME/hardware)")
    p.add_argument("file")
    _add_json(p)
    p.set_defaults(func=cmd_hw_register)
    p = hsub.add_parser("remove", help="undo a registration: delete the user file that "
                        "defines a device or cluster")
    p.add_argument("name")
    _add_json(p)
    p.set_defaults(func=cmd_hw_remove)


def _add_source(p: argparse.ArgumentParser) -> None:
    """--model or --graph, never both (the one not used would be ignored)."""
    what = p.add_mutually_exclusive_group()
    what.add_argument("--model", help="zoo model name")
    what.add_argument("--graph", help="graph JSON file (Graph.to_json)")


def _add_run_commands(sub: Any) -> None:
    p = sub.add_parser("simulate", help="place one graph with one policy and simulate it")
    _add_source(p)
    p.add_argument("--cluster", required=True)
    p.add_argument("--policy", help="placement policy NAME[:k=v,...] (not with --pp)")
    p.add_argument("--cost", default="roofline",
                   help="cost model: roofline (default), table, calibrated")
    p.add_argument("--cost-file", help="the table or calibration file the cost model reads")
    _add_workload(p)
    p.add_argument("--pp", type=_positive_int, metavar="S",
                   help="pipeline the training step over S stages (a zoo --model; "
                        "placement by the parallel transforms, with --dp and --tp)")
    p.add_argument("--microbatches", type=_positive_int, metavar="M",
                   help="with --pp: micro-batches per step (default 4 per stage)")
    p.add_argument("--schedule", choices=("gpipe", "1f1b"), default="1f1b",
                   help="with --pp: the pipeline schedule (default 1f1b)")
    p.add_argument("--dp", type=_positive_int, metavar="N",
                   help="N data-parallel replicas (a zoo --model; gradients all-reduced in "
                        "buckets)")
    p.add_argument("--tp", type=_positive_int, metavar="T",
                   help="T-way tensor parallelism of a zoo transformer (Megatron's split)")
    p.add_argument("--bucket-mb", type=float, default=25.0, metavar="MB",
                   help="with --dp: gradient bucket size in MiB (default 25, as PyTorch DDP)")
    p.add_argument("--algorithm", choices=ALGORITHMS, default="ring",
                   help="with --dp: the all-reduce algorithm (default ring)")
    p.add_argument("--links", choices=LINK_MODELS, default="fcfs",
                   help="fcfs: a copy engine and a link channel carry one transfer at a time; "
                        "none: no contention (a list scheduler's own model)")
    p.add_argument("--order", choices=ORDERS,
                   help="plan (default): devices follow the plan's order; priority: each "
                        "device starts its highest-priority ready op (the default with --dp "
                        "or --tp and no --pp: communication first)")
    p.add_argument("--repair", type=_nonnegative_int, default=0, metavar="N",
                   help="m_etf, m_sct: simulate, hold back on each device the memory it "
                        "went over and place again, at most N times")
    p.add_argument("--trace", help="write a Chrome-trace JSON here")
    p.add_argument("--gantt", help="write a Gantt chart (.png or .svg) here")
    _add_json(p)
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("run", help="run a plan for real and print it beside the simulator's "
                       "prediction")
    _add_source(p)
    p.add_argument("--policy", required=True)
    p.add_argument("--devices", type=_positive_int, default=1,
                   help="logical devices (cpu, torch: shares of this machine's cores; gpu, "
                        "torch-cuda: GPUs)")
    p.add_argument("--engine", choices=ENGINE_NAMES, default="cpu")
    p.add_argument("--repeats", type=_positive_int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and inputs")
    _add_workload(p)
    p.add_argument("--trace", help="write the measured Chrome-trace JSON here")
    _add_json(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("compare", help="compare policies on models and clusters")
    p.add_argument("--model", required=True, help="zoo model name(s), comma-separated")
    p.add_argument("--cluster", required=True, help="cluster name(s), comma-separated")
    p.add_argument("--policies", default="all", help="comma-separated names, or all")
    p.add_argument("--cost", default="roofline")
    p.add_argument("--links", choices=LINK_MODELS, default="fcfs",
                   help="how transfers share links (default: fcfs)")
    p.add_argument("--workers", type=_positive_int, default=1,
                   help="local worker processes for the cells (default: 1, this process)")
    _add_workload(p, seq_len=False)
    p.add_argument("--out", help="results table (.parquet, or .csv)")
    p.add_argument("--plot", help="bar chart (.png or .svg)")
    _add_json(p)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("calibrate", help="time ops and copies on an engine, fit the cost "
                       "model, write a device and cluster TOML")
    p.add_argument("--engine", choices=ENGINE_NAMES, default="cpu")
    p.add_argument("--devices", type=_positive_int, default=1,
                   help="logical devices the calibration is for (their thread budget)")
    p.add_argument("--quick", action="store_true",
                   help="fewer random configurations, repeats and zoo models")
    p.add_argument("--cases", type=_positive_int, default=None,
                   help="random configurations per op kind fitted on (default: 16 with "
                        "--quick, 40 without)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the random configurations (default 0)")
    p.add_argument("--out", required=True, help="the calibration file (.toml)")
    p.add_argument("--plot", help="each op kind's held-out error (.png or .svg)")
    _add_json(p)
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("validate", help="run plans for real, simulate them, report the error")
    p.add_argument("--engine", choices=ENGINE_NAMES, default="cpu")
    p.add_argument("--device", help="calibration file from placelab calibrate of the same "
                   "engine (default: the engine's uncalibrated devices)")
    p.add_argument("--devices", type=_positive_int, default=None,
                   help="logical devices (default: as many as the calibration is for, "
                        "else 2)")
    p.add_argument("--models", help="zoo models, comma-separated; NAME:train for an SGD step")
    p.add_argument("--graph", action="append", help="a graph JSON or ONNX file (repeatable)")
    p.add_argument("--policies", default="single_device,heft,round_robin",
                   help="the plans of each graph (default: single_device,heft,round_robin)")
    p.add_argument("--batch", type=_positive_int, default=1)
    p.add_argument("--repeats", type=_positive_int, default=5)
    p.add_argument("--min-seconds", type=_nonnegative_float, default=0.5,
                   help="run a short plan more often, to this much time in all (default 0.5)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--rounds", type=_positive_int, default=3,
                   help="run every plan in this many turns over the whole validation, so a "
                        "slow phase of the machine falls on one turn (default 3)")
    p.add_argument("--out", help="results table (.parquet, or .csv)")
    p.add_argument("--ops", help="each op of each run, measured against its prediction, "
                   "with the source that priced it (.parquet, or .csv)")
    p.add_argument("--plot", help="predicted vs measured (.png or .svg)")
    _add_json(p)
    p.set_defaults(func=cmd_validate)

    add_sweep_command(sub)
    add_tenants_command(sub)
    add_profile_command(sub, ENGINE_NAMES, _positive_int)
    add_autoparallel_command(sub, _positive_int, _batch, _int_at_least(1, MAX_SEQ_LEN))

    p = sub.add_parser("demo", help="the main job: a placement study with table and plot")
    p.add_argument("--out", default="placelab-demo", help="output folder")
    _add_json(p)
    p.set_defaults(func=cmd_demo)


def _one_line_warning(message: Warning | str, category: type[Warning], filename: str,
                      lineno: int, file: Any = None, line: str | None = None) -> None:
    sys.stderr.write(f"placelab: warning: {message}\n")


def _refuse_empty(argv: Sequence[str]) -> None:
    """An empty value (``--out ''``) names nothing: refused, never read as "not given"."""
    for i, token in enumerate(argv):
        flag, eq, value = token.partition("=")
        if token == "" or (flag.startswith("--") and eq and not value):
            name = flag if token else (argv[i - 1] if i and argv[i - 1].startswith("-")
                                       else f"argument {i + 1}")
            raise PlacelabError(f"{name}: expected a value, got ''")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``placelab`` console script."""
    warnings.showwarning = _one_line_warning
    try:
        argv = sys.argv[1:] if argv is None else list(argv)
        _refuse_empty(argv)
        args = build_parser().parse_args(argv)
        check_outputs(args)
        args.func(args)
    except KeyboardInterrupt:
        sys.stderr.write("placelab: interrupted\n")
        return 130
    except PlacelabError as err:
        sys.stderr.write(f"placelab: error: {' '.join(str(err).splitlines())}\n")
        return 2
    except BrokenPipeError as err:
        if not _stdout_closed():
            return _os_error(err)
        # the reader closed standard output (``| head``): its choice, not an error; later
        # writes (the interpreter's last flush) go nowhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except MemoryError:
        sys.stderr.write("placelab: error: out of memory: expected the run to fit in the "
                         "memory this process may use (see ulimit -v), got MemoryError\n")
        return 2
    except OSError as err:
        return _os_error(err)
    return 0


def _os_error(err: OSError) -> int:
    where = f" {err.filename!r}" if err.filename else ""
    sys.stderr.write(f"placelab: error: cannot write or read{where}: {err.strerror}\n")
    return 2


def _stdout_closed() -> bool:
    """Whether standard output's reader has gone (a broken pipe elsewhere is an error):
    a pipe whose reading end is closed polls as an error."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(event & select.POLLERR for _, event in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll here, or no file behind stdout
        return False


if __name__ == "__main__":
    raise SystemExit(main())
