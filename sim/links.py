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

if TYPE_CHECKING:
    from sim.engine import Simulation

__all__ = ["FairSharing", "FirstComeFirstServed", "LinkModel", "NoContention"]


class LinkModel(ABC):
    """How transfers share copy engines and links. :meth:`start` is the whole interface:
    charge the receiver (``run.receive``), record the transfer's start, end and engine
    (``run.t_start``, ``t_end``, ``t_engine``) and call ``run.finish_transfer`` at its end."""

    name: ClassVar[str] = ""

    def __init__(self, run: Simulation) -> None:
        self.run = run

    @abstractmethod
    def start(self, k: int) -> None:
        """Transfer ``k``'s tensor is ready on its source (at ``run.env.now``)."""


class FirstComeFirstServed(LinkModel):
    """Each copy engine and link channel carries one transfer at a time, first come first
    served; a transfer holds its whole route at the bottleneck rate."""

    name = "fcfs"

    def __init__(self, run: Simulation) -> None:
        super().__init__(run)
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
    """

    name = "fair"

    def __init__(self, run: Simulation) -> None:
        super().__init__(run)
        self.env, self.t_channels = run.env, run.t_channels
        routes: dict[tuple[int, int], tuple[float, float]] = {}
        self.channel_capacity: dict[str, float] = {}
        self.f_latency: list[float] = []
        self.f_volume: list[float] = []
        for k in range(len(run.t_src)):
            key = (run.t_src[k], run.t_dst[k])
            if key not in routes:
                hops = run.cluster.route(run.devices[key[0]], run.devices[key[1]])
                for hop in hops:
                    self.channel_capacity[hop.channel] = hop.link.bandwidth
                routes[key] = (sum(h.link.latency_s for h in hops),
                               min(h.link.bandwidth for h in hops))
            latency, bottleneck = routes[key]
            # The bytes at the bottleneck rate take what the cost model charges beyond the
            # latency (the tensor's bytes for the roofline; a table's time otherwise).
            self.f_latency.append(min(latency, run.t_duration[k]))
            self.f_volume.append(max(run.t_duration[k] - latency, 0.0) * bottleneck)
        # Views of one device (several jobs) share its engine list, so its queue too.
        engines: dict[int, list[int]] = {}
        queues: dict[int, deque[int]] = {}
        self.free_engines = [engines.setdefault(id(e), list(range(len(e) - 1, -1, -1)))
                             for e in run.copy_free]
        self.waiting: list[deque[int]] = [queues.setdefault(id(e), deque())
                                          for e in run.copy_free]
        self.flows_on: dict[str, dict[int, None]] = {c: {} for c in self.channel_capacity}
        self.remaining: dict[int, float] = {}  # bytes left at ``settled[k]``
        self.settled: dict[int, float] = {}
        self.rate: dict[int, float] = {}
        self.ends: list[tuple[float, int, int]] = []  # (foreseen end, flow, version)
        self.version: dict[int, int] = {}
        self.next_tick = float("inf")

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
        now = self.env.now
        self.remaining[k], self.settled[k], self.rate[k] = self.f_volume[k], now, 0.0
        channels, alone = self.t_channels[k], True
        for channel in channels:
            flows = self.flows_on[channel]
            alone = alone and not flows
            flows[k] = None
        if not alone or not channels:
            self._reshare(self._component(channels))
            return
        # Alone on its channels: what _reshare would do for a component of one flow (no
        # progress to settle yet, its narrowest channel's capacity for a rate).
        rate = self.rate[k] = min(self.channel_capacity[c] for c in channels)
        version = self.version[k] = self.version.get(k, 0) + 1
        heapq.heappush(self.ends, (now + max(self.remaining[k], 0.0) / rate, k, version))
        self._schedule_tick()

    # -- bandwidth ----------------------------------------------------------------------------

    def _component(self, channels: tuple[str, ...]) -> list[int]:
        """The active flows linked to ``channels`` through shared channels, transitively."""
        seen_channels = set(channels)
        stack, flows = list(channels), dict[int, None]()
        while stack:
            for k in self.flows_on[stack.pop()]:
                if k not in flows:
                    flows[k] = None
                    for c in self.t_channels[k]:
                        if c not in seen_channels:
                            seen_channels.add(c)
                            stack.append(c)
        return list(flows)

    def _share(self, flows: list[int]) -> dict[int, float]:
        """Progressive filling over one component: the channel with the smallest fair share
        fixes the rate of its flows; remove them and repeat.

        The channel is found in a heap of (share, first-seen order) entries, one pushed
        whenever a channel's share changes and stale ones skipped: the same channel a scan
        would pick (ties to the first seen), in logarithmic time."""
        t_channels, users = self.t_channels, self.flows_on
        if len(flows) == 1:  # alone: its narrowest channel (capacity / 1, as filling has it)
            return {flows[0]: min(self.channel_capacity[c] for c in t_channels[flows[0]])}
        # A component holds every active flow of each of its channels, so a channel's
        # flows are those it carries; within one channel's turn every flow gets the same
        # share, so the order they are visited in changes no sum.
        order: dict[str, int] = {}
        for k in flows:
            for channel in t_channels[k]:
                if channel not in order:
                    order[channel] = len(order)
        capacity = self.channel_capacity
        left = {c: capacity[c] for c in order}
        count = {c: len(users[c]) for c in order}
        heap = [(left[c] / count[c], i, c) for c, i in order.items()]
        heapq.heapify(heap)
        rate: dict[int, float] = {}
        while len(rate) < len(flows):
            share, _, channel = heapq.heappop(heap)
            if not count[channel] or share != left[channel] / count[channel]:
                continue  # stale: the channel's share changed after this entry
            touched: dict[str, None] = {}
            for k in users[channel]:
                if k in rate:
                    continue
                rate[k] = share
                for c in t_channels[k]:
                    left[c] -= share
                    count[c] -= 1
                    touched[c] = None
            for c in touched:
                if count[c]:
                    heapq.heappush(heap, (left[c] / count[c], order[c], c))
        return rate

    def _reshare(self, flows: list[int]) -> None:
        """Settle the component's flows at their old rates, give them new ones, foresee
        their ends."""
        if not flows:
            return
        now = self.env.now
        remaining, settled, rate, version = self.remaining, self.settled, self.rate, self.version
        for k, new in self._share(flows).items():
            remaining[k] -= rate[k] * (now - settled[k])
            settled[k], rate[k] = now, new
            version[k] = version.get(k, 0) + 1
            heapq.heappush(self.ends, (now + max(remaining[k], 0.0) / new, k, version[k]))
        self._schedule_tick()

    def _schedule_tick(self) -> None:
        ends, version = self.ends, self.version
        if len(ends) > 64 and len(ends) > 4 * len(version):
            # Most entries were foreseen under rates that have changed since: drop them at
            # once (linear) rather than one pop at a time. The live entries, and so the
            # order they come out in, are the same.
            ends[:] = [e for e in ends if e[2] == version.get(e[1])]
            heapq.heapify(ends)
        while ends and ends[0][2] != version.get(ends[0][1]):
            heapq.heappop(ends)  # foreseen under a rate that has changed since
        if ends and (ends[0][0] < self.next_tick or self.next_tick <= self.env.now):
            self.next_tick = ends[0][0]
            self.env.schedule(self.next_tick - self.env.now, self._tick, None)

    def _tick(self, _unused: None) -> None:
        # This tick has fired (the clock may read it an ulp early: now + (t - now) need
        # not round to t), so none is pending until _schedule_tick books the next.
        self.next_tick = float("inf")
        now, ends, version = self.env.now, self.ends, self.version
        # The flows foreseen to end by now end now, by name: waiting for a remainder that
        # rounding left would stall time (a tick too small to move the clock).
        done: list[int] = []
        while ends and ends[0][0] <= now * (1 + 1e-9) + 1e-15:
            _, k, v = heapq.heappop(ends)
            if v == version.get(k):
                done.append(k)
        channels: dict[str, None] = {}
        for k in done:
            del self.remaining[k], self.settled[k], self.rate[k], version[k]
            for channel in self.t_channels[k]:
                del self.flows_on[channel][k]
                channels[channel] = None
        for k in done:
            self._complete(k)
        flows_on = self.flows_on
        if any(flows_on[c] for c in channels):  # others shared a channel: they speed up
            self._reshare(self._component(tuple(channels)))
        self._schedule_tick()

    def _complete(self, k: int) -> None:
        run = self.run
        run.t_end[k] = self.env.now
        src = run.t_src[k]
        self.free_engines[src].append(run.t_engine[k])
        if self.waiting[src]:
            self._begin(self.waiting[src].popleft())
        run.finish_transfer(k)
