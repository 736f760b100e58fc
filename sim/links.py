"""How transfers share copy engines and links: the link models, one part of a run
(:class:`sim.engine.Simulation`), registered by name in :data:`sim.options.LINK_REGISTRY`.

* ``fcfs`` (:class:`FirstComeFirstServed`, the default): a transfer needs one copy engine of
  its source and every link channel of its route for its whole duration, each serving one
  transfer at a time, first come first served.
* ``none`` (:class:`NoContention`): every transfer starts when its tensor is ready and
  takes the contention-free time, the model list schedulers plan with.
* ``fair`` (:class:`FairSharing`): the flow model of SimGrid and of network simulators.
  A transfer waits for a copy engine of its source (first come first served), then for its
  route's latency, a pure delay that occupies no link; then its bytes flow, and every link
  channel divides its bandwidth max-min fairly among the flows crossing it (progressive
  filling), recomputed whenever a flow starts or ends. A flow alone takes exactly the cost
  model's contention-free time.

A link model is told when a transfer's tensor is ready on its source (:meth:`LinkModel.start`)
and says when it has arrived (``run.finish_transfer``); the rest of a run (compute, memory,
trace) is shared.
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections import deque
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from workloads.errors import PlacementError
from workloads.params import Param
from workloads.plugin import Plugin

if TYPE_CHECKING:
    from collections.abc import Sequence

    from hwmodels.spec import Cluster
    from sim.engine import IssueOrder, Simulation
    from sim.flows import FlowTable

__all__ = ["FairSharing", "FirstComeFirstServed", "LinkModel", "NoContention", "bind"]


def bind(part: IssueOrder | LinkModel, run: Simulation) -> None:
    """Bind a run's part (issue order, link model) to ``run``: a part keeps one run's state,
    so one already serving another run is refused (give each run its own, ``clone()``).

    >>> from sim.options import LINK_REGISTRY
    >>> part, run, other = LINK_REGISTRY.make("fcfs"), object(), object()
    >>> bind(part, run); bind(part, run)  # the same run again: nothing changes
    >>> bind(part, other)
    Traceback (most recent call last):
    ...
    workloads.errors.PlacementError: link model 'fcfs': already serves another run; ...
    """
    serves = part.__dict__.get("run")
    if serves is not None and serves is not run:
        raise part.error(f"{part.family} {part.name!r}: already serves another run; "
                         f"give each run its own (clone())")
    part.run = run


class LinkModel(Plugin, ABC):
    """How transfers share copy engines and links, one part of a run: made from its declared
    parameters alone (:class:`workloads.plugin.Plugin`; ``LINK_REGISTRY.make("fair")``) and
    bound to one run by :meth:`attach`. :meth:`start` is the whole interface: charge the
    receiver (``run.receive``), record the transfer's start, end and engine (``run.t_start``,
    ``t_end``, ``t_engine``) and call ``run.finish_transfer`` at its end.
    :mod:`sim.testing` is the suite every link model must pass."""

    name: ClassVar[str] = ""
    family = "link model"
    error = PlacementError
    run: Simulation

    def attach(self, run: Simulation) -> None:
        """Bind to ``run`` before it begins (a part serves one run: :func:`bind`)."""
        bind(self, run)

    @abstractmethod
    def start(self, k: int) -> None:
        """Transfer ``k``'s tensor is ready on its source (at ``run.env.now``)."""


class FirstComeFirstServed(LinkModel):
    """Each copy engine and link channel carries one transfer at a time, first come first
    served; a transfer holds its whole route at the bottleneck rate."""

    name = "fcfs"

    def attach(self, run: Simulation) -> None:
        super().attach(run)
        self.link_free: dict[str, float] = {}

    def start(self, k: int) -> None:
        run = self.run
        env = run.env
        now = env.now
        engines = run.copy_free[run.t_src[k]]
        start = min(engines)
        engine = engines.index(start)
        link_free = self.link_free
        channels = run.t_channels[k]
        for channel in channels:
            busy = link_free.get(channel, 0.0)
            if busy > start:
                start = busy
        if now > start:
            start = now
        end = start + run.t_duration[k]
        engines[engine] = end
        for channel in channels:
            link_free[channel] = end
        run.t_start[k], run.t_end[k], run.t_engine[k] = start, end, engine
        run.receive(k)
        env.schedule(end - now, run.finish_transfer, k)


class NoContention(LinkModel):
    """Copy engines and links without limit."""

    name = "none"

    def start(self, k: int) -> None:
        run = self.run
        now = run.env.now
        end = now + run.t_duration[k]
        run.t_start[k], run.t_end[k], run.t_engine[k] = now, end, 0
        run.receive(k)
        run.env.schedule(end - now, run.finish_transfer, k)


class FairSharing(LinkModel):
    """Max-min fair bandwidth sharing among the flows active on each link channel.

    Incremental: a flow that starts or ends changes the rates of its component only (the
    flows linked to it through shared channels, transitively); every other flow keeps its
    rate and its foreseen end. A flow's bytes left are settled only when its rate changes.
    The flows, their rates and the filling live in :class:`sim.flows.FlowTable` (compiled);
    this part holds the copy engines, the latencies and the events.
    """

    name = "fair"
    params = (Param("scan_up_to", "int", 256, minimum=1,
                    doc="open channels up to which each bottleneck is found by a scan "
                        "rather than a heap (the same channel either way: speed only)"),)

    def __init__(self, scan_up_to: int = 256) -> None:
        self.scan_up_to: int = self.checked("scan_up_to", scan_up_to)

    def attach(self, run: Simulation) -> None:
        # numba: paid only by runs that share links fairly
        from sim.flows import finish_flows, start_flow

        super().attach(run)
        self.env = run.env
        self.flows, self.f_latency, self.f_volume = self.layout(
            run.cluster, run.devices, run.t_src, run.t_dst, run.t_duration)
        # The compiled calls and their arrays, bound once: each transfer calls both.
        self.floats, self.ints = self.flows.floats, self.flows.ints
        self.start_flow, self.finish_flows = start_flow, finish_flows
        # Views of one device (several jobs) share its engine list, so its queue too.
        engines: dict[int, list[int]] = {}
        queues: dict[int, deque[int]] = {}
        self.free_engines = [engines.setdefault(id(e), list(range(len(e) - 1, -1, -1)))
                             for e in run.copy_free]
        self.waiting: list[deque[int]] = [queues.setdefault(id(e), deque())
                                          for e in run.copy_free]
        self.booked: list[float] = []  # times of the ticks scheduled and not yet fired
        self.soonest = float("inf")  # the earliest foreseen end, as the flows last said

    def layout(self, cluster: Cluster, devices: Sequence[str], t_src: Sequence[int],
               t_dst: Sequence[int], t_duration: Sequence[float]
               ) -> tuple[FlowTable, list[float], list[float]]:
        """The flow table of these transfers (each from device number ``t_src`` to
        ``t_dst`` of ``devices``, taking ``t_duration`` alone), and each one's latency and
        volume (bytes at its bottleneck's rate): what a run under this part starts from,
        bound to no run.

        >>> from hwmodels import get_cluster
        >>> c = get_cluster("quad-v100-nvlink")
        >>> _, latency, volume = FairSharing().layout(c, c.device_names, [0], [1], [1e-3])
        >>> latency, round(volume[0])  # 1 us of latency, the rest at NVLink's 25 GB/s
        ([1e-06], 24975000)
        """
        from sim.flows import FlowTable

        # the (source, destination) pairs met, sorted, as one number each (a sort of rows
        # is many times slower)
        n_dev = len(devices)
        pair = np.asarray(t_src, dtype=np.int64) * n_dev + np.asarray(t_dst, dtype=np.int64)
        codes, route_of = np.unique(pair, return_inverse=True)
        keys = np.column_stack(np.divmod(codes, n_dev))
        channels: dict[str, int] = {}
        capacity: list[float] = []
        paths = [cluster.route(devices[src], devices[dst]) for src, dst in keys.tolist()]
        for hop in (hop for path in paths for hop in path):
            if hop.channel not in channels:
                channels[hop.channel] = len(capacity)
                capacity.append(hop.link.bandwidth)
        routes = [[channels[hop.channel] for hop in path] for path in paths]
        latency = np.array([sum(h.link.latency_s for h in path) for path in paths])[route_of]
        bottleneck = np.array([min((h.link.bandwidth for h in path), default=0.0)
                               for path in paths])[route_of]
        duration = np.asarray(t_duration, dtype=np.float64)
        # The bytes at the bottleneck rate take what the cost model charges beyond the
        # latency (the tensor's bytes for the roofline; a table's time otherwise).
        # A route of no hops (a copy within one device) is a pure delay of its whole time.
        f_latency: list[float] = np.where(bottleneck > 0, np.minimum(latency, duration),
                                          duration).tolist()
        f_volume: list[float] = (np.maximum(duration - latency, 0.0) * bottleneck).tolist()
        return (FlowTable(routes, capacity, route_of=route_of, scan_up_to=self.scan_up_to),
                f_latency, f_volume)

    # -- engines and latency ----------------------------------------------------------------

    def start(self, k: int) -> None:
        self.run.receive(k)
        src = self.run.t_src[k]
        if self.free_engines[src]:
            self._begin(k)
        else:
            self.waiting[src].append(k)

    def _begin(self, k: int) -> None:
        run = self.run
        run.t_engine[k] = self.free_engines[run.t_src[k]].pop()
        run.t_start[k] = self.env.now
        self.env.schedule(self.f_latency[k], self._flowing, k)

    def _flowing(self, k: int) -> None:
        if self.f_volume[k] <= 0.0:
            self._complete(k)
            return
        _, self.soonest = self.start_flow(k, self.f_volume[k], self.env.now, self.floats,
                                          self.ints)
        self._schedule_tick()

    # -- ends -----------------------------------------------------------------------------------

    def _schedule_tick(self) -> None:
        """Book a tick at the earliest foreseen end unless one is booked by then: a tick
        booked for an end that rates have since put off fires, finds nothing due and books
        the next, so at most one tick is booked per distinct time."""
        soonest, booked = self.soonest, self.booked
        if soonest < float("inf") and (not booked or soonest < booked[0]):
            heapq.heappush(booked, soonest)
            self.env.schedule(soonest - self.env.now, self._tick, None)

    def _tick(self, _unused: None) -> None:
        heapq.heappop(self.booked)  # this one (ticks fire in the order of their times)
        # The clock may read a tick an ulp early (now + (t - now) need not round to t), and
        # waiting for a remainder that rounding left would stall time: what is due within a
        # rounding of now ends now.
        now = self.env.now
        if self.soonest <= now * (1 + 1e-9) + 1e-15:
            n, first, _, self.soonest = self.finish_flows(now, self.floats, self.ints)
            for k in self.flows.done(n, first):
                self._complete(k)
        self._schedule_tick()

    def _complete(self, k: int) -> None:
        run = self.run
        run.t_end[k] = self.env.now
        src = run.t_src[k]
        self.free_engines[src].append(run.t_engine[k])
        if self.waiting[src]:
            self._begin(self.waiting[src].popleft())
        run.finish_transfer(k)
