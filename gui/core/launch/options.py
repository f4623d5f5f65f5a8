"""The reference trainers' command-line options as data: name, type, range, default, which frameworks.

This table is the one place that knows the trainers' options. The launch dialog generates its form from it, and
``check_option`` / ``format_option`` validate and render values without Qt, so every rule is tested headless.
It must never import Qt or a training framework, and never start anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Literal

OptionType = Literal["int", "float", "choice", "flag", "path"]
Framework = Literal["ddp", "tf"]
OptionValue = str | int | float | bool

BOTH: Final[frozenset[Framework]] = frozenset({"ddp", "tf"})
DDP: Final[frozenset[Framework]] = frozenset({"ddp"})
TF: Final[frozenset[Framework]] = frozenset({"tf"})


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """One trainer option (``--name``).

    ``default`` is what the dialog pre-fills; ``None`` means "not passed: the trainer's own default applies".
    ``minimum``/``maximum`` are inclusive for numbers; ``choices`` for ``choice`` options.
    """

    name: str
    type: OptionType
    help: str
    frameworks: frozenset[Framework] = BOTH
    default: OptionValue | None = None
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    key: str = ""  # unique id when two frameworks' trainers have the same option name with different values

    @property
    def ident(self) -> str:
        """Unique id of this entry in the table (``key`` or ``name``)."""
        return self.key or self.name

    @property
    def flag(self) -> str:
        """The command-line flag, e.g. ``--batch-size``."""
        return f"--{self.name}"

    def range_text(self) -> str:
        """A short human description of the accepted values (for placeholders and error messages)."""
        if self.type == "choice":
            return " | ".join(self.choices)
        if self.type == "flag":
            return "on/off"
        if self.type == "path":
            return "a folder path"
        low = "-inf" if self.minimum is None else _fmt(self.minimum)
        high = "inf" if self.maximum is None else _fmt(self.maximum)
        return f"{self.type} in [{low}, {high}]"


def _fmt(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else str(number)


# ---- The table ---------------------------------------------------------------------------------------------------
# Mirrors trainers/common.py (shared options), trainers/ddp_trainer.py and trainers/tf_trainer.py. Ranges are the
# trainers' own checks, so the dialog refuses what the trainer would refuse with exit code 2.

OPTIONS: Final[tuple[OptionSpec, ...]] = (
    OptionSpec("dataset", "choice", "data set", default="digits", choices=("digits", "synthetic")),
    OptionSpec("model-width", "int", "hidden units per MLP layer (trainer default 64)", default=64, minimum=1,
               maximum=65536),
    OptionSpec("model-depth", "int", "hidden layers of the MLP (trainer default 2)", default=2, minimum=1,
               maximum=256),
    OptionSpec("batch-size", "int", "samples per rank per step (trainer default 32)", default=32, minimum=1,
               maximum=1_000_000),
    OptionSpec("steps", "int", "optimizer steps (trainer default 200; or give --epochs)", default=200, minimum=1,
               maximum=1_000_000_000),
    OptionSpec("epochs", "float", "passes over the training data (instead of --steps)", minimum=1e-6,
               maximum=1_000_000),
    OptionSpec("lr", "float", "learning rate (trainer default 0.05)", default=0.05, minimum=1e-12, maximum=1e6),
    OptionSpec("seed", "int", "random seed (trainer default 0)", minimum=0, maximum=2**32 - 1),
    OptionSpec("loader-workers", "int", "input-pipeline worker processes (trainer default 0)", minimum=0,
               maximum=256),
    OptionSpec("prefetch", "int", "batches prefetched per loader worker (trainer default 2)", minimum=1,
               maximum=1024),
    OptionSpec("data-delay-ms", "float", "extra milliseconds per batch in the input pipeline", minimum=0,
               maximum=600_000),
    OptionSpec("slow-rank", "int", "rank that does --slow-ms more compute per step (a straggler)", minimum=0,
               maximum=100_000),
    OptionSpec("slow-ms", "float", "extra milliseconds of compute per step on --slow-rank", minimum=0,
               maximum=600_000),
    OptionSpec("checkpoint-dir", "path", "folder for checkpoints (created if missing)"),
    OptionSpec("checkpoint-every-steps", "int", "save a checkpoint every N steps", minimum=1, maximum=1_000_000_000),
    OptionSpec("checkpoint-every-s", "float", "save a checkpoint every N seconds", minimum=1e-3, maximum=1e9),
    OptionSpec("resume", "flag", "continue from the latest checkpoint in --checkpoint-dir", default=False),
    OptionSpec("resume-latest", "flag", "continue from the latest checkpoint when there is one, else from step 0 "
               "(for Restart automatically)", default=False),
    OptionSpec("log-every", "int", "print progress every N steps (0: never; trainer default 20)", minimum=0,
               maximum=1_000_000_000),
    OptionSpec("amp", "flag", "mixed precision (bf16); GPU only", default=False),
    # PyTorch DDP only
    OptionSpec("device", "choice", "where ranks compute (cuda: NCCL, one GPU per rank)", frameworks=DDP,
               default="auto", choices=("auto", "cpu", "cuda"), key="device-ddp"),
    OptionSpec("compression", "choice", "gradient compression comm hook", frameworks=DDP, default="none",
               choices=("none", "fp16", "bf16", "powersgd")),
    OptionSpec("bucket-mb", "float", "DDP gradient bucket size in MB (trainer default 25)", frameworks=DDP,
               minimum=0.01, maximum=4096),
    # TensorFlow only (--strategy and --devices come from the launch kind and the process count)
    OptionSpec("device", "choice", "where replicas run", frameworks=TF, default="auto", choices=("auto", "cpu", "gpu"),
               key="device-tf"),
    OptionSpec("fit", "flag", "train with Keras model.fit + RingscopeCallback instead of a custom loop",
               frameworks=TF, default=False),
)

OPTIONS_BY_KEY: Final[dict[str, OptionSpec]] = {option.ident: option for option in OPTIONS}


def option_for(name: str, framework: Framework) -> OptionSpec | None:
    """The option ``--name`` of ``framework``'s trainer, or None when that trainer has no such option."""
    return next((o for o in OPTIONS if o.name == name and framework in o.frameworks), None)


def options_for(framework: Framework) -> list[OptionSpec]:
    """The options that apply to ``framework``, in table order."""
    return [option for option in OPTIONS if framework in option.frameworks]


def default_options(framework: Framework) -> dict[str, OptionValue]:
    """The pre-filled values for ``framework`` (options whose default is None are left out)."""
    return {o.name: o.default for o in options_for(framework) if o.default is not None}


# ---- Checking and rendering --------------------------------------------------------------------------------------

def coerce_option(option: OptionSpec, value: OptionValue) -> OptionValue:
    """``value`` converted to the option's type (text from a form is accepted). Raises ValueError in words."""
    if option.type == "flag":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off", ""):
            return False
        raise ValueError(f"{option.flag}: {value!r} is not on/off; use true or false")
    if option.type == "choice":
        text = str(value).strip()
        if text not in option.choices:
            raise ValueError(f"{option.flag}: {text!r} is not one of {option.range_text()}")
        return text
    if option.type == "path":
        text = str(value).strip()
        if not text:
            raise ValueError(f"{option.flag}: the path is empty; give a folder or leave the option out")
        return text
    return _coerce_number(option, value)


def _coerce_number(option: OptionSpec, value: OptionValue) -> int | float:
    if isinstance(value, bool):
        raise ValueError(f"{option.flag}: expected a number, got {value!r}")
    text = str(value).strip()
    try:
        number: int | float = int(text) if option.type == "int" else float(text)
    except ValueError:
        kind = "a whole number" if option.type == "int" else "a number"
        raise ValueError(f"{option.flag}: {text!r} is not {kind}; expected {option.range_text()}") from None
    if isinstance(number, float) and not math.isfinite(number):
        raise ValueError(f"{option.flag}: {text!r} is not a finite number")
    if (option.minimum is not None and number < option.minimum) or (
        option.maximum is not None and number > option.maximum
    ):
        raise ValueError(f"{option.flag}: {text} is out of range; expected {option.range_text()}")
    return number


def check_option(name: str, value: OptionValue, framework: Framework) -> str | None:
    """None when ``--name value`` is acceptable for ``framework``, else a message saying what is wrong."""
    option = option_for(name, framework)
    if option is None:
        if any(o.name == name for o in OPTIONS):
            only = "TensorFlow" if framework == "ddp" else "PyTorch DDP"
            return f"--{name} applies to the {only} trainer only; remove it"
        known = sorted({o.name for o in options_for(framework)})
        return f"--{name}: unknown trainer option; known options are {', '.join(known)}"
    try:
        coerce_option(option, value)
    except ValueError as error:
        return str(error)
    return None


def check_combination(options: dict[str, OptionValue], framework: Framework, world_size: int) -> list[str]:
    """Problems between options (the trainers refuse these at start): call after every ``check_option`` passed."""
    values = {name: coerce_option(o, value) for name, value in options.items()
              if (o := option_for(name, framework)) is not None}
    errors = []
    if "steps" in values and "epochs" in values:
        errors.append("--steps and --epochs both given; the trainer takes one of them: clear the other")
    slow_rank, slow_ms = values.get("slow-rank"), float(values.get("slow-ms", 0) or 0)
    if slow_rank is not None and not 0 <= int(slow_rank) < world_size:
        errors.append(f"--slow-rank {slow_rank} does not exist: this run has {world_size} rank(s), "
                      f"numbered 0..{world_size - 1}")
    if slow_rank is not None and slow_ms <= 0:
        errors.append(f"--slow-rank {slow_rank} needs --slow-ms with a positive number of milliseconds")
    if slow_rank is None and slow_ms > 0:
        errors.append(f"--slow-ms {values['slow-ms']} needs --slow-rank K to say which rank is slowed")
    wants_dir = [f"--{name}" for name in ("checkpoint-every-steps", "checkpoint-every-s", "resume",
                                              "resume-latest") if values.get(name)]
    if wants_dir and not values.get("checkpoint-dir"):
        errors.append(f"{', '.join(wants_dir)} needs --checkpoint-dir (where checkpoints are written and read)")
    if values.get("amp") and values.get("device") == "cpu":
        errors.append("--amp needs a GPU (mixed precision is not supported on CPU here); drop --amp or --device cpu")
    return errors


def format_option(name: str, value: OptionValue, framework: Framework) -> list[str]:
    """The argv words for one option: ``["--steps", "300"]``, ``["--amp"]``, or ``[]`` for a flag that is off."""
    option = option_for(name, framework)
    if option is None:
        raise ValueError(f"--{name} is not an option of the {framework} trainer")
    coerced = coerce_option(option, value)
    if option.type == "flag":
        return [option.flag] if coerced else []
    return [option.flag, str(coerced)]
