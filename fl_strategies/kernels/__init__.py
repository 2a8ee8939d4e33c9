"""Plain numpy/scipy kernels that clients and server strategies call: they know neither Flower nor the run config.

* :mod:`.rows`: a client's rows as stored (any real dtype, memory-mapped, sparse), streamed in float64 blocks;
* :mod:`.products`: the local operator ``A_i`` applied to a ``(d, r)`` block, from rows or from a cached Gram matrix;
* :mod:`.power`: FedPower's local power iterations;
* :mod:`.faps_local`: FAPS's local maths (multiplier, masked product, local subproblem);
* :mod:`.linalg`: orthonormalisation, subspace distances, eigenvectors;
* :mod:`.mf`: the matrix-factorisation baselines' updates, initialisations and bounds;
* :mod:`.losses`: the ERM losses and their gradients;
* :mod:`.metrics`: the accuracy of an estimate against the exact reference;
* :mod:`.standardize`: the pooled mean and column scales from per-client sums.
"""
