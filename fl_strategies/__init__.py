"""Federated spectral and low-rank algorithms as Flower strategies, in one package per concern.

* :mod:`.kernels`: the numerics, plain numpy/scipy, called by the clients and the server strategies alike;
* :mod:`.privacy`: noise sources, calibration, accounting and sensitivities;
* :mod:`.protocol`: the Flower glue (the server strategies, rounds, records, reply checks, checkpoints), the only
  layer that imports Flower;
* :mod:`.settings`: the run configuration's keys and checks, the strategy registry, participation;
* :mod:`.files`: the files a run reads and writes (data, secrets, the PCA model) and the simulation harness hook.
"""
