"""Malformed inputs, generated from valid ones: every file format placelab reads, through
the Python API and the command line.

A mutation picks a place in a valid document and puts a wrong type, NaN, infinity, a huge
or negative number, a deep nesting there, deletes a key or adds one; byte-level mutations
truncate the file or put bytes that are not UTF-8 into it. The API must answer with a
``PlacelabError`` subclass or a valid object; the CLI must exit 0 or 2 with at most one line
on stderr, and leave the user catalog loadable.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experiments.cli import main
from hwmodels import TableCost, get_cluster, get_device, loads
from policies import Plan, plan
from tests.helpers import reload_catalog
from workloads import Graph, PlacelabError, build_model

ROOT = Path(__file__).resolve().parents[1]
NPU = (ROOT / "experiments" / "hardware" / "whatif-npu.toml").read_text()

BAD_VALUES: list[Any] = [None, "x", "", 5, -1, 0, 1.5, -2.5, math.nan, math.inf, -math.inf,
                         2**70, -(2**70), True, [], {}, [1, "a"], {"k": 1}]


def _places(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _places(value, (*path, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc[:3]):
            yield from _places(value, (*path, i))


DEEP = "__deeply_nested__"


@st.composite
def mutated(draw: st.DrawFn, doc: Any, toml: bool = False) -> str:
    """``doc`` (a JSON-like document) with one place broken, as JSON or TOML text."""
    doc = json.loads(json.dumps(doc))
    places = list(_places(doc))
    path = draw(st.sampled_from(places))
    action = draw(st.sampled_from(["replace", "delete", "add", "deep"]))
    values = [v for v in BAD_VALUES if not (toml and v is None)]
    if not path:
        if toml or action != "replace":
            return tomli_w.dumps(doc) if toml else json.dumps(doc)
        return json.dumps(draw(st.sampled_from(values)))
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    if action == "replace":
        parent[last] = draw(st.sampled_from(values))
    elif action == "delete":
        del parent[last]
    elif action == "add" and isinstance(parent, dict):
        parent["unexpected_field"] = draw(st.sampled_from(values))
    elif action == "deep":
        parent[last] = DEEP
    text = tomli_w.dumps(doc) if toml else json.dumps(doc, allow_nan=True)
    depth = draw(st.sampled_from([70, 2000]))  # built as text: no recursion to make it
    return text.replace(f'"{DEEP}"', "[" * depth + "1" + "]" * depth)


def _bytes(draw: Callable[[st.SearchStrategy[Any]], Any], text: str) -> bytes:
    data = text.encode()
    how = draw(st.sampled_from(["truncate", "garbage", "utf16"]))
    if how == "truncate":
        return data[:draw(st.integers(0, len(data)))]
    if how == "garbage":
        at = draw(st.integers(0, len(data)))
        return data[:at] + b"\xff\xfe\x80" + data[at:]
    return text.encode("utf-16")


def _fine_or_placelab_error(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except PlacelabError as err:
        assert "\n" not in str(err), str(err)
        return None


GRAPH = build_model("mlp", batch=2).to_dict()
SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


@SETTINGS
@given(mutated(GRAPH))
def test_graph_json_api(text: str) -> None:
    graph = _fine_or_placelab_error(Graph.from_json, text, source="g.json")
    if graph is not None:
        assert all(0 <= op.flops < 2**63 and isinstance(op.flops, int) for op in graph)
        assert Graph.from_json(graph.to_json()) == graph


@SETTINGS
@given(st.data())
def test_graph_json_bytes_api(data: st.DataObject) -> None:
    blob = _bytes(data.draw, json.dumps(GRAPH))
    _fine_or_placelab_error(Graph.from_json, blob, source="g.json")


PLAN = plan(build_model("mlp", batch=2), get_cluster("workstation"), "heft").to_dict()


@SETTINGS
@given(mutated(PLAN))
def test_plan_json_api(text: str) -> None:
    p = _fine_or_placelab_error(Plan.from_json, text, source="p.json")
    if p is not None:
        _fine_or_placelab_error(p.validate, get_cluster("workstation"))


@SETTINGS
@given(mutated(tomllib.loads(NPU), toml=True))
def test_hardware_toml_api(text: str) -> None:
    hw = _fine_or_placelab_error(loads, text, source="x.toml", known_models=get_device)
    if hw is not None:
        for device in hw.devices.values():
            assert math.isfinite(device.memory_bandwidth) and device.compute_streams <= 1024


TABLE = {"op_time_s": {"fc1": {"cpu0": 2.5, "gpu0": 0.5}, "input": {"cpu0": 0, "gpu0": 0}},
         "transfer_time_s": {"input": 7}}


@SETTINGS
@given(mutated(TABLE, toml=True))
def test_cost_table_api(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    path = tmp_path_factory.mktemp("t") / "t.toml"
    path.write_text(text)
    cost = _fine_or_placelab_error(TableCost.create, get_cluster("workstation"), path)
    if cost is not None:
        assert all(math.isfinite(t) for row in cost.table.values() for t in row.values())


# -- the command line -------------------------------------------------------------------------


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err
    assert code in (0, 2), (argv, code, err)
    assert len(err.strip().splitlines()) <= 1, err
    assert "Traceback" not in err
    return code, err


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hw_register_never_breaks_the_catalog(home: Path, capsys, data) -> None:
    if data.draw(st.booleans()):
        blob = data.draw(mutated(tomllib.loads(NPU), toml=True)).encode()
    else:
        blob = _bytes(data.draw, NPU)
    for old in home.glob("hardware/*"):
        old.unlink()
    reload_catalog()
    path = home.parent / "candidate.toml"
    path.write_bytes(blob)
    code, _ = _cli(capsys, "hw", "register", str(path))
    if code == 2:
        assert not list(home.glob("hardware/*.toml")), "a refused file was stored"
    reload_catalog()
    _cli(capsys, "hw", "list")  # every later command still works
    code, _ = _cli(capsys, "simulate", "--model", "mlp", "--cluster", "workstation",
                   "--policy", "heft")
    assert code == 0


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=mutated(GRAPH))
def test_simulate_graph_file_is_zero_or_two(tmp_path_factory, capsys, text: str) -> None:
    path = tmp_path_factory.mktemp("g") / "g.json"
    path.write_text(text)
    _cli(capsys, "simulate", "--graph", str(path), "--cluster", "workstation",
         "--policy", "heft", "--json")


@pytest.mark.parametrize("argv", [
    ["simulate", "--model", "mlp", "--cluster", "workstation", "--policy", "heft",
     "--batch", "1e20"],
    ["simulate", "--model", "mlp", "--cluster", "workstation", "--policy", "heft",
     "--batch", str(10**30)],
    ["compare", "--model", "mlp", "--cluster", "workstation", "--policies", ""],
    ["compare", "--model", "mlp", "--cluster", "workstation", "--policies", "heft,heft"],
    ["compare", "--model", "mlp,mlp", "--cluster", "workstation", "--policies", "heft"],
    ["compare", "--model", "mlp", "--cluster", "workstation", "--policies", "heft",
     "--plot", "p.xyz"],
    ["simulate", "--model", "mlp", "--cluster", "workstation", "--policy", "heft",
     "--trace", "t.txt"],
    ["simulate", "--graph", "/nonexistent.json", "--cluster", "workstation",
     "--policy", "heft"],
    ["hw", "remove", "l4"],
    ["hw", "remove", "nothing-like-it"],
    ["model", "show", "mlp", "--passes", ","],
])
def test_bad_command_lines_are_one_line(capsys, argv: list[str]) -> None:
    try:
        code, err = _cli(capsys, *argv)
    except SystemExit as exc:  # argparse's own errors
        assert exc.code == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1
        return
    assert code == 2 and err.startswith("placelab: error: ")


TENANTS = {"cluster": "quad-v100-nvlink", "sharing": "weighted_fair", "links": "fair",
           "jobs": [{"name": "a", "model": "mlp", "batch": 2, "weight": 2.0},
                    {"name": "b", "model": "lenet5", "arrival_s": 1e-5, "priority": 1}],
           "stream": {"rate_per_s": 1e4, "count": 2, "seed": 1,
                      "mix": [{"model": "mlp", "batch": 2}]}}


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=mutated(TENANTS, toml=True))
def test_tenant_specs_are_zero_or_two(tmp_path_factory, capsys, text: str) -> None:
    folder = tmp_path_factory.mktemp("tenants")
    spec, out = folder / "t.toml", folder / "jobs.parquet"
    spec.write_text(text)
    code, _ = _cli(capsys, "tenants", str(spec), "--out", str(out), "--json")
    assert out.exists() == (code == 0)  # a refused spec stores nothing
