"""The held-out split: calibration's random configurations and the unseen graphs validation
runs never share an op signature, and both sides keep to their residue."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.calibrate import Budget, _draws
from runtime.microbench import calibration_graphs
from runtime.sampling import FAMILIES, TRAINED, build, draw, draw_dim, is_held_out, perturb
from runtime.unseen import FAMILIES as UNSEEN
from runtime.unseen import signatures, unseen_graphs, zoo_signatures


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), low=st.integers(1, 50), span=st.integers(20, 5000),
       held_out=st.booleans())
def test_a_drawn_dimension_keeps_to_its_side_of_the_split(seed: int, low: int, span: int,
                                                           held_out: bool) -> None:
    d = draw_dim(np.random.default_rng(seed), low, low + span, held_out=held_out)
    assert low <= d <= low + span and is_held_out(d) == held_out


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), family=st.sampled_from(sorted(FAMILIES)))
def test_every_tensor_calibration_builds_keeps_to_its_side(seed: int, family: str) -> None:
    rng = np.random.default_rng(seed)
    config = draw(family, rng)
    for c in (config, perturb(config, rng)):  # adaptive sampling's neighbours too
        forward = build({**c, "train": False})
        assert not [t.shape for op in forward for t in op.outputs
                    if any(is_held_out(d) for d in t.shape)]


def _training_signatures(budget: Budget, seed: int = 0) -> set[str]:
    """What calibration with ``budget`` fits on before its adaptive rounds (which only
    perturb these on calibration's side): its random cases and the zoo's models."""
    found = set()
    for config in _draws(np.random.default_rng([seed, 0]), budget.cases):
        found |= signatures(build(config))
    for graph in calibration_graphs(budget.quick_zoo):
        found |= signatures(graph)
    return found


def test_the_ops_that_dominate_training_are_drawn_inside_training_steps_as_often_as_alone(
        ) -> None:
    configs = _draws(np.random.default_rng(0), 6)
    for family in FAMILIES:
        mine = [c for c in configs if c["family"] == family]
        steps = sum(c["train"] for c in mine)
        assert len(mine) == (12 if family in TRAINED else 6)
        assert steps >= (6 if family in TRAINED else 0)
    backward = {op.kind for c in configs if c["family"] == "conv2d" and c["train"]
                for op in build(c)}
    assert "backward" in backward


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_unseen_graphs_share_no_signature_with_calibrations_training_set(seed: int) -> None:
    training = _training_signatures(Budget.full()) | _training_signatures(Budget.quick())
    graphs = unseen_graphs(24, seed=seed, avoid=zoo_signatures() | training)
    assert len(graphs) == 24
    shared = {name: signatures(g) & training for name, g in graphs.items()}
    assert not any(shared.values()), shared
    # the split, not the avoid list, does nearly all the work
    plain = unseen_graphs(24, seed=seed)
    assert sum(len(signatures(g) & training) for g in plain.values()) <= 3


def test_unseen_graphs_are_seeded_and_cover_every_family_and_step() -> None:
    a, b = unseen_graphs(24, seed=5), unseen_graphs(24, seed=5)
    assert list(a) == list(b) and all(a[n] == b[n] for n in a)
    assert list(unseen_graphs(24, seed=6)) != list(a) or any(
        unseen_graphs(24, seed=6)[n] != a[n] for n in a)
    assert {g.meta["family"] for g in a.values()} == set(UNSEEN)
    steps = {g.meta["step"] for g in a.values()}
    assert {"forward", "train.sgd", "train.adam"} <= steps
    assert all(g.meta["batch"] >= 1 for g in a.values())
    assert all(g.meta["step"] == "forward" for g in a.values() if g.meta["family"] == "rnn")
