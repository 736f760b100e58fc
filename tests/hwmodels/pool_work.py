"""Work sent to a worker process by the pickling test (a module, so the pool can import it)."""

from __future__ import annotations

from hwmodels import Cluster, CostModel


def makespan_in_a_worker(cluster: Cluster, cost: CostModel) -> float:
    from policies import plan
    from sim import simulate
    from workloads import build_model

    return simulate(plan(build_model("lenet5", batch=4), cluster, "heft", cost), cluster,
                    cost).makespan_s
