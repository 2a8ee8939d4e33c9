"""Plain-numpy kernels the clients call: they know neither Flower nor the run config.

* :mod:`.rows`: a client's rows as stored (any real dtype, memory-mapped, sparse), streamed in float64 blocks;
* :mod:`.products`: the local operator ``A_i`` applied to a ``(d, r)`` block, from rows or from a cached Gram matrix;
* :mod:`.power`: FedPower's local power iterations;
* :mod:`.faps_local`: FAPS's local maths (multiplier, masked product, local subproblem).
"""
