"""experiments: comparisons of policies, results tables, plots and the ``placelab`` CLI.

>>> from experiments import compare
>>> compare(["lenet5"], "workstation", ["single_device"]).shape[0]
1
"""

from experiments.compare import RESULT_COLUMNS, compare, run_one
from experiments.results import format_table, plot_compare, read_results, write_results

__all__ = ["RESULT_COLUMNS", "compare", "format_table", "plot_compare", "read_results",
           "run_one", "write_results"]
