"""Experiments: the commands' layer of long-running studies built on the library.

Benchmarks (``bench``), the paper reproduction (``reproduce``, ``ablation``), parameter
sweeps (``sweep``), the verdict's calibration (``calibration``) and the atlas of PyG's zoo
(``atlas``). Nothing in the compute, interpret or write layers imports this package; the
CLI and the scripts do.
"""
