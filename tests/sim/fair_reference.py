"""The ``fair`` link model as first written, in Python (dicts of flows, a heap of foreseen
ends): the reference that :class:`sim.links.FairSharing`, whose flows are compiled, must
equal to the bit."""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from sim.links import FairSharing

if TYPE_CHECKING:
    from sim.engine import Simulation


class ReferenceFairSharing(FairSharing):
    """Max-min fair bandwidth sharing among the flows active on each link channel (copy
    engines, latency and the end of a transfer as :class:`FairSharing` has them).

    Incremental: a flow that starts or ends changes the rates of its component only (the
    flows linked to it through shared channels, transitively); every other flow keeps its
    rate and its foreseen end. A flow's bytes left are settled only when its rate changes.
    """

    name = "fair_reference"

    def attach(self, run: Simulation) -> None:
        super().attach(run)
        self.t_channels = run.t_channels
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
        self.flows_on: dict[str, dict[int, None]] = {c: {} for c in self.channel_capacity}
        self.remaining: dict[int, float] = {}  # bytes left at ``settled[k]``
        self.settled: dict[int, float] = {}
        self.rate: dict[int, float] = {}
        self.ends: list[tuple[float, int, int]] = []  # (foreseen end, flow, version)
        self.version: dict[int, int] = {}
        self.booked: list[float] = []

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
        if ends and (not self.booked or ends[0][0] < self.booked[0]):
            heapq.heappush(self.booked, ends[0][0])
            self.env.schedule(ends[0][0] - self.env.now, self._tick, None)

    def _tick(self, _unused: None) -> None:
        heapq.heappop(self.booked)
        now, ends, version = self.env.now, self.ends, self.version
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
