"""The model zoo's table for docs/workloads.md: ops, parameters, forward FLOPs and activation bytes
of every model at batch 1 (and its default sequence length), forward and training step.

    python experiments/scripts/zoo_table.py
"""

from __future__ import annotations

from workloads import build_model, list_models, training_graph


def rows() -> list[dict[str, object]]:
    out = []
    for name in list_models():
        fwd = build_model(name, batch=1)
        step = training_graph(fwd, "adam")
        out.append({"model": name, "ops": len(fwd), "params": fwd.params,
                    "gflop": fwd.flops / 1e9, "activation_mb": fwd.activation_bytes / 1e6,
                    "train_ops": len(step), "train_gflop": step.flops / 1e9})
    return out


def markdown(table: list[dict[str, object]]) -> str:
    lines = ["| model | ops | parameters | forward GFLOP | activations MB | training ops "
             "(Adam) | training GFLOP |", "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| `{r['model']}` | {r['ops']:,} | {r['params']:,} | {r['gflop']:.3f} | "
              f"{r['activation_mb']:.1f} | {r['train_ops']:,} | {r['train_gflop']:.3f} |"
              for r in table]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(rows()))
