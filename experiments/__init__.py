"""experiments: comparisons of policies, results tables, plots and the ``placelab`` CLI.

Names are imported on first use (``placelab --help`` loads neither pandas nor a policy).

>>> from experiments import compare
>>> compare(["lenet5"], "workstation", ["single_device"]).shape[0]
1
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workloads.lazy import attach

if TYPE_CHECKING:
    from experiments.comparison import RESULT_COLUMNS, compare, run_one
    from experiments.results import format_table, plot_compare, read_results, write_results

_WHERE = {"RESULT_COLUMNS": "comparison", "compare": "comparison", "run_one": "comparison",
          "format_table": "results", "plot_compare": "results", "read_results": "results",
          "write_results": "results"}

__all__ = ["RESULT_COLUMNS", "compare", "format_table", "plot_compare", "read_results",
           "run_one", "write_results"]

__getattr__, __dir__ = attach(__name__, _WHERE)
