"""One plug-in base for every parameterised family (placement policies, sharing policies,
passes): made from a spec by the family's registry, parameters got, set, cloned and shown
the same way, and refused in one line naming the family, the member and the parameter."""

from __future__ import annotations

from typing import Any

import pytest

from policies.base import POLICIES
from sim.sharing import SHARING
from workloads.errors import GraphError, PlacementError
from workloads.passes import PASSES
from workloads.registry import Registry

FAMILIES: list[tuple[Registry[Any], str, type[Exception]]] = [
    (POLICIES, "policy", PlacementError), (SHARING, "sharing policy", PlacementError),
    (PASSES, "pass", GraphError)]
MEMBERS = [(registry, name, family, error) for registry, family, error in FAMILIES
           for name in registry.names()]


@pytest.mark.parametrize(("registry", "name", "family", "error"), MEMBERS,
                         ids=[f"{m[2]}:{m[1]}" for m in MEMBERS])
def test_every_member_is_made_cloned_and_shown_from_its_declared_parameters(
        registry, name: str, family: str, error: type[Exception]) -> None:
    member = registry.make(name)
    declared = {p.name: p.default for p in member.params}
    assert member.get_params() == declared
    assert (member.family, member.error) == (family, error)
    clone = member.clone()
    assert type(clone) is type(member) and clone is not member
    assert clone.get_params() == member.get_params()
    shown = ", ".join(f"{k}={v!r}" for k, v in declared.items())
    assert repr(member) == f"{type(member).__name__}({shown})"
    with pytest.raises(error, match=rf"^{family} '{name}': nope is not a declared parameter "
                                    r"\(params lists none by that name\)$"):
        member.set_params(nope=1)


def test_set_params_checks_values_as_the_constructor_does() -> None:
    policy = POLICIES.make("mcmc:evals=10")
    assert policy.set_params(evals=20, beta=2.5) is policy
    assert (policy.evals, policy.beta) == (20, 2.5)
    with pytest.raises(PlacementError, match=r"^policy 'mcmc': evals must be an int >= 1, got -1$"):
        policy.set_params(evals=-1)
    train = PASSES.make("train")
    with pytest.raises(GraphError, match=r"^pass 'train': optimizer must be one of "):
        train.set_params(optimizer="lion")


def test_a_spec_of_an_undeclared_key_names_the_family_and_the_key() -> None:
    with pytest.raises(GraphError, match=r"pass 'train'"):
        PASSES.make("train:lr=0.1")
    with pytest.raises(PlacementError, match=r"sharing policy 'priority'"):
        SHARING.make("priority:urgent=true")


def test_a_clone_draws_what_the_original_would_draw() -> None:
    import numpy as np

    policy = POLICIES.make("random")
    policy.set_params(seed=np.random.default_rng(5))
    clone = policy.clone()
    assert clone.seed is not policy.seed
    assert clone.seed.random() == policy.seed.random()


def test_a_registry_registers_what_it_decorates_and_refuses_a_name_twice() -> None:
    from workloads.errors import RegistryError
    from workloads.passes import Pass

    @PASSES.register("identity_for_test")
    class Identity(Pass):
        name = "identity_for_test"

        def call(self, graph):  # type: ignore[no-untyped-def]
            return graph, False

    try:
        assert PASSES.get("identity_for_test") is Identity
        assert repr(PASSES.make("identity_for_test")) == "Identity()"
        with pytest.raises(RegistryError, match="pass 'identity_for_test' is already "
                                                "registered"):
            PASSES.register("identity_for_test")(Identity)
    finally:
        PASSES.unregister("identity_for_test")
