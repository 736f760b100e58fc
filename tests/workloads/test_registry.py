from __future__ import annotations

import pytest

from workloads import RegistryError, build_model
from workloads.registry import Registry


def test_unknown_model_lists_the_known_ones() -> None:
    with pytest.raises(RegistryError, match=r"unknown model 'nope'; expected one of: .*lenet5"):
        build_model("nope")


@pytest.mark.parametrize(("kwargs", "got"), [
    ({"batch": 0}, "batch must be an int in 1..16777216, got 0"),
    ({"batch": True}, "batch must be an int in 1..16777216, got True"),
    ({"batch": 1.5}, "batch must be an int in 1..16777216, got 1.5"),
    ({"batch": 10**20}, "batch must be an int in 1..16777216, got 100000000000000000000"),
    ({"seq_len": 2**24 + 1}, "seq_len must be an int in 1..16777216, got 16777217"),
])
def test_bad_batch_or_seq_len_is_named(kwargs: dict[str, object], got: str) -> None:
    with pytest.raises(RegistryError, match=got):
        build_model("gpt2_small", **kwargs)  # type: ignore[arg-type]


def test_duplicate_registration_is_refused() -> None:
    reg: Registry[int] = Registry("widget")
    reg.register("a", 1)
    with pytest.raises(RegistryError, match="widget 'a' is already registered"):
        reg.register("a", 2)
    assert reg.get("a") == 1


def _fake_distribution(root, name: str, entry_points: str, modules: dict[str, str]) -> None:
    """A distribution installed in ``root`` (a folder on sys.path): metadata, entry points
    and its modules, the way pip lays one out."""
    info = root / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)
    for module, source in modules.items():
        (root / f"{module}.py").write_text(source)


PLUGINS = '''
[placelab.policies]
everything_first = fake_plugins:EverythingFirst
broken = fake_broken:Nope
heft = fake_plugins:EverythingFirst
[placelab.passes]
noop = fake_plugins:NoOp
[placelab.cost_models]
flat = fake_plugins:Flat
'''

PLUGIN_SOURCE = '''
from hwmodels.cost import CostModel
from policies.base import PlacementPolicy
from policies.plans import Placement
from workloads.passes.base import Pass


class EverythingFirst(PlacementPolicy):
    name = "everything_first"

    def place(self, graph, cluster, cost):
        return Placement({op.name: cluster.device_names[0] for op in graph})


class NoOp(Pass):
    name = "noop"

    def call(self, graph):
        return graph, False


class Flat(CostModel):
    def op_time(self, op, device):
        return 1e-3
'''


def test_plugins_load_through_entry_points_and_a_broken_one_spoils_nothing(
        tmp_path, monkeypatch) -> None:
    import sys

    from workloads.registry import PluginWarning

    _fake_distribution(tmp_path, "placelab_fake_plugins", PLUGINS,
                       {"fake_plugins": PLUGIN_SOURCE, "fake_broken": "raise ImportError('x')"})
    monkeypatch.syspath_prepend(str(tmp_path))
    policies: Registry[type] = Registry("policy", "placelab.policies",
                        builtins={"heft": "policies.listsched:HEFT"})
    with pytest.warns(PluginWarning) as caught:
        names = policies.names()
    messages = [str(w.message) for w in caught]
    assert any("policy plug-in 'broken' (fake_broken:Nope) of distribution "
               "'placelab_fake_plugins' failed to load and is skipped: ImportError: x" in m
               for m in messages), messages
    assert any("'heft'" in m and "already registered" in m for m in messages), messages
    assert names == ["everything_first", "heft"]
    assert policies.get("heft").__name__ == "HEFT"  # the built-in is never overwritten
    assert policies.get("everything_first").__name__ == "EverythingFirst"
    passes: Registry[type] = Registry("pass", "placelab.passes")
    costs: Registry[type] = Registry("cost model", "placelab.cost_models")
    assert passes.names() == ["noop"] and costs.get("flat").__name__ == "Flat"
    assert "fake_plugins" in sys.modules


@pytest.mark.parametrize("broken", ["raise ImportError('x')", "raise SystemExit(0)",
                                    "import sys; sys.exit('bye')"])
def test_the_cli_lists_entry_point_policies_and_warns_once_about_a_broken_one(
        tmp_path, broken: str) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    _fake_distribution(tmp_path, "placelab_fake_plugins", PLUGINS,
                       {"fake_plugins": PLUGIN_SOURCE, "fake_broken": broken})
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(root)])}
    done = subprocess.run([sys.executable, "-m", "experiments.cli", "list", "policies"],
                          env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "everything_first" in done.stdout.split()
    assert done.stderr.count("'broken'") == 1
    assert "Traceback" not in done.stderr
