"""The server of an eigenspace strategy holds O(1) estimates (d x r arrays), however many rounds run."""

import numpy as np
import pytest

from conftest import run_app
from fl_strategies.protocol.iterates import Iterates

D, R = 24, 3
RUN = dict(num_clients=3, num_samples=600, dimension=D, rank=2, iteration_rank=R, num_server_rounds=40,
           row_normalize=True)


def held_arrays(root, shape) -> int:
    """How many distinct arrays of ``shape`` are reachable from ``root`` through containers and the ``__dict__``
    of fedspectral objects (the strategy, its estimates, its participation; not Flower's proxies)."""
    seen_objects, arrays, todo = set(), set(), [root]
    while todo:
        obj = todo.pop()
        if id(obj) in seen_objects:
            continue
        seen_objects.add(id(obj))
        if isinstance(obj, np.ndarray):
            if obj.shape == shape:
                arrays.add(id(obj))
        elif isinstance(obj, dict):
            todo.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            todo.extend(obj)
        elif type(obj).__module__.startswith("fl_strategies") and hasattr(obj, "__dict__"):
            todo.extend(vars(obj).values())
    return len(arrays)


@pytest.mark.parametrize("strategy, extra", [
    ("fedpower", dict(local_steps=2)),
    ("power", {}),
    ("ssi", dict(stop_tol=1e-300)),  # every row is held one round by the stopping rule
    ("faps", dict(row_normalize=False, stop_tol=1e-300, dataset="faps-geometric", xi=1.05)),
    ("dp-power", dict(dataset="dp-haar", row_normalize=False, secagg_clip=1500.0)),
])
def test_after_many_rounds_the_server_holds_a_constant_number_of_estimates(strategy, extra):
    s = run_app(strategy=strategy, **{**RUN, **extra})
    assert len(s.records) > 20 and len(s.iterates) == len(s.records)  # ssi's rule fires once F stops changing
    # Z_0, the newest two, the round's broadcast, the summary's estimate, the last sum, the simulation's reference
    held = held_arrays(s, (D, s.r))
    assert 1 <= held <= 7, f"{strategy}: the server holds {held} estimates after {len(s.records) - 1} rounds"
    assert len(s.state_dict()["iterates"]) == 3  # a checkpoint holds Z_0 and the newest two
    np.testing.assert_array_equal(s.estimate, s.iterates[-1])


def test_iterates_keep_the_start_and_the_newest_and_count_them_all():
    estimates = [np.full((2, 1), float(i)) for i in range(6)]
    kept = Iterates(keep=2)
    for Z in estimates:
        kept.append(Z)
    assert len(kept) == 6 and kept.oldest_kept == 4 and kept.moved and kept.first_moved == 1
    assert kept[0] is estimates[0] and kept[-1] is estimates[5] and kept[4] is estimates[4] and kept[-2] is kept[4]
    with pytest.raises(IndexError, match=r"estimate 3 of 6 is not kept: the server keeps Z_0 and the newest 2 "
                                         r"\(positions 4 \.\. 5\)"):
        kept[3]
    with pytest.raises(IndexError, match="estimate 6 of 6"):
        kept[6]
    with pytest.raises(TypeError, match="only Z_0 and the newest 2 of 6 estimates are kept"):
        list(kept)
    state = kept.state()
    again = Iterates(state["estimates"], keep=2, count=state["count"], first_moved=state["first_moved"])
    assert len(again) == 6 and again[5] is estimates[5] and again[0] is estimates[0] and again.first_moved == 1
    kept.truncate(5)
    assert len(kept) == 5 and kept[-1] is estimates[4]
    with pytest.raises(IndexError, match="cannot keep 3 of 5 estimates: position 2 is not kept"):
        kept.truncate(3)
    everything = Iterates(estimates, keep=None)
    assert [Z[0, 0] for Z in everything] == list(range(6))


def test_iterates_that_never_moved_and_their_truncation():
    Z = np.ones((2, 1))
    same = Iterates([Z, Z.copy(), Z.copy()])
    assert not same.moved and len(same) == 3
    moved_last = Iterates([Z, Z.copy(), 2 * Z])
    assert moved_last.first_moved == 2
    moved_last.truncate(2)
    assert not moved_last.moved  # the only estimate that moved was dropped
    with pytest.raises(ValueError, match="2 estimates cannot stand for 1"):
        Iterates([Z, Z], count=1)
    with pytest.raises(ValueError, match="keep must be >= 1 or None"):
        Iterates(keep=0)


def test_a_round_releases_its_serialised_replies_once_decoded_and_still_counts_their_bytes():
    """Every reply of a round is decoded once; its serialised arrays are then dropped (they would otherwise stay
    until the round ends), and ``bytes_up`` still counts them: the bytes of every round's 3 replies of Y and
    Z_prev (d x r float64 each, with Flower's .npy header)."""
    from fl_strategies.protocol.base import FederatedStrategy

    seen = []
    collect = FederatedStrategy.collect_replies

    def recording(self, server_round, results, *args, **kwargs):
        sizes = [sum(len(t) for t in res.parameters.tensors) for _, res in results]
        out = collect(self, server_round, results, *args, **kwargs)
        seen.append((sizes, [len(res.parameters.tensors) for _, res in results]))
        return out

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(FederatedStrategy, "collect_replies", recording)
        s = run_app(strategy="fedpower", local_steps=2, schedule="fixed", **{**RUN, "num_server_rounds": 4})
    rounds = seen[:4]  # then the summary exchange
    assert all(len(sizes) == 3 and min(sizes) > 2 * D * R * 8 for sizes, _ in rounds)
    assert all(left == [0, 0, 0] for _, left in seen)  # released
    assert [r["bytes_up"] for r in s.records[1:]] == [sum(sizes) for sizes, _ in rounds]
