"""Cluster churn: the same workload as devices are retired from a cluster and new ones join.

Starts from the DGX-1 of the catalog (eight V100s in the NVLink hybrid cube-mesh), retires
GPUs one by one down to four, then adds two H100s joined to the remaining V100s over PCIe
4.0 (a host's upgrade path). At every state a ResNet-50 training step (SGD, batch 64) is
placed by several policies and simulated. Each state is written as a hardware TOML file
(``clusters/step-K.toml``, cluster ``dgx1-churn-K``, registrable by ``placelab hw
register``; its devices are catalog models), the table to
``cluster_churn.parquet`` and the curve to ``cluster_churn.png`` in ``--out``.

    python experiments/scripts/cluster_churn.py [--out DIR] [--quick] [--workers N]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from experiments.plots import plot_curves
from experiments.results import write_results
from experiments.runspec import RunSpec
from experiments.sweep import Experiment
from hwmodels import Cluster, Link, dumps, get_cluster, get_device

POLICIES = ("single_device", "heft", "m_etf", "metis", "pipeline")
PCIE = 31.5e9  # bytes/s of PCIe 4.0 x16 (PCI-SIG, PCI Express Base Specification 4.0)


def states() -> list[tuple[str, Cluster]]:
    """(event, cluster after it), in order."""
    cluster = get_cluster("dgx1-v100")
    out = [("start: 8 V100", cluster)]
    for gone in ("gpu7", "gpu6", "gpu5", "gpu4"):
        cluster = cluster.without(gone, name=f"dgx1-churn-{len(out)}")
        out.append((f"retire {gone}", cluster))
    h100 = get_device("h100-sxm5-80gb")
    for k, peer in enumerate(("gpu0", "gpu2")):
        name = f"h100-{k}"
        cluster = cluster.with_devices((h100.instance(name),),
                                       (Link(name, peer, PCIE, 2e-6, name=f"pcie-{name}"),),
                                       hosts={name: "dgx1"}, name=f"dgx1-churn-{len(out)}")
        out.append((f"add {name}", cluster))
    return out


def cells(model: str, batch: int) -> list[RunSpec]:
    return [RunSpec.make(model, cluster, policy, batch=batch, train=True, links="fair",
                         variant=f"{k}: {event}")
            for k, (event, cluster) in enumerate(states()) for policy in POLICIES]


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="churn-out", help="output folder")
    parser.add_argument("--quick", action="store_true", help="a small model (for tests)")
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args(argv)
    out = Path(args.out)
    from workloads.io import write_text_atomic

    for k, (_, cluster) in enumerate(states()[1:], start=1):  # devices: catalog models
        write_text_atomic(out / "clusters" / f"step-{k}.toml", dumps((), [cluster]))
    model, batch = ("lenet5", 64) if args.quick else ("resnet50", 64)
    df = Experiment(cells(model, batch)).run(workers=args.workers)
    df["step"] = [int(v.split(":", 1)[0]) for v in df["variant"]]
    write_results(df, out / "cluster_churn.parquet")
    plot_curves(df, "step", out / "cluster_churn.png", xlabel="cluster state (see table)",
                title=f"{model} training step as the DGX-1 changes")
    table = df.pivot(index="variant", columns="policy", values="makespan_s") * 1e3
    print(table[list(POLICIES)].round(2).to_string())
    print(f"wrote {out / 'cluster_churn.parquet'}, {out / 'cluster_churn.png'} and "
          f"{out / 'clusters'}/step-*.toml")
    return df


if __name__ == "__main__":
    main()
