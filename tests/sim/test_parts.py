"""A run is composed of parts chosen by name: the event core against simpy, and third-party
issue orders and link models taken from their registries."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from policies import Plan
from sim import simulate
from sim.engine import IssueOrder, Simulation
from sim.events import EventQueue
from sim.links import LinkModel, NoContention
from sim.options import LINK_REGISTRY, ORDER_REGISTRY
from tests.helpers import FixedCost, op, toy_cluster
from workloads import Graph
from workloads.errors import PlacementError, RegistryError


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 0.1, 0.3, 1.0, 1e-9, 2.5]),
                          st.lists(st.sampled_from([0.0, 0.2, 0.1 + 0.2, 7.0]), max_size=3)),
                min_size=1, max_size=30))
def test_events_run_in_simpys_order_at_simpys_times(plan: list[tuple[float, list[float]]]
                                                     ) -> None:
    # Each event, when it runs, schedules its follow-ups; simpy (public API) is the oracle.
    def on_simpy() -> list[tuple[float, tuple[int, ...]]]:
        env = simpy.Environment()
        seen: list[tuple[float, tuple[int, ...]]] = []

        def fire(event: simpy.Event) -> None:
            value = cast(tuple[int, ...], event.value)  # what the timeout was given
            seen.append((float(env.now), value))
            for j, delay in enumerate(plan[value[0]][1] if len(value) == 1 else []):
                env.timeout(delay, (*value, j)).callbacks.append(fire)

        for i, (delay, _) in enumerate(plan):
            env.timeout(delay, (i,)).callbacks.append(fire)
        env.run()
        return seen

    def on_ours() -> list[tuple[float, tuple[int, ...]]]:
        queue, seen = EventQueue(), []

        def fire(value: tuple[int, ...]) -> None:
            seen.append((queue.now, value))
            for j, delay in enumerate(plan[value[0]][1] if len(value) == 1 else []):
                queue.schedule(delay, fire, (*value, j))

        for i, (delay, _) in enumerate(plan):
            queue.schedule(delay, fire, (i,))
        queue.run()
        return seen

    assert on_ours() == on_simpy()  # same order, bit-identical times


class DoubledTransfers(NoContention):
    """No contention, every transfer twice its contention-free time."""

    name = "doubled"

    def start(self, k: int) -> None:
        run = self.run
        run.t_duration[k] *= 2
        super().start(k)


class LastReadyFirst(IssueOrder):
    """Each device starts the op that became ready last."""

    name = "last_ready_first"

    def attach(self, run: Simulation) -> None:
        super().attach(run)
        self.stacks: list[list[int]] = [[] for _ in run.devices]
        self.ready = lambda op: self.stacks[run.op_dev[op]].append(op)

    def try_start(self, d: int) -> None:
        run, stack = self.run, self.stacks[d]
        while run.free_streams[d] and stack:
            run.next[d] += 1
            run.start_op(stack.pop(), d, run.free_streams[d].pop())


@pytest.fixture
def plugins() -> Iterator[None]:
    LINK_REGISTRY.register("doubled", DoubledTransfers)
    ORDER_REGISTRY.register("last_ready_first", LastReadyFirst)
    yield
    LINK_REGISTRY.unregister("doubled")
    ORDER_REGISTRY.unregister("last_ready_first")


def test_a_registered_link_model_is_a_choice_of_simulate(plugins: None) -> None:
    g = Graph("t", [op("a", nbytes=4000), op("b", ("a",))])
    c = toy_cluster(2, bandwidth=1e6, latency_s=2e-3)
    p = Plan(g, {"a": "d0", "b": "d1"}, {"d0": ["a"], "d1": ["b"]})
    cost = FixedCost(c, {"a": 1.0, "b": 0.5})
    plain = simulate(p, c, cost, links="none").makespan_s
    assert plain == pytest.approx(1.0 + 2e-3 + 4000 / 1e6 + 0.5)
    assert simulate(p, c, cost, links="doubled").makespan_s == pytest.approx(
        1.0 + 2 * (2e-3 + 4000 / 1e6) + 0.5)
    with pytest.raises(PlacementError, match=r"links must be one of fcfs, fair, none, "
                                             r"doubled, got 'slow'"):
        simulate(p, c, cost, links="slow")


def test_a_registered_issue_order_decides_what_starts(plugins: None) -> None:
    g = Graph("fan", [op("root"), op("x", ("root",)), op("y", ("root",))])
    c = toy_cluster(1)
    p = Plan(g, dict.fromkeys(g.names, "d0"), {"d0": ["root", "x", "y"]})
    cost = FixedCost(c, {"root": 1.0, "x": 2.0, "y": 3.0})
    starts = {o: simulate(p, c, cost, order=o).trace.set_index("name")["start_s"]
              for o in ("plan", "last_ready_first")}
    assert (starts["plan"]["x"], starts["plan"]["y"]) == (1.0, 3.0)
    assert (starts["last_ready_first"]["y"], starts["last_ready_first"]["x"]) == (1.0, 4.0)


def test_a_part_name_is_taken_once() -> None:
    with pytest.raises(RegistryError, match="link model 'fair' is already registered"):
        LINK_REGISTRY.register("fair", LinkModel)
    with pytest.raises(RegistryError, match="issue order 'plan' is already registered"):
        ORDER_REGISTRY.register("plan", IssueOrder)


def _pair_run(order: IssueOrder, links: LinkModel) -> Simulation:
    """A two-op run on two devices, composed of ``order`` and ``links``."""
    from sim.wiring import wire

    cluster = toy_cluster(2)
    graph = Graph("pair", [op("a"), op("b", inputs=("a",))])
    p = Plan(graph, {"a": "d0", "b": "d1"}, {"d0": ["a"], "d1": ["b"]})
    made = Simulation(wire(p, cluster, FixedCost(cluster, default=1e-3)), cluster,
                      cluster.device_names, p)
    return made.compose(order, links)


def test_a_part_serving_one_run_is_refused_by_another() -> None:
    from sim.engine import PlanOrder

    order, links = PlanOrder(), LINK_REGISTRY.make("fair")
    first = _pair_run(order, links)
    first.compose(order, links)  # the same run again is fine
    for refused, name in ((lambda: _pair_run(order, NoContention()), "issue order 'plan'"),
                          (lambda: _pair_run(PlanOrder(), links), "link model 'fair'")):
        with pytest.raises(PlacementError, match=rf"^{name}: already serves another run; "
                                                 r"give each run its own \(clone\(\)\)$"):
            refused()
    assert order.run is first and links.run is first  # the first run keeps its parts
    # clones serve a run of their own
    second = _pair_run(order.clone(), links.clone())
    assert second.issue.run is second and second.links.run is second
