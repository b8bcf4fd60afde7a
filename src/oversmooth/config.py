"""The model's configuration, and the command-line option of every config field.

Imports no torch (``oversmooth <command> --help`` reads this module and nothing heavier):

- :class:`ModelConfig`: every field that defines a model, validated at construction.  It is
  the one home of the model fields: the run configs (:mod:`oversmooth.run_configs`,
  :class:`oversmooth.experiments.sweep.SweepSpec`) hold one as ``config.model``.
- :data:`OPTIONS`: the one table from config fields to command-line options (flags, help,
  how a value is read and written).  The CLI's parser and help text and a report's
  "Reproduce" line all read it, so they cannot drift apart.
- :func:`build`: a run config from the values of its options (dotted field paths,
  ``"model.depth"``); :func:`command_options`: the options that give a config back.
- :func:`upgrade_record`: a ``config.json`` record written before the model fields were
  nested under ``"model"``, in today's layout.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from oversmooth.registry import CONVS, MODELS, NORMS, RENAMED_COLUMNS

__all__ = [
    "check_repeats",
    "DTYPE_NAMES",
    "FLOOR_METHODS",
    "ENCODERS",
    "INITS",
    "NONLOCAL_NORMS",
    "PATTERN_LETTERS",
    "MAX_DEPTH",
    "MAX_SEED",
    "SEED_RANGE",
    "SPLITS",
    "DERIVED",
    "MODEL_FIELDS",
    "ModelConfig",
    "resolve_floor_method",
    "is_seed",
    "check_seed",
    "drawn_seed",
    "check_layers",
    "Option",
    "OPTIONS",
    "option",
    "options_of",
    "leaf_fields",
    "default_of",
    "value_at",
    "build",
    "from_record",
    "command_options",
    "set_by_run",
    "upgrade_record",
    "with_data_sizes",
]

DTYPE_NAMES = ("float32", "float64")
FLOOR_METHODS = ("auto", "shadow", "twin", "bound")
ENCODERS = ("mlp", "linear")
INITS = ("xavier", "torch", "xavier_all")
NONLOCAL_NORMS = ("mean", "sum")
PATTERN_LETTERS = {
    "M": "neighbourhood-masked attention",
    "S": "global self-attention over all nodes of the graph",
}
MAX_DEPTH = 65536
SPLITS = ("random", "public")  # training splits: seeded 60/20/20, or Planetoid's own

#: Model fields a run sets from its data when it builds the model (the feature size, the
#: number of classes, the edge attribute size; the commands run without edge attributes):
#: no option sets them.
DERIVED = ("model.in_channels", "model.out_channels", "model.edge_channels")


def _check_dtype(name: object) -> str:
    if name not in DTYPE_NAMES:
        raise ValueError(f"dtype: expected one of {', '.join(DTYPE_NAMES)}, received {name!r}")
    return str(name)


def resolve_floor_method(method: str, dtype: str) -> str:
    """The floor method actually used: ``auto`` is ``shadow`` for float32, ``twin`` for float64."""
    _check_dtype(dtype)
    if method not in FLOOR_METHODS:
        raise ValueError(f"floor: expected one of {', '.join(FLOOR_METHODS)}, received {method!r}")
    if method == "auto":
        return "shadow" if dtype == "float32" else "twin"
    if method == "shadow" and dtype == "float64":
        raise ValueError(
            "floor: 'shadow' compares a run with a float64 copy, so it needs --dtype float32; "
            "use twin or bound for float64 runs"
        )
    return method


def _is_int(value: object, minimum: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= minimum


#: the largest seed: torch's CPU generator keeps the low 32 bits of the 64 that
#: ``torch.manual_seed`` takes, so seeds 0 and 2**32 drew the same weights and were pooled as
#: two replicates (an audit); a seed above 2**64 - 1 failed in torch as "Overflow when
#: unpacking long long"
MAX_SEED = 2**32 - 1
#: how a refused seed is told (the range and why)
SEED_RANGE = "[0, 2**32 - 1] (torch's CPU generator keeps 32 bits of a seed)"


def is_seed(value: object) -> bool:
    """Whether ``value`` is a seed: an integer in ``[0, MAX_SEED]``."""
    return _is_int(value, 0) and value <= MAX_SEED  # type: ignore[operator]


def drawn_seed(seed: int) -> int:
    """The seed torch's CPU generator draws with for ``seed``: its low 32 bits (in
    :data:`MAX_SEED`'s range; the same numbers)."""
    return seed % (MAX_SEED + 1)


def check_seed(name: str, value: object) -> int:
    """``value`` when it is a seed (:func:`is_seed`); otherwise one ``ValueError`` naming
    ``name``, the range and why."""
    if not is_seed(value):
        raise ValueError(f"{name}: expected an integer in {SEED_RANGE}, received {value!r}")
    return value  # type: ignore[return-value]


def _layer_number(value: object) -> int | None:
    """``value`` as a layer number: a Python or NumPy integer, or a 0-d integer tensor (from
    ``torch.arange``); None for anything else, booleans included.  Read without importing
    NumPy or torch (``operator.index`` on a 0-d value)."""
    if isinstance(value, bool) or "bool" in str(getattr(value, "dtype", "")):
        return None
    if isinstance(value, int):
        return value
    if getattr(value, "ndim", None) != 0:
        return None
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:  # a float scalar or tensor
        return None


def check_layers(layers: Sequence[int] | int | None, depth: int) -> list[int]:
    """Validate 1-based layer numbers against the depth (default: every layer); NumPy and 0-d
    torch integers count (``np.arange(2, 9)``), one integer is one layer."""
    if layers is None:
        return list(range(1, depth + 1))
    one = _layer_number(layers)
    if one is not None:
        layers = [one]  # one layer
    if not isinstance(layers, Iterable) or isinstance(layers, (str, bytes)):
        raise ValueError(
            f"layers: expected a list of integers in [1, {depth}], received {layers!r}"
        )
    out: list[int] = []
    for item in layers:
        k = _layer_number(item)
        if k is None:
            raise ValueError(f"layers: expected integers in [1, {depth}], received {item!r}")
        if not 1 <= k <= depth:
            raise ValueError(
                f"layers: expected layer numbers in [1, {depth}] for a depth-{depth} model, "
                f"received {k}"
            )
        if k in out:
            raise ValueError(f"layers: layer {k} is listed twice; expected each layer once")
        out.append(k)
    if not out:
        raise ValueError("layers: expected at least one layer number")
    return sorted(out)


@dataclass(frozen=True)
class ModelConfig:
    """Everything that defines a model; validated at construction.

    Args:
        name: one of :data:`~oversmooth.registry.MODELS` (default ``preln``).
        conv: ``san``, ``gcn``, ``gat`` or ``esa``.
        depth: number of blocks ``L >= 1``.
        in_channels: input feature size (in a run config, set from the dataset when the
            model is built).
        out_channels: number of classes (likewise).
        hidden: width ``d`` (default 32, as in the paper); divisible by ``heads``.
        heads: attention heads ``h`` (default 4).
        seed: parameter initialisation seed.
        ffn: FFN inner width (default ``2 * hidden``).
        dropout: encoder input dropout (default 0.5) -- the only dropout unless
            ``block_dropout`` is set.
        block_dropout: dropout inside each FFN (default 0).
        norm: LayerNorm mode, ``node`` (default) or ``graph``.
        pattern: ESA-style block pattern over ``M`` (neighbourhood attention) and
            ``S`` (global self-attention), repeated to the depth; default ``"M"``.
        dtype: parameter precision, ``float32`` (default) or ``float64``.  Parameters are
            always drawn in float32 and then cast, so one seed gives the same initial
            weights in both precisions.
        edge_channels: edge attribute size (``conv="esa"`` only; default 0, none).

    Choices the seed paper does not state (defaults are oversmooth's; the other values exist
    for the reproduction's ablations, ``oversmooth.experiments.ablation``):

    - ``ffn=0``: no FFN sublayer at all (the block is attention only).
    - ``encoder``: ``"mlp"`` (default: dropout, Linear, ReLU, Linear) or ``"linear"``
      (dropout, one Linear).
    - ``init``: ``"xavier"`` (default: Xavier-uniform message-passing projections, PyTorch's
      default elsewhere), ``"torch"`` (PyTorch's ``nn.Linear`` default everywhere) or
      ``"xavier_all"`` (Xavier-uniform for every Linear weight, zero biases).
    - ``self_loops``: attention over ``N(i) ∪ {i}`` (default ``True``) or ``N(i)`` only
      (a node without in-neighbours then keeps itself, so no row of P is empty).
    - ``score_scale``: divide SAN scores by ``sqrt(d_k)`` (default ``True``).
    - ``nonlocal_norm``: the nonlocal factor ``(1/n)||P_h X - X||^2`` (``"mean"``, default,
      the paper's) or ``||P_h X - X||^2`` (``"sum"``).
    """

    name: str = "preln"
    conv: str = "san"
    depth: int = 2
    in_channels: int = 1
    out_channels: int = 1
    hidden: int = 32
    heads: int = 4
    seed: int = 0
    ffn: int | None = None
    dropout: float = 0.5
    block_dropout: float = 0.0
    norm: str = "node"
    pattern: str = "M"
    dtype: str = "float32"
    encoder: str = "mlp"
    init: str = "xavier"
    self_loops: bool = True
    score_scale: bool = True
    nonlocal_norm: str = "mean"
    edge_channels: int = 0

    def __post_init__(self) -> None:
        MODELS.resolve(self.name)
        _check_dtype(self.dtype)
        CONVS.resolve(self.conv)
        NORMS.resolve(self.norm)
        self._check_sizes()
        self._check_choices()
        self._check_structure()

    def _check_sizes(self) -> None:
        for field in ("depth", "in_channels", "out_channels", "hidden", "heads"):
            value = getattr(self, field)
            if not _is_int(value, 1):
                raise ValueError(f"{field}: expected an integer >= 1, received {value!r}")
        if self.hidden % self.heads:
            raise ValueError(
                f"hidden: expected a multiple of heads={self.heads}, received {self.hidden}; "
                f"try hidden={self.heads * max(1, round(self.hidden / self.heads))}, or heads "
                "that divide the hidden width"
            )
        if self.ffn is not None and not _is_int(self.ffn, 0):
            raise ValueError(f"ffn: expected an integer >= 0 (0: no FFN), received {self.ffn!r}")
        check_seed("seed", self.seed)
        if not _is_int(self.edge_channels, 0):
            raise ValueError(
                f"edge_channels: expected an integer >= 0, received {self.edge_channels!r}"
            )
        for field in ("dropout", "block_dropout"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{field}: expected a probability in [0, 1), received {value!r}")
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{field}: expected a probability in [0, 1), received {value!r}")

    def _check_choices(self) -> None:
        for field, choices in (
            ("encoder", ENCODERS),
            ("init", INITS),
            ("nonlocal_norm", NONLOCAL_NORMS),
        ):
            if getattr(self, field) not in choices:
                raise ValueError(
                    f"{field}: expected one of {', '.join(choices)}, "
                    f"received {getattr(self, field)!r}"
                )
        for field in ("self_loops", "score_scale"):
            if not isinstance(getattr(self, field), bool):
                raise ValueError(
                    f"{field}: expected a boolean (true or false), "
                    f"received {getattr(self, field)!r}"
                )
        if (
            not isinstance(self.pattern, str)
            or not self.pattern
            or set(self.pattern) - set(PATTERN_LETTERS)
        ):
            raise ValueError(
                f"pattern: expected a non-empty string over {{M, S}} (M = {PATTERN_LETTERS['M']}, "
                f"S = {PATTERN_LETTERS['S']}), received {self.pattern!r}"
            )

    def _check_structure(self) -> None:
        """The checks that combine fields: what a conv or the diffusion model allows."""
        edges = CONVS[self.conv].elements == "edges"
        diffusion = MODELS[self.name].placement == "diffusion"
        if not self.self_loops and edges:
            raise ValueError(
                "self_loops: edge-set attention always lets an edge attend to itself (ESA's "
                "Algorithm 1); expected True"
            )
        if not self.self_loops and diffusion:
            raise ValueError(
                "self_loops: the diffusion model's P is the GCN mean with self loops (the one "
                "its spectral reference is computed for); expected True"
            )
        if diffusion and edges:
            # it ran over the line graph, titled and judged as the node graph's diffusion
            # (its spectral reference, "the nodes converge"; an audit)
            raise ValueError(
                f"conv: the diffusion model propagates node states (X' = P X, P the GCN mean "
                f"of the graph), so conv={self.conv!r}, whose states are edges, does not apply; "
                "it ignores a node-level conv: pass san, gcn or gat, or leave it out"
            )
        if diffusion and set(self.pattern) != {"M"}:
            raise ValueError(
                "pattern: the diffusion model has no attention (every block is X' = P X over "
                f"the neighbourhood); expected 'M', received {self.pattern!r}"
            )
        if self.edge_channels and not edges:
            raise ValueError(
                f"edge_channels: only conv='esa' reads edge attributes, received "
                f"edge_channels={self.edge_channels} with conv={self.conv!r}; set edge_channels=0"
            )

    @property
    def ffn_channels(self) -> int:
        return self.ffn if self.ffn is not None else 2 * self.hidden

    def block_kinds(self) -> str:
        """The pattern letter of every block, ``len == depth``."""
        reps = -(-self.depth // len(self.pattern))
        return (self.pattern * reps)[: self.depth]

    def to_dict(self) -> dict:
        return asdict(self)


MODEL_FIELDS = tuple(f.name for f in dataclasses.fields(ModelConfig))


def set_by_run(model: ModelConfig, owner: str, **values: Any) -> ModelConfig:
    """``model`` with the fields a run config sets itself (``seed`` from its ``seeds``; a grid's
    ``name``, ``conv``, ``depth``) at the run's first value.

    A field still at the :class:`ModelConfig` default, or already at that value, is replaced;
    any other value would be silently overridden, so it is refused, naming the run field.
    """
    for name, (axis, value) in values.items():
        have = getattr(model, name)
        if have != value and have != _MODEL_DEFAULTS[name]:
            raise ValueError(
                f"model.{name}: {owner} sets it from {axis} (received model.{name}={have!r} "
                f"with {axis} starting at {value!r}); set {axis} instead"
            )
    return dataclasses.replace(model, **{name: value for name, (_, value) in values.items()})


_MODEL_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ModelConfig)}


# ----------------------------------------------------------------------------- option table


@dataclass(frozen=True)
class Option:
    """The command-line option of one config field.

    ``field``: the dotted path of the field in a run config (``"model.depth"``); an option
    names several when configs keep the same setting in different places (the first a config
    has is the one it sets).  ``flags``: long name first, then a short one.  ``kind``: how
    the value reads on the command line:

    - ``int``, ``float``, ``str``: one value; ``choice``: one of ``choices``;
    - ``switch``: a boolean, ``--name/--no-name``;
    - ``ints``, ``names``: a comma-separated list (``2,32,64``; ``preln,postln``), each
      integer at least ``minimum``;
    - ``extra``: a comma-separated list added to the field's default (``--metrics``);
    - ``repeat``: a list given one value per repetition of the flag (``--trained``).

    ``old``: former spellings, accepted hidden with a ``note:``.  ``default_text``: how the
    help states a ``None`` default that the run derives (``2 x hidden``).
    """

    field: str | tuple[str, ...]
    flags: tuple[str, ...]
    help: str
    kind: str = "str"
    choices: Collection[str] | None = None
    minimum: int = 0
    old: tuple[str, ...] = ()
    default_text: str | None = None

    @property
    def fields(self) -> tuple[str, ...]:
        return (self.field,) if isinstance(self.field, str) else self.field

    @property
    def flag(self) -> str:
        return self.flags[0].split("/")[0]

    @property
    def off_flag(self) -> str:
        """A switch's spelling for off: ``--no-NAME``, or the one its flags give (``--full``)."""
        on, _, off = self.flags[0].partition("/")
        return off or "--no-" + on.removeprefix("--")

    @property
    def name(self) -> str:
        """The parameter name: the long flag without dashes (``--data-root`` -> data_root)."""
        return self.flag.removeprefix("--").replace("-", "_")

    def parse(self, value: Any, flag: str | None = None) -> Any:
        """The config value of what the command line gave (``flag``: the spelling used)."""
        if self.kind in ("ints", "names", "extra"):
            return _parse_list(flag or self.flag, value, self.kind == "ints", self.minimum)
        if self.kind == "repeat":
            return tuple(str(v) for v in value)
        return value

    def render(self, value: Any, default: Any = None) -> list[str]:
        """The arguments that give ``value`` (``[]`` when it is the default)."""
        if _same(value, default):
            return []
        if self.kind == "switch":
            return [self.flag if value else self.off_flag]
        if self.kind == "repeat":
            return [arg for item in value for arg in (self.flag, str(item))]
        if self.kind == "extra":
            value = [v for v in value if v not in (default or ())]
            if not value:
                return []
        if value is None:  # a derived default: not writable, and never a non-default
            return []
        if isinstance(value, (list, tuple)):
            return [self.flag, ",".join(str(v) for v in value)]
        return [self.flag, str(value)]

    def shown(self, default: Any) -> str:
        """How the help states ``default``."""
        if default is None:
            return self.default_text or "none"
        if isinstance(default, bool):
            if self.off_flag != "--no-" + self.flag.removeprefix("--"):
                return self.flag if default else self.off_flag
            return "on" if default else "off"
        if isinstance(default, (list, tuple)):
            return ",".join(map(str, default)) if default else "none"
        return str(default)


def check_repeats(
    name: str, values: Sequence[object], each: str = "value", shown: Any = None
) -> None:
    """Refuse a list option that names one value twice (``--seeds 0,0``, ``--depths 2,2``,
    ``--models preln,preln``): one rule for every list, parsed or given (some dropped the repeat
    silently).  ``shown``: how the message quotes the list (default: the values)."""
    repeated = [v for i, v in enumerate(values) if v in values[:i]]
    if repeated:
        listed = list(values) if shown is None else shown
        raise ValueError(
            f"{name}: {repeated[0]} appears twice in {listed!r}; list each {each} once"
        )


def _parse_list(flag: str, text: Any, integers: bool, minimum: int) -> tuple:
    """``"2,32,64"`` -> ``(2, 32, 64)`` (or names), with a clear error naming the option.

    A ``key=value`` item after a name with parameters belongs to it: ``"csbm:n=200,degree=5,
    cora"`` is the two datasets ``csbm:n=200,degree=5`` and ``cora``.  An empty item (``0,,1``,
    ``0,``) is refused, never dropped."""
    if isinstance(text, (list, tuple)):
        return tuple(text)
    parts = [p.strip() for p in str(text).split(",")]
    example = "0,1,2" if "seed" in flag else "2,32,64"
    if any(not p for p in parts) and any(parts):
        raise ValueError(
            f"{flag}: an empty item in {text!r}; expected comma-separated "
            f"{'integers like ' + example if integers else 'names'} with nothing between two commas"
        )
    parts = [p for p in parts if p]
    if not integers:
        if not parts:
            raise ValueError(f"{flag}: expected comma-separated names, received {text!r}")
        names: list[str] = []
        for part in parts:
            if names and "=" in part and ":" not in part and ":" in names[-1]:
                names[-1] += "," + part  # the parameter of the name before it
            else:
                names.append(part)
        check_repeats(flag, names, "name", shown=text)
        return tuple(names)
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise ValueError(
            f"{flag}: expected comma-separated integers like {example}, received {text!r}"
        ) from None
    if not values:
        raise ValueError(f"{flag}: expected at least one integer, received {text!r}")
    bad = [v for v in values if v < minimum]
    if bad:
        raise ValueError(f"{flag}: expected integers >= {minimum}, received {bad[0]}")
    return values


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return [str(x) for x in a] == [str(x) for x in b]
    return bool(a == b)


_MODEL_HELP = "Architecture: " + ", ".join(
    name if entry.display in (name, "plain") else f"{name} ({entry.display})"
    for name, entry in MODELS.items()
)
_DTYPE_HELP = (
    "Precision the model runs in. float64 resolves energies down to ~1e-30; "
    "float32 stops at its accumulated rounding floor, ~1e-12 at depth 256 (those layers are "
    "flagged at_floor and left out of fits)."
)
_FLOOR_HELP = (
    "How the float floor is estimated: auto (shadow for float32, twin for float64), "
    "shadow (a float64 copy runs in step), twin (a copy on an input perturbed by one ulp), "
    "bound ((eps*norm)^2; free, too low when deep)."
)
_PATTERN_HELP = (
    "Block pattern over M (masked neighbourhood attention) and S (global self-attention), "
    "repeated to the depth, e.g. MMSS."
)

#: config field -> command-line option: the one table the parser, the help text and the
#: "Reproduce" line read.  Every field of every run config is here, in :data:`DERIVED`, or
#: set by a grid (a config's ``GRID``); a test checks it.
OPTIONS: tuple[Option, ...] = (
    # -- grids: the values of a model field, one run each ----------------------------------
    Option(
        "models",
        ("--models", "-m"),
        "Comma-separated architectures (see `oversmooth models`).",
        "names",
    ),
    Option(
        "convs",
        ("--convs",),
        "Comma-separated message passing types (see `oversmooth models`).",
        "names",
        old=("--conv",),
    ),
    Option("depths", ("--depths", "-L"), "Comma-separated depths.", "ints", minimum=1),
    # -- the model (ModelConfig) -----------------------------------------------------------
    Option("model.name", ("--model", "-m"), _MODEL_HELP + ".", "choice", MODELS),
    Option(
        "model.conv", ("--conv",), "Message passing (see `oversmooth models`).", "choice", CONVS
    ),
    Option(
        "model.depth", ("--depth", "-L"), "Number of blocks between encoder and decoder.", "int"
    ),
    Option("model.hidden", ("--hidden",), "Hidden width (divisible by --heads).", "int"),
    Option("model.heads", ("--heads",), "Attention heads.", "int"),
    Option("model.seed", ("--seed",), "Initialisation seed (and of the random split).", "int"),
    Option(
        "model.ffn",
        ("--ffn",),
        "FFN inner width; 0: no FFN sublayer.",
        "int",
        default_text="2 x hidden",
    ),
    Option(
        "model.dropout",
        ("--dropout",),
        "Encoder input dropout; in training only (measurements run in eval mode).",
        "float",
    ),
    Option(
        "model.block_dropout",
        ("--block-dropout",),
        "Dropout inside each FFN; in training only (measurements run in eval mode).",
        "float",
    ),
    Option(
        "model.norm",
        ("--norm",),
        "LayerNorm statistics: node (per node) or graph (per graph).",
        "choice",
        NORMS,
    ),
    Option("model.pattern", ("--pattern",), _PATTERN_HELP),
    Option(("model.dtype", "dtype"), ("--dtype",), _DTYPE_HELP, "choice", DTYPE_NAMES),
    Option(
        "model.encoder",
        ("--encoder",),
        "Encoder: mlp (dropout, Linear, ReLU, Linear) or linear (dropout, one Linear).",
        "choice",
        ENCODERS,
    ),
    Option(
        "model.init",
        ("--init",),
        "Initialisation: xavier (Xavier-uniform attention projections), torch (PyTorch's "
        "Linear default) or xavier_all (Xavier-uniform everywhere, zero biases).",
        "choice",
        INITS,
    ),
    Option(
        "model.self_loops",
        ("--self-loops/--no-self-loops",),
        "Attend over each node's neighbours and itself (off: the neighbours only).",
        "switch",
    ),
    Option(
        "model.score_scale",
        ("--score-scale/--no-score-scale",),
        "Divide SAN scores by sqrt(head width).",
        "switch",
    ),
    Option(
        "model.nonlocal_norm",
        ("--nonlocal-norm",),
        "The nonlocal factor: mean ((1/n)||P_h X - X||^2, the paper's) or sum.",
        "choice",
        NONLOCAL_NORMS,
    ),
    # -- the runs: replicates, modes ---------------------------------------------------------
    Option(
        "seeds",
        ("--seeds",),
        "Comma-separated seeds, e.g. 0,1,2: each a draw of the architecture's weights, "
        "pooled as replicates.",
        "ints",
        old=("--seed",),
    ),
    Option("modes", ("--modes",), "init and/or trained.", "names"),
    # -- the data ---------------------------------------------------------------------------
    Option(
        "dataset",
        ("--dataset", "-d"),
        "Dataset name (see `oversmooth datasets`), name:params, or the path of a saved PyG "
        "Data (.pt); an edge-list .csv is saved as a .pt with its features first "
        "(docs/datasets.md).",
    ),
    Option("datasets", ("--datasets", "-d"), "Comma-separated datasets.", "names"),
    Option(
        "data_root",
        ("--data-root",),
        "Folder of downloaded benchmarks (PubMed, Coauthor, Amazon).",
        default_text="$OVERSMOOTH_DATA or ~/.cache/oversmooth/data",
    ),
    # -- where and how precisely it runs ----------------------------------------------------
    Option("device", ("--device",), "auto (CUDA when available), cpu, cuda or cuda:N."),
    Option("floor", ("--floor",), _FLOOR_HELP, "choice", FLOOR_METHODS),
    # -- what an analysis records -----------------------------------------------------------
    Option(
        "similarity",
        ("--similarity/--no-similarity",),
        "Record the (L+1) x (L+1) inter-layer similarity matrix of layers 0..L "
        "(memory grows with depth).",
        "switch",
    ),
    Option(
        "prune",
        ("--prune-layers",),
        "Layers to prune one at a time, e.g. 2,32,64.",
        "ints",
        minimum=1,
        old=("--prune", "--layers"),
    ),
    Option(
        "metrics",
        ("--metrics",),
        "Extra per-layer metrics, e.g. effective_rank,mean_average_distance,energy_3 "
        "(see `oversmooth metrics`).",
        "extra",
    ),
    Option(
        "checkpoint",
        ("--checkpoint",),
        "A best.pt from `oversmooth train`: analyse the trained model (architecture and "
        "dataset come from it).",
    ),
    # -- training ---------------------------------------------------------------------------
    Option("epochs", ("--epochs",), "Training epochs.", "int"),
    Option(
        "lr",
        ("--lr",),
        "Learning rate.",
        "float",
        default_text="1e-4 peak for the Post-LN models (postln, nonlocal), 1e-3 for the others",
    ),
    Option(
        "warmup",
        ("--warmup",),
        "Linear warm-up epochs.",
        "int",
        default_text="a tenth of --epochs, at least 1, for postln and nonlocal; 0 for the others",
    ),
    Option("weight_decay", ("--weight-decay",), "Adam L2 weight decay.", "float"),
    Option(
        "split",
        ("--split",),
        "random (60/20/20, seeded by --seed) or public (Planetoid).",
        "choice",
        SPLITS,
    ),
    Option(
        "patience",
        ("--patience",),
        "Early stopping: epochs in a row without a higher validation accuracy.",
        "int",
        default_text="none: no early stopping",
    ),
    Option(
        "deterministic",
        ("--deterministic/--no-deterministic",),
        "Deterministic kernels: a fixed seed repeats bit for bit on CPU.",
        "switch",
    ),
    Option(
        "probe_every",
        ("--probe-every",),
        "Record every layer's energies every N epochs into dynamics.csv, on the eval forward "
        "that scores the epoch (0: off).",
        "int",
        default_text="epochs/50, at least 1",
    ),
    # -- how a sweep runs -------------------------------------------------------------------
    Option("backend", ("--backend",), "local (a process pool) or ray."),
    Option("workers", ("--workers",), "Parallel cells.", "int", default_text="all cores"),
    Option(
        "ray_address",
        ("--ray-address",),
        "Ray cluster to join.",
        default_text="start a local one",
    ),
    Option("out", ("--out", "-o"), "Sweep folder; rerunning into it skips finished cells."),
    # -- the paper reproduction -------------------------------------------------------------
    Option(
        "quick",
        ("--quick/--full",),
        "--quick: 3 seeds, training at depth 16 for 150 epochs; "
        "--full: 5 seeds, depth 32, 300 epochs.",
        "switch",
    ),
    Option(
        "trained",
        ("--trained",),
        "An `oversmooth train` run folder (with best.pt) to prune at eight layers spread over "
        "its depth, beside the paper's Table 8; repeat for several runs.",
        "repeat",
    ),
    Option(
        "ablations",
        ("--ablations/--no-ablations",),
        "Section 4: change one unstated choice at a time (init, encoder, FFN, norm, heads, "
        "score scaling, energy measure, ...) on Cora at depths 2, 32, 256.",
        "switch",
    ),
    # -- the atlas of PyG's zoo --------------------------------------------------------------
    Option(
        "architectures",
        ("--architectures",),
        "Comma-separated architectures of the atlas (the command's help lists their keys).",
        "names",
        default_text="all of them",
    ),
    Option(
        "prune_seeds",
        ("--prune-seeds",),
        "How many of the seeds have the middle layer pruned (one or two more forwards each).",
        "int",
    ),
)


def option(field: str) -> Option:
    """The option of the field ``field`` (a dotted path)."""
    for entry in OPTIONS:
        if field in entry.fields:
            return entry
    raise KeyError(f"no option sets {field!r}")


def leaf_fields(config: type) -> Iterator[str]:
    """The dotted path of every field of the dataclass ``config``, nested model included."""
    for f in dataclasses.fields(config):
        if f.name == "model":
            yield from (f"model.{name}" for name in MODEL_FIELDS)
        else:
            yield f.name


def _grid(config: type) -> Mapping[str, str]:
    """``model field -> the list field of`` ``config`` that sets it per run (its ``GRID``)."""
    return getattr(config, "GRID", {})


def options_of(config: type) -> list[tuple[str, Option]]:
    """``(field, option)`` for every field of the run config ``config`` an option sets, in
    the order of :data:`OPTIONS`: all but :data:`DERIVED`, the model fields its grid sets
    (its ``GRID``) and the fields a preset sets (its ``PRESET``)."""
    mine = set(leaf_fields(config)) - set(DERIVED) - set(getattr(config, "PRESET", ()))
    mine -= {f"model.{name}" for name in _grid(config)}
    out = []
    for entry in OPTIONS:
        found = [f for f in entry.fields if f in mine]
        if found:
            out.append((found[0], entry))
    return out


#: ``oversmooth prune``'s own defaults over AnalysisConfig's: the seed paper's Table 8 prunes
#: Pre-LN models, and a pruning run needs no similarity matrix
PRUNE_DEFAULTS: dict[str, Any] = {"model.name": "preln", "similarity": False}


def with_values(record: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the nested ``record`` with each dotted path of ``values`` set."""
    out = dict(record)
    for path, value in values.items():
        head, _, rest = path.partition(".")
        out[head] = with_values(out[head], {rest: value}) if rest else value
    return out


def value_at(record: Any, path: str) -> Any:
    """The value at the dotted ``path`` of a config or its record (``KeyError`` if absent)."""
    value = record
    for part in path.split("."):
        if isinstance(value, Mapping):
            value = value[part]
        elif dataclasses.is_dataclass(value):
            value = getattr(value, part)
        else:
            raise KeyError(path)
    return value


def default_of(config: type, path: str) -> Any:
    """The default of the dotted field ``path`` of the dataclass ``config`` (a nested model's
    from its default model); read from the class, nothing is validated or imported."""
    head, _, rest = path.partition(".")
    for f in dataclasses.fields(config):
        if f.name != head:
            continue
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            break
        return value_at(value, rest) if rest else value
    raise KeyError(f"{config.__name__} has no default for {path!r}")


C = TypeVar("C")


def build(config: type[C], values: Mapping[str, Any], **model: Any) -> C:
    """The run config ``config`` with the dotted-path ``values`` over its defaults.

    ``{"model.depth": 8, "seeds": (0,)}`` is ``config(model=replace(<its default model>,
    depth=8), seeds=(0,))``; ``model`` replaces the default model's fields first (a
    command's own default).  An ``extra`` option's value is added to the field's default.
    Every check runs once, in the config's construction.
    """
    run: dict[str, Any] = {}
    given = dict(model)
    for path, value in values.items():
        if path in _EXTRA_FIELDS:  # added to the defaults, which the config fills itself
            value = tuple(dict.fromkeys((*value_at(config(), path), *value)))
        if path.startswith("model."):
            given[path.removeprefix("model.")] = value
        else:
            run[path] = value
    if given:
        run["model"] = dataclasses.replace(default_of(config, "model"), **given)
    return config(**run)


_EXTRA_FIELDS = {f for entry in OPTIONS if entry.kind == "extra" for f in entry.fields}


def command_options(
    config: type, record: Any, default: Any, skip: Collection[str] = ()
) -> list[str]:
    """The command-line options that turn ``default`` into ``record`` (each an instance of
    the run config ``config`` or its record): one per field that differs, in the order of
    :data:`OPTIONS`; the fields in ``skip`` are left out."""
    out: list[str] = []
    for path, entry in options_of(config):
        if path in skip:
            continue
        try:
            value = value_at(record, path)
        except KeyError:
            continue
        out += entry.render(value, value_at(default, path))
    return out


def with_data_sizes(record: dict, sizes: Collection[tuple[int, int]]) -> dict:
    """``record`` (a run config's ``to_dict()``) with ``model.in_channels`` and
    ``model.out_channels`` as the run's data set them (``sizes``: one ``(features, classes)``
    pair per dataset): the pair all datasets share, else None (each dataset its own), never
    the config's placeholder."""
    pairs = set(sizes)
    features, classes = next(iter(pairs)) if len(pairs) == 1 else (None, None)
    return {
        **record,
        "model": {**record["model"], "in_channels": features, "out_channels": classes},
    }


def from_record(config: type[C], record: Mapping[str, Any]) -> C:
    """The run config ``config`` a ``config.json`` record describes (today's layout or an
    older flat one, see :func:`upgrade_record`); keys that are no field of ``config``
    (``command``, ``environment``, ...) are ignored, as are the :data:`DERIVED` sizes (the
    data's, which the run sets again), lists read as tuples, and fields the record lacks keep
    ``config``'s defaults."""
    record = upgrade_record(record)
    values: dict[str, Any] = {}
    for path in leaf_fields(config):
        if path in DERIVED:  # the data's sizes (or None): a run sets them from its data again
            continue
        try:
            value = value_at(record, path)
        except KeyError:
            continue
        values[path] = tuple(value) if isinstance(value, list) else value
    return build(config, values)


# ----------------------------------------------------------------------------- old records


def upgrade_record(record: Mapping[str, Any]) -> dict:
    """A ``config.json`` record (or a sweep's ``spec.json``) in today's layout.

    One written before the model fields were nested (``"model": "postln", "depth": 256,
    ...``, or a grid's ``"models": [...], "hidden": 32, ...``) gets them under ``"model"``
    (``name`` from its ``model``), and a compare record's single ``conv`` becomes ``convs``.
    Metric names renamed since (``cosine_prev``, ``mad``, ...: the columns named after their
    functions, :data:`oversmooth.registry.RENAMED_COLUMNS`) get their current names.  Today's
    records, and records of commands without a model (reproduce, bench), are returned as they
    are (copied).
    """
    out = dict(record)
    metrics = out.get("metrics")
    if isinstance(metrics, (list, tuple)) and any(
        isinstance(m, str) and m in RENAMED_COLUMNS for m in metrics
    ):
        out["metrics"] = type(metrics)(
            RENAMED_COLUMNS.get(m, m) if isinstance(m, str) else m for m in metrics
        )
    flat = "model" in out and not isinstance(out["model"], Mapping)
    if not flat and not ("models" in out and "model" not in out):
        return out
    model: dict[str, Any] = {"name": out.pop("model")} if flat else {}
    if "models" in out and "conv" in out and "convs" not in out:  # compare: one conv, a field
        out["convs"] = [out.pop("conv")]
    for key in MODEL_FIELDS:
        if key in out and key != "name":
            model[key] = out.pop(key)
    out["model"] = model
    return out
