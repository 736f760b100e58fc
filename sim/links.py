"""How transfers share copy engines and links: the simulator's link models beyond its
default (first come first served, in :mod:`sim.engine`).

* ``none`` (:class:`NoContention`): every transfer starts when its tensor is ready and
  takes the contention-free time, the model list schedulers plan with.
* ``fair`` (:class:`FairSharing`): the flow model of SimGrid and of network simulators.
  A transfer waits for a copy engine of its source (first come first served), then for its
  route's latency, a pure delay that occupies no link; then its bytes flow, and every link
  channel divides its bandwidth max-min fairly among the flows crossing it (progressive
  filling), recomputed whenever a flow starts or ends. A flow alone takes exactly the cost
  model's contention-free time.

They are mixins over the simulation classes of :mod:`sim.engine`, overriding how a
transfer starts; the rest of a run (compute, memory, trace) is shared.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Any

from simpy.events import NORMAL, Event

__all__ = ["FairSharing", "NoContention"]


def _event(sim: Any, delay: float, value: Any, callback: Any) -> None:
    event = Event(sim.env)
    event._ok = True
    event._value = value
    event.callbacks.append(callback)
    sim.env.schedule(event, NORMAL, delay)


def _charge_receiver(sim: Any, k: int) -> None:
    """A received copy holds memory from the transfer's request (as in every model)."""
    dst = sim.t_dst[k]
    used = sim.used[dst] + sim.t_bytes[k]
    sim.used[dst] = used
    sim.timeline.extend((sim.env._now, dst, used))
    if used > sim.peak[dst]:
        sim._new_peak(dst, used, -1, k)


class NoContention:
    """Copy engines and links without limit."""

    def _start_transfer(self: Any, k: int) -> None:
        now = self.env._now
        end = now + self.t_duration[k]
        self.t_start[k], self.t_end[k], self.t_engine[k] = now, end, 0
        _charge_receiver(self, k)
        _event(self, end - now, k, self._on_transfer_done)


class FairSharing:
    """Max-min fair bandwidth sharing among the flows active on each link channel.

    Incremental: a flow that starts or ends changes the rates of its component only (the
    flows linked to it through shared channels, transitively); every other flow keeps its
    rate and its foreseen end. A flow's bytes left are settled only when its rate changes.
    """

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)  # type: ignore[call-arg]
        s: Any = self
        routes: dict[tuple[int, int], tuple[float, float]] = {}
        self.channel_capacity: dict[str, float] = {}
        self.f_latency: list[float] = []
        self.f_volume: list[float] = []
        for k in range(len(s.t_src)):
            key = (s.t_src[k], s.t_dst[k])
            if key not in routes:
                hops = s.cluster.route(s.devices[key[0]], s.devices[key[1]])
                for hop in hops:
                    self.channel_capacity[hop.channel] = hop.link.bandwidth
                routes[key] = (sum(h.link.latency_s for h in hops),
                               min(h.link.bandwidth for h in hops))
            latency, bottleneck = routes[key]
            # The bytes at the bottleneck rate take what the cost model charges beyond the
            # latency (the tensor's bytes for the roofline; a table's time otherwise).
            self.f_latency.append(min(latency, s.t_duration[k]))
            self.f_volume.append(max(s.t_duration[k] - latency, 0.0) * bottleneck)
        # Views of one device (several jobs) share its engine list, so its queue too.
        engines: dict[int, list[int]] = {}
        queues: dict[int, deque[int]] = {}
        self.free_engines = [engines.setdefault(id(e), list(range(len(e) - 1, -1, -1)))
                             for e in s.copy_free]
        self.waiting: list[deque[int]] = [queues.setdefault(id(e), deque())
                                          for e in s.copy_free]
        self.flows_on: dict[str, dict[int, None]] = {c: {} for c in self.channel_capacity}
        self.remaining: dict[int, float] = {}  # bytes left at ``settled[k]``
        self.settled: dict[int, float] = {}
        self.rate: dict[int, float] = {}
        self.ends: list[tuple[float, int, int]] = []  # (foreseen end, flow, version)
        self.version: dict[int, int] = {}
        self.next_tick = float("inf")
        self._on_flowing = self._flowing
        self._on_tick = self._tick

    # -- engines and latency ----------------------------------------------------------------

    def _start_transfer(self: Any, k: int) -> None:
        _charge_receiver(self, k)
        src = self.t_src[k]
        if self.free_engines[src]:
            self._begin(k)
        else:
            self.waiting[src].append(k)

    def _begin(self: Any, k: int) -> None:
        self.t_engine[k] = self.free_engines[self.t_src[k]].pop()
        self.t_start[k] = self.env._now
        _event(self, self.f_latency[k], k, self._on_flowing)

    def _flowing(self: Any, event: Any) -> None:
        k: int = event._value
        if self.f_volume[k] <= 0.0:
            self._complete(k)
            return
        now = self.env._now
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

    def _component(self: Any, channels: tuple[str, ...]) -> list[int]:
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

    def _share(self: Any, flows: list[int]) -> dict[int, float]:
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

    def _reshare(self: Any, flows: list[int]) -> None:
        """Settle the component's flows at their old rates, give them new ones, foresee
        their ends."""
        if not flows:
            return
        now = self.env._now
        remaining, settled, rate, version = self.remaining, self.settled, self.rate, self.version
        for k, new in self._share(flows).items():
            remaining[k] -= rate[k] * (now - settled[k])
            settled[k], rate[k] = now, new
            version[k] = version.get(k, 0) + 1
            heapq.heappush(self.ends, (now + max(remaining[k], 0.0) / new, k, version[k]))
        self._schedule_tick()

    def _schedule_tick(self: Any) -> None:
        ends, version = self.ends, self.version
        if len(ends) > 64 and len(ends) > 4 * len(version):
            # Most entries were foreseen under rates that have changed since: drop them at
            # once (linear) rather than one pop at a time. The live entries, and so the
            # order they come out in, are the same.
            ends[:] = [e for e in ends if e[2] == version.get(e[1])]
            heapq.heapify(ends)
        while ends and ends[0][2] != version.get(ends[0][1]):
            heapq.heappop(ends)  # foreseen under a rate that has changed since
        if ends and (ends[0][0] < self.next_tick or self.next_tick <= self.env._now):
            self.next_tick = ends[0][0]
            _event(self, self.next_tick - self.env._now, None, self._on_tick)

    def _tick(self: Any, event: Any) -> None:
        # This tick has fired (the clock may read it an ulp early: now + (t - now) need
        # not round to t), so none is pending until _schedule_tick books the next.
        self.next_tick = float("inf")
        now, ends, version = self.env._now, self.ends, self.version
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

    def _complete(self: Any, k: int) -> None:
        self.t_end[k] = self.env._now
        src = self.t_src[k]
        self.free_engines[src].append(self.t_engine[k])
        if self.waiting[src]:
            self._begin(self.waiting[src].popleft())
        self._finish_transfer(k)
