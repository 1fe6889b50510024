"""The config reference, generated from the typed config so that it cannot drift from the code.

`python -m orchestrator config` prints a Markdown table per config section (key, type, default,
description, TRL's name); `--defaults` prints every key with its default as YAML that loads back
into the default `TrainConfig`. docs/reference/ holds both, rewritten by
`python -m orchestrator config --write docs/reference`; tests/orchestrator/config/test_reference.py
fails when they are stale.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import textwrap
import types
import typing

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from orchestrator.config.relative_paths import section_model
from orchestrator.config.train import TrainConfig

# Top-level keys that are also fields of TRL's GRPOConfig (trl 1.16; the test checks the list against it).
TRL_SAME_NAME = frozenset(
    "num_generations max_completion_length temperature learning_rate beta epsilon epsilon_high loss_type delta "
    "importance_sampling_level num_iterations steps_per_generation mask_truncated_completions top_entropy_quantile "
    "vllm_importance_sampling_correction vllm_importance_sampling_mode vllm_importance_sampling_clip_max "
    "vllm_importance_sampling_clip_min off_policy_mask_threshold scale_rewards max_grad_norm warmup_steps "
    "lr_scheduler_type seed max_steps reward_weights eval_steps report_to top_p top_k output_dir save_steps "
    "save_total_limit vllm_mode vllm_gpu_memory_utilization max_tool_calling_iterations".split()
)
# Nested keys whose GRPOConfig field has another name (the same setting by TRL's help text).
TRL_OTHER_NAME = {
    "learner.bf16": "bf16",
    "rollout.max_model_len": "vllm_max_model_length",
    "rollout.tensor_parallel_size": "vllm_tensor_parallel_size",
}
# Sections whose keys are all named as in another library's config (the test checks them too).
SAME_NAMES_AS = {"lora": "PEFT's LoraConfig"}

REGENERATE = "python -m orchestrator config --write docs/reference"
WIDTH = 100  # of the YAML's comment lines


@dataclasses.dataclass(frozen=True)
class Section:
    key: str  # dotted, '' for the top level; 'tools[]' for the items of a list
    model: type[BaseModel]
    description: str

    def dotted(self, name: str) -> str:
        return f"{self.key}.{name}" if self.key else name


def sections(model: type[BaseModel] = TrainConfig, key: str = "", description: str = "") -> list[Section]:
    """The top level, then every nested config section, depth first in field order."""
    found = [Section(key, model, description)]
    for name, field in fields(model):
        if (nested := section_model(field.annotation)) is not None:
            found += sections(nested, _nested_key(key, name, field), field.description or "")
    return found


def fields(model: type[BaseModel]) -> list[tuple[str, FieldInfo]]:
    """A model's fields, those it declares first, then its bases' (TrainConfig: what to train before
    the GRPO settings it inherits)."""
    names = [name for cls in model.__mro__ for name in inspect.get_annotations(cls) if name in model.model_fields]
    return [(name, model.model_fields[name]) for name in dict.fromkeys(names)]


def _nested_key(key: str, name: str, field: FieldInfo) -> str:
    """A nested section's key: `a.b`, `a.b[]` for a list of sections, `a.b.NAME` for named ones (`judges`)."""
    suffix = "[]" if _is_list(field.annotation) else ".NAME" if typing.get_origin(field.annotation) is dict else ""
    return (f"{key}.{name}" if key else name) + suffix


def _is_list(annotation) -> bool:
    return typing.get_origin(annotation) is list or any(_is_list(arg) for arg in typing.get_args(annotation))


def _type_name(annotation) -> str:
    """`int`, `float | null`, `"a" | "b"`, `list[str]`; a nested config is a `section`."""
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(json.dumps(arg) for arg in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(arg) for arg in sorted(args, key=lambda arg: arg is type(None)))
    if origin is list:
        return f"list[{_type_name(args[0])}]"
    return annotation.__name__


def _default_value(field: FieldInfo):
    return field.get_default(call_default_factory=True)


def _yaml_value(value) -> str:
    """`value` as one line of YAML: `null`, `1.0e-06`, `['builtin:search_call']`, `' error: {error} '`."""
    text = yaml.safe_dump(value, default_flow_style=True, width=float("inf"), allow_unicode=True)
    return text.removesuffix("\n...\n").removesuffix("\n")


def _path_kind(field: FieldInfo) -> str | None:
    """'path' or 'spec' for the fields whose relative paths are read from the config file's folder."""
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    return extra.get("relative_path")


# Markdown


INTRO = """\
`python -m orchestrator train` reads its run config from a YAML file (`--config FILE.yaml`; without it, the
embedded default run) and then from overrides after it: `key=value` or `--key value`, each value parsed as
YAML, dotted keys for sections: `learner.micro_batch_size=4`, `rollout.engines=2`, `--learning_rate 1e-3`.
Overrides win over the file; an unknown key is an error (naming the closest known key, if one is close). A
run folder's `config.yaml` is the full config the run used, and `train --resume RUN_DIR` reads it back.

A key the config file leaves out takes the default below. `train` with no `--config` runs the embedded
default, `orchestrator/builtin/default_train.yaml`, which sets a few keys for the built-in tiny model.

Keys typed *(path)* name a file or folder, and keys typed *(function)* a Python function as
`path/file.py:name`, `package.module:name` or `builtin:NAME`. In a config file, a relative path is read from
the file's folder when a file or folder of that name is there (otherwise it is kept as written: a hub name,
`builtin:NAME`); on the command line, from the current folder.

The last column names the key's counterpart in TRL's `GRPOConfig` (PEFT's `LoraConfig` for `lora:`): *same
name* where the key is also a field there, or the field for the same setting where TRL names it otherwise.
Defaults are this project's and may differ from TRL's. Every key with its default as one YAML file:
`python -m orchestrator config --defaults` ([defaults.yaml](defaults.yaml)).
"""


def config_markdown() -> str:
    parts = ["# Config reference", "", f"<!-- Generated from the code by `{REGENERATE}`; do not edit. -->", "", INTRO]
    for section in sections():
        parts += _section_markdown(section)
    return "\n".join(parts)


def _section_markdown(section: Section) -> list[str]:
    title = _title(section.key)
    lines = [f"## {title}", ""]
    if section.key:
        shape = "a list of sections, each with these keys" if section.key.endswith("[]") else "a section"
        lines += [f"`{title}:` is {shape}. {_cell(section.description)}", ""]
    rows = [_row(section, name, field) for name, field in fields(section.model)]
    header = ["key", "type", "default", "description", SAME_NAMES_AS.get(section.key, "TRL's GRPOConfig")]
    if not any(row[-1] for row in rows):  # no key of the section has a counterpart
        header, rows = header[:-1], [row[:-1] for row in rows]
    lines += ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    return [*lines, *("| " + " | ".join(row) + " |" for row in rows), ""]


def _title(key: str) -> str:
    return key.replace("[]", "") or "Top level"


def _anchor(key: str) -> str:
    """The id Markdown gives the section's heading."""
    return re.sub(r"[^\w-]", "", _title(key)).lower()


def _row(section: Section, name: str, field: FieldInfo) -> list[str]:
    key = section.dotted(name)
    kind = {"path": " *(path)*", "spec": " *(function)*"}.get(_path_kind(field), "")
    description = _cell(field.description or "")
    if section_model(field.annotation) is not None:
        nested_key = _nested_key(section.key, name, field)
        description += f" Its keys: [{_title(nested_key)}](#{_anchor(nested_key)})."
    return [
        f"`{key}`",
        _cell(_type_name(field.annotation)) + kind,
        _default_cell(field),
        description,
        _library_name(section, key),
    ]


def _default_cell(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = _default_value(field)
    return "its keys' defaults" if isinstance(value, BaseModel) else f"`{_yaml_value(value)}`"


def _library_name(section: Section, key: str) -> str:
    if section.key in SAME_NAMES_AS or key in TRL_SAME_NAME:
        return "same name"
    return f"`{TRL_OTHER_NAME[key]}`" if key in TRL_OTHER_NAME else ""


def _cell(text: str) -> str:
    """`text` for a table cell: Markdown's special characters escaped outside `code spans`."""
    pieces = text.split("`")
    for index in range(0, len(pieces), 2):  # the even pieces are outside code spans
        pieces[index] = pieces[index].replace("\\", "\\\\").replace("*", "\\*").replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(pieces).replace("|", "\\|").replace("\n", " ")


# YAML


def defaults_yaml() -> str:
    header = [
        "# Every key of the train config with its default: a run config sets only the keys it changes.",
        f"# Generated from the code by `{REGENERATE}`; do not edit.",
        "# Types and what each key does: docs/reference/config.md (`python -m orchestrator config`).",
    ]
    return "\n".join(header + _yaml_lines(TrainConfig, "")) + "\n"


def _yaml_lines(model: type[BaseModel], indent: str) -> list[str]:
    lines = []
    for name, field in fields(model):
        lines += [""] if not indent else []
        lines += _comment(field.description or "", indent)
        nested, value = section_model(field.annotation), _default_value(field)
        if isinstance(value, BaseModel):
            lines += [f"{indent}{name}:", *_yaml_lines(nested, indent + "  ")]
        elif field.is_required():
            lines.append(f"{indent}{name}:  # required")
        else:
            lines.append(f"{indent}{name}: {_yaml_value(value)}")
        if nested is not None and not isinstance(value, BaseModel):  # off by default: its keys, commented out
            named = typing.get_origin(field.annotation) is dict  # named sections (`judges`): one shown as NAME
            lines += _commented_section(name, nested, indent, _is_list(field.annotation), named)
    return lines


def _commented_section(name: str, model: type[BaseModel], indent: str, is_list: bool, named: bool = False) -> list[str]:
    """The keys of a section that is off (null, an empty list or mapping) by default, as YAML commented out."""
    body = _yaml_lines(model, indent + ("    " if is_list or named else "  "))
    if named:
        body.insert(0, f"{indent}  NAME:")
    if is_list:  # the item's first key takes the list's dash, and its comment moves out to the dash
        first = next(index for index, line in enumerate(body) if not line.lstrip().startswith("#"))
        body[:first] = [indent + "  " + line.lstrip() for line in body[:first]]
        body[first] = indent + "  - " + body[first].lstrip()
    lead = f"{indent}# Its keys, when set{' (per item)' if is_list else ''}:"
    return [lead, f"{indent}# {name}:", *(f"{indent}# {line.removeprefix(indent)}" for line in body)]


def _comment(text: str, indent: str) -> list[str]:
    return [f"{indent}# {line}" for line in textwrap.wrap(text, WIDTH - len(indent) - 2, break_on_hyphens=False)]
