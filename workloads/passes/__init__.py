"""Optimizer passes over the IR: the pass contract, a manager, and the standard passes.

>>> from workloads.passes import PASSES
>>> PASSES.names()
['cse', 'dce', 'fuse_elementwise', 'train']
"""

from workloads.passes.base import PASSES, Pass, PassManager, make_pass, register_pass

__all__ = ["PASSES", "Pass", "PassManager", "make_pass", "register_pass"]
