"""Presets of ``mxhet-bench``: models, input sizes, profile and budgets, and the
paper's published numbers that the report puts beside ours.

* ``smoke``: the small CNN, Sync, Async, ESync and the standalone device,
  seconds per run -- a check that the whole pipeline works (run by the test
  suite), not a measurement.
* ``cpu``: the paper's models at reduced input size on the ``cpu`` profile
  (slowdown 10 instead of 117, 2 fast devices instead of 4), a fixed training
  budget per run; models whose calibrated base iteration leaves the fast
  devices fewer than 150 iterations in the budget are skipped with the numbers
  that decided it (ResNet-18 trained alone here needed about 150 iterations to
  come near 0.8).
* ``paper-sim``: the closed division -- the paper's profile (117x) and
  hyperparameters (lr 0.001) in virtual time, 3 seeds, every run to a common
  budget, times to target confirmed on all 10,000 test images, the baselines
  a user would pick; Inception-v3 only when ``--models`` names it.
* ``paper-sim-open``: the open division -- the same, each variant at its best
  learning rate from a committed sweep (``mxhet-bench sweep``).
* ``paper-sim-lr0.1``: what ``paper-sim`` was before the divisions (lr 0.1,
  one seed, each run until an unconfirmed target or a cap); the committed
  bench/results/paper-sim was made with it.
* ``paper-sim-gpu``: ``paper-sim-lr0.1`` at the paper's input sizes, the
  replicas on ``gpu(0)``, for a GPU machine.
* ``paper``: the paper's models at ImageNet input sizes on the ``paper``
  profile (117x, fast devices on ``gpu(0)``), for a GPU machine.
"""
import dataclasses

from mxhet.errors import ConfigError

PAPER_FIGURE_MODES = ("sync", "async", "esync", "adsp", "ssp", "localsgd", "dcasgd")
ALL_MODES = ("sync", "async", "esync", "adsp", "ssp", "localsgd", "dcasgd", "nodelay")
ALL_MODES += ("preduce",)   # Partial Reduce (bench/preduce.py has its own experiment)
ALL_MODES += ("gcada", "cada")   # G-CADA and CADA (bench/gcada.py has the paper's experiment)
ALL_MODES += ("dylu",)   # asynchronous local SGD with Delayed Nesterov and DyLU
STANDALONE = "local"
FAST_SYNC = "sync-fast"
"""Sync over the fastest devices of the profile only, the stragglers left out (a variant, run as ``sync``)."""
VARIANTS = (STANDALONE, FAST_SYNC)
"""Table 1 variants that are not modes of their own."""
RECOMMENDED_ARGS = ("--round-deadline", "8", "--round-length", "8", "--late-memory")
"""ESync's recommended configuration (issue 31): flags that ``python -m mxhet.train`` and ``python -m
mxhet.sim`` both take beside ``--sync esync``. A candidate being measured by ``mxhet-bench heterogeneity``:
a round lasts 8 iterations of the fastest device and waits only for devices at most 8x slower, whose
deltas enter later rounds with a staleness weight, and every round a late device misses adds its latest
delta again at 1/N (the late memory). The fast devices thus do about 8 local steps between exchanges at
every degree of heterogeneity: rounds of one slow iteration (the paper's) drift apart and aggregate late
at 117x, and rounds of one fast iteration (``--round-deadline 4`` alone, an earlier candidate) spend as
long exchanging the model as computing. Without the memory, on label-sorted data the rounds of the fast
devices alone undo what each late delta brought (the previous candidate, without ``--late-memory``). The
measurements behind the choice: bench/results/heterogeneity-explore. The deadline needs blocking ACKs and
the plain mean, so the other aggregation options cannot join it."""
NEEDED_ARGS = ("--wait-needed", "2")
"""ESync's ``--wait-needed 2`` (mxhet.policy.needed): beside :data:`RECOMMENDED_ARGS`, the rounds also wait
for a device whose loss on the global model is above twice the lowest device's. A candidate for the
recommended configuration (the ``needed`` variant of ``mxhet-bench heterogeneity``): on label-sorted data
the rounds of the fast devices alone undo what the slow devices' late deltas bring, and the memory does not
stop it (bench/results/heterogeneity-explore)."""
NORMALIZED_ARGS = ("--aggregation", "normalized")
"""The paper's ESync with FedNova's per-step normalisation of the deltas (mxhet.policy.aggregation): every
device's per-step direction counts equally, so a slow device's one step is not a small share of the mean
beside the fast devices' many. The ``normalized`` variant of ``mxhet-bench heterogeneity`` (run only when
named): it led the small CNN screen on label-sorted data (bench/results/heterogeneity-explore) but did not reach
0.80 in 540 s on the bench's label-sorted ResNet-18 cell (bench/results/heterogeneity), so it is no candidate."""
USER_BASELINES = (STANDALONE, FAST_SYNC, "async", "dcasgd", "adsp", "localsgd")
"""What a user would run instead of ESync on a heterogeneous cluster: the fastest device alone, Sync without
the stragglers, and the asynchronous and adaptive alternatives."""

# Table 1 of the ESync paper: speedup of ESync over Sync to 0.8 test accuracy,
# and final test accuracy of ESync and of standalone training.
PAPER_TABLE1 = {
    "alexnet": {"name": "AlexNet", "speedup": 27.0, "esync": 0.929, "standalone": 0.928},
    "inceptionv3": {"name": "Inception-v3", "speedup": 7.0, "esync": 0.937, "standalone": 0.932},
    "resnet18_v1": {"name": "ResNet-18-v1", "speedup": 7.0, "esync": 0.926, "standalone": 0.926},
    "resnet50_v1": {"name": "ResNet-50-v1", "speedup": 4.0, "esync": 0.914, "standalone": 0.910},
    "resnet50_v2": {"name": "ResNet-50-v2", "speedup": 6.0, "esync": 0.918, "standalone": 0.920},
    "mobilenet1.0": {"name": "MobileNet-v1", "speedup": 2.0, "esync": 0.903, "standalone": 0.902},
}
PAPER_ORDER = ("alexnet", "inceptionv3", "resnet18_v1", "resnet50_v1", "resnet50_v2", "mobilenet1.0")
# Figure 4 (§5): ESync processes 33x Sync's and 3x Async's samples per second,
# and sends 1/15 of Async's bytes per second. Figure 3: ESync about 7x faster
# than Sync to the target on ResNet, i.i.d.
PAPER_FIG4 = {"samples_esync_over_sync": 33.0, "samples_esync_over_async": 3.0, "bytes_async_over_esync": 15.0}


@dataclasses.dataclass(frozen=True)
class Preset:
    name: str
    models: tuple              # Table 1 rows, in the paper's order
    input_sizes: dict          # model -> pixels per side
    lrs: dict                  # model -> learning rate (plain SGD)
    profile: str               # a built-in profile name
    time_budget: float         # training seconds per run
    figure_model: str          # the model of Figures 3-5
    modes: tuple = ALL_MODES   # Figures 4 and 5
    curve_modes: tuple = ("sync", "async", "esync")  # Figure 3, both distributions
    table_modes: tuple = ("sync", "esync")
    batch_size: int = 64
    eval_points: int = 20      # snapshots of the global model per run (curve points)
    eval_samples: int = 1000   # test images per curve point (the final point: all 10,000)
    min_fast_iterations: int = 0  # skip a model whose fast devices get fewer in the budget
    utilization: float = 0.75  # see bench.calibrate.base_iteration
    target_accuracy: float = 0.8
    startup_allowance: float = 300.0  # seconds beyond the budget: start-up and evaluation
    engine: str = "cluster"    # the default --engine
    stop_at_target: bool = False  # sim: end each run at the target (the budget is then a cap)
    eval_interval_s: float = 0.0  # seconds between snapshots (0: the budget over eval_points)
    eval_slowest_share: float = 0.0  # sim: snapshots every this share of the slowest device's iteration...
    eval_base_share: float = 0.0     # ... or (instead) of the fastest device's: one grid for every variant
    eval_growth: float = 0.0      # ... or this share of the time so far, whichever is longer
    iteration_s: dict = dataclasses.field(default_factory=dict)
    # sim: model -> seconds of one iteration of a slowdown-1 device, fixed instead of measured, so that
    # virtual times do not depend on how loaded the machine is when the bench starts
    max_iterations: int = 0       # sim: stop a run once its devices ran this many real iterations in all
                                  # (a compute cap, deterministic; 0: none)
    time_budgets: dict = dataclasses.field(default_factory=dict)
    # model -> training seconds per run where a model needs another budget than time_budget
    iteration_caps: dict = dataclasses.field(default_factory=dict)
    # sim: model -> its compute cap where it needs another than max_iterations
    non_iid_max_iterations: int = 0  # sim: the compute cap of non-i.i.d. runs (0: as the i.i.d. runs')
    eval_min_iterations: int = 0  # sim: a snapshot waits until the devices ran this many real iterations
                                  # since the last one (0: every point of the grid)
    opt_in: dict = dataclasses.field(default_factory=dict)
    # model -> why it runs only when --models names it (Table 1 shows it skipped with this reason otherwise)
    seeds: tuple = (0,)           # the seeds of every headline cell (--seeds replaces them)
    model_seeds: dict = dataclasses.field(default_factory=dict)   # model -> its seeds where fewer are affordable
    non_iid_seeds: tuple = ()     # seeds of Figure 3's non-i.i.d. runs (empty: as the i.i.d. runs')
    extra_table_modes: dict = dataclasses.field(default_factory=dict)
    # model -> more Table 1 variants beside table_modes (the baselines a user would pick)
    mode_time_budgets: dict = dataclasses.field(default_factory=dict)
    # variant -> {model: training seconds} where a variant needs another budget than the common one
    # (Sync over the whole 117x cluster needs ~100x the virtual time of the others to reach the target)
    mode_lrs: dict = dataclasses.field(default_factory=dict)   # variant -> learning rate (open division)
    lr_sweep: dict = dataclasses.field(default_factory=dict)
    # open division: {"model", "modes", "lrs"} of `mxhet-bench sweep`; each variant's lr is then its best one
    # from the committed sweep (``sweep.json`` in the bench's --out), for every model
    confirm: bool = False         # confirm each run's time to target on the whole test set (bench.confirm)
    division: str = ""            # "closed" (the reference hyperparameters) or "open" (each method's best)

    def default_models(self):
        """The models a bench runs when ``--models`` is not given: all but the opt-in ones."""
        return tuple(m for m in self.models if m not in self.opt_in)

    def budget_for(self, model):
        """Training seconds per run of ``model``."""
        return self.time_budgets.get(model, self.time_budget)

    def cap_for(self, model, dist="iid"):
        """The simulator's compute cap for ``model`` on ``dist`` data (real iterations over all devices;
        0: none)."""
        if dist != "iid" and self.non_iid_max_iterations:
            return self.non_iid_max_iterations
        return self.iteration_caps.get(model, self.max_iterations)

    def seeds_for(self, model, dist="iid"):
        """The seeds of ``model``'s runs on ``dist`` data."""
        if dist != "iid" and self.non_iid_seeds:
            return self.non_iid_seeds
        return self.model_seeds.get(model, self.seeds)

    def table_modes_for(self, model):
        """Table 1's variants for ``model`` (the standalone run apart)."""
        return tuple(dict.fromkeys(self.table_modes + self.extra_table_modes.get(model, ())))

    def budget_of(self, model, mode):
        """Training seconds of one run of ``mode`` (a variant) on ``model``."""
        return self.mode_time_budgets.get(mode, {}).get(model, self.budget_for(model))

    def lr_for(self, model, mode):
        """The learning rate of ``mode`` (a variant) on ``model``."""
        return self.mode_lrs.get(mode, self.lrs.get(model, 0.05))

    def eval_interval(self, budget, slowest_iteration=0.0, base_iteration=0.0):
        if self.eval_base_share and base_iteration:
            return self.eval_base_share * base_iteration
        if self.eval_slowest_share and slowest_iteration:
            return self.eval_slowest_share * slowest_iteration
        return self.eval_interval_s or max(0.5, budget / self.eval_points)


PRESETS = {
    "smoke": Preset(
        name="smoke", models=("smallcnn",), input_sizes={"smallcnn": 28}, lrs={"smallcnn": 0.1},
        profile="smoke", time_budget=3.0, figure_model="smallcnn", eval_points=3, eval_samples=500,
        # Figure 3 with the two variants its report compares (ESync over Sync, on both distributions): an
        # Async run on non-i.i.d. data would take a launch more and go through no code the others do not
        curve_modes=("sync", "esync"),
        # Figures 4 and 5 with the modes their report compares (ESync over Sync and Async): every other mode
        # would take a launch more for a bar, and each one's real-process contract is a cheaper test's
        # (tests/integration/test_modes_learn.py, test_contexts_all_modes.py)
        modes=("sync", "async", "esync"), startup_allowance=180.0),
    "cpu": Preset(
        name="cpu", models=PAPER_ORDER,
        input_sizes={"alexnet": 64, "inceptionv3": 75, "resnet18_v1": 32, "resnet50_v1": 32,
                     "resnet50_v2": 32, "mobilenet1.0": 32},
        lrs={"alexnet": 0.1, "inceptionv3": 0.1, "resnet18_v1": 0.1, "resnet50_v1": 0.1,
             "resnet50_v2": 0.1, "mobilenet1.0": 0.1},
        profile="cpu", time_budget=200.0, figure_model="resnet18_v1", min_fast_iterations=150),
    "paper-sim-lr0.1": Preset(
        # The paper's profile exactly (2 devices at 117x, 4 at 1x, batch 64, plain SGD) in virtual time;
        # reduced inputs and lr 0.1 so that the paper's models fit a 2-core machine (the paper: 224 px,
        # 0.001); Inception-v3 only on request, since it alone costs what the other five do at --jobs 2.
        name="paper-sim-lr0.1", models=PAPER_ORDER,
        input_sizes={"alexnet": 64, "inceptionv3": 75, "resnet18_v1": 32, "resnet50_v1": 32,
                     "resnet50_v2": 32, "mobilenet1.0": 32},
        lrs={m: 0.1 for m in PAPER_ORDER}, profile="paper-sim", time_budget=7200.0, figure_model="resnet18_v1",
        # Snapshots every half slowest iteration, then every 10% of the time so far: the times to
        # the target of ESync (seconds) and of Sync (thousands) get the same relative resolution.
        engine="sim", stop_at_target=True, eval_slowest_share=0.5, eval_growth=0.1,
        # A compute cap for runs that never reach the target (non-i.i.d. data, a standalone device on
        # a few labels): ESync to 0.8 took 2,751 iterations on ResNet-18 and 5,041 on MobileNet here.
        max_iterations=6000,
        # Non-i.i.d. runs never reach the target here (Figure 3's right panel: ESync and Async end near 0.43
        # at 6,000 iterations, Sync at 0.45 after 7,200 s; at 3,000, 0.39, 0.40 and 0.46); 1,500 iterations
        # (ESync 0.32 at 68 virtual s, Async 0.21 at 81 s, Sync 0.44 at 3,385 s) still show none near the
        # target and Sync ahead, at a quarter of the first cost, so that the whole bench fits about 90 min
        # on a 2-core machine
        non_iid_max_iterations=1500,
        # A snapshot (1,000 test images and the precise-BN pass) costs 4-14 iterations of compute; where
        # iterations are few between grid points (a standalone device early on, Sync's 6-iteration rounds)
        # scoring would outweigh training, so a snapshot waits for 20 iterations since the last one
        eval_min_iterations=20,
        # Inception-v3's ESync was at 0.792 when 6,000 iterations ran out (823 virtual s): its own cap
        iteration_caps={"inceptionv3": 9000},
        opt_in={"inceptionv3": "opt-in (`--models` naming it): about 90 CPU min on a 2-core machine at its "
                               "smallest input, 75 px (ESync 64, Sync 15, standalone 11; 0.52 CPU s an "
                               "iteration), as long as the other five models together at `--jobs 2`"},
        # Inception-v3's and ResNet-50-v1's Sync were at 0.77 and 0.76 when 7200 virtual s ran out (114
        # rounds of 63 s, 204 of 35 s); Sync is cheap in compute at 117x (6 iterations a round), so the
        # large models get a longer budget
        time_budgets={"inceptionv3": 21600.0, "resnet50_v1": 21600.0, "resnet50_v2": 21600.0},
        # Figures 4 and 5: the ESync paper's family (the seed modes have experiments of their own)
        modes=PAPER_FIGURE_MODES,
        # measured by the cpu preset's calibration on this 2-core machine, idle (bench/results/report.md)
        iteration_s={"alexnet": 0.148, "inceptionv3": 0.54, "resnet18_v1": 0.115, "resnet50_v1": 0.302,
                     "resnet50_v2": 0.311, "mobilenet1.0": 0.103}),
    "paper": Preset(
        name="paper", models=PAPER_ORDER,
        input_sizes={"alexnet": 224, "inceptionv3": 299, "resnet18_v1": 224, "resnet50_v1": 224,
                     "resnet50_v2": 224, "mobilenet1.0": 224},
        lrs={m: 0.001 for m in PAPER_ORDER},  # §5: learning rate 0.001, batch 64, mini-batch SGD
        profile="paper", time_budget=3600.0, figure_model="resnet18_v1", eval_points=60,
        startup_allowance=1800.0),
}

def _epochs(preset_iteration_s, epochs):
    """model -> the virtual seconds in which one fast device trains ``epochs`` passes over Fashion-MNIST's
    60,000 training images at batch 64 (938 iterations a pass)."""
    return {m: round(epochs * 938 * t, -1) for m, t in preset_iteration_s.items()}


_LEGACY = PRESETS["paper-sim-lr0.1"]
CLOSED_EPOCHS = 10
"""The closed division's common budget, in passes of one fast device over the training set (see paper-sim)."""
OPEN_EPOCHS = 5
"""The open division's common budget, likewise."""
SYNC_BUDGET_FACTOR = 20
"""Sync over the whole 117x cluster runs 20x the common budget: 6 iterations every 117 base iterations is
about 1/20 of one fast device's samples per second, so it then sees as many samples as the standalone run."""

_CLOSED_BUDGETS = _epochs(_LEGACY.iteration_s, CLOSED_EPOCHS)
_OPEN_BUDGETS = _epochs(_LEGACY.iteration_s, OPEN_EPOCHS)
_R50 = ("resnet50_v1", "resnet50_v2")

# The closed division (MLPerf's sense): the ESync paper's own settings -- the paper's profile (2 devices at
# 117x, 4 at 1x), batch 64, plain SGD, lr 0.001 (§5) -- in virtual time, at the reduced inputs that fit a
# 2-core machine.
#
# * Every run goes on to its budget (no stop at the target, no compute cap): the accuracy columns are
#   converged figures at one common budget, CLOSED_EPOCHS passes of one fast device over the training set;
#   Sync gets SYNC_BUDGET_FACTOR times that, so that it sees as many samples as the standalone device.
# * Times to target are confirmed on the whole test set (bench.confirm); 3 seeds per cell (ResNet-50s: 1).
# * ADSP's Γ is 1.5 x the slowest device's iteration, so that every device commits at least once a period
#   and a run's three commit-rate searches fit 3 to 12 comparisons.
# The measurements behind these choices: bench/results/discussion.md, "Why the closed division is set so".
PRESETS["paper-sim"] = dataclasses.replace(
    _LEGACY, name="paper-sim", division="closed", lrs={m: 0.001 for m in PAPER_ORDER},
    stop_at_target=False, max_iterations=0, iteration_caps={}, non_iid_max_iterations=0,
    time_budget=_CLOSED_BUDGETS["resnet18_v1"], time_budgets=_CLOSED_BUDGETS,
    mode_time_budgets={"sync": {m: SYNC_BUDGET_FACTOR * b for m, b in _CLOSED_BUDGETS.items()}},
    seeds=(0, 1, 2), model_seeds={m: (0,) for m in _R50 + ("inceptionv3",)}, non_iid_seeds=(0,),
    table_modes=("esync", "sync", FAST_SYNC),
    extra_table_modes={m: ("async", "dcasgd", "adsp", "localsgd") for m in ("resnet18_v1", "alexnet")},
    curve_modes=("sync", "async", "esync", FAST_SYNC), confirm=True,
    opt_in={"inceptionv3": "opt-in (`--models` naming it): 0.54 CPU s an iteration at 75 px, the cost of the "
                           "other five models together"})

# The open division: any method, at its best learning rate, to the same confirmed target. Each variant's lr
# is the best of lr_sweep["lrs"] on ResNet-18 (`mxhet-bench sweep --preset paper-sim-open`, one seed: the
# shortest confirmed time to the target, else the best final accuracy), used for every model; otherwise as
# the closed division, with a budget of OPEN_EPOCHS passes (lr 0.1 reaches the target within one).
PRESETS["paper-sim-open"] = dataclasses.replace(
    PRESETS["paper-sim"], name="paper-sim-open", division="open", lrs={m: 0.1 for m in PAPER_ORDER},
    time_budget=_OPEN_BUDGETS["resnet18_v1"], time_budgets=_OPEN_BUDGETS,
    mode_time_budgets={"sync": {m: SYNC_BUDGET_FACTOR * b for m, b in _OPEN_BUDGETS.items()}},
    lr_sweep={"model": "resnet18_v1", "modes": ("esync", STANDALONE, FAST_SYNC, "async"),
              "lrs": (0.01, 0.03, 0.1)},
    # Snapshots every half fast iteration (then 10% of the time so far): at lr 0.1 the target comes within
    # tens of seconds, which half a 117x iteration (6.7 s) would not resolve; every variant on one grid, the
    # heterogeneity bench's, so that its 117x runs are this division's runs too (`--reuse`).
    eval_slowest_share=0.0, eval_base_share=0.5)

# The simulator at the paper's input sizes, where a GPU is available: the paper-sim settings, the replicas
# on gpu(0) (the simulator computes every device on the profile's first GPU), base iterations measured
# there at the start, lr 0.1 kept from paper-sim (the paper: 0.001), all six models.
PRESETS["paper-sim-gpu"] = dataclasses.replace(
    _LEGACY, name="paper-sim-gpu", profile="paper", input_sizes=PRESETS["paper"].input_sizes,
    iteration_s={}, opt_in={})


def for_result(result):
    """The preset a results JSON was made with. Before the closed division, ``paper-sim`` named the lr-0.1
    preset now called ``paper-sim-lr0.1`` (bench/results/paper-sim was made with it)."""
    name = result["preset"]
    if name == "paper-sim" and not result.get("division") and any(r.get("lr") == 0.1 for r in result["runs"]):
        return PRESETS["paper-sim-lr0.1"]
    return get(name)


def get(name):
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError("unknown preset %r; known presets: %s" % (name, ", ".join(PRESETS))) from None
