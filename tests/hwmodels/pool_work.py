"""Work sent to a worker process by the pickling test (a module, so the pool can import it)."""

from __future__ import annotations

from hwmodels import Cluster, CostModel


def makespan_in_a_worker(cluster: Cluster, cost: CostModel) -> float:
    from policies import plan
    from sim import simulate
    from workloads import build_model

    return simulate(plan(build_model("lenet5", batch=4), cluster, "heft", cost), cluster,
                    cost).makespan_s


def write_profiles(path: str, worker: int) -> int:
    """Forty graphs' worth of profile entries, one transaction each, from one process."""
    from hwmodels.profiles import Entry, ProfileStore

    store = ProfileStore(path)
    return sum(store.record("cpu", {"worker": "pool"}, 1,
                            [Entry("fp32", f"w{worker}.s{i}", 2, (worker + 1) * 1e-4 + i * 1e-6,
                                   3, "relu")], f"graph{worker}.{i}") for i in range(40))
