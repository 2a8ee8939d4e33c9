"""Validation of run configurations: one place for every key's type, range and relations.

A run configuration is the flat ``[tool.flwr.app.config]`` table of
``pyproject.toml`` after Flower fused it with ``--run-config`` overrides (or a
row of a comparison file). :func:`validate_run_config` checks it completely
before the first round and returns the *effective* configuration: values
coerced to their types, ``iteration-rank = 0`` and ``clients-per-round = 0``
resolved, and the settings a baseline strategy fixes (``power``) applied. The
server and every client call it on the same input and so agree on the result.

Relations that need the data (a rank above the dimension, more clients than
rows) are checked by :func:`check_against_data` as soon as the data are known,
still before round 1.

Which strategies read each key is derived from their settings classes (:mod:`fl_strategies.settings.strategies`,
:func:`fl_strategies.settings.registry.readers`). At the start of a run :func:`check_unread_keys` names, in one
line, the keys set to a non-default value that the strategy does not read (refused under ``strict = true``), and
refuses two keys that set one thing (:data:`SHADOWING`); pairs decidable without the defaults are refused by the
validation itself.
"""

from __future__ import annotations

import difflib
import math
import numbers
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from ..files.data_files import is_data_file
from .errors import ConfigError
from ..files.harness import NODE_DATA, is_partition_folder, node_files
from ..privacy.dp_sensitivity import SENSITIVITIES
from ..privacy.dp_power_noise import privacy_plan
from ..privacy.dp_krylov_noise import RELEASE as DP_KRYLOV_RELEASE, default_block_width, privacy_plan as dp_krylov_plan
from ..privacy.noise import NOISE_SOURCES
from ..privacy.accounting import AccountantUnavailable, unmeasurable
from ..privacy.fedpower_dp import achieved_epsilon, centred_releases, epsilon_spent, noise_multiplier
from ..privacy.zcdp import CALIBRATIONS
from ..privacy.analyze_gauss import check_row_bound, covariance_releases
from .participation import LATENCY_MODELS, ROUND_POLICIES, SAMPLING, check_participation
from .registry import PROMISE_KEYS, STRATEGY_NAMES, read_keys, readers, spec
from .schedule import SCHEDULES, round_lengths

__all__ = ["ConfigError", "KEYS", "RESUME_HARMLESS", "PRIVATE_PCA", "secure_covariance", "secure_power",
           "SECURE_SUM_STRATEGIES", "row_sums_at_discovery", "round_timeout", "DEPLOYED_ROUND_TIMEOUT",
           "column_scaling",
           "validate_run_config", "effective_config", "unread_keys", "check_unread_keys", "default_run_config",
           "SHADOWING", "MODES", "check_against_data",
           "total_iterations", "writable_directory", "suggest", "check_known_keys", "RESULT_FILES",
           "previous_results", "check_results_dir"]


@dataclass(frozen=True)
class Key:
    """Specification of one run-config key."""

    name: str
    kind: type  # int, float, bool or str
    doc: str
    check: Callable[[Any], bool] | None = None
    allowed: str = ""  # human description of the allowed values
    choices: tuple[str, ...] = ()
    harmless_on_resume: bool = False
    """May differ between a checkpointed run and its resumption: it changes neither the estimate nor the privacy
    guarantee (where results go, how long to wait). Every other key must be the same (:data:`RESUME_HARMLESS`)."""
    absent_means: Any = None
    """For a key added after checkpoints were written: the value that reproduces what a run did before the key
    existed. A checkpoint whose saved run config lacks the key resumes when the key's value now equals it (and
    is refused, naming the key, otherwise); ``None``: a saved config without the key is a difference."""


def _key(name, kind, doc, check=None, allowed="", choices=(), harmless_on_resume=False, absent_means=None):
    if absent_means is not None and type(absent_means) is not kind:
        raise AssertionError(f"key {name!r}: absent_means {absent_means!r} is not a {kind.__name__}")
    return Key(name, kind, doc, check, allowed, tuple(choices), harmless_on_resume, absent_means)


DEPLOYED_ROUND_TIMEOUT = 600.0
"""Seconds a round waits for replies under the default ``round-timeout = -1`` when the nodes are real SuperNodes:
a node whose ClientApp never starts then costs one round, never the run."""


PARTITIONERS = ("iid", "contiguous", "linear", "label", "dirichlet", "group")  # = simulations.data.partitioners

KEYS: dict[str, Key] = {
    k.name: k
    for k in [
        _key("strategy", str, "algorithm to run", choices=STRATEGY_NAMES),
        _key("dataset", str, "nodes: every node's own data-path file (the server holds no data); a folder holding "
             "partition_0.npy ... partition_<m-1>.npy (or .csv, scipy sparse .npz, PLINK .bed or .pgen): client i "
             "reads only its own file "
             "(a .npy in its stored dtype, memory-mapped); in simulation a "
             "named generator or bundled set (fedpower-model1, fedpower-model1-lazy (per partition, for large "
             "populations), fedpower-model2, digits, faps-geometric, faps-arithmetic, mf-synthetic, mf-step, "
             "mf-decay, dp-haar, dp-coherent; erm-logistic, erm-ridge for FedLRGD/FedAve, label in the last column), "
             "a .npy/.csv file split by the partitioner, or a folder of user-item interactions (dp-power)",
             allowed="a non-empty string"),
        _key("partitioner", str, "how rows are split over clients", choices=PARTITIONERS),
        _key("dirichlet-alpha", float, "concentration of the Dirichlet label skew",
             lambda v: v > 0, "a number > 0"),
        _key("num-clients", int, "m, the number of clients (partitions)", lambda v: v >= 1, "an integer >= 1"),
        _key("clients-per-round", int, "K, clients sampled per round (FedPower: with replacement, see sampling); 0 "
             "or num-clients = full participation without sampling", lambda v: v >= 0, "an integer in [0, num-clients]"),
        _key("rank", int, "k, the target rank", lambda v: v >= 1, "an integer >= 1"),
        _key("iteration-rank", int, "r >= k, columns iterated (0 = rank; dp-krylov: its block width, 0 = "
             "max(2 rank + 4, 10))", lambda v: v >= 0,
             "0 or an integer >= rank"),
        _key("num-server-rounds", int, "communication rounds (the maximum, with stop-tol; used when "
             "total-iterations is 0)", lambda v: v >= 1, "an integer in [1, 1000000]"),
        _key("total-iterations", int, "T, local iterations in total; > 0 fixes the schedule and the number of "
             "rounds, 0 derives T from num-server-rounds", lambda v: v >= 0, "an integer in [0, 1000000] (and T <= 1000000)"),
        _key("local-steps", int, "p, local iterations between communications", lambda v: v >= 1,
             "an integer >= 1"),
        _key("schedule", str, "fixed: p every round; decayed: p, p-1, ..., 1, 1, ...; halving: p, p//2, ..., 1, 1, ...",
             choices=SCHEDULES),
        _key("krylov-blocks", int, "krylov: blocks (d x r each) the server's Krylov basis holds before a thick "
             "restart from its Ritz vectors (0 = num-server-rounds: no restart); server memory 2 d r q floats",
             lambda v: v == 0 or v >= 2, "0 or an integer >= 2", absent_means=0),
        _key("alignment", str, "opt: Orthogonal Procrustes alignment before averaging; none: plain average",
             choices=("opt", "none")),
        _key("epsilon", float, "privacy target epsilon; 0 = no noise", lambda v: v >= 0 and math.isfinite(v),
             "a finite number >= 0 (0 = no noise)"),
        _key("delta", float, "privacy target delta", lambda v: 0 < v < 1, "a number in (0, 1)"),
        _key("noise-std", float, "explicit noise standard deviation nu; overrides the calibration (0 = off)",
             lambda v: v >= 0 and math.isfinite(v), "a finite number >= 0"),
        _key("noise-source", str, "auto: node-secret on a SuperNode (node config with data-path), seeded in a "
             "simulation; node-secret: from a secret the node draws once from OS entropy and keeps (node-config "
             "noise-secret file, else node state), private and the same when a round is repeated; os: fresh OS "
             "entropy (private; no resume); seeded: reproducible from seed, known to the server, refused on a "
             "SuperNode; seeded-not-private: seeded, also on a SuperNode", choices=NOISE_SOURCES),
        _key("seed", int, "run seed: initialisation, sampling and seeded noise derive from it", allowed="an integer >= 0"),
        _key("data-seed", int, "seed of the synthetic data and of the partition", allowed="an integer >= 0"),
        _key("num-samples", int, "rows of a generated data set (m for the FAPS generators; 0 = 10000); for digits "
             "and files 0 = all rows, else a seeded subsample",
             lambda v: v >= 0, "an integer >= 0"),
        _key("dimension", int, "d of a generated data set (0 = 50); for files and bundled sets 0 or their width",
             lambda v: v >= 0, "an integer >= 0"),
        _key("row-normalize", bool,
             "scale every row to unit L2 norm on its node (never done unless set; required by epsilon / noise-std)"),
        _key("clip-norm", float, "c > 0: rows longer than c are scaled down to L2 norm c on their node, others kept "
             "(the privacy bound for data already bounded; with epsilon: covariance only); 0 = off; the model "
             "records it and transform applies it", lambda v: v >= 0, "a finite number >= 0", absent_means=0.0),
        _key("results-dir", str, "directory where the server writes rounds.csv and estimate.npy (and pca.npz) "
             "('' = none); one that already holds any of them is refused unless overwrite or resume is true",
             allowed="string (a writable directory)", harmless_on_resume=True),
        _key("overwrite", bool, "replace the results of an earlier run in results-dir (its rounds.csv, "
             "estimate.npy and pca.npz are removed before round 1) and its checkpoint in checkpoint-dir; false = "
             "such a results-dir, or a checkpoint-dir holding a checkpoint without resume, is refused",
             harmless_on_resume=True),
        _key("round-timeout", float, "seconds to wait for replies in a round and for each node's answer at "
             f"discovery: -1 = the default, no limit in a simulation and {DEPLOYED_ROUND_TIMEOUT:g} s when the nodes are real SuperNodes "
             "(a deployment); 0 = no limit; > 0 = that many",
             lambda v: v == -1 or v >= 0, "-1 or a number >= 0", harmless_on_resume=True),
        _key("stop-tol", float, "stopping rule (27) of the FAPS paper: stop when the objective's relative "
             "change is at most this (0 = run all rounds)", lambda v: 0 <= v < 1, "a number in [0, 1)"),
        _key("inner-solver", str, "FAPS local subproblem: ssi (subspace iterations) or exact (eigh)",
             choices=("ssi", "exact")),
        _key("inner-tol", float, "FAPS inner rule (26): stop when the basis changes by at most inner-tol (relative Frobenius norm)",
             lambda v: v >= 0, "a number >= 0"),
        _key("inner-steps", int, "FAPS: a fixed number of inner iterations (0 = use inner-tol)",
             lambda v: v >= 0, "an integer >= 0"),
        _key("inner-min-steps", int, "FAPS: inner iterations before the inner-tol rule may stop (the paper: 1)",
             lambda v: v >= 1, "an integer >= 1"),
        _key("inner-max-steps", int, "FAPS: cap on inner iterations under the inner-tol rule",
             lambda v: v >= 1, "an integer >= 1"),
        _key("penalty-init", float, "FAPS: beta_0 = penalty-init times the squared spectral norm of the client's data", lambda v: v > 0, "a number > 0"),
        _key("penalty-theta", float, "FAPS rule (25): beta grows by the factor 1 + theta", lambda v: v >= 0,
             "a number >= 0"),
        _key("penalty-mu", float, "FAPS rule (25): required relative decrease of d_i over 5 rounds",
             lambda v: v >= 0, "a number >= 0"),
        _key("xi", float, "faps-geometric data: singular values xi^(1-i)", lambda v: v > 1, "a number > 1"),
        _key("kappa", float, "faps-arithmetic data: singular values from 1 down to 1/kappa", lambda v: v > 1,
             "a number > 1"),
        _key("loss", str, "FedLRGD/FedAve: logistic (the paper's soft-label l2-regularised cross-entropy) or "
             "ridge (1/2 (theta^T x - y)^2, no intercept); both add (l2/2) times the squared norm of theta",
             choices=("logistic", "ridge")),
        _key("l2", float, "FedLRGD/FedAve: mu, the l2 regularisation (strong-convexity) constant of the loss",
             lambda v: v > 0, "a number > 0"),
        _key("server-samples", int, "FedLRGD/FedAve: r, the server's own samples (the first r rows of the data); "
             "FedLRGD's rank and number of communication rounds", lambda v: v >= 1, "an integer >= 1"),
        _key("gd-iterations", int, "FedLRGD: S, inexact gradient-descent steps at the server after the r rounds",
             lambda v: 0 <= v <= 10_000_000, "an integer in [0, 10000000]"),
        _key("g-inverse", str, "FedLRGD: inv (the literal inverse of each G) or pinv (truncated pseudo-inverse "
             "with cut-off pinv-rcond, for ill-conditioned G)", choices=("inv", "pinv")),
        _key("pinv-rcond", float, "FedLRGD: relative singular-value cut-off of the pinv mode",
             lambda v: 0 < v < 1, "a number in (0, 1)"),
        _key("comm-ratio", float, "FedLRGD/FedAve: phi, time to send one R^p vector over time for one gradient "
             "(Definition 1 of the oracle complexity Gamma)", lambda v: v >= 0, "a number >= 0"),
        _key("frac-active", float, "FedAve: tau, fraction of clients sampled without replacement each epoch",
             lambda v: 0 < v <= 1, "a number in (0, 1]"),
        _key("step-schedule", str, "FedAve step sizes: clipped min(step-max, 4/(mu(kb+1))) (tuned), "
             "theory-shifted 4/(mu((k+T0)b+1)) (safe) or const step-max; b = local-steps",
             choices=("clipped", "theory-shifted", "const")),
        _key("step-max", float, "FedAve: the largest (clipped) or constant (const) step size",
             lambda v: v > 0, "a number > 0"),
        _key("server-as-client", bool, "FedAve: the server runs local SGD on its r samples as an always-active "
             "pseudo-client (weight r), so that FedAve minimises the same F as FedLRGD"),
        _key("power-steps", int, "fedmf: alpha, power iterations of the initialisation of V (alpha + 1 "
             "communications)", lambda v: 0 <= v <= 10, "an integer in [0, 10]"),
        _key("num-sketches", int, "fedmf: m, Gaussian sketches drawn in round 1; the one of least condition number "
             "is kept", lambda v: 1 <= v <= 1000, "an integer in [1, 1000]"),
        _key("local-iterations", int, "fedmf: T, local gradient steps on U with V fixed",
             lambda v: 0 <= v <= 100_000, "an integer in [0, 100000]"),
        _key("momentum", str, "fedmf local GD: none, nesterov (beta_k = k/(k+3), the paper's experiments) or "
             "nesterov-sc (constant (kappa-1)/(kappa+1), Theorem 1's accelerated rate)",
             choices=("none", "nesterov", "nesterov-sc")),
        _key("u-solver", str, "fedmf: gd (local GD on U), exact (closed form S V (V^T V)^+) or orth (the server "
             "orthonormalises V, then GD with step 1)", choices=("gd", "exact", "orth")),
        _key("mf-noise", float, "mf-synthetic data: std of the added Gaussian noise; mf-step data: the singular "
             "values after the first rank", lambda v: v >= 0, "a finite number >= 0"),
        _key("target-log-excess", float, "mf-altgd and mf-simgd: stop once log10(F - eps_min) is at most this "
             "(num-server-rounds caps the iterations)", allowed="a finite number"),
        _key("dp-sensitivity", str, "dp-power: Delta_l of each noisy product: row-norm (the paper's max row norm of "
             "X, relation (12)), max-entry (Hardt & Price, sqrt(p) max |X_ij|) or one (runtime-independent; also "
             "valid for adding or removing one unit-norm row)", choices=SENSITIVITIES),
        _key("dp-channel", str, "dp-power, dp-krylov: how the clients' noisy products reach the server: secagg "
             "(Flower's "
             "SecAgg+, each client adds noise sigma/sqrt(s)), plaintext (same noise, summed in the clear: a test "
             "mode, private only with one client) or public (each client adds the full central noise, no SecAgg)",
             choices=("secagg", "plaintext", "public")),
        _key("dp-calibration", str, "fedpower, dp-power, covariance: the noise for the target (epsilon, delta): paper "
             "(fedpower: Theorem 6; dp-power: sigma = sqrt(4 L ln(1/delta))/epsilon), tight (exact zCDP "
             "conversion, less noise), pld or rdp (the smallest noise that dp-accounting's privacy-loss-"
             "distribution or Renyi accountant certifies over the run's releases; needs the privacy extra); "
             "epsilon_spent is by the same accountant; dp-krylov (its whole run is one Gaussian): paper = the exact "
             "Gaussian curve (no extra needed), tight = zCDP, pld / rdp as above", choices=CALIBRATIONS),
        _key("secure-aggregation", str, "covariance: send each client's Gram matrix (and row sum, with center) "
             "through Flower's SecAgg+, so that the server learns only the sums: auto (= true whenever epsilon is "
             "set and there are >= 2 clients), true or false (dp-power: see dp-channel); power, ssi, fedpower, "
             "localpower, krylov: true sends every round's products, the discovery sums and the summary through "
             "SecAgg+ as "
             "exact fixed-point limbs, fedpower and localpower with each client aligning its reply to the broadcast "
             "basis (auto = false; no noise; refused for faps)",
             choices=("auto", "true", "false")),
        _key("secagg-clip", float, "dp-power, covariance with SecAgg+: clipping range C of each uploaded entry (quantisation step "
             "2C/2^22); 0 = derived from the public bound s_i + 8 nu of row-normalised data; power, ssi, fedpower, "
             "localpower, krylov: the public bound "
             "on each uploaded value that fixes the exact fixed-point scale (0 = n (c + ||mean||)^2 r for rows of norm <= "
             "c: row-normalize or clip-norm; over PLINK genotypes derived from allele counts in [0, 2] and the "
             "federation's mean and scale)",
             lambda v: v >= 0, "a finite number >= 0"),
        _key("secagg-num-shares", int, "dp-power, covariance, power, ssi, fedpower, localpower, krylov with SecAgg+: "
             "shares of each client's keys (0 = all clients up to 7, "
             "else the odd number near 2 log2(s) + 1); the reconstruction threshold is half of them, plus one",
             lambda v: v == 0 or v >= 3, "0 or an integer >= 3"),
        # participation and stragglers (fl_strategies.settings.participation)
        _key("sampling", str, "FedPower, FedAve: how the clients of a round are drawn: auto (the strategy's own "
             "rule: FedPower with, FedAve without replacement), with-replacement or without-replacement", choices=SAMPLING),
        _key("latency-model", str, "virtual compute time per local work unit: none, shifted-exp (latency-shift + "
             "latency-scale Exp(1), the FedLRGD paper's model) or pareto (latency-shift + latency-scale "
             "Lomax(latency-tail))", choices=LATENCY_MODELS),
        _key("latency-shift", float, "deterministic part of one work unit's virtual compute time",
             lambda v: v >= 0, "a number >= 0"),
        _key("latency-scale", float, "scale of the random part of one work unit's virtual compute time",
             lambda v: v >= 0, "a number >= 0"),
        _key("latency-tail", float, "pareto: the tail index alpha (smaller = heavier; infinite variance below 2)",
             lambda v: v > 0, "a number > 0"),
        _key("latency-upload", float, "mean of the exponential virtual upload time (0 = instantaneous)",
             lambda v: v >= 0, "a number >= 0"),
        _key("slow-fraction", float, "fraction of slow devices (drawn once per partition from the seed)",
             lambda v: 0 <= v <= 1, "a number in [0, 1]"),
        _key("slow-factor", float, "a slow device's latency is multiplied by this", lambda v: v >= 1,
             "a number >= 1"),
        _key("dropout", float, "probability that a client drops out of a round (reported as a failure)",
             lambda v: 0 <= v < 1, "a number in [0, 1)"),
        _key("round-policy", str, "when the server closes a round in virtual time: all (every reply), first-k "
             "(the first-k earliest replies) or deadline (the replies by deadline); round_time in the results",
             choices=ROUND_POLICIES),
        _key("first-k", int, "round-policy first-k: replies kept per round (0 with the other policies)",
             lambda v: v >= 0, "an integer in [1, num-clients] with round-policy first-k, else 0"),
        _key("deadline", float, "round-policy deadline: virtual time at which the round closes (0 with the other "
             "policies; independent of the real round-timeout)", lambda v: v >= 0,
             "a number > 0 with round-policy deadline, else 0"),
        _key("checkpoint-dir", str, "directory where the server saves its state after every round, for resume "
             "('' = no checkpoints; fedpower, power, ssi, localpower and krylov only)",
             allowed="string (a writable directory)", harmless_on_resume=True),
        _key("resume", bool, "continue the run checkpointed in checkpoint-dir (same run config) and append to "
             "its rounds.csv", harmless_on_resume=True),
        _key("evaluation", str, "what the server measures each estimate against: auto (the exact reference when "
             "a simulation harness builds the run's data set, none for dataset = \"nodes\"), reference (required: "
             "an error when no harness builds the data) or none (no reference; nothing is computed from pooled data)",
             choices=("auto", "reference", "none")),
        _key("server-data", str, "FedLRGD/FedAve: a .npy/.csv file on the server with its own samples (label in "
             "the last column; the first server-samples rows are used); '' = the simulation harness's first "
             "server-samples rows of the data set", allowed="a string ('' or a .npy/.csv path)"),
        _key("mf-sigma-1", float, "mf-altgd/mf-simgd: sigma_1 of the pooled matrix, for the step sizes (0 = from "
             "the simulation harness's data set)", lambda v: v >= 0, "a finite number >= 0"),
        _key("mf-sigma-r", float, "mf-simgd: sigma_r of the pooled matrix, for Ye & Du's step size (0 = from the "
             "simulation harness's data set)", lambda v: v >= 0, "a finite number >= 0"),
        _key("center", bool, "PCA: centre every client's rows with the global mean (exchanged as per-client sums "
             "and counts before round 1; covariance, power, ssi, fedpower, localpower and krylov with "
             "secure-aggregation and dp-power: the sums go through SecAgg+ (dp-power: "
             "its dp-channel), with noise under epsilon; fedpower with epsilon: each client's row sum with its own noise), "
             "as scikit-learn's PCA; false = the papers' uncentred (1/n) X^T X", absent_means=False),
        _key("scale", str, "PCA: true = also divide every column by its pooled standard deviation (population, "
             "from per-client sums of squares exchanged once before round 1; constant columns keep scale 1), as "
             "scikit-learn's StandardScaler then PCA; hwe = divide every variant of 0/1/2 allele counts by "
             "sqrt(2 p (1 - p)) with the federation's allele frequency p (monomorphic variants keep scale 1), as "
             "plink2 --pca; needs center = true", choices=("false", "true", "hwe"), absent_means="false"),
        _key("maf-min", float, "PLINK .bed data: drop the variants whose minor allele frequency (over the non-missing "
             "calls) is below this, as plink2 --maf, from the federation's allele counts at discovery (SecAgg+ sums with "
             "secure-aggregation); 0 = no filter; needs center = true in a noise-free run",
             lambda v: 0 <= v <= 0.5, "a number in [0, 0.5]", absent_means=0.0),
        _key("geno-max", float, "PLINK .bed data: drop the variants whose missing-call rate is above this, as plink2 "
             "--geno, from the federation's call counts at discovery (SecAgg+ sums with secure-aggregation); 1 = no "
             "filter; needs center = true in a noise-free run",
             lambda v: 0 <= v <= 1, "a number in [0, 1]", absent_means=1.0),
        _key("indep-pairwise", str, "PLINK .bed data: prune variants in LD as plink2 --indep-pairwise on the "
             "pooled file, after maf-min / geno-max, from the per-window pair sums the nodes send at discovery: "
             "plink2's arguments, '50 5 0.2' (window in variants, step, r^2) or '500kb 1 0.2' (window in kb from "
             "the .bim positions); the PCA uses the variants kept, written as prune.in / prune.out beside the "
             "model; '' = no pruning; needs center = true in a noise-free run (with secure-aggregation = true the "
             "pair sums go through SecAgg+)",
             allowed="'' or plink2's '<window>[kb] [<step>] <r^2>'", absent_means=""),
        _key("exclude-range", str, "PLINK .bed data: base-pair ranges whose variants leave the run before "
             "indep-pairwise, as plink2 --exclude range: 'GRCh37' (or 'hg19') / 'GRCh38' (or 'hg38') = the "
             "long-range LD regions fedspectral ships for that build (fl_strategies/files/long_range_ld/), anything "
             "else a file on the server in plink2's --exclude range format (chromosome, first bp, last bp, label "
             "per line; a file called like a build: './GRCh37'); '' = none; needs center = true in a noise-free run",
             allowed="'', GRCh37, hg19, GRCh38, hg38 or a file path", absent_means=""),
        _key("drop-ambiguous", bool, "PLINK .bed data: true = drop every strand-ambiguous variant (alleles A/T or "
             "C/G) at discovery, whatever the order the sites list their alleles in, as before merging data from "
             "different arrays; false = keep those every site lists in the same A1/A2 order (one listed the other way "
             "round at some site is dropped either way: a strand flip cannot be told from an allele swap)",
             absent_means=False),
        _key("nonfounders", bool, "PLINK .bed data: true = the allele frequencies (the mean, scale = hwe and "
             "maf-min) from every person in the fit, as plink2 --nonfounders; false = from the founders alone (a .fam "
             "line with father and mother 0), plink2's default; the fit itself is over every person either way, and "
             "indep-pairwise's r^2 over the founders (as plink2's, whose --nonfounders changes only the frequencies "
             "that pick which variant of a pair goes)",
             absent_means=False),
        _key("outlier-sigma", float, "PLINK .bed data: remove outliers as smartpca does: after a fit, each site "
             "flags its own people beyond this many standard deviations of the federation's scores (mean and sd from "
             "the sites' score sums) on any of the top outlier-pcs PCs; they leave the fit and it is run again, up to "
             "outlier-iterations times; each site's count is logged (with secure-aggregation the sums and counts go "
             "through SecAgg+: the server logs the total, each site its own count), the list stays at the site "
             "(transform writes it); smartpca's value is 6; 0 = off; needs center = true in a noise-free run without "
             "checkpoint-dir", lambda v: v >= 0, "a finite number >= 0", absent_means=0.0),
        _key("outlier-iterations", int, "PLINK .bed data with outlier-sigma: the most outlier removals (fits "
             "again), as smartpca's numoutlieriter; the removals stop early once a pass removes nobody",
             lambda v: v >= 1, "an integer >= 1", absent_means=5),
        _key("outlier-pcs", int, "PLINK .bed data with outlier-sigma: the top PCs the rule looks at, as smartpca's "
             "numoutlierevec (at most n - 1 as there); at most rank", lambda v: v >= 1, "an integer >= 1",
             absent_means=10),
        _key("init-from", str, "PCA: start the iteration from an earlier run's pca.npz (its components, completed "
             "to iteration-rank columns by a seeded random orthonormal complement) instead of a random basis; its "
             "width and center / scale settings must be the run's; '' = a random start",
             allowed="a string ('' or a pca.npz path)", absent_means=""),
        _key("variance-target", float, "PCA: keep the smallest number of components (<= iteration-rank) whose "
             "explained-variance ratio reaches this fraction, as scikit-learn's fractional n_components; 0 = rank",
             lambda v: 0 <= v < 1, "a number in [0, 1)", absent_means=0.0),
        _key("discovery", str, "how the server learns each node's partition id and row count before round 1: ask "
             "(a get_properties message to every node; deployment) or engine (from the in-process or Ray engine "
             "that created the nodes, and the data generator: nothing is sent, for large populations)",
             choices=("ask", "engine")),
        _key("strict", bool, "refuse a run that sets a key (to a non-default value) its strategy does not read; "
             "false = name such keys in one warning line at the start of the run", harmless_on_resume=True),
    ]
}

RESUME_HARMLESS = tuple(name for name, key in KEYS.items() if key.harmless_on_resume)
"""The run-config keys a resumed run may change (``harmless_on_resume``); a change of any other is refused."""

MAX_ITERATIONS = 1_000_000
"""Upper limit on ``num-server-rounds``, ``total-iterations`` and the total number of local iterations ``T``.

Far beyond any useful run, and low enough that the schedule (one entry per
round) is built in a moment instead of exhausting memory before round 1."""


def keys_markdown(defaults: Mapping[str, Any]) -> str:
    """The README's table of run-config keys: key, default, allowed values, meaning (and, for the keys
    declared ``harmless_on_resume``, that a resumed run may change them; for the keys not common to every
    strategy, the strategies that read them).

    ``python -m fl_strategies.settings.config`` prints it with the defaults of ``pyproject.toml``.
    """
    kinds = {int: "an integer", float: "a number", bool: "true / false", str: "a string"}
    lines = ["| key | default | allowed | meaning |", "|---|---|---|---|"]
    for key in KEYS.values():
        value = defaults[key.name]
        shown = f'"{value}"' if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else value
        allowed = ", ".join(key.choices) if key.choices else (key.allowed or kinds[key.kind])
        doc = key.doc + (" (may change on resume)" if key.harmless_on_resume else "")
        doc += f"; read by {', '.join(readers(key.name))}" if readers(key.name) else ""
        lines.append(f"| `{key.name}` | {shown} | {allowed} | {doc} |")
    return "\n".join(lines) + "\n"


def suggest(name: Any, options) -> str:
    """`` Did you mean 'x'?`` with the option closest to a misspelt ``name`` (difflib), or ``""``.

    The one wording of every "unknown name" message (run-config keys here and in the engines' and compare's
    command lines, strategy names, compare's own keys).
    """
    if not isinstance(name, str):
        return ""
    close = difflib.get_close_matches(name, [str(o) for o in options], n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def check_known_keys(keys) -> None:
    """Refuse the first name of ``keys`` that is not a run-config key, naming the closest valid one.

    Raises
    ------
    ConfigError
        ``unknown run-config key 'rnak'. Did you mean 'rank'? Valid keys: ...``.
    """
    for k in keys:
        if k not in KEYS:
            raise ConfigError(f"unknown run-config key {k!r}.{suggest(k, KEYS)} Valid keys: {', '.join(KEYS)}")


def _coerce(key: Key, value: Any) -> Any:
    """``value`` as ``key.kind``; floats must be finite (NaN and inf are refused for every float key)."""
    is_bool = isinstance(value, bool) or type(value).__name__ == "bool_"  # also numpy's bool
    if key.kind is bool:
        if is_bool:
            return bool(value)
        raise ConfigError(f"{key.name} must be true or false, got {value!r}")
    if is_bool and key.kind is str and "true" in key.choices:  # a true/false/auto key given as a TOML boolean
        return "true" if value else "false"
    if is_bool:
        raise ConfigError(f"{key.name} must be {key.allowed or 'a ' + key.kind.__name__}, got {value!r}")
    if key.kind is int:
        if isinstance(value, numbers.Integral):
            return int(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{key.name} must be {key.allowed or 'an integer'}, got {value!r}")
    if key.kind is float:
        if isinstance(value, numbers.Real):
            try:
                number = float(value)
            except (OverflowError, ValueError):
                number = math.inf
            if math.isfinite(number):
                return number
            allowed = key.allowed or "a number"
            raise ConfigError(f"{key.name} must be {allowed}{'' if 'finite' in allowed else ' and finite'}, "
                              f"got {value!r}")
        raise ConfigError(f"{key.name} must be {key.allowed or 'a number'}, got {value!r}")
    if not isinstance(value, str):
        raise ConfigError(f"{key.name} must be a string, got {value!r}")
    return value


def validate_run_config(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The effective run configuration of :func:`effective_config` (without the list of fixed settings)."""
    return effective_config(raw)[0]


def effective_config(raw: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, tuple[Any, Any]]]:
    """Check a run configuration and return its effective values.

    Parameters
    ----------
    raw : mapping of str to scalar
        All keys of :data:`KEYS` (as Flower's fused run config has them).

    Returns
    -------
    cfg : dict
        A new dict with coerced values, ``iteration-rank`` and
        ``clients-per-round`` resolved, and the settings the strategy fixes
        (:attr:`fl_strategies.settings.registry.StrategySpec.fixed`) applied.
    overridden : dict
        ``key -> (value in the run config, value the strategy fixed)`` for
        every fixed setting that changed a value (the ServerApp logs them in
        one line at the start of the run).

    Raises
    ------
    ConfigError
        On an unknown or missing key, a value of the wrong type or out of
        range, inconsistent keys, or a value of a key of
        :data:`fl_strategies.settings.registry.PROMISE_KEYS` (privacy, participation)
        that the strategy would override. The message names the key, the value and
        what is allowed. This is the only exception it raises, whatever
        ``raw`` holds.

    Notes
    -----
    Beyond each key's own range (:data:`KEYS`): every float key must be finite
    (NaN and inf are refused); ``seed`` and ``data-seed`` must be >= 0 (they
    seed numpy); ``dataset`` must not be empty; ``num-server-rounds``,
    ``total-iterations`` and the total number of local iterations ``T`` are at
    most :data:`MAX_ITERATIONS`; with noise, the privacy accounting over ``T``
    steps must be a finite number (an ``epsilon`` so small that Theorem 6's
    noise overflows, or a ``noise-std`` so small that a client with a single
    row would have no finite epsilon, is refused). Whether ``results-dir`` is
    writable is checked by the server (the clients do not write there).
    The participation keys' relations are checked by
    :func:`fl_strategies.settings.participation.check_participation`.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(f"a run config must be a table of key = value pairs, got {type(raw).__name__}")
    check_known_keys(raw)
    missing = [k for k in KEYS if k not in raw]
    if missing:
        raise ConfigError(f"run config is missing key(s) {', '.join(missing)}")
    cfg: dict[str, Any] = {}
    for name, key in KEYS.items():
        value = _coerce(key, raw[name])
        if key.choices and value not in key.choices:
            raise ConfigError(f"{name} must be one of {', '.join(key.choices)}; got {value!r}."
                              f"{suggest(value, key.choices)}")
        if key.check is not None and not key.check(value):
            raise ConfigError(f"{name} must be {key.allowed}, got {value!r}")
        cfg[name] = value

    m = cfg["num-clients"]
    if cfg["clients-per-round"] == 0:
        cfg["clients-per-round"] = m
    if cfg["iteration-rank"] == 0:  # dp-krylov: its block width (fl_strategies.privacy.dp_krylov_noise)
        cfg["iteration-rank"] = (default_block_width(cfg["rank"]) if cfg.get("strategy") == "dp-krylov"
                                 else cfg["rank"])
    _check_conflicts(cfg)
    overridden = _apply_fixed(cfg)
    if cfg["clients-per-round"] > m:
        raise ConfigError(f"clients-per-round must be at most num-clients = {m}, got {cfg['clients-per-round']}")
    if cfg["iteration-rank"] < cfg["rank"]:
        raise ConfigError(f"iteration-rank must be >= rank = {cfg['rank']} (or 0 for rank), "
                          f"got {cfg['iteration-rank']}")
    noisy = cfg["epsilon"] > 0 or cfg["noise-std"] > 0
    if noisy and cfg["stop-tol"] > 0:
        raise ConfigError("stop-tol must be 0 when epsilon or noise-std is set: the stopping rule needs each "
                          "client's exact objective, which the noise is there to hide")
    if cfg["clip-norm"] > 0:
        if cfg["row-normalize"]:
            raise ConfigError("clip-norm and row-normalize = true contradict each other: choose one (row-normalize "
                              "scales every row to norm 1, clip-norm only the rows longer than clip-norm)")
        if not spec(cfg["strategy"]).pca:
            raise ConfigError(f"clip-norm applies to the strategies that write a PCA model, not {cfg['strategy']!r}")
        if noisy and cfg["strategy"] != "covariance":
            raise ConfigError(f"clip-norm with epsilon or noise-std is supported by covariance only: the privacy "
                              f"calibration of {cfg['strategy']!r} assumes unit rows (row-normalize = true)")
        try:  # the model's explained variance scales as c^2 (covariance checks its noise too)
            check_row_bound(cfg["clip-norm"], None, False)
        except ValueError as ex:
            raise ConfigError(f"clip-norm = {ex}") from None
    if noisy and not cfg["row-normalize"] and not cfg["clip-norm"] > 0 and cfg["strategy"] != "dp-power":
        raise ConfigError("row-normalize must be true when epsilon or noise-std is set (or, for covariance, clip-norm "
                          "> 0): the privacy "
                          "calibration (Theorem 6) assumes rows of unit L2 norm, and fedspectral does not "
                          "rescale a node's rows unless the run config asks for it (row-normalize = true "
                          "scales every row to unit norm on its node)")
    _check_more(cfg)
    return cfg, overridden


def _check_conflicts(cfg: dict[str, Any]) -> None:
    """Refuse two keys set together where the code would read one and silently ignore the other."""
    if cfg["epsilon"] > 0 and cfg["noise-std"] > 0:
        raise ConfigError(f"epsilon = {cfg['epsilon']!r} and noise-std = {cfg['noise-std']!r} are both set: the "
                          "noise is either calibrated to epsilon or given as noise-std, not both; set one of them "
                          "to 0")
    if cfg["noise-std"] > 0 and cfg["dp-calibration"] != "paper":
        raise ConfigError(f"dp-calibration = {cfg['dp-calibration']!r} with noise-std set: an explicit noise-std "
                          "is not calibrated, and its privacy is accounted by the paper's bound; set "
                          "dp-calibration = \"paper\" (or epsilon instead of noise-std)")
    inner_rule = cfg["strategy"] == "faps" and cfg["inner-solver"] == "ssi" and cfg["inner-steps"] == 0
    if inner_rule and cfg["inner-min-steps"] > cfg["inner-max-steps"]:
        raise ConfigError(f"inner-min-steps = {cfg['inner-min-steps']} exceeds inner-max-steps = "
                          f"{cfg['inner-max-steps']}: the cap would be raised to inner-min-steps; set inner-min-steps "
                          "<= inner-max-steps")


SHADOWING = (
    ("fedpower", "total-iterations", lambda c: c["total-iterations"] > 0, ("num-server-rounds",),
     "it fixes the schedule and so the number of rounds"),
    ("faps", "inner-steps", lambda c: c["inner-steps"] > 0, ("inner-tol", "inner-min-steps", "inner-max-steps"),
     "a fixed number of inner iterations replaces the inner-tol rule"),
)
"""``(strategy, key, active, keys, why)``: for ``strategy``, ``key`` set so that ``active(cfg)`` holds makes
``keys`` unread. Two ways of setting one thing: :func:`check_unread_keys` refuses a non-default value of both."""

MODES = (
    ("faps", "inner-solver", lambda c: c["inner-solver"] == "exact",
     ("inner-tol", "inner-steps", "inner-min-steps", "inner-max-steps")),
    ("fedmf", "u-solver", lambda c: c["u-solver"] == "exact", ("local-iterations", "momentum")),
)
"""``(strategy, key, active, keys)``: a mode of ``strategy`` in which ``keys`` are not read (the exact solvers
iterate nothing); named with the keys the strategy never reads (:func:`unread_keys`)."""


def _changed(cfg: Mapping[str, Any], defaults: Mapping[str, Any], name: str) -> bool:
    return name in defaults and name in cfg and cfg[name] != defaults[name]


def unread_keys(cfg: Mapping[str, Any], defaults: Mapping[str, Any]) -> list[str]:
    """The keys set to a value other than their default that ``cfg``'s strategy does not read.

    Parameters
    ----------
    cfg : mapping
        A run configuration as given (before :func:`effective_config` applies the settings the strategy fixes),
        with a valid ``strategy``.
    defaults : mapping
        The default run configuration (``pyproject.toml``'s ``[tool.flwr.app.config]``, see
        :func:`default_run_config`); keys missing there are not reported.

    Returns
    -------
    list of str
        In the order of :data:`KEYS`: each key the strategy does not read
        (:func:`fl_strategies.settings.registry.read_keys`: its settings class, less the keys it fixes), and each key
        a mode of the strategy (:data:`MODES`) leaves unread.
    """
    strategy = cfg["strategy"]
    unread = set(KEYS) - read_keys(strategy)
    for owner, _, active, keys in MODES:
        if owner == strategy and active(cfg):
            unread.update(keys)
    return [name for name in KEYS if name in unread and _changed(cfg, defaults, name)]


def check_unread_keys(cfg: Mapping[str, Any], defaults: Mapping[str, Any]) -> str | None:
    """Refuse the pairs of :data:`SHADOWING`; return the warning line for :func:`unread_keys`, or ``None``.

    Raises
    ------
    ConfigError
        For a key of :data:`SHADOWING` set together with a key it makes unread (one message naming both); with
        ``strict = true``, instead of returning the line.
    """
    for owner, key, active, keys, why in SHADOWING:
        shadowed = [name for name in keys if _changed(cfg, defaults, name)]
        if owner == cfg["strategy"] and active(cfg) and shadowed:
            listed = ", ".join(f"{name} = {cfg[name]!r}" for name in shadowed)
            raise ConfigError(f"{key} = {cfg[key]!r} and {listed} are both set: {why}, so {listed} would have "
                              f"no effect; set only one of them")
    names = unread_keys(cfg, defaults)
    if not names:
        return None
    listed = ", ".join(f"{name} = {cfg[name]!r}" for name in names)
    line = f"strategy {cfg['strategy']!r} does not read {listed} (set to non-default values; they have no effect)"
    if cfg["strict"]:
        raise ConfigError(f"strict = true: {line}")
    return line


def default_run_config() -> dict[str, Any]:
    """The default run configuration: ``[tool.flwr.app.config]`` of the ``pyproject.toml`` beside the package
    (in a Flower app bundle and in a source checkout), else of the copy an installed wheel carries
    (``fedspectral/app/pyproject.toml``, :data:`fedspectral.app_bundle.SHIPPED_PYPROJECT`); ``{}`` without
    either."""
    import tomllib

    root = Path(__file__).resolve().parents[2]
    for pyproject in (root / "pyproject.toml", root / "fedspectral" / "app" / "pyproject.toml"):
        try:
            return dict(tomllib.loads(pyproject.read_text())["tool"]["flwr"]["app"]["config"])
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            continue
    return {}


def _apply_fixed(cfg: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Apply the settings the strategy fixes; refuse those that would break a promise of the run config."""
    name = cfg["strategy"]
    overridden = {}
    for key, value in spec(name).fixed(cfg).items():
        if cfg[key] == value:
            continue
        if key in PROMISE_KEYS:
            what = "privacy noise" if key in ("epsilon", "noise-std") else "partial participation"
            raise ConfigError(f"{key} = {cfg[key]!r} is not honoured by strategy {name!r}, which fixes {key} = "
                              f"{value!r}: the run would silently lose the {what} it asks for; set {key} = "
                              f"{0 if key != 'frac-active' else 1.0} or choose a strategy that supports it")
        overridden[key] = (cfg[key], value)
    cfg.update({key: fixed for key, (_, fixed) in overridden.items()})
    return overridden


def variant_qc(cfg: Mapping[str, Any]) -> bool:
    """Whether the run filters its PLINK ``.bed`` variants at discovery (``maf-min > 0`` or ``geno-max < 1``)."""
    return cfg.get("maf-min", 0.0) > 0 or cfg.get("geno-max", 1.0) < 1


def _check_variant_qc(cfg: dict[str, Any], noisy: bool) -> None:
    """``maf-min`` / ``geno-max``: the filter comes from the allele sums and call counts the nodes send at
    discovery, in the clear (:func:`row_sums_at_discovery`) or as SecAgg+ sums (:func:`secure_power`), so it needs
    one of them; the data's kind is checked there."""
    keys = " and ".join(f"{key} = {cfg[key]:g}" for key, active in (("maf-min", cfg["maf-min"] > 0),
                                                                    ("geno-max", cfg["geno-max"] < 1)) if active)
    _check_discovery_sums(cfg, noisy, keys, "the variant filters apply",
                          "the filter comes from the allele sums and call counts the nodes send at discovery")


def _check_ld_prune(cfg: dict[str, Any], noisy: bool) -> None:
    """``indep-pairwise`` (plink2's arguments, :func:`fl_strategies.kernels.ld_prune.parse_indep_pairwise`) and
    ``exclude-range`` (read by the server at discovery): the pair sums come at discovery, in the clear
    (:func:`row_sums_at_discovery`) or as SecAgg+ sums (:func:`secure_power`), so a noise-free centred run of a PCA
    strategy with one of them; the variants' positions (public map data) come in the clear."""
    from ..kernels.ld_prune import parse_indep_pairwise

    value = cfg.get("indep-pairwise", "")
    try:
        parse_indep_pairwise(value)
    except ValueError as ex:
        raise ConfigError(f"indep-pairwise = {value!r}: {ex}") from None
    if cfg.get("exclude-range", ""):
        from ..files.ranges import range_file

        try:  # a build's name names the shipped list; a file itself is read by the server at discovery
            range_file(cfg["exclude-range"])
        except ValueError as ex:
            raise ConfigError(f"exclude-range = {cfg['exclude-range']!r}: {ex}") from None
    keys = " and ".join(f"{key} = {cfg[key]!r}" for key in ("indep-pairwise", "exclude-range") if cfg.get(key))
    _check_discovery_sums(cfg, noisy, keys, "LD pruning applies", "the pair sums are sent at discovery")


def _check_discovery_sums(cfg: dict[str, Any], noisy: bool, keys: str, what: str, sums: str) -> None:
    """The rule shared by the keys whose decision comes from sums the nodes send at discovery (``maf-min`` /
    ``geno-max``, ``indep-pairwise`` / ``exclude-range``): a PCA strategy, in a noise-free centred run whose
    discovery sends row sums in the clear (:func:`row_sums_at_discovery`) or sums them through SecAgg+
    (:func:`secure_power`); ``keys`` names the keys set, ``what`` and ``sums`` say what they need."""
    if not spec(cfg["strategy"]).pca:
        raise ConfigError(f"{keys}: {what} to the strategies that write a PCA model of PLINK .bed data (fedpower, "
                          f"power, ssi, localpower, faps, covariance), not {cfg['strategy']!r}")
    if noisy or not cfg.get("center") or not (row_sums_at_discovery(cfg) or secure_power(cfg)):
        raise ConfigError(f"{keys} needs center = true in a noise-free run (with secure-aggregation, a strategy of "
                          f"{', '.join(SECURE_SUM_STRATEGIES)}): {sums}, in the clear or through SecAgg+")


def _check_outliers(cfg: dict[str, Any], noisy: bool) -> None:
    """``outlier-sigma`` (:mod:`fl_strategies.kernels.outliers`): the sites' score sums and counts, and the fits
    again, in a noise-free centred run of a PCA strategy whose sums are sent in the clear
    (:func:`row_sums_at_discovery`) or through SecAgg+ (:func:`secure_power`:
    :func:`fl_strategies.protocol.outlier_exchange.secure_outlier_pass`), from the rows as stored (no row scaling),
    without a checkpoint (a resumed run would not know the passes), on at most ``rank`` PCs."""
    key = f"outlier-sigma = {cfg['outlier-sigma']:g}"
    if not spec(cfg["strategy"]).pca:
        raise ConfigError(f"{key}: outlier removal applies to the strategies that write a PCA model of PLINK .bed "
                          f"data (fedpower, power, ssi, localpower, faps, krylov, covariance), not {cfg['strategy']!r}")
    if noisy or not cfg.get("center") or not (row_sums_at_discovery(cfg) or secure_power(cfg)):
        raise ConfigError(f"{key} needs center = true in a noise-free run (with secure-aggregation, a strategy of "
                          f"{', '.join(SECURE_SUM_STRATEGIES)}): each site's count and score sums are sent in the "
                          "clear or through SecAgg+")
    for other, active in (("row-normalize", cfg["row-normalize"]), ("clip-norm", cfg.get("clip-norm", 0.0) > 0),
                          ("checkpoint-dir", bool(cfg.get("checkpoint-dir"))),
                          ("variance-target", cfg.get("variance-target", 0.0) > 0)):
        if active:
            raise ConfigError(f"{key} is refused with {other} = {cfg[other]!r}: the outlier passes score the "
                              "people of the genotype files as stored, with a fixed number of components, in one "
                              "run that is not resumed")
    if cfg["outlier-pcs"] > cfg["rank"]:
        raise ConfigError(f"outlier-pcs = {cfg['outlier-pcs']} exceeds rank = {cfg['rank']}: the rule looks at the "
                          "model's components only; set rank >= outlier-pcs (smartpca looks at 10) or a smaller "
                          "outlier-pcs")


def column_scaling(value: Any) -> str:
    """The ``scale`` setting as one of its choices, ``"false"``, ``"true"`` or ``"hwe"`` (a boolean as true/false)."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return "true" if value else "false"
    return str(value)


def _check_pca(cfg: dict[str, Any]) -> None:
    """``scale``, ``center``, ``variance-target``, ``init-from``: strategies that write a PCA model; under noise
    only the private forms (:data:`PRIVATE_PCA`) of centring; nodes asked."""
    scaled = column_scaling(cfg["scale"]) != "false"
    if scaled and not cfg["center"]:
        raise ConfigError(f"scale = {column_scaling(cfg['scale'])} needs center = true: the columns are scaled about "
                          "the pooled mean, as StandardScaler does (set center = true, or scale = false)")
    noisy = cfg["epsilon"] > 0 or cfg["noise-std"] > 0
    if scaled and noisy:
        raise ConfigError("scale is refused with epsilon or noise-std set: the clients' per-column sums of squares "
                          "would be released in the clear, which the privacy guarantee does not cover")
    if scaled and not row_sums_at_discovery(cfg) and not secure_power(cfg):
        channel = ("its private channel (dp-channel)" if cfg["strategy"] in PRIVATE_CHANNEL else
                   f"SecAgg+ (secure-aggregation = {cfg['secure-aggregation']!r})")
        raise ConfigError(f"scale is refused for {cfg['strategy']!r} here: its row sums travel through {channel}, "
                          "and the per-column sums of squares would be sent in the clear at discovery")
    for key, active in (("center", cfg["center"]), ("variance-target", cfg["variance-target"] > 0),
                        ("init-from", bool(cfg["init-from"]))):
        if not active:
            continue
        if not spec(cfg["strategy"]).pca and not (key == "center" and cfg["strategy"] in PRIVATE_CHANNEL):
            raise ConfigError(f"{key} applies to the strategies that write a PCA model (fedpower, power, ssi, "
                              f"localpower, faps, covariance; center also dp-power, dp-krylov), not "
                              f"{cfg['strategy']!r}")
        if key == "init-from" and cfg["strategy"] == "covariance":
            raise ConfigError("init-from does not apply to strategy 'covariance': it computes the exact "
                              "components in one round from no starting basis")
        if key == "init-from" and noisy:
            raise ConfigError("init-from is refused with epsilon or noise-std set: the earlier model was computed "
                              "from the data without noise, and a start drawn from it would carry it into the "
                              "private run's releases unaccounted")
        if noisy and cfg["strategy"] not in PRIVATE_PCA:
            raise ConfigError(f"{key} is refused with epsilon or noise-std set for {cfg['strategy']!r} (private "
                              f"PCA: {', '.join(PRIVATE_PCA)}): the clients' row sums (centring) "
                              "and the final summary exchange (explained variance) are sent without noise, so "
                              "the privacy guarantee would not cover them")
        if (key == "variance-target" and (cfg["epsilon"] > 0 or cfg["noise-std"] > 0)
                and cfg["strategy"] != "covariance"):
            raise ConfigError(f"variance-target is refused with epsilon or noise-std for {cfg['strategy']!r}: its "
                              "noisy model has no explained-variance ratio (tr(C) is not released); set rank, "
                              "or use covariance")
        if key == "center" and cfg["noise-std"] > 0 and cfg["strategy"] == "fedpower":
            raise ConfigError("center = true with noise-std is refused for fedpower: the mean is released with "
                              "noise calibrated to epsilon; set epsilon (and delta) instead of noise-std")
    if cfg["init-from"] and not cfg["init-from"].lower().endswith(".npz"):
        raise ConfigError(f"init-from must be '' or a pca.npz file written by an earlier run, got "
                          f"{cfg['init-from']!r}")
    if variant_qc(cfg):
        _check_variant_qc(cfg, noisy)
    if cfg.get("indep-pairwise", "") or cfg.get("exclude-range", ""):
        _check_ld_prune(cfg, noisy)
    if cfg.get("outlier-sigma", 0.0) > 0:
        _check_outliers(cfg, noisy)
    if row_sums_at_discovery(cfg) and cfg["discovery"] == "engine":
        raise ConfigError('center = true needs discovery = "ask": the clients send their row sums at discovery')


def _check_more(cfg: dict[str, Any]) -> None:
    """The checks :data:`KEYS` cannot express (see :func:`validate_run_config`, Notes)."""
    check_participation(cfg)
    for name in ("seed", "data-seed"):
        if cfg[name] < 0:
            raise ConfigError(f"{name} must be an integer >= 0 (it seeds numpy's generators), got {cfg[name]}")
    _check_pca(cfg)
    _check_secure_power(cfg)
    if cfg["server-data"] and not is_data_file(cfg["server-data"]):
        raise ConfigError(f"server-data must be '' or a .npy/.csv file, got {cfg['server-data']!r}")
    if not cfg["dataset"].strip():
        raise ConfigError(f"dataset must name a data set or a .npy/.csv file, got {cfg['dataset']!r}")
    if is_partition_folder(cfg["dataset"]):  # the one rule of node folders (every command alike)
        try:
            node_files(cfg["dataset"], cfg["num-clients"], f"the dataset folder {cfg['dataset']!r}")
        except ValueError as ex:
            raise ConfigError(str(ex) if str(ex).startswith("num-clients") else f"dataset: {ex}") from None
    for name in ("num-server-rounds", "total-iterations"):
        if cfg[name] > MAX_ITERATIONS:
            raise ConfigError(f"{name} must be at most {MAX_ITERATIONS}, got {cfg[name]}")
    T = total_iterations(cfg)  # the schedule has at most MAX_ITERATIONS entries now
    if T > MAX_ITERATIONS:
        raise ConfigError(f"local-steps = {cfg['local-steps']} with num-server-rounds = {cfg['num-server-rounds']} "
                          f"and total-iterations = {cfg['total-iterations']} ({cfg['schedule']} schedule) means "
                          f"T = {T} local iterations; at most {MAX_ITERATIONS} are allowed")
    if cfg["noise-std"] > 0:  # worst case of the accounting: a client with a single row
        sigma_g = cfg["noise-std"] / (2.0 * math.sqrt(cfg["iteration-rank"]))
        if not math.isfinite(achieved_epsilon(sigma_g, T, cfg["delta"])):
            raise ConfigError(f"noise-std = {cfg['noise-std']!r} is too small to account for: the epsilon spent "
                              f"over T = {T} steps is not a finite number; use 0 for no noise or a larger value")
    elif cfg["strategy"] == "dp-power":
        _check_dp_power(cfg)
    elif cfg["strategy"] == "dp-krylov":
        _check_dp_krylov(cfg)
    elif cfg["strategy"] == "covariance":
        _check_covariance(cfg)
    elif cfg["epsilon"] > 0:
        _check_fedpower_privacy(cfg, T)


MAX_SECAGG_CLIENTS = 1000
"""SecAgg+ sums ``s`` entries quantised to ``[0, 2^22)`` modulo ``2^32``: more than 1024 clients would overflow."""


def _check_fedpower_privacy(cfg: dict[str, Any], T: int) -> None:
    """FedPower's noise for (epsilon, delta) over T steps: a positive finite multiplier whose accounting is finite."""
    calibration = cfg["dp-calibration"]
    try:
        sigma_g = noise_multiplier(cfg["epsilon"], cfg["delta"], T, calibration)
    except AccountantUnavailable as ex:
        raise ConfigError(f"dp-calibration = {calibration!r}: {ex}") from None
    except (ValueError, ArithmeticError) as ex:
        raise ConfigError(f"epsilon = {cfg['epsilon']!r} (with delta = {cfg['delta']!r}, dp-calibration = "
                          f"{calibration!r}): {ex}") from None
    _check_noise_variance(cfg, 2.0 * math.sqrt(cfg["iteration-rank"]) * sigma_g,
                          f"Theorem 6's noise standard deviation over T = {T} steps (2 sqrt(r) sigma_g, a client "
                          "of one row)")
    spent = epsilon_spent(sigma_g, T, cfg["delta"], calibration)
    if not (sigma_g > 0 and math.isfinite(spent)):
        raise ConfigError(f"epsilon = {cfg['epsilon']!r} (with delta = {cfg['delta']!r}) is too large: the "
                          f"calibrated noise (sigma_g = {sigma_g:.3g}) is so small that the epsilon spent over "
                          f"T = {T} steps is not a finite number")
    _check_measurable(cfg, sigma_g, T)
    if cfg["center"]:  # the mean and the T steps, calibrated together
        try:
            releases = centred_releases(cfg["epsilon"], cfg["delta"], cfg["dp-calibration"], T)
        except (ValueError, ArithmeticError) as ex:
            raise ConfigError(f"epsilon = {cfg['epsilon']!r} with center = true: {ex}") from None
        _check_noise_variance(cfg, max(releases.multipliers.values()), "the noise multiplier of its centred releases")


MAX_NOISE_STD = math.sqrt(sys.float_info.max)
"""The largest noise standard deviation whose variance is a finite float64 (about 1.34e154)."""


def _check_noise_variance(cfg: Mapping[str, Any], std: float, what: str) -> None:
    """Refuse an ``epsilon`` whose noise standard deviation ``std`` (``what`` says which) is not finite or whose
    variance ``std^2`` overflows: its noise would make every estimate, and the variances of the model, meaningless
    (``epsilon = 1e-300`` wrote variances near 1e298)."""
    if not (math.isfinite(std) and std <= MAX_NOISE_STD):
        raise ConfigError(f"epsilon = {cfg['epsilon']!r} (with delta = {cfg['delta']!r}) is too small: {what} is "
                          f"{std:.3g}, whose variance is not a finite number (the standard deviation must be at most "
                          f"{MAX_NOISE_STD:.3g}); raise epsilon")


def _check_measurable(cfg: dict[str, Any], sigma: float, releases: int) -> None:
    """Refuse a target whose noise is too small for the PLD accountant to report (``epsilon_pld`` left empty)."""
    if unmeasurable(sigma, releases, cfg["delta"]):
        raise ConfigError(f"epsilon = {cfg['epsilon']!r} (with delta = {cfg['delta']!r}) is too large: its noise "
                          f"(sigma = {sigma:.3g} over {releases} releases) is so small that dp-accounting's PLD "
                          "accountant cannot measure the epsilon spent (epsilon_pld); lower epsilon")


PRIVATE_PCA = ("covariance", "dp-power", "dp-krylov", "fedpower")

PRIVATE_CHANNEL = ("dp-power", "dp-krylov")
"""The strategies whose row sums (``center``) travel with their products through their ``dp-channel``."""
"""The strategies whose noisy runs centre privately (``center``; fedpower with ``epsilon``, not ``noise-std``);
``variance-target`` under noise: covariance only (the others' models have no explained-variance ratio)."""


def secure_covariance(cfg: Mapping[str, Any]) -> bool:
    """Whether a ``covariance`` run sends its sums through SecAgg+ (``secure-aggregation``; ``auto``: with
    ``epsilon`` and at least two clients)."""
    if cfg["strategy"] != "covariance":
        return False
    choice = cfg["secure-aggregation"]
    return choice == "true" or (choice == "auto" and cfg["epsilon"] > 0 and cfg["num-clients"] >= 2)


def round_timeout(seconds: float, real_nodes: bool) -> float | None:
    """The seconds a round waits for replies (``None``: no limit), from ``round-timeout``.

    Parameters
    ----------
    seconds : float
        ``round-timeout``: ``-1`` (the default), ``0`` or a number of seconds.
    real_nodes : bool
        Whether the nodes are real SuperNodes (a deployment), not an engine's simulated ones.

    Returns
    -------
    float or None
        ``DEPLOYED_ROUND_TIMEOUT`` for the default on real nodes, no limit for the default in a simulation and for
        an explicit ``0``, else ``seconds``: a value the user set is never replaced.
    """
    if seconds == -1:
        return DEPLOYED_ROUND_TIMEOUT if real_nodes else None
    return seconds or None


def row_sums_at_discovery(cfg: Mapping[str, Any]) -> bool:
    """Whether ``center`` has the nodes send their row sums at discovery, in the clear (noise-free runs without
    SecAgg+); a secure ``covariance`` sends them through SecAgg+ with its Gram matrix instead, a secure ``power``
    or ``ssi`` in a SecAgg+ discovery round (:func:`secure_power`)."""
    return (bool(cfg.get("center")) and not secure_covariance(cfg) and not secure_power(cfg)
            and cfg.get("strategy") not in PRIVATE_CHANNEL)


SECURE_SUM_STRATEGIES = ("power", "ssi", "fedpower", "localpower", "krylov")
"""The exact strategies whose server needs only sums: ``secure-aggregation = true`` sends them through SecAgg+
(``fedpower`` and ``localpower`` with each client aligning its own reply to the broadcast basis; ``krylov``'s
server needs the same sums as ``power``)."""

_NO_SECURE_SUM = {
    "faps": "each site's reply scales with its own penalty beta_i, which has no public bound to fix a "
            "quantisation range, and the sites' private state cannot survive a site lost from the sum",
}


def secure_power(cfg: Mapping[str, Any]) -> bool:
    """Whether a ``power``, ``ssi``, ``fedpower``, ``localpower`` or ``krylov`` run sends its sums through SecAgg+
    (``secure-aggregation = true``)."""
    return cfg["strategy"] in SECURE_SUM_STRATEGIES and cfg.get("secure-aggregation") == "true"


SECURE_BOUND_NEEDED = ("secagg-clip must be set (> 0) when neither row-normalize nor clip-norm is set and the "
                       "data are no PLINK .bed/.pgen genotypes: without bounded rows the server has no public bound on "
                       "the values the clients upload, which fixes their scale")
"""The refusal of a secure power / krylov run without a public bound on its uploads (genotypes carry their own:
allele counts 0..2, :meth:`fl_strategies.protocol.strategies.secure_power.SecurePowerStrategy.upload_bound`)."""


def genotype_data(cfg: Mapping[str, Any]) -> bool | None:
    """Whether the run's data are PLINK genotype files: ``True`` for a folder of ``.bed`` / ``.pgen`` node files,
    ``False`` for other data, ``None`` when only the nodes know (``dataset = "nodes"``, or a folder
    :func:`~fl_strategies.files.harness.node_files` refuses: its own message follows)."""
    from ..files.data_files import is_genotype_file

    if cfg["dataset"] == NODE_DATA:
        return None
    if not is_partition_folder(cfg["dataset"]):
        return False
    try:
        files = node_files(cfg["dataset"], cfg["num-clients"], "the dataset folder")
    except ValueError:
        return None
    return all(is_genotype_file(path) for path in files)


def _check_secure_power(cfg: dict[str, Any]) -> None:
    """``secure-aggregation = true``: refused where the server needs a site's own reply; for power and ssi a
    SecAgg+ set-up with every client in every round and a public bound on the uploads."""
    why = _NO_SECURE_SUM.get(cfg["strategy"])
    if why is not None and cfg["secure-aggregation"] == "true":
        raise ConfigError(f"secure-aggregation = true is refused for strategy {cfg['strategy']!r}: {why}")
    if not secure_power(cfg):
        return
    if cfg.get("epsilon", 0) > 0 or cfg.get("noise-std", 0) > 0:
        raise ConfigError(f"secure-aggregation = true for {cfg['strategy']!r} is exact and adds no noise: epsilon "
                          "and noise-std must be 0 (fedpower's noise is accounted per site)")
    m = cfg["num-clients"]
    if not 2 <= m <= MAX_SECAGG_CLIENTS:
        raise ConfigError(f"secure-aggregation = true needs 2 <= num-clients <= {MAX_SECAGG_CLIENTS} (SecAgg+ "
                          f"masks need two clients), got {m}")
    if cfg["clients-per-round"] not in (0, m) or cfg["round-policy"] != "all" or cfg["dropout"] > 0:
        raise ConfigError("secure-aggregation = true needs every client in every round (clients-per-round = 0, "
                          "round-policy = \"all\", dropout = 0): SecAgg+ sums the products of the clients it set "
                          "up, once each")
    if cfg["secagg-clip"] == 0 and not cfg["row-normalize"] and not cfg["clip-norm"] > 0 \
            and genotype_data(cfg) is False:
        raise ConfigError(SECURE_BOUND_NEEDED)
    if cfg["secagg-num-shares"] > m:
        raise ConfigError(f"secagg-num-shares must be at most num-clients = {m}, got {cfg['secagg-num-shares']}")
    if cfg["checkpoint-dir"]:
        raise ConfigError("checkpoint-dir is refused with secure-aggregation = true: the SecAgg+ loop writes no "
                          "checkpoint")


def _check_covariance(cfg: dict[str, Any]) -> None:
    """covariance: a target the Analyze Gauss calibration meets, a clip-norm whose Gram scale, sensitivity and
    noise fit float64; SecAgg+ whenever noise meets more than one client."""
    releases = None
    if cfg["epsilon"] > 0:
        try:
            releases = covariance_releases(cfg["epsilon"], cfg["delta"], cfg["dp-calibration"], cfg["center"])
        except AccountantUnavailable as ex:
            raise ConfigError(f"dp-calibration = {cfg['dp-calibration']!r}: {ex}") from None
        except (ValueError, ArithmeticError) as ex:
            raise ConfigError(f"epsilon = {cfg['epsilon']!r} (delta = {cfg['delta']!r}): {ex}") from None
        _check_noise_variance(cfg, max(releases.multipliers.values()), "its noise multiplier (the noise standard "
                              "deviation per unit of sensitivity)")
    if cfg["clip-norm"] > 0:
        try:
            check_row_bound(cfg["clip-norm"], releases, cfg["center"])
        except ValueError as ex:
            raise ConfigError(f"clip-norm = {ex}") from None
    if cfg["epsilon"] > 0:
        if cfg["num-clients"] > 1 and not secure_covariance(cfg):
            raise ConfigError("secure-aggregation = false with epsilon set and num-clients > 1: each client adds "
                              "only its share of the noise, so its matrix would reach the server less private "
                              "than accounted; use secure-aggregation = \"auto\" or \"true\"")
    if secure_covariance(cfg):
        if not 2 <= cfg["num-clients"] <= MAX_SECAGG_CLIENTS:
            raise ConfigError(f"secure-aggregation = true needs 2 <= num-clients <= {MAX_SECAGG_CLIENTS} (SecAgg+ "
                              f"masks need two clients), got {cfg['num-clients']}")
        if cfg["secagg-clip"] == 0 and not cfg["row-normalize"] and not cfg["clip-norm"] > 0:
            raise ConfigError("secagg-clip must be set (> 0) when neither row-normalize nor clip-norm is set: "
                              "without bounded rows the server has no public bound on the entries the clients upload")
        if cfg["secagg-num-shares"] > cfg["num-clients"]:
            raise ConfigError(f"secagg-num-shares must be at most num-clients = {cfg['num-clients']}, got "
                              f"{cfg['secagg-num-shares']}")


def _check_dp_power(cfg: dict[str, Any]) -> None:
    """dp-power: a target (epsilon, delta) the calibration meets, and a SecAgg+ set-up Flower can run."""
    if cfg["center"] and cfg["epsilon"] > 0:
        if not cfg["row-normalize"] or cfg["dp-sensitivity"] != "one":
            raise ConfigError("dp-power with center = true and epsilon needs row-normalize = true and dp-sensitivity "
                              "= \"one\": the mean and the products are accounted for one unit row replaced "
                              "(sensitivity 2 each)")
    if cfg["epsilon"] > 0:
        try:
            c, _ = privacy_plan(cfg["epsilon"], cfg["delta"], cfg["dp-calibration"], cfg["num-server-rounds"],
                                cfg["center"])
        except AccountantUnavailable as ex:
            raise ConfigError(f"dp-calibration = {cfg['dp-calibration']!r}: {ex}") from None
        except (ValueError, ArithmeticError) as ex:
            raise ConfigError(str(ex)) from None
        _check_noise_variance(cfg, c.sigma, "its noise multiplier sigma (the noise standard deviation per unit of "
                              "sensitivity)")
        _check_measurable(cfg, c.sigma, cfg["num-server-rounds"])
    _check_dp_channel(cfg)


def _check_dp_channel(cfg: dict[str, Any]) -> None:
    """dp-power, dp-krylov: a SecAgg+ set-up Flower can run (``dp-channel = "secagg"``)."""
    if cfg["dp-channel"] == "secagg":
        if not 2 <= cfg["num-clients"] <= MAX_SECAGG_CLIENTS:
            raise ConfigError(f"dp-channel = \"secagg\" needs 2 <= num-clients <= {MAX_SECAGG_CLIENTS} (SecAgg+ "
                              f"masks need two clients; more than 1024 overflow its 2^32 modulus), got "
                              f"{cfg['num-clients']}; one client is the central algorithm: dp-channel = \"plaintext\"")
        if cfg["secagg-clip"] == 0 and not cfg["row-normalize"]:
            raise ConfigError("secagg-clip must be set (> 0) when row-normalize is false: without unit-norm rows "
                              "the server has no public bound on the entries the clients upload")
        if cfg["secagg-num-shares"] > cfg["num-clients"]:
            raise ConfigError(f"secagg-num-shares must be at most num-clients = {cfg['num-clients']}, got "
                              f"{cfg['secagg-num-shares']}")


def _check_dp_krylov(cfg: dict[str, Any]) -> None:
    """dp-krylov: a target the calibration meets (one Gaussian for the whole run), and SecAgg+ as dp-power."""
    if cfg["epsilon"] > 0:
        try:
            releases = dp_krylov_plan(cfg["epsilon"], cfg["delta"], cfg["dp-calibration"])
        except AccountantUnavailable as ex:
            raise ConfigError(f"dp-calibration = {cfg['dp-calibration']!r}: {ex}") from None
        except (ValueError, ArithmeticError) as ex:
            raise ConfigError(str(ex)) from None
        sigma = releases.multipliers[DP_KRYLOV_RELEASE]
        _check_noise_variance(cfg, sigma, "its noise multiplier sigma (the noise standard deviation per unit of "
                              "sensitivity)")
        _check_measurable(cfg, sigma, 1)
    _check_dp_channel(cfg)


def writable_directory(directory: str | Path, key: str) -> Path:
    """Create ``directory`` if needed and check that a file can be written there.

    The probe is a new temporary file (created exclusively, so never through a link), removed at once.

    Raises
    ------
    ConfigError
        Naming ``key`` (``results-dir``, ``checkpoint-dir``) and the reason.
    """
    path = Path(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path, prefix=".write-test."):
            pass
    except (OSError, ValueError) as ex:
        raise ConfigError(f"{key} = {str(directory)!r} is not a writable directory: {type(ex).__name__}: {ex}") from None
    return path


RESULT_FILES = ("rounds.csv", "estimate.npy", "pca.npz", "pca.eigenval", "pca.eigenvec.allele", "pca.score",
                "pca.afreq", "prune.in", "prune.out")
"""What a run writes to its ``results-dir``."""


def previous_results(directory: str | Path) -> list[str]:
    """The names of :data:`RESULT_FILES` present in ``directory`` (an earlier run's results, or a user's files)."""
    path = Path(directory)
    return [name for name in RESULT_FILES if (path / name).exists() or (path / name).is_symlink()]


def check_results_dir(cfg: Mapping[str, Any]) -> None:
    """Refuse a ``results-dir`` that holds an earlier run's results, unless ``overwrite`` or ``resume`` is true.

    Raises
    ------
    ConfigError
        Naming the directory and the files found, and the keys that allow it.
    """
    if not cfg["results-dir"] or cfg["overwrite"] or cfg["resume"]:
        return
    found = previous_results(cfg["results-dir"])
    if found:
        raise ConfigError(f"results-dir = {cfg['results-dir']!r} already holds {', '.join(found)} of an earlier "
                          "run: choose another results-dir, set overwrite = true to replace them, or resume = "
                          "true to continue that run")


def total_iterations(cfg: Mapping[str, Any]) -> int:
    """``T``, the total number of local iterations of the effective configuration."""
    return sum(round_lengths(cfg["local-steps"], cfg["schedule"], total_iterations=cfg["total-iterations"],
                             num_rounds=cfg["num-server-rounds"]))


def check_against_data(cfg: Mapping[str, Any], dimension: int, num_rows: int) -> None:
    """Check the relations between a validated config and the data.

    Parameters
    ----------
    cfg : mapping
        Output of :func:`validate_run_config`.
    dimension : int
        ``d``, the number of columns of the data.
    num_rows : int
        ``n``, the total number of rows over all clients.

    Raises
    ------
    ConfigError
        If ``rank`` or ``iteration-rank`` exceeds ``d``, ``rank`` exceeds the rank the rows can have (``n``, or
        ``n - 1`` with ``center``: more components would be arbitrary directions of no variance; for the
        strategies that read ``rank``, unless ``variance-target`` chooses it), or ``num-clients`` exceeds ``n``.
    """
    for name in ("rank", "iteration-rank"):
        if cfg[name] > dimension:
            raise ConfigError(f"{name} must be at most the data dimension d = {dimension}, got {cfg[name]}")
    centred = bool(cfg.get("center")) and cfg["strategy"] in (readers("center") or STRATEGY_NAMES)
    most = num_rows - centred
    reads_rank = cfg["strategy"] in (readers("rank") or STRATEGY_NAMES)
    if cfg["rank"] > most and not cfg.get("variance-target") and reads_rank:
        raise ConfigError(f"rank = {cfg['rank']} is above the rank of the data: {num_rows} rows "
                          + ("centred have at most " if centred else "have at most ") + f"{most} independent "
                          f"direction(s), so components beyond them would be arbitrary; set rank <= {most}")
    if cfg["num-clients"] > num_rows:
        raise ConfigError(f"num-clients must be at most the number of rows n = {num_rows}, "
                          f"got {cfg['num-clients']}")


if __name__ == "__main__":
    import tomllib

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    print(keys_markdown(tomllib.loads(pyproject.read_text())["tool"]["flwr"]["app"]["config"]), end="")
