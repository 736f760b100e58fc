"""Regenerate the published GPU measurements in ``benchmarks/data`` from their sources.

The sources are two git repositories (bare mirrors or work trees), read at pinned commits
with ``git show``, so the same commits always give the same bytes:

* NeuSight (Lee, Phanishayee, Mahajan, ASPLOS'25; MIT): kernel latencies under
  ``scripts/asplos/data/dataset/{train,test}`` and end-to-end labels under
  ``scripts/asplos/label`` -> ``neusight_kernels.csv`` and ``neusight_models.csv``;
* DeepBench (Baidu; Apache-2.0): ``results/train/DeepBench_NV_*.xlsx`` ->
  ``deepbench_train.csv``. Reading the workbooks needs pandas and openpyxl (the ``data``
  extra); nothing at run time does.

``README.md`` beside this script says what every column means. It is one script, longer
than our modules usually are, so that regenerating the data needs nothing but this file.
Example::

    python benchmarks/data/extract_published.py \\
        --neusight /work/.mirror/sitar-lab+NeuSight/repo \\
        --deepbench /work/.mirror/baidu-research+DeepBench/repo --out benchmarks/data
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from workloads.io import write_text_atomic

NEUSIGHT_COMMIT = "6945927d9afcca2b9daf021f8395e53edc5b4eef"
DEEPBENCH_COMMIT = "da81ba7820739e2e506dc27f382d15be5479f98f"
ROWS_PER_GROUP = {"bmm": 400, "linear": 400, "conv": 400}  # other ops: VECTOR_ROWS
VECTOR_ROWS = 200

Row = dict[str, str]


class ExtractError(Exception):
    """A source file is missing or one of its rows is not a measurement."""


# ---------------------------------------------------------------------------------------
# sources


def git(repo: Path, *args: str) -> bytes:
    """The standard output of ``git -C repo ARGS``; a failure is one ExtractError line."""
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=False)
    if done.returncode != 0:
        err = done.stderr.decode(errors="replace").strip().splitlines()
        raise ExtractError(f"{repo}: git {' '.join(args)}: {err[-1] if err else 'failed'}")
    return done.stdout


def show(repo: Path, rev: str, path: str) -> bytes:
    """The bytes of ``path`` at ``rev``."""
    return git(repo, "show", f"{rev}:{path}")


def present(repo: Path, rev: str, path: str) -> bool:
    """Whether the blob of ``path`` at ``rev`` is in the repository (a partial mirror may
    list a file whose content it lacks)."""
    done = subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{rev}:{path}"],
                          capture_output=True, check=False)
    return done.returncode == 0


def list_files(repo: Path, rev: str, prefix: str) -> list[str]:
    """Every file path under ``prefix`` at ``rev``, sorted."""
    out = git(repo, "ls-tree", "-r", "--name-only", "-z", rev, "--", prefix)
    return sorted(p for p in out.decode().split("\0") if p)


def read_rows(text: str) -> list[Row]:
    """The rows of a CSV text with a header line."""
    csv.field_size_limit(1 << 30)
    return list(csv.DictReader(io.StringIO(text, newline="")))


def csv_text(fields: list[str], rows: list[Row]) -> str:
    """``rows`` as CSV with ``fields`` as header, ``\\n`` line ends, empty for missing."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n", extrasaction="raise")
    writer.writeheader()
    writer.writerows([{f: row.get(f, "") for f in fields} for row in rows])
    return buf.getvalue()


def positive(raw: object, where: str, field: str) -> float:
    """``raw`` as a finite float > 0, else one ExtractError line."""
    try:
        value = float(str(raw))
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ExtractError(f"{where}: {field} must be a finite number > 0, got {raw!r}")
    return value


def count(raw: object, where: str, field: str) -> int:
    """``raw`` as an integer >= 1 (``"13"`` or ``13.0``), else one ExtractError line."""
    value = positive(raw, where, field)
    if value != int(value):
        raise ExtractError(f"{where}: {field} must be a whole number, got {raw!r}")
    return int(value)


def num(value: float) -> str:
    """A float as the shortest text that reads back to it."""
    return repr(float(value))


# ---------------------------------------------------------------------------------------
# NeuSight


NEUSIGHT_DEVICES = {  # NeuSight's torch.cuda.get_device_name() -> placelab catalog name
    "Tesla P4": "p4",
    "Tesla P100-PCIE-16GB": "p100-pcie-16gb",
    "Tesla T4": "t4",
    "Tesla V100-PCIE-32GB": "v100-pcie-32gb",
    "NVIDIA A100-PCIE-40GB": "a100-pcie-40gb",
    "NVIDIA A100-SXM4-40GB": "a100-sxm4-40gb",
    "NVIDIA A100 80GB PCIe": "a100-pcie-80gb",
    "NVIDIA H100 80GB HBM3": "h100-sxm5-80gb",
    "NVIDIA L4": "l4",
}
# scripts/asplos/data/dataset/train/device_configs/*.json: the GPUs NeuSight trains on.
NEUSIGHT_TRAINING = frozenset({"p4", "p100-pcie-16gb", "t4", "v100-pcie-32gb",
                               "a100-pcie-40gb"})
FAMILIES = {"bmm": "bmm", "linear": "linear", "conv": "conv", "ln": "layernorm",
            "softmax": "softmax"}
ELEMENTWISE = ("add", "addu", "mul", "mulu", "pow", "powu", "div", "divu", "relu", "gelu",
               "tanh")
TRAIN_DIR = "scripts/asplos/data/dataset/train/collect/"
# test/vec.csv and test/habitat.csv are the rows of elem.csv, ln.csv and softmax.csv again.
TEST_FILES = tuple(f"scripts/asplos/data/dataset/test/{n}.csv"
                   for n in ("bmm", "linear", "elem", "ln", "softmax"))
LABEL_DIR = "scripts/asplos/label/"
CONV_COLUMNS = {"in_channels": "Input_Channel", "out_channels": "Output_Channel",
                "kernel_size": "Kernel_Szie", "image_size": "Input_Size", "stride": "Stride",
                "padding": "Padding"}

SHAPE_FIELDS = ["b", "m", "n", "k", "h", *CONV_COLUMNS]
KERNEL_FIELDS = ["gpu", "device", "role", "dataset", "family", "op", *SHAPE_FIELDS,
                 "latency_ms", "kernel", "n_kernels", "grid", "block", "torch", "cuda"]
MODEL_FIELDS = ["gpu", "device", "role", "model", "mode", "seqlen", "batch", "parallel",
                "gpus", "micro_batches", "compiled", "e2e_ms", "fw_ms", "bw_ms", "num_layer",
                "trace_fw_ms", "trace_bw_ms", "trace_layer_fw_ms", "trace_layer_bw_ms"]


def device_of(gpu: str, where: str) -> tuple[str, str]:
    """The catalog name and NeuSight role of a NeuSight device string."""
    if gpu not in NEUSIGHT_DEVICES:
        raise ExtractError(f"{where}: Device must be one of {sorted(NEUSIGHT_DEVICES)}, "
                           f"got {gpu!r}")
    device = NEUSIGHT_DEVICES[gpu]
    return device, "train" if device in NEUSIGHT_TRAINING else "heldout"


def short_kernel(name: str) -> str:
    """A demangled kernel name without ``void`` and its trailing parameter list (which only
    repeats the template arguments); of PyTorch's vectorised elementwise kernel only the
    vector width is kept, the functor after it being the op itself.

    >>> short_kernel("void k<4, f<float> >(int, f<float>)")
    'k<4, f<float> >'
    >>> short_kernel("void at::native::vectorized_elementwise_kernel<4, F<float>, A>(int)")
    'at::native::vectorized_elementwise_kernel<4, ...>'
    """
    name = name.strip().removeprefix("void ")
    depth = 0
    for i in range(len(name) - 1, -1, -1) if name.endswith(")") else ():
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0:
            name = name[:i].rstrip() or name
            break
    return re.sub(r"^(at::native::vectorized_elementwise_kernel<\d+),.*>$", r"\1, ...>", name)


def kernel_dims(src: Row, family: str, where: str) -> Row:
    """The shape columns of one NeuSight kernel row, by family."""
    if family in ("bmm", "linear"):
        names = {"b": "B", "m": "M", "n": "N", "k": "K"}
    elif family == "conv":
        names = {"b": "B", **CONV_COLUMNS}
    else:
        names = {"b": "B", "h": "H"}
    return {ours: str(count(src.get(theirs), where, theirs)) for ours, theirs in names.items()}


def kernel_row(src: Row, dataset: str, where: str) -> Row:
    """One NeuSight kernel measurement in our columns; a bad row is an ExtractError."""
    op = src["OPName"]
    family = FAMILIES.get(op, "elementwise" if op in ELEMENTWISE else "")
    if not family:
        raise ExtractError(f"{where}: OPName must be a known NeuSight op, got {op!r}")
    device, role = device_of(src["Device"], where)
    kernels = [k for k in src.get("Kernels", "").split(";") if k.strip()]
    grid = math.prod(count(src[f"Grid {a}"], where, f"Grid {a}") for a in "xyz")
    block = math.prod(count(src[f"Block {a}"], where, f"Block {a}") for a in "xyz")
    return {"gpu": src["Device"], "device": device, "role": role, "dataset": dataset,
            "family": family, "op": op, **kernel_dims(src, family, where),
            "latency_ms": num(positive(src["Latency"], where, "Latency")),
            "kernel": short_kernel(src["Kernel Name"]),
            "n_kernels": str(len(kernels)) if kernels else "", "grid": str(grid),
            "block": str(block), "torch": src["Torch Version"].removeprefix("p"),
            "cuda": re.sub(r"^cu(\d+)(\d)$", r"\1.\2", src["CUDA Version"])}


def size_key(row: Row) -> tuple[int, ...]:
    """Problem size first (the product of the shape columns), then the shape itself."""
    dims = tuple(int(row[c]) for c in SHAPE_FIELDS if row.get(c))
    return (math.prod(dims), *dims)


def subsample(rows: list[Row], limit: int) -> list[Row]:
    """At most ``limit`` rows, evenly spaced in size order, smallest and largest kept."""
    rows = sorted(rows, key=lambda r: (size_key(r), float(r["latency_ms"])))
    if len(rows) <= limit:
        return rows
    if limit < 2:
        return rows[:limit]
    return [rows[i * (len(rows) - 1) // (limit - 1)] for i in range(limit)]


def kernel_sources(repo: Path, rev: str) -> list[tuple[str, str]]:
    """(path, dataset) of every NeuSight NVIDIA kernel file we read: the per-device raw
    files under ``train/collect/<op>/<torch>/`` and the merged ``test/*.csv``."""
    train = [p for p in list_files(repo, rev, TRAIN_DIR)
             if p.endswith(".csv") and len(p.removeprefix(TRAIN_DIR).split("/")) == 3]
    return [(p, "train") for p in train] + [(p, "test") for p in TEST_FILES]


def kernel_rows(repo: Path, rev: str) -> list[Row]:
    """Every NeuSight kernel measurement, subsampled per (gpu, dataset, op)."""
    groups: dict[tuple[str, str, str], list[Row]] = {}
    for path, dataset in kernel_sources(repo, rev):
        text = show(repo, rev, path).decode()
        for line, src in enumerate(read_rows(text), start=2):
            row = kernel_row(src, dataset, f"NeuSight {path} line {line}")
            groups.setdefault((row["gpu"], dataset, row["op"]), []).append(row)
    order = sorted(groups, key=lambda g: (g[0], g[1], FAMILIES.get(g[2], "elementwise"), g[2]))
    return [row for key in order
            for row in subsample(groups[key], ROWS_PER_GROUP.get(key[2], VECTOR_ROWS))]


LABEL_NAME = re.compile(r"(?P<model>\w+)-(?P<mode>inf|train)-(?P<seqlen>\d+)-(?P<batch>\d+)"
                        r"(?:-(?:(?P<kind>dp|tp|pp)(?P<degree>\d+)(?:_(?P<micro>\d+))?"
                        r"|(?P<fusion>fusion)))?")
LAYER_MARKERS = {  # NeuSight neusight/Prediction/aggregator.py, replicate_layer()
    "bert": ("bert_encoder_layer_0_attention_self_query",
             "bert_encoder_layer_0_output_layer_norm"),
    "gpt": ("transformer_h_0_ln_1", "add_15"),
    "opt": ("model_decoder_layers_0_self_attn_layer_norm", "view_11"),
}


def parallel_of(name: re.Match[str]) -> Row:
    """The parallelism columns of a label name's suffix (``-dp4``, ``-pp4_1``, ``-fusion``)."""
    if name["kind"] is None:
        return {"parallel": "none", "gpus": "1", "micro_batches": "",
                "compiled": "1" if name["fusion"] else "0"}
    # run_label_distributed.py passes --megatron_lm_num_micro_batches 1 to every run
    return {"parallel": f"{name['kind']}{name['degree']}", "gpus": name["degree"],
            "micro_batches": name["micro"] or "1", "compiled": "0"}


def trace_sums(text: str, model: str, layers: int, where: str) -> Row:
    """The fx trace of one label (a one-layer model) summed as NeuSight does: everything
    outside layer 0 once, layer 0 ``layers`` times; backward includes AccumulateGrad."""
    rows = read_rows(text)
    names = [r["Name"] for r in rows]
    family = next((f for f in LAYER_MARKERS if f in model), None)
    if family is None or layers <= 0:
        start, end = 0, 0
    else:
        first, last = LAYER_MARKERS[family]
        if first not in names or last not in names:
            raise ExtractError(f"{where}: the layer markers {first}, {last} are not in it")
        start, end = names.index(first), names.index(last) + 1

    def total(cols: tuple[str, ...], part: Iterable[Row]) -> float:
        return sum(positive_or_zero(r[c], where, c) for r in part for c in cols)

    out: Row = {}
    for key, cols in (("fw", ("fw_latency",)), ("bw", ("bw_latency", "acc_latency"))):
        layer = total(cols, rows[start:end])
        whole = total(cols, rows[:start]) + total(cols, rows[end:]) + layers * layer
        out[f"trace_{key}_ms"] = num(whole) if whole > 0 else ""
        out[f"trace_layer_{key}_ms"] = num(layer) if end > start and layer > 0 else ""
    return out


def positive_or_zero(raw: str, where: str, field: str) -> float:
    """A latency that may be 0 (an op NeuSight did not time)."""
    return 0.0 if raw.strip() in ("0", "0.0") else positive(raw, where, field)


def label_row(repo: Path, rev: str, path: str) -> Row:
    """One NeuSight end-to-end label (its .json, and the .csv trace beside it if present)."""
    folder, name = path.removeprefix(LABEL_DIR).rsplit("/", 1)
    where = f"NeuSight {path}"
    match = LABEL_NAME.fullmatch(name.removesuffix(".json"))
    if match is None:
        raise ExtractError(f"{where}: name must be model-mode-seqlen-batch[-option]")
    gpu = folder.replace("_", " ")
    device, role = device_of(gpu, where)
    label = json.loads(show(repo, rev, path))
    layers = int(label.get("num_layer") or 0)  # 0 or null: not recorded
    row: Row = {"gpu": gpu, "device": device, "role": role, "model": match["model"],
                "mode": match["mode"], "seqlen": match["seqlen"], "batch": match["batch"],
                **parallel_of(match),
                "e2e_ms": num(positive(label.get("e2e_latency"), where, "e2e_latency")),
                "num_layer": str(layers) if layers > 0 else ""}
    for ours, theirs in (("fw_ms", "fw_latency"), ("bw_ms", "bwall_latency")):
        raw = label.get(theirs)  # 0 or absent: not measured (inference, four GPUs)
        row[ours] = "" if raw in (0, None) else num(positive(raw, where, theirs))
    trace = path.removesuffix(".json") + ".csv"
    if row["parallel"] == "none" and row["compiled"] == "0" and present(repo, rev, trace):
        text = show(repo, rev, trace).decode()
        row.update(trace_sums(text, match["model"], layers, f"NeuSight {trace}"))
    return row


def model_rows(repo: Path, rev: str) -> list[Row]:
    """Every NeuSight end-to-end label on an NVIDIA GPU (the AMD ones are skipped)."""
    paths = [p for p in list_files(repo, rev, LABEL_DIR)
             if p.endswith(".json") and not p.removeprefix(LABEL_DIR).startswith("AMD")]
    rows = [label_row(repo, rev, p) for p in paths]
    return sorted(rows, key=lambda r: (r["gpu"], r["model"], r["mode"], int(r["seqlen"]),
                                       int(r["batch"]), r["parallel"], r["compiled"]))


# ---------------------------------------------------------------------------------------
# DeepBench


DEEPBENCH_DEVICES = {  # results/train/DeepBench_NV_<name>.xlsx -> placelab catalog name
    "V100": "v100-sxm2-32gb",  # Specs sheet: "NVIDIA DGX-1", so SXM2; memory not stated
    "P100": "p100-pcie-16gb",  # Specs: an ASUS X99-E WS board; README: PCIe; memory not stated
    "1080Ti": "gtx-1080ti",
    "TitanXp": "titan-xp",
    "M40": "m40",
    "T4": "t4",
}
PRECISIONS = {  # the "Precision" cell of each results sheet -> our code
    "Float": "fp32",
    "16 bit inputs, 16 bit multiplication, 32 bit addition": "fp16-mixed",
    "16 bit inputs, 32 bit multiplication, 32 bit addition": "fp16-pseudo",
}
SECTIONS = {"Dense Matrix Multiplication": "gemm", "Convolution": "conv",
            "Recurrent Layers - Vanilla": "rnn", "Recurrent Layers - LSTM": "rnn",
            "Recurrent Layers - GRU": "rnn", "All-Reduce": "allreduce"}
# normalised sheet header -> our column; "ms:" marks a time in milliseconds
HEADERS = {
    "gemm": {"m": "m", "n": "n", "k": "k", "a transpose": "a_t", "b transpose": "b_t",
             "time (msec)": "ms:time_us", "teraflops": "tflops"},
    "conv": {"w": "w", "h": "h", "c": "c", "n": "n", "k": "k", "s (filter width)": "filter_w",
             "s": "filter_w", "r (filter height)": "filter_h", "r": "filter_h",
             "pad_w": "pad_w", "pad_h": "pad_h", "horizontal stride": "stride_w",
             "vertical stride": "stride_h", "forward (msec)": "ms:fwd_us",
             "wrt inputs (msec)": "ms:bwd_inputs_us", "wrt parameters (msec)": "ms:bwd_params_us",
             "fwd teraflops": "tflops"},
    "rnn": {"hidden units": "hidden", "n": "batch", "timesteps": "timesteps",
            "time forward (msec)": "ms:fwd_us", "time backward wrt inputs (msec)":
            "ms:bwd_inputs_us", "time backward wrt weights (msec)": "ms:bwd_params_us",
            "time backward (msec)": "ms:bwd_us", "teraflops fwd": "tflops"},
    "allreduce": {"size # floats": "size_floats", "# chips / accelerator cards": "gpus",
                  "mean all reduce time (msec)": "ms:time_us", "selected algorithm":
                  "algorithm", "std dev all reduce time (msec)": "ms:std_us"},
}
DIMENSIONS = {"gemm": ("m", "n", "k"), "conv": ("w", "h", "c", "n", "k", "filter_w",
              "filter_h", "pad_w", "pad_h", "stride_w", "stride_h"),
              "rnn": ("hidden", "batch", "timesteps"), "allreduce": ("size_floats", "gpus")}
TIMES = ("time_us", "fwd_us", "bwd_inputs_us", "bwd_params_us", "bwd_us", "std_us")
DEEPBENCH_FIELDS = ["gpu", "device", "family", "precision", "m", "n", "k", "a_t", "b_t", "w",
                    "h", "c", "filter_w", "filter_h", "pad_w", "pad_h", "stride_w", "stride_h",
                    "rnn_type", "hidden", "batch", "timesteps", "size_floats", "gpus", "nodes",
                    "algorithm", *TIMES, "tflops", "cuda", "cudnn"]
ZEROABLE = {"pad_w", "pad_h"}


def cell(value: Any) -> str:
    """A spreadsheet cell as trimmed text; empty for a blank (NaN) cell."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def header_map(family: str, cells: list[str], where: str) -> dict[int, str]:
    """Column index -> our column for one section's header row."""
    known = HEADERS[family]
    found = {i: known[" ".join(c.lower().split())] for i, c in enumerate(cells)
             if " ".join(c.lower().split()) in known}
    missing = set(DIMENSIONS[family]) - set(found.values())
    if missing:
        raise ExtractError(f"{where}: header lacks {sorted(missing)}, got {cells}")
    if family == "allreduce":  # the blank-headed column after "# chips" is the node count
        found[next(i for i, c in found.items() if c == "gpus") + 1] = "nodes"
    return found


def deepbench_row(family: str, columns: dict[int, str], cells: list[str],
                  where: str) -> Row | None:
    """One measurement row of a section, or None for a note, a blank or an unmeasured
    problem (a row with no time at all)."""
    raw = {ours: cells[i] if i < len(cells) else "" for i, ours in columns.items()}
    if not all(re.fullmatch(r"\d+(\.0)?", raw.get(d, "")) for d in DIMENSIONS[family]):
        return None
    row: Row = {}
    for key, value in raw.items():
        name = key.removeprefix("ms:")
        if key.startswith("ms:"):  # "N/A*" marks a pass DeepBench does not time
            row[name] = "" if value in ("", "N/A*") else num(
                round(positive(value, where, name) * 1000, 6))
        elif name == "tflops":
            row[name] = num(float(value)) if value not in ("", "N/A*") else ""
        elif name in ZEROABLE and value in ("0", "0.0"):
            row[name] = "0"
        elif name in (*DIMENSIONS[family], "nodes") and value:
            row[name] = str(count(value, where, name))
        else:
            row[name] = value
    return row if any(row.get(t) for t in TIMES) else None


def sheet_rows(table: list[list[Any]], sheet: str) -> list[Row]:
    """The measurements of one results sheet, each with its family and precision."""
    precision, family, rnn_type = "", "", ""
    columns: dict[int, str] = {}
    out: list[Row] = []
    for number, values in enumerate(table, start=1):
        cells = [cell(v) for v in values]
        where = f"{sheet} row {number}"
        if cells[0] == "Precision":
            if cells[1] not in PRECISIONS:
                raise ExtractError(f"{where}: Precision must be one of {sorted(PRECISIONS)}, "
                                   f"got {cells[1]!r}")
            precision = PRECISIONS[cells[1]]
        elif cells[0] in SECTIONS:
            family, columns = SECTIONS[cells[0]], {}
            rnn_type = cells[0].rsplit(" ", 1)[-1].lower()
            if family != "conv":
                columns = header_map(family, cells, where)
        elif family == "conv" and not columns and "W" in cells:
            columns = header_map(family, cells, where)
        elif columns:
            row = deepbench_row(family, columns, cells, where)
            if row is not None:
                extra = {"rnn_type": rnn_type} if family == "rnn" else {}
                out.append({"family": family, "precision": precision, **extra, **row})
    return out


def read_book(data: bytes) -> dict[str, list[list[Any]]]:
    """Every sheet of an xlsx workbook as rows of cells (blank cells are NaN)."""
    import pandas as pd  # only regenerating the data needs pandas and openpyxl

    with warnings.catch_warnings():  # openpyxl: "Unknown extension is not supported"
        warnings.simplefilter("ignore", UserWarning)
        sheets = pd.read_excel(io.BytesIO(data), sheet_name=None, header=None, dtype=object,
                               engine="openpyxl")
    return {name: frame.values.tolist() for name, frame in sheets.items()}


def deepbench_rows(repo: Path, rev: str) -> list[Row]:
    """Every DeepBench training measurement on the NVIDIA GPUs we keep."""
    rows: list[Row] = []
    for name, device in DEEPBENCH_DEVICES.items():
        path = f"results/train/DeepBench_NV_{name}.xlsx"
        book = read_book(show(repo, rev, path))
        specs = {cell(r[0]): cell(r[1]) for r in book.pop("Specs") if len(r) > 1}
        common = {"gpu": specs["GPU Model"], "device": device, "cuda": specs["CUDA Version"],
                  "cudnn": specs["Cudnn Version"]}
        for sheet, table in book.items():
            where = f"DeepBench {path} sheet '{sheet}'"
            rows += [{**common, **r} for r in sheet_rows(table, where)]
    return rows


# ---------------------------------------------------------------------------------------
# command line


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line: where the two repositories are, which commits, where to write."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--neusight", type=Path, required=True,
                        help="git directory of github.com/sitar-lab/NeuSight")
    parser.add_argument("--deepbench", type=Path, required=True,
                        help="git directory of github.com/baidu-research/DeepBench")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent,
                        help="folder for the CSV files (default: beside this script)")
    parser.add_argument("--neusight-rev", default=NEUSIGHT_COMMIT,
                        help="NeuSight commit to read (default: the pinned one)")
    parser.add_argument("--deepbench-rev", default=DEEPBENCH_COMMIT,
                        help="DeepBench commit to read (default: the pinned one)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Write the three CSV files; a bad source row stops everything with one line."""
    args = parse_args(argv)
    tables: dict[str, tuple[list[str], Callable[[], list[Row]]]] = {
        "neusight_kernels.csv": (KERNEL_FIELDS, lambda: kernel_rows(
            args.neusight, args.neusight_rev)),
        "neusight_models.csv": (MODEL_FIELDS, lambda: model_rows(
            args.neusight, args.neusight_rev)),
        "deepbench_train.csv": (DEEPBENCH_FIELDS, lambda: deepbench_rows(
            args.deepbench, args.deepbench_rev)),
    }
    try:
        texts = {name: csv_text(fields, make()) for name, (fields, make) in tables.items()}
    except ExtractError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for name, text in texts.items():
        path = write_text_atomic(args.out / name, text)
        print(f"{path}: {text.count(chr(10)) - 1} rows, {len(text.encode())} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
