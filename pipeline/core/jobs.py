"""A stage's settings as one document: what the workflow's job passes (``--settings-json``, built by
pipeline/workflow/*.py from the dataset's resolved config) and what a run by hand reads from a file
(``--settings FILE``, printed by ``python -m pipeline.workflow.jobs DATASET STAGE``), each flag of the
stage's contract over it. The contract (pipeline.core.settings: GenerateJob, SieveJob, ...) validates the
result, so a hand run and the workflow's job compute with the same settings; a key neither gives takes
the contract's default.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Callable, Literal, Mapping, Optional, Sequence, get_args, get_origin

from pipeline.core.cli import check_writable, start_stage
from pipeline.core.config import ConfigError, load_mapping, unique_json_pairs
from pipeline.core.settings.base import Contract, bare_type
from pipeline.core.settings.flags import _nested, add_flags, flag_name, pick
from pipeline.core.settings.validation import from_dict


def add_settings_flags(
    ap: argparse.ArgumentParser, cls: type[Contract], title: str, aliases: dict[str, str] | None = None
) -> None:
    """--settings FILE, --settings-json TEXT, and one flag per field of ``cls`` over the document (no
    default: a flag not given keeps the document's value). A list field takes several values; a field
    of another shape (a dataset's split) takes JSON. ``aliases``: field -> an older spelling of its
    flag that a hand-written command may still use (--split-spec)."""
    ap.add_argument(
        "--settings",
        help=f"the job's settings document (JSON or YAML; {cls.__module__}.{cls.__name__}), as the "
        "workflow's job gets it: python -m pipeline.workflow.jobs DATASET STAGE > FILE",
    )
    ap.add_argument("--settings-json", help="the settings document inline (what the rules pass)")
    group = ap.add_argument_group(f"{title} (over the document; default: the contract's)")
    scalar = [name for name in cls.model_fields if _kind(cls, name) == "scalar"]
    add_flags(group, cls, names=scalar, override=True)
    for name, field in cls.model_fields.items():
        kind = _kind(cls, name)
        if kind == "list":
            item = bare_type(get_args(field.annotation)[0])
            group.add_argument(flag_name(name), dest=name, nargs="+", type=item, help=field.description)
        elif kind == "json":
            spellings = [flag_name(name), *([aliases[name]] if aliases and name in aliases else [])]
            group.add_argument(*spellings, dest=name, type=_json_or_word, help=f"{field.description} (JSON)")


def _kind(cls: type[Contract], name: str) -> str:
    """scalar (a flag of add_flags: a type, a Literal, either or None), list, or json (any other shape)."""
    hint = cls.model_fields[name].annotation
    if get_origin(hint) is list and bare_type(get_args(hint)[0]) in (int, float, str):
        return "list"
    options = (  # Optional[Share]: the union holds the type with its bounds, a float all the same
        [bare_type(a) for a in get_args(hint) if a is not type(None)]
        if get_origin(hint) is not Literal
        else [hint]
    )
    if get_origin(hint) is None or all(
        a in (int, float, str, bool) or get_origin(a) is Literal for a in options
    ):
        return "scalar"
    return "json"


def _json_or_word(text: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=unique_json_pairs)
    except json.JSONDecodeError:
        return text  # a bare word such as none


def read_document(args: argparse.Namespace) -> dict:
    """The document --settings (a file) or --settings-json (inline) gives; {} when neither."""
    if args.settings and args.settings_json:
        raise ConfigError("--settings and --settings-json: give the settings document once")
    if args.settings_json:
        try:
            document = json.loads(args.settings_json, object_pairs_hook=unique_json_pairs)
        except json.JSONDecodeError as err:
            raise ConfigError(f"--settings-json: not JSON ({err})") from None
        except ConfigError as err:  # a key given twice
            raise ConfigError(f"--settings-json: {err}") from None
    elif args.settings:
        document = load_mapping(args.settings)
    else:
        document = {}
    if not isinstance(document, dict):
        raise ConfigError(f"settings document: a mapping is needed, got {type(document).__name__}")
    return document


# A field of a job document that is a mapping of another contract's keys (train_dense's ``train``:
# TrainSettings') -> (that contract, the keys of it the field takes; None: all). Its flags are the
# contract's own, spelled without the field's name (--lr, --beta), as ``add_flags`` wrote them.
Parts = Mapping[str, tuple[type[Contract], Optional[Sequence[str]]]]


def merge_flags(
    cls: type[Contract], document: dict, args: argparse.Namespace, parts: Parts | None = None
) -> dict:
    """``document`` with each flag of ``cls`` that was given over it (unvalidated; ``document`` itself
    is left as it is). A field that is a section of its own (ar2.simans) takes its flags (--simans-a)
    key by key over the document's, and so does each field of ``parts`` (train_dense's train takes
    --lr). Such a field that the document gives as anything but a mapping is a ConfigError naming it,
    whether or not a flag is given (a flag would otherwise replace it unseen)."""
    nested = {
        name: (field.annotation, None, name)
        for name, field in cls.model_fields.items()
        if _nested(field.annotation)
    }
    nested.update({name: (contract, names, "") for name, (contract, names) in (parts or {}).items()})
    flagged: dict[str, Any] = {}
    for name in cls.model_fields:
        if name in nested:
            contract, names, prefix = nested[name]
            inner = document.get(name, {})
            if not isinstance(inner, dict):
                raise ConfigError(
                    f"config key 'settings.{name}': a mapping is needed, got {type(inner).__name__}"
                )
            picked = pick(contract, args, prefix, names)
            given = {key: value for key, value in picked.items() if value is not None}
            if given:
                flagged[name] = {**inner, **given}
        elif (value := getattr(args, name, None)) is not None:
            flagged[name] = value
    return {**document, **flagged}


def merged_document(cls: type[Contract], args: argparse.Namespace) -> dict:
    """The document (--settings or --settings-json) with each flag of ``cls`` that was given over it
    (unvalidated; ``merge_flags``)."""
    return merge_flags(cls, read_document(args), args)


def job_settings(cls: type[Contract], args: argparse.Namespace) -> Any:
    """The run's settings: the document, the flags over it, validated by ``cls`` (a bad or unknown key
    is one line naming it, and the flag that gave it: a user who typed --near-duplicate 2 reads that
    flag, not only the document's key)."""
    flagged = {name: flag_name(name) for name in cls.model_fields if getattr(args, name, None) is not None}
    return from_dict(cls, merged_document(cls, args), "settings", given_by=flagged)


def run_job(
    parser: argparse.ArgumentParser,
    cls: type[Contract],
    work: Callable[[argparse.Namespace, Any], object],
    argv: list[str] | None,
    output: str = "out",
) -> int:
    """A stage's main, for a stage whose parser has add_job_flags and add_settings_flags(``cls``): its
    settings first (a bad document or flag is one line before any work), then its log and CPU threads,
    then a check that the flag ``output`` names a place it can write (found before hours of work, not by
    the last write), then ``work(args, job)``."""
    args = parser.parse_args(argv)
    job = job_settings(cls, args)
    start_stage(args.log, args.threads)
    check_writable(getattr(args, output))
    work(args, job)
    return 0
