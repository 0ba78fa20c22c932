"""The built-in modes, described without MXNet (one table the launcher, the
bench, ``python -m mxhet.train`` and the docs read).

========  ============  ============  ================================================
name      kvstore       State Server  what it does
========  ============  ============  ================================================
esync     dist_sync     yes           ESync: local iterations, State Server decides
sync      dist_sync     no            synchronous SGD, gradient averaged every step
async     dist_async    no            asynchronous SGD, gradient applied on arrival
dcasgd    dist_async    no            asynchronous SGD with delay compensation
ssp       dist_async    yes           async SGD, at most s iterations ahead
localsgd  dist_async    yes           τ local steps, then a synchronous model average
adsp      dist_async    yes           ADSP: commits at scheduler-set rates, no waiting
preduce   dist_async    yes           Partial Reduce: average with the next P-1 ready workers
nodelay   dist_sync     yes           async SGD without gradient delay: merges run while workers compute
gcada     dist_async    yes           G-CADA: lazily selected groups, first finisher uploads, AMSGrad
cada      dist_async    yes           CADA: G-CADA with groups of one (D=1: distributed AMSGrad)
dylu      dist_async    no            async local SGD: H_i steps by speed, delta applied with Delayed Nesterov
local     (none)        no            standalone training on one device
========  ============  ============  ================================================
"""
import dataclasses

from .aggregation import AGGREGATIONS, OUTER_OPTIMIZERS
from .checks import OffOrAtLeast, at_least, positive, unit_interval
from .spec import ModeSpec, Option, get_spec, register_spec


ACK_MODES = ("blocking", "delayed")
"""ESync's ``ack``: wait for every State Server answer, or keep training (§4.2)."""
WEIGHTINGS = ("constant", "dynamic")
"""Partial Reduce's ``weights``: 1/P, or staleness-aware EMA weights."""
SMOOTHNESS = ("folded", "shard")
"""G-CADA's and CADA's ``smoothness``: eq. (9)'s L_g folded into c, or computed from the group's shard."""

DEFAULT_STATE_TIMEOUT = 60.0
"""Seconds a worker waits for a State Server reply, resends included, before giving up."""

_STATE_TIMEOUT = Option("state_timeout", DEFAULT_STATE_TIMEOUT,
                        "seconds to wait for a State Server answer (resends included) before failing",
                        check=positive())
_GLOBAL_LR = Option("global_lr", 1.0, "esync: ε of Algorithm 1, w += ε·mean(Δ) (BatchNorm statistics: their mean); "
                    "adsp: W += (ε/M)·Δ per commit", check=positive())

ESYNC = register_spec(ModeSpec(
    "esync", "dist_async",   # the round rendezvous on dist_async (mxhet.modes.rounds): a worker may leave
    "local iterations on a replica, State Server decides when to average model deltas; "
    "fast devices keep training while the slowest finishes one iteration",
    state_rules=('esync', 'membership'), needs_state_server=True, exchanges_deltas=True,
    options=(_GLOBAL_LR,
             Option("reset_optimizer_state", False, "clear the local optimizer state at every round boundary",
                    switch=True),
             _STATE_TIMEOUT,
             Option("ack", "blocking", "'blocking': wait for every answer (Algorithm 1); 'delayed': keep "
                                       "training, no answer yet means NOT-READY (§4.2)",
                    choices=ACK_MODES),
             Option("aggregation", "mean", "how deltas are combined: 'mean' (Algorithm 1), 'normalized' (FedNova: "
                                           "per local step), 'weighted' (by samples); see mxhet.policy.aggregation",
                    choices=AGGREGATIONS),
             Option("outer_optimizer", "none", "'none': w += combined delta; 'nesterov': DiLoCo's outer Nesterov "
                                               "momentum on the servers",
                    choices=OUTER_OPTIMIZERS),
             Option("outer_lr", 0.7, "learning rate of the outer optimizer", check=positive()),
             Option("outer_momentum", 0.9, "momentum of the outer optimizer", check=unit_interval()),
             Option("max_local_steps", 0, "K: a device aggregates after at most K local iterations a round, "
                                          "READY or not, and waits for the slowest (0: no cap)",
                    check=at_least(0)),
             Option("round_deadline", 0.0, "D: a round waits only for devices whose iteration takes at most D x "
                                           "the fastest's; a slower one's delta enters a later round with weight "
                                           "1/(1+rounds missed) (0: off, Algorithm 2; see mxhet.policy.deadline)",
                    check=OffOrAtLeast(1)),
             Option("round_length", 0.0, "L, with round_deadline: a device on time is READY only after "
                                         "max(1, round(L x the fastest's c / its c)) local iterations a round, so "
                                         "a round lasts about L fast iterations (0: off; L = D pairs them)",
                    check=OffOrAtLeast(1)),
             Option("late_memory", False, "with round_deadline: every round a late device misses adds its latest "
                                          "delta again at 1/N, the members keeping their shares (MIFA's memory; "
                                          "see mxhet.policy.deadline)",
                    switch=True),
             Option("wait_needed", 0.0, "R, with round_deadline: the rounds also wait for a device whose training "
                                        "loss on the global model it pulled is, smoothed, above R x the lowest "
                                        "device's (0: off; see mxhet.policy.needed). The training loop reports the "
                                        "loss with Trainer.observe_loss before each step (mxhet.train does)",
                    check=OffOrAtLeast(1)))))

SYNC = register_spec(ModeSpec(
    "sync", "dist_sync", "synchronous SGD: gradients averaged every step; everyone waits for the slowest"))

SYNC_ELASTIC = dataclasses.replace(
    SYNC, kvstore="dist_async", needs_state_server=True, exchanges_deltas=True, state_rules=("membership",))
"""``sync`` where a worker may leave or die (``mxhet-launch --elastic``, the simulator's ``--events``): each
step is a round of the members the State Server names, one local optimizer step each, their deltas averaged
(:class:`mxhet.modes.gradient.ElasticSync`). Not registered: the mode is still ``sync``."""

_ELASTIC_VARIANTS = {"sync": SYNC_ELASTIC}


def executor_spec(name, elastic=False):
    """The spec the executor of mode ``name`` runs under: its elastic variant when ``elastic`` and it has
    one (``sync``), else the registered spec.

    Raises:
        UnknownModeError: naming the known modes.
    """
    spec = get_spec(name)
    return _ELASTIC_VARIANTS.get(name, spec) if elastic else spec

ASYNC = register_spec(ModeSpec(
    "async", "dist_async", "asynchronous SGD: each gradient applied on arrival; no waiting, stale gradients"))

DCASGD = register_spec(ModeSpec(
    "dcasgd", "dist_async",
    "asynchronous SGD with delay-compensated gradients (MXNet's DCASGD on the servers)",
    options=(Option("lamda", 0.04, "delay-compensation strength λ", flag="--dc-lambda", check=at_least(0)),)))

SSP = register_spec(ModeSpec(
    "ssp", "dist_async",
    "stale synchronous parallel: async SGD, the fastest at most s iterations ahead of the slowest",
    state_rules=('ssp',), needs_state_server=True, options=(_STATE_TIMEOUT,)))

LOCALSGD = register_spec(ModeSpec(
    "localsgd", "dist_async", "local SGD / fixed ADACOMM: tau local steps, then a synchronous average of the models",
    state_rules=('membership',),   # it names each round's members (mxhet.control.membership)
    needs_state_server=True,
    exchanges_deltas=True, options=(Option("local_steps", 8, "local steps τ between two averages",
                                                   check=at_least(1)),)))

ADSP = register_spec(ModeSpec(
    "adsp", "dist_async", "ADSP: train without waiting, commit accumulated updates at scheduler-set rates",
    state_rules=('adsp',), needs_state_server=True, exchanges_deltas=True, uses_loss=True,
    options=(_GLOBAL_LR, _STATE_TIMEOUT)))

NODELAY = register_spec(ModeSpec(
    "nodelay", "dist_sync",
    "asynchronous SGD without gradient delay: workers keep computing while their previous updates are "
    "averaged; a worker waits only when tau of its gradients are missing from its global model",
    state_rules=('nodelay',), needs_state_server=True, exchanges_deltas=True,
    options=(Option("staleness", 16, "tau: the most gradients a worker holds that are not in the last global model "
                                     "it received (the paper's maximal staleness; python -m mxhet.train "
                                     "--max-staleness)",
                    flag="--max-staleness", check=at_least(1)),
             _STATE_TIMEOUT)))

PREDUCE = register_spec(ModeSpec(
    "preduce", "dist_async",
    "Partial Reduce: after every local step, average the model with the next P-1 ready workers (weights by "
    "staleness if dynamic); a star through the servers, not the paper's ring all-reduce",
    state_rules=('preduce',), needs_state_server=True,
    options=(Option("group_size", 2, "P, workers per partial reduce (2 <= P <= N)", check=at_least(2)),
             Option("weights", "dynamic", "'constant': 1/P; 'dynamic': staleness-aware EMA weights (§3.3.3)",
                    choices=WEIGHTINGS),
             Option("alpha", 0.5, "α of the dynamic weights' EMA, in [0, 1) (the paper gives none)",
                    check=unit_interval()),
             Option("frozen_filter", True, "group-frozen avoidance (§4): keep the last T groups' sync-graph "
                                           "connected"),
             Option("frozen_window", 0, "T, groups in the sync-graph (0: 2*ceil((N-1)/(P-1)))",
                    check=at_least(0)),
             _STATE_TIMEOUT)))

DEFAULT_STEP_SIZE = 3e-4
"""G-CADA's and CADA's α when not given. The paper's 0.01 (its §VI) is for
its linear regression; on a CNN AMSGrad at 0.01 stays at chance, and at
Adam's usual 0.001 lazy CADA (c = 2, D = 10), whose servers step every
iteration with the stale sum of the last gradients, collapses back to chance
once a few uploads are old; 3e-4 learns in both (``mxhet-bench gcada`` gives
the paper's 0.01 explicitly). The trainer's ``learning_rate`` is not used."""

DEFAULT_MAX_DELAY = 10
"""G-CADA's D when not given (the paper gives none): the largest age of
information, and the window of the lazy condition (eq. 9)."""


def _amsgrad_options(c):
    return (Option("max_delay", DEFAULT_MAX_DELAY, "D: a group whose age of information reaches D is selected; "
                                                   "eq. (9)'s window (D = 1: every group, every iteration)",
                   check=at_least(1)),
            Option("c", c, "c of the lazy condition (eq. 9)", flag="--lazy-c", check=positive()),
            Option("smoothness", "folded", "eq. (9)'s L_g: 'folded' (L_g = 1, folded into c) or 'shard' "
                                           "(computed exactly from the group's shard; --model linear --loss l2)",
                   choices=SMOOTHNESS),
            Option("step_size", DEFAULT_STEP_SIZE, "α, AMSGrad's step size on the servers (eq. 8c; the paper's "
                                                    "0.01 is for its linear model)",
                   check=positive()),
            Option("beta1", 0.9, "β1, AMSGrad's momentum weight (eq. 8a)", check=unit_interval()),
            Option("beta2", 0.999, "β2, AMSGrad's second-moment weight (eq. 8b)", check=unit_interval()),
            _STATE_TIMEOUT)


GCADA = register_spec(ModeSpec(
    "gcada", "dist_async",
    "G-CADA: groups of workers sharing a shard, selected lazily each iteration; all members of a selected group "
    "compute, the first to finish uploads; the servers apply AMSGrad to fresh and stale group gradients",
    state_rules=('gcada',), needs_state_server=True,
    options=(Option("groups", 1, "G, groups of M/G workers (contiguous slots; use --dist group)",
                    check=at_least(1)),)
    + _amsgrad_options(0.3)))

CADA = register_spec(ModeSpec(
    "cada", "dist_async",
    "CADA: workers selected lazily each iteration, the servers wait for every selected one and apply AMSGrad; "
    "max_delay=1 is distributed AMSGrad",
    state_rules=('gcada',), needs_state_server=True, options=_amsgrad_options(2.0)))

DYLU = register_spec(ModeSpec(
    "dylu", "dist_async",
    "asynchronous local SGD (Liu et al. 2024): each device runs local steps in proportion to its measured speed "
    "(Dynamic Local Updates), pushes its delta without waiting, and the servers apply it with Delayed Nesterov",
    exchanges_deltas=True,
    options=(Option("local_steps", 8, "H: the fastest device's local steps between two pushes; a device v times "
                                      "slower runs round(H/v), at least 1",
                    check=at_least(1)),
             Option("outer_lr", 0.7, "the servers' outer learning rate", check=positive()),
             Option("outer_momentum", 0.9, "μ, the servers' outer Nesterov momentum, in [0, 1)",
                    check=unit_interval()),
             Option("nesterov_period", 0, "N: the momentum is updated every N pushes of a key (Delayed "
                                          "Nesterov; 0: the number of workers)",
                    check=at_least(0)),
             Option("dynamic", True, "scale each device's local steps by its speed (DyLU); False: H for all",
                    flag="--dynamic-local-steps"))))

LOCAL = register_spec(ModeSpec("local", None, "standalone: one device, no parameter server"))
