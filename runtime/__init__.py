"""runtime: real execution of a Plan on NumPy (CPU) and CuPy (GPU) engines.

The engines, kernels, microbenchmarks and calibration are not part of placelab yet; this
package reserves its place in the layering (it may import ``sim`` and below).
"""
