"""Properties of the node-secret noise derivation (fl_strategies/privacy/noise.py), not examples.

* Two releases that differ in any single input (partition, round, broadcast iterate, data, noise level, local
  steps, secret) draw independent noise: the sample correlation of the two draws is near 0.
* A repeat of the same release (same secret file, equal inputs, a new ClientNoise) draws the same noise.
* Every draw of one release continues the keyed stream: every local step gets fresh noise.
* The clients pass everything a release depends on (round, broadcast, data, noise level, steps) to the derivation.

Noise that repeats over releases cancels in their difference, so the server could strip it: each of these is a
privacy property, and each test could fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fl_strategies.kernels.power import local_power_iterations
from fl_strategies.privacy.noise import STREAM_NOISE, ClientNoise, KeyedNormal
from fl_strategies.protocol.node_state import secret_in_state

N_DRAWS = 8192
# |corr| of two independent N(0,1) samples of size n is about N(0, 1/n): 6 standard deviations (p ~ 2e-9)
INDEPENDENT = 6.0 / math.sqrt(N_DRAWS)
SECRETS = (bytes(range(32)), bytes(range(1, 33)))
PROPS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _secret_file(folder, secret: bytes):
    path = folder / f"secret-{secret.hex()[:8]}"
    if not path.exists():
        path.write_bytes(secret)
        path.chmod(0o600)
    return path


def _noise(folder, partition_id: int = 2, secret: bytes = SECRETS[0], source: str = "node-secret") -> ClientNoise:
    """A node's noise source as a SuperNode's client builds it at every message."""
    from flwr.common import RecordDict

    node_config = {"data-path": str(folder / "rows.npy"), "noise-secret": str(_secret_file(folder, secret))}
    return ClientNoise({"noise-source": source, "seed": 0}, node_config, partition_id,
                       secret_in_state(RecordDict()), True, STREAM_NOISE)


def _release(seed: int = 0, d: int = 6, r: int = 2):
    """The inputs of one fedpower release: round, broadcast Z (d, r), data A (d, d), noise level, steps."""
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((20, d))
    return {"round": 3, "Z": np.linalg.qr(rng.standard_normal((d, r)))[0], "A": M.T @ M / 20, "nu": 0.25,
            "steps": 3}


def _draw(noise: ClientNoise, release: dict, n: int = N_DRAWS) -> np.ndarray:
    rng = noise.generator(release["round"], release["Z"], release["A"], release["nu"], release["steps"])
    return rng.standard_normal((n,))


def _corr(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a, b)[0, 1])


def _nudged(a, index: int):
    """``a`` with one entry moved to the next float (the smallest change of one input there is)."""
    b = a.copy()
    flat = b.reshape(-1) if isinstance(b, np.ndarray) else b.data
    flat[index % flat.size] = np.nextafter(flat[index % flat.size], np.inf)
    return b


CHANGES = ("partition", "round", "Z", "A", "nu", "steps", "secret")


@pytest.mark.parametrize("change", CHANGES)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(index=st.integers(0, 10**6), seed=st.integers(0, 2**16))
def test_releases_differing_in_one_input_draw_independent_noise(tmp_path, change, index, seed):
    base = _release(seed)
    other = dict(base)
    pid, secret = 2, SECRETS[0]
    if change == "partition":
        pid = 2 + 1 + index % 50
    elif change == "round":
        other["round"] = base["round"] + 1 + index % 50
    elif change in ("Z", "A"):
        other[change] = _nudged(base[change], index)
    elif change == "nu":
        other["nu"] = float(np.nextafter(base["nu"], np.inf))
    elif change == "steps":
        other["steps"] = base["steps"] + 1 + index % 5
    else:
        secret = SECRETS[1]
    first = _draw(_noise(tmp_path), base)
    second = _draw(_noise(tmp_path, partition_id=pid, secret=secret), other)
    assert abs(_corr(first, second)) < INDEPENDENT, f"{change}: the two releases share their noise"
    assert not np.any(first == second)


@pytest.mark.parametrize("pair", [((1, 12), (11, 2)), ((0, 1), (1, 0)), ((3, 4), (34, 0))])
def test_partition_and_round_never_run_together(tmp_path, pair):
    """(partition, round) pairs whose digits concatenate alike still get independent noise."""
    (p1, r1), (p2, r2) = pair
    base = _release()
    a = _draw(_noise(tmp_path, partition_id=p1), {**base, "round": r1})
    b = _draw(_noise(tmp_path, partition_id=p2), {**base, "round": r2})
    assert abs(_corr(a, b)) < INDEPENDENT


def test_sparse_data_that_differ_in_one_entry_draw_independent_noise(tmp_path):
    base = _release()
    A = sp.random(40, 6, density=0.3, random_state=1, format="csr")
    B = _nudged(A, 5)
    assert (A != B).nnz == 1
    a = _draw(_noise(tmp_path), {**base, "A": A})
    b = _draw(_noise(tmp_path), {**base, "A": B})
    assert abs(_corr(a, b)) < INDEPENDENT


@PROPS
@given(seed=st.integers(0, 2**16), pid=st.integers(0, 1000), rnd=st.integers(1, 10**4))
def test_a_repeated_release_draws_the_same_noise(tmp_path, seed, pid, rnd):
    """A new client (as at every message) with the same secret file and equal (not identical) inputs."""
    base = {**_release(seed), "round": rnd}
    copy = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in base.items()}
    first = _draw(_noise(tmp_path, partition_id=pid), base)
    np.testing.assert_array_equal(_draw(_noise(tmp_path, partition_id=pid), copy), first)


def test_the_draws_are_standard_normal(tmp_path):
    from scipy import stats

    z = _draw(_noise(tmp_path), _release(), n=40000)
    assert stats.kstest(z, "norm").pvalue > 1e-4
    assert abs(z.mean()) < 6 / math.sqrt(z.size) and abs(z.std() - 1) < 0.02


@PROPS
@given(seed=st.integers(0, 2**16), calls=st.integers(2, 6))
def test_every_draw_of_a_release_continues_the_stream(tmp_path, seed, calls):
    """Successive draws of one release (one per local step) are independent of each other."""
    rng = _noise(tmp_path).generator(*_release(seed).values())
    draws = [rng.standard_normal((N_DRAWS,)) for _ in range(calls)]
    for i in range(calls):
        for j in range(i):
            assert abs(_corr(draws[i], draws[j])) < INDEPENDENT, f"draws {j} and {i} share their noise"


def test_the_keyed_stream_counter_advances_and_depends_on_the_key():
    g, h = KeyedNormal(SECRETS[0]), KeyedNormal(SECRETS[0])
    first, second = g.standard_normal((4, 3)), g.standard_normal((4, 3))
    assert g.calls == 2 and abs(_corr(first.ravel(), second.ravel())) < 0.99
    np.testing.assert_array_equal(h.standard_normal((4, 3)), first)  # the same key restarts the same stream
    np.testing.assert_array_equal(h.standard_normal((4, 3)), second)
    odd = KeyedNormal(SECRETS[0]).standard_normal((5,))  # an odd count: the first half of the pairs' draws
    assert odd.shape == (5,) and np.all(np.isfinite(odd))


def test_every_local_step_adds_fresh_noise(tmp_path):
    """local_power_iterations with A = 0: the reply is the last step's noise alone, which is the stream's third
    draw, not its first (the steps draw one after another)."""
    release = _release()
    Z, steps, nu = release["Z"], 3, release["nu"]
    Y, _ = local_power_iterations(np.zeros((6, 6)), Z, steps, nu, _noise(tmp_path).generator(*release.values()))
    stream = _noise(tmp_path).generator(*release.values())
    draws = [stream.standard_normal(Z.shape) for _ in range(steps)]
    np.testing.assert_allclose(Y, nu * draws[-1], rtol=1e-15)
    assert not np.allclose(Y, nu * draws[0])


@pytest.mark.parametrize("source", ["seeded", "seeded-not-private"])
def test_seeded_noise_differs_by_round_and_partition(tmp_path, source):
    from flwr.common import RecordDict

    def draw(pid, rnd):
        noise = ClientNoise({"noise-source": source, "seed": 0}, {}, pid, secret_in_state(RecordDict()), True,
                            STREAM_NOISE)
        return noise.generator(rnd).standard_normal((N_DRAWS,))

    np.testing.assert_array_equal(draw(1, 2), draw(1, 2))
    assert abs(_corr(draw(1, 2), draw(1, 3))) < INDEPENDENT and abs(_corr(draw(1, 2), draw(2, 2))) < INDEPENDENT


@pytest.mark.parametrize("source", ["seeded", "seeded-not-private"])
def test_seeded_noise_is_the_documented_stream_of_the_seed_tag_2_partition_and_round(source):
    """``default_rng([seed, 2, partition id, round])``, as the module and the other streams' tags document: a
    committed reproduction of a simulation (or a SuperNode's ``seeded-not-private`` run) redraws its noise only
    while the tag stays 2. The clients pass ``STREAM_NOISE`` as the stream."""
    from flwr.common import RecordDict

    for seed, pid, rnd in [(0, 0, 1), (7, 3, 12)]:
        noise = ClientNoise({"noise-source": source, "seed": seed}, {}, pid, secret_in_state(RecordDict()), True,
                            STREAM_NOISE)
        np.testing.assert_array_equal(noise.generator(rnd).standard_normal((3, 4)),
                                      np.random.default_rng([seed, 2, pid, rnd]).standard_normal((3, 4)))


@pytest.mark.parametrize("source, noisy", [("node-secret", True), ("node-secret", False), ("seeded", True),
                                           ("seeded-not-private", True), ("os", True)])
def test_the_fingerprint_is_keyed_with_the_node_secret_and_plain_without_one(tmp_path, source, noisy):
    """With a secret, the plain hash of the data never leaves the node (the server could test a guess of the
    data): the reported fingerprint differs from it, is the same for a new client of the same node and data,
    and differs for other data or another secret. Without a secret (no noise, seeded or OS noise) it is the
    plain fingerprint itself."""
    from flwr.common import RecordDict

    plain, other = "ab" * 32, "cd" * 32

    def node(secret=SECRETS[0]):
        node_config = {"noise-secret": str(_secret_file(tmp_path, secret))}
        if source != "seeded":  # a SuperNode (seeded noise is refused on one)
            node_config["data-path"] = str(tmp_path / "rows.npy")
        return ClientNoise({"noise-source": source, "seed": 0}, node_config, 2, secret_in_state(RecordDict()),
                           noisy, STREAM_NOISE)

    reported = node().fingerprint(plain)
    if source == "node-secret" and noisy:
        assert reported not in (plain, other) and node().fingerprint(plain) == reported
        assert node().fingerprint(other) != reported and node(SECRETS[1]).fingerprint(plain) != reported
    else:
        assert reported == plain and node().fingerprint(other) == other


def test_os_noise_never_repeats(tmp_path):
    noise = _noise(tmp_path, source="os")
    assert abs(_corr(_draw(noise, _release()), _draw(noise, _release()))) < INDEPENDENT


# -- what the clients pass to the derivation ----------------------------------------------------------------------

def _spy(monkeypatch) -> list:
    calls = []
    real = ClientNoise.generator

    def generator(self, server_round, *inputs):
        calls.append((self.partition_id, server_round, inputs))
        return real(self, server_round, *inputs)

    monkeypatch.setattr(ClientNoise, "generator", generator)
    return calls


def _blocks(d=6, sizes=(40, 60)):
    rng = np.random.default_rng(7)
    return [rng.standard_normal((s, d)) * np.linspace(3, 1, d) for s in sizes]


def test_fedpower_clients_derive_the_noise_from_everything_the_release_depends_on(tmp_path, monkeypatch):
    """Each release's derivation gets its round, the broadcast Z it answers, the node's A_i (dense reference from
    its rows), the noise level and the steps; no two releases of a node share them."""
    from test_noise_source import _nodes

    calls = _spy(monkeypatch)
    seen = []
    blocks = [b / np.linalg.norm(b, axis=1, keepdims=True) for b in _blocks()]
    _nodes(tmp_path, blocks, secrets=True, observer=lambda rnd, pid, Z, arrays: seen.append((rnd, pid, Z.copy())),
           strategy="fedpower", rank=2, **{"iteration-rank": 2, "num-server-rounds": 3, "local-steps": 2,
                                           "schedule": "fixed", "noise-std": 0.5, "row-normalize": True})
    assert len(calls) == len(seen) == 6
    broadcast = {(rnd, pid): Z for rnd, pid, Z in seen}
    for pid, rnd, (Z, A, nu, steps) in calls:
        B = blocks[pid]
        np.testing.assert_allclose(A, B.T @ B / len(B), rtol=1e-12)
        np.testing.assert_array_equal(Z, broadcast[(rnd, pid)])
        assert (nu, steps) == (0.5, 2)
    assert sorted((pid, rnd) for pid, rnd, _ in calls) == [(p, r) for p in (0, 1) for r in (1, 2, 3)]


def test_dp_power_clients_derive_the_noise_from_everything_the_release_depends_on(tmp_path, monkeypatch):
    from test_noise_source import _nodes

    calls = _spy(monkeypatch)
    seen = []
    blocks = [b / np.linalg.norm(b, axis=1, keepdims=True) for b in _blocks()]
    _nodes(tmp_path, blocks, secrets=True, observer=lambda rnd, pid, X, arrays: seen.append((rnd, X.copy())),
           strategy="dp-power", rank=2, **{"iteration-rank": 2, "num-server-rounds": 2, "epsilon": 1.0,
                                           "delta": 1e-4, "dp-channel": "plaintext", "row-normalize": True})
    assert len(calls) == 4
    broadcast = {rnd: X for rnd, X in seen}
    for pid, rnd, (X, rows, nu) in calls:
        np.testing.assert_allclose(np.asarray(rows.todense() if hasattr(rows, "todense") else rows), blocks[pid],
                                   rtol=1e-12)
        np.testing.assert_array_equal(X, broadcast[rnd])
        assert nu > 0


@pytest.mark.parametrize("source", ["auto", "node-secret", "os", "seeded", "seeded-not-private"])
def test_every_documented_noise_source_is_accepted_by_the_run_config(source):
    from fl_strategies.settings.config import validate_run_config
    from simulations.engines import fused_run_config

    assert validate_run_config(fused_run_config({"noise-source": source}))["noise-source"] == source


@pytest.mark.parametrize("byte", [0x00, 0xFF])
def test_the_extreme_words_of_the_stream_still_give_finite_draws(monkeypatch, byte):
    """The uniforms stay in (0, 1] even for the smallest and largest 64-bit words: a uniform of 0 would make
    log(u) infinite, one above 1 sqrt(-2 log u) NaN (the largest word rounds to exactly 1: a draw of 0)."""
    import hashlib

    import fl_strategies.privacy.noise as noise

    class Constant:
        def __init__(self, data):
            pass

        def digest(self, length):
            return bytes([byte]) * length

    monkeypatch.setattr(noise, "hashlib", type("H", (), {"shake_256": Constant, "blake2b": hashlib.blake2b}))
    z = KeyedNormal(SECRETS[0]).standard_normal((64,))
    assert np.all(np.isfinite(z))
    assert np.max(np.abs(z)) < 9.0  # sqrt(-2 log 2^-54) ~ 8.7: the tail a 53-bit uniform allows
    # the uniforms are the midpoints (w + 1/2) 2^-53: the word 0 gives 2^-54, the largest radius; the largest word
    # rounds to u = 1 (radius 0)
    expected = 0.0 if byte else math.sqrt(-2.0 * math.log(2.0**-54))
    np.testing.assert_allclose(np.max(np.abs(z)), expected, rtol=1e-12)


@pytest.mark.parametrize("source, noisy", [("node-secret", False), ("os", True), ("seeded-not-private", True)])
def test_a_node_that_draws_no_secret_noise_creates_no_secret(tmp_path, source, noisy):
    from flwr.common import RecordDict

    state = RecordDict()
    node_config = {"data-path": str(tmp_path / "rows.npy"), "noise-secret": str(tmp_path / "secret")}
    ClientNoise({"noise-source": source, "seed": 0}, node_config, 0, secret_in_state(state), noisy, STREAM_NOISE)
    assert not (tmp_path / "secret").exists() and "noise-secret" not in state
    del node_config["noise-secret"]
    ClientNoise({"noise-source": source, "seed": 0}, node_config, 0, secret_in_state(state), noisy, STREAM_NOISE)
    assert "noise-secret" not in state


@pytest.mark.parametrize("cfg, reported, expected", [
    ({"epsilon": 0.0, "noise-std": 0.0, "noise-source": "auto"}, {}, None),
    ({"epsilon": 0.0, "noise-std": 0.5, "noise-source": "auto"}, {}, "seeded"),
    ({"epsilon": 0.5, "noise-std": 0.0, "noise-source": "auto"}, {}, "seeded"),
    ({"epsilon": 0.0, "noise-std": 0.5, "noise-source": "os"}, {}, "os"),
    ({"epsilon": 1.0, "noise-std": 0.0, "noise-source": "auto"},
     {1: {"noise-source": "node-secret"}, 2: {}, 3: None, 4: {"noise-source": "node-secret"}}, "node-secret"),
    ({"epsilon": 1.0, "noise-std": 0.0, "noise-source": "auto"},
     {1: {"noise-source": "os"}, 2: {"noise-source": "node-secret"}}, "node-secret+os"),
])
def test_the_rows_noise_source_is_what_the_nodes_reported_or_the_config_implies(cfg, reported, expected):
    """Any noise level (also below 1) makes a run noisy; nodes that reported nothing (or no mapping) are passed
    over; without reports, auto means seeded (a simulation) and any other source is itself."""
    from fl_strategies.privacy.noise import run_noise_source

    assert run_noise_source(cfg, reported) == expected
