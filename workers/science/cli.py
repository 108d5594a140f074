"""``python -m workers <subcommand>``: the science from a shell.

Subcommands: ``build-toy-models``, ``import-gguf``, ``derive-student`` and one per registered job kind (``mismatch``,
``sensitivity``, ``drift``, ``selftest``, ...), its options read from the kind's config
schema.  ``--json`` prints exactly one JSON object on stdout, otherwise a readable table;
anything else written while the job runs (vLLM's log included) goes to stderr.
Bad input prints one line per problem on stderr and exits 2 (problems in the YAML are
named by field, problems with options by flag); a cancelled run exits 130.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Sequence, Union, get_args, get_origin

from pydantic import AliasChoices, BaseModel
from pydantic.fields import FieldInfo

from .config import (
    DTYPE_ALIASES,
    ConfigError,
    RolloutConfig,
    ValidationError,
    describe_validation_error,
    load_list_file,
    load_mapping_file,
    validation_problems,
)
from .entrypoints import KINDS, JobKind
from .kinds import Kind
from .reporting import Cancelled, ConsoleReporter

#: Kinds whose rollout config may be left out (it is the BF16 engine they start from).
ROLLOUT_OPTIONAL = frozenset({Kind.CALIBRATION})
EXIT_BAD_INPUT = 2
EXIT_CANCELLED = 130
#: CPU threads when ``--threads`` is not given: under load one thread per process runs fastest.
DEFAULT_THREADS = 1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m workers", description="opdweb science: rollout mismatch on one scale.")
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("build-toy-models", help="train the tiny teacher and student (cached)")
    b.add_argument("--size", choices=["test", "demo", "long"], required=True,
                   help="test: seconds, 1-digit addition; demo: minutes, 3-digit +/*; "
                        "long: minutes, 4-digit addition with a worked solution")
    b.add_argument("--out", required=True, help="directory; gets teacher/ and student/")
    b.add_argument("--force", action="store_true", help="rebuild even when cached")
    b.add_argument("--threads", type=int, default=1)
    b.add_argument("--device", default="cpu", help="cpu | cuda[:N] (training device; the result is the same recipe)")
    b.add_argument("--json", action="store_true")

    g = sub.add_parser("import-gguf", help="a GGUF checkpoint as an ordinary checkpoint folder (safetensors)")
    source = g.add_mutually_exclusive_group(required=True)
    source.add_argument("--gguf", help="path of the .gguf file")
    source.add_argument("--packaged", choices=["smollm2", "gemma3"],
                        help="a GGUF the product ships as a package (smollm2: SmolLM2-135M-Instruct Q4_1; "
                             "gemma3: Gemma 3 270M base Q4_K_M, Gemma Terms of Use, after `make gemma`)")
    g.add_argument("--out", required=True, help="the checkpoint folder to write (under the model roots)")
    g.add_argument("--force", action="store_true", help="replace an existing folder")
    g.add_argument("--task", help="the task jobs with task 'auto' measure it on (gsm8k for --packaged)")
    g.add_argument("--max-new-tokens", type=int, help="the response length those jobs sample (256 for --packaged)")
    g.add_argument("--json", action="store_true")

    d = sub.add_parser("derive-student", help="a student made from a teacher by keeping some of its layers")
    d.add_argument("--teacher", required=True, help="the teacher's checkpoint folder")
    d.add_argument("--out", required=True, help="the student's checkpoint folder to write (under the model roots)")
    d.add_argument("--keep", default="every:2",
                   help="layers kept: every:K (0, K, 2K, ... and the last; default every:2) or indices 0,2,5")
    d.add_argument("--force", action="store_true", help="replace an existing folder")
    d.add_argument("--json", action="store_true")

    for kind in KINDS.values():
        _add_kind(sub, kind)
    return p


def _derive_student(args) -> int:
    from .derive_student import derive_student

    record = derive_student(args.teacher, args.out, keep=args.keep, force=args.force)
    if args.json:
        print(json.dumps(record))
    else:
        print(f"{args.out}: {len(record['kept_layers'])} of the teacher's {record['teacher_layers']} layers "
              f"({', '.join(map(str, record['kept_layers']))}); checkpoint hash {record['checkpoint_hash'][:12]}")
    return 0


def _import_gguf(args) -> int:
    import tempfile

    from .gguf_import import import_gguf
    from .packaged import SMOLLM2, assemble_gemma3, packaged_file

    task = {"task": args.task or "gsm8k", "max_new_tokens": args.max_new_tokens or 256} \
        if args.packaged or args.task else None
    if task and args.max_new_tokens is None and not args.packaged:
        task.pop("max_new_tokens")
    with _stdout_to_stderr(True), tempfile.TemporaryDirectory(prefix=".gguf-", dir=_existing_parent(args.out)) as tmp:
        if args.packaged == "gemma3":  # shipped in parts: put together beside the folder, then dropped
            path = assemble_gemma3(Path(tmp))
        else:
            path = packaged_file(*SMOLLM2) if args.packaged == "smollm2" else args.gguf
        record = import_gguf(path, args.out, force=args.force, task=task)
    if args.json:
        print(json.dumps(record))
    else:
        print(f"{args.out}: {record['architecture']}, {record['layers']} layers, from {record['source']['file']} "
              f"({record['note']}); logits match the GGUF-loaded model to {record['logits_max_abs_diff']:.3g}; "
              f"checkpoint hash {record['checkpoint_hash'][:12]}")
    return 0


def _existing_parent(out: str) -> str:
    """The folder ``out`` will be written in, made if it is missing."""
    parent = Path(out).resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    return str(parent)


def _add_kind(sub, kind: JobKind) -> None:
    """A subcommand per registered kind: one option per scalar config field (values are
    validated by the kind's schema, not by argparse), ``--config`` for the rollout YAML."""
    j = sub.add_parser(kind.command, help=kind.description)
    for name, info in kind.config.model_fields.items():
        annotation = _without_none(info.annotation)
        if isinstance(annotation, type) and issubclass(annotation, RolloutConfig):
            optional = kind.name in ROLLOUT_OPTIONAL
            j.add_argument("--config", required=not optional,
                           help="rollout config YAML" + (" (default: the BF16 engine)" if optional else ""))
        elif _file_model(annotation) is not None:
            j.add_argument(_flag(name), dest=name, required=info.is_required(),
                           help=_help(f"{info.description or name}: a JSON or YAML file"))
        elif _list_model(annotation) is not None:
            j.add_argument(_flag(name), dest=name, help=_help(f"{info.description or name}: a JSON or YAML file "
                                                              "holding a list"))
        elif get_origin(annotation) is list:
            j.add_argument(_flag(name), dest=name, help=_help(f"{info.description or name} (comma separated)"))
        elif get_origin(annotation) is Literal:
            j.add_argument(*_flags(name, info), dest=name, choices=_choices(annotation), help=_help(info.description))
        elif annotation is bool:
            j.add_argument(_flag(name), dest=name, action="store_const", const=True, default=None,
                           help=_help(info.description))
        elif annotation in (int, float, str, bool):
            j.add_argument(_flag(name), dest=name, required=info.is_required(), help=_help(info.description))
    for option in kind.cli_options:
        j.add_argument(option.name, dest=option.dest, default=None, help=option.help)
    j.add_argument("--json", action="store_true", help="print one JSON object")


def _help(text: str | None) -> str | None:
    """argparse formats help with %: a literal one (\"95% CI\") is doubled."""
    return text.replace("%", "%%") if text else text


def _flag(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def _choices(literal: Any) -> list[str]:
    """A Literal field's values, and the dtype aliases the schema folds into them."""
    values = [str(c) for c in get_args(literal)]
    return values + [alias for alias, name in DTYPE_ALIASES.items() if name in values]


def _flags(field_name: str, info: FieldInfo) -> list[str]:
    """The field's flag, then those of its former spellings (``--unit`` for ``--granularity``)."""
    alias = info.validation_alias
    if not isinstance(alias, AliasChoices):
        return [_flag(field_name)]
    former = [a for a in alias.choices if isinstance(a, str) and a != field_name]
    return [_flag(field_name)] + [_flag(a) for a in former]


def _file_model(annotation) -> type[BaseModel] | None:
    """The config model a field takes from a file (``BudgetSpec``, also where the product
    may give an id instead: ``BudgetSpec | int``); None for other fields."""
    options = get_args(annotation) if get_origin(annotation) in (Union, UnionType) else (annotation,)
    return next((a for a in options if isinstance(a, type) and issubclass(a, BaseModel)
                 and not issubclass(a, RolloutConfig)), None)


def _list_model(annotation) -> type[BaseModel] | None:
    """The item model of a list-of-models field (a calibration's ``transfer``), read from a file."""
    if get_origin(annotation) is not list:
        return None
    item = (get_args(annotation) or (None,))[0]
    return item if isinstance(item, type) and issubclass(item, BaseModel) else None


def _without_none(annotation):
    if get_origin(annotation) in (Union, UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


class _BadOptions(Exception):
    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


def _job_config(kind: JobKind, args: argparse.Namespace):
    """The kind's config from the YAML (its problems name YAML fields) and the options
    (their problems name the flags)."""
    fields = {name: getattr(args, name) for name in kind.config.model_fields if getattr(args, name, None) is not None}
    if "rollout" in kind.config.model_fields and getattr(args, "config", None) is not None:
        fields["rollout"] = RolloutConfig.from_file(args.config)
    for name, info in kind.config.model_fields.items():
        annotation = _without_none(info.annotation)
        if name not in fields or name == "rollout":
            continue
        if _file_model(annotation) is not None:
            fields[name] = load_mapping_file(fields[name], _flag(name))
        elif _list_model(annotation) is not None:
            fields[name] = load_list_file(fields[name], _flag(name))
        elif get_origin(annotation) is list:
            fields[name] = [v.strip() for v in fields[name].split(",") if v.strip()]
    if "threads" in kind.config.model_fields:
        fields.setdefault("threads", DEFAULT_THREADS)
    try:
        return kind.config.model_validate(fields)
    except ValidationError as exc:
        lines = []
        for p in validation_problems(exc, model=kind.config):
            name, _, rest = p["field"].partition(".")
            model = _file_model(kind.config.model_fields[name].annotation) if name in kind.config.model_fields else None
            if model is not None and rest:
                # a file option's field, e.g. "budget.BudgetSpec.metric": the file holds the model,
                # so the problems of the union's other alternatives (an id) do not apply
                if not rest.startswith(model.__name__ + ".") and rest != model.__name__:
                    continue
                rest = rest[len(model.__name__) + 1:] if rest.startswith(model.__name__ + ".") else ""
            flag = _flag(name) if name in kind.config.model_fields and name != "rollout" else p["field"]
            if flag != p["field"] and rest:
                flag += f" ({rest})"  # e.g. --budget (metric)
            lines.append(f"{flag}: {p['message']}")
        raise _BadOptions(lines) from None


@contextlib.contextmanager
def _stdout_to_stderr(enabled: bool):
    """While the job runs, send stdout (Python's and file descriptor 1, where C code and
    vLLM's logger write) to stderr, so stdout holds nothing but the report."""
    if not enabled:
        yield
        return
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    sys.stdout.flush()
    saved_fd = None
    try:
        saved_fd = os.dup(1)
        os.dup2(2, 1)
    except OSError:
        saved_fd = None
    saved = sys.stdout
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout = saved
        if saved_fd is not None:
            with contextlib.suppress(OSError):
                sys.stderr.flush()
            os.dup2(saved_fd, 1)
            os.close(saved_fd)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "build-toy-models":
            return _build(args)
        if args.command == "import-gguf":
            return _import_gguf(args)
        if args.command == "derive-student":
            return _derive_student(args)
        kind = next(k for k in KINDS.values() if k.command == args.command)
        cfg = _job_config(kind, args)
        options = {o.dest: getattr(args, o.dest) for o in kind.cli_options if getattr(args, o.dest) is not None}
        reporter = ConsoleReporter()
        try:
            with _stdout_to_stderr(True):  # the report alone on stdout, JSON or table
                report = kind.run(cfg, reporter, **options)
        finally:
            reporter.close()
    except ValidationError as exc:
        print(f"error: invalid configuration ({getattr(args, 'config', '')}):", file=sys.stderr)
        for line in describe_validation_error(exc):
            print(f"  {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except _BadOptions as exc:
        print("error: invalid options:", file=sys.stderr)
        for line in exc.lines:
            print(f"  {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ConfigError as exc:
        for line in str(exc).splitlines() or [""]:
            print(f"error: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Cancelled as exc:
        print(f"cancelled: {exc}", file=sys.stderr)
        return EXIT_CANCELLED
    if args.json or kind.formatter is None:
        print(json.dumps(report.model_dump(mode="json"), allow_nan=False, default=_json_default))
    else:
        print(kind.formatter(report))
    return 0


def _json_default(x: Any) -> Any:
    if hasattr(x, "item"):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def _build(args) -> int:
    import torch

    from .toy import build_toy_models

    torch.set_num_threads(args.threads)
    reporter = ConsoleReporter()
    try:
        manifest = build_toy_models(args.size, args.out, reporter, force=args.force, device=args.device)
    finally:
        reporter.close()
    if args.json:
        print(json.dumps(manifest))
    else:
        state = "cached" if manifest.get("cached") else f"built in {manifest['build_seconds']} s"
        print(f"toy models ({args.size}) in {args.out}: {state}")
        print(f"  teacher: {manifest['teacher_params']:,} params, greedy accuracy {manifest['teacher_accuracy']:.1%}")
        print(f"  student: {manifest['student_params']:,} params, greedy accuracy {manifest['student_accuracy']:.1%}")
    return 0
