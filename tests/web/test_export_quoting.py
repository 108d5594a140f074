"""What an approver saw is what is exported: names and paths people wrote cannot add a
setting to any export. Each format is read back with that tool's own parser (hydra-core
and OmegaConf for verl's overrides, tomllib for prime-rl, shlex for slime's shell line,
PyYAML, json) and must hold exactly the settings of a benign export, with the hostile text
as the value it was given."""
import json
import random
import shlex
import tomllib
from dataclasses import replace

import pytest
import yaml
from django.test import Client
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from opdweb.exports import FORMATS
from opdweb.exports import render as render_export
from opdweb.exports.quoting import (
    UnrenderableValue,
    hydra_value,
    omegaconf_cli_list,
    omegaconf_cli_value,
    printable,
    shell_word,
    toml_string,
)
from opdweb.rollouts.canonical import canonical_rollout
from opdweb.rollouts.models import RolloutConfigRecord
from opdweb.sandbox import OutsideSandbox, confine_model
from tests.web.test_config_exports import PROVENANCE, TWO_LAYERS
from tests.web.test_configs import form_data

# An engine every trainer builds as admitted, so every format writes it.
CONFIG = canonical_rollout({"kv_cache": "fp8_e4m3", "kv_scales": "unit", "staleness": 2})
# The names of the security review, and their kin.
HOSTILE_NAMES = [
    "inj\nactor_rollout_ref.rollout.quantization=none\ntrainer.total_epochs=999",
    "x\nseed = 666\nmax_async_level = 64\n[orchestrator]\nmax_off_policy_steps = 64",
    "x\r\n--rollout-temperature 9 \\\n--extra-flag",
    "x\u2028seed = 1\u2029", "tab\there", "nul\x00byte", "bidi \u202egnp.exe",
]
# Printable paths that still mean something to a parser (checkpoints are printable: see below).
HOSTILE_PATHS = ["/models/a b", "/models/it's", "/models/${oc.env:HOME}", "/models/x\\'y", "/models/$(reboot)",
                 "/models/a;b=c,d", "/models/[1,2]", '/models/"q"', "/models/tail\\", "/models/é"]
HYDRA = OverridesParser.create()
MINI_BATCH = "${actor_rollout_ref.actor.ppo_mini_batch_size}"  # verl's data.train_batch_size in separate_async


def overrides(text: str) -> dict:
    """verl's view: every non-comment line as Hydra parses it, resolved as OmegaConf holds it
    (the one interpolation the export writes itself, into verl's own tree, left as written)."""
    parsed = [HYDRA.parse_override(line) for line in text.splitlines() if line and not line.startswith("#")]
    return {o.key_or_group: o.value() if o.value() == MINI_BATCH else OmegaConf.create({"v": o.value()}).v
            for o in parsed}


def skyrl_view(lines: list[str]) -> dict:
    """SkyRL's view: ``OmegaConf.from_cli`` of the non-comment lines, resolved (its
    ``from_cli_overrides``, then ``from_dict_config``)."""
    return OmegaConf.to_container(OmegaConf.from_cli([line for line in lines if line and not line.startswith("#")]),
                                  resolve=True)


# SkyRL's synchronous trainer only: the same engine, staleness 0.
SKYRL_CONFIG = canonical_rollout({"kv_cache": "fp8_e4m3", "kv_scales": "unit"})


def render_skyrl(**changes) -> str:
    return render_export(FORMATS["skyrl"], SKYRL_CONFIG, replace(PROVENANCE, **changes), TWO_LAYERS)


@pytest.mark.parametrize("path", HOSTILE_PATHS)
def test_skyrl_holds_a_hostile_path_as_its_one_value_and_a_hostile_name_adds_nothing(path):
    benign = skyrl_view(render_skyrl().splitlines())
    hostile = skyrl_view(render_skyrl(checkpoint=path).splitlines())
    benign["trainer"]["policy"]["model"]["path"] = path
    assert hostile == benign
    for name in HOSTILE_NAMES:
        assert skyrl_view(render_skyrl(config_name=name).splitlines()) == skyrl_view(render_skyrl().splitlines())


def shell_words(text: str) -> list[str]:
    return shlex.split("\n".join(line for line in text.splitlines() if not line.startswith("#")))


def comments(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#")]


def render(fmt: str, **changes) -> str:
    return render_export(FORMATS[fmt], CONFIG, replace(PROVENANCE, **changes), TWO_LAYERS)


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_hostile_config_name_adds_nothing_to_any_export(name):
    benign = {fmt: render(fmt) for fmt in FORMATS if fmt != "skyrl"}  # staleness 2: SkyRL's below
    assert overrides(render("verl", config_name=name)) == overrides(benign["verl"])
    assert tomllib.loads(render("prime-rl", config_name=name)) == tomllib.loads(benign["prime-rl"])
    assert shell_words(render("slime", config_name=name)) == shell_words(benign["slime"])
    for fmt in ("verl", "prime-rl", "slime"):  # the name stays inside its one comment line
        assert len(comments(render(fmt, config_name=name))) == len(comments(benign[fmt]))
    assert yaml.safe_load(render("yaml", config_name=name))["opdweb"]["config_name"] == name
    assert json.loads(render("vllm", config_name=name))["opdweb"]["config_name"] == name


@pytest.mark.parametrize("path", HOSTILE_PATHS)
def test_a_checkpoint_path_is_the_one_value_it_names_in_every_export(path):
    verl = overrides(render("verl", checkpoint=path))
    toml = tomllib.loads(render("prime-rl", checkpoint=path))
    slime = shell_words(render("slime", checkpoint=path))
    assert verl == {**overrides(render("verl")), "actor_rollout_ref.model.path": path}
    benign_toml = tomllib.loads(render("prime-rl"))
    benign_toml["model"]["name"] = path
    assert toml == benign_toml
    benign_words = shell_words(render("slime"))
    assert slime == [path if word == PROVENANCE.checkpoint else word for word in benign_words]
    assert json.loads(render("vllm", checkpoint=path))["engine_args"]["model"] == path


def test_the_quoting_round_trips_through_each_parser_for_any_text():
    rng = random.Random(0)
    alphabet = ["\\", "'", '"', "$", "{", "}", "a", " ", "=", ",", "[", "]", ":", "/", "#", ";", "é", "\t", "\n"]
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
        assert tomllib.loads(f"k = {toml_string(text)}")["k"] == text
        assert "\n" not in printable(text) and printable(text).isprintable()
        if text.isprintable():
            assert shlex.split(shell_word(text)) == [text]
            assert OmegaConf.create({"v": HYDRA.parse_override(f"k={hydra_value(text)}").value()}).v == text
            assert skyrl_view([f"k.v={omegaconf_cli_value(text)}", f"k.w={omegaconf_cli_list([text, 1])}"]) == {
                "k": {"v": text, "w": [text, 1]}}
        else:
            with pytest.raises(UnrenderableValue):
                hydra_value(text)


def test_a_plain_path_is_written_as_it_stands():
    assert hydra_value("/models/student-1.5b") == shell_word("/models/student-1.5b") == "/models/student-1.5b"


def test_a_config_name_that_is_not_one_printable_line_is_refused_and_nothing_written(member):
    user, team = member
    client = Client()
    client.force_login(user)
    for name in HOSTILE_NAMES + ["x" * 201]:
        response = client.post("/configs/new/", form_data(team, name=name))
        assert response.status_code == 400, name
        assert b"name" in response.content  # the form names the field (a NUL is refused before any view)
    assert not RolloutConfigRecord.objects.exists()
    assert client.post("/configs/new/", form_data(team, name="  fp8 w+kv  ")).status_code == 302
    assert RolloutConfigRecord.objects.get().name == "fp8 w+kv"


def test_a_checkpoint_path_with_a_control_character_is_refused(settings, tmp_path):
    settings.OPDWEB_MODEL_ROOTS = [tmp_path]
    (tmp_path / "a\nb").mkdir()
    (tmp_path / "a\nb" / "config.json").write_text("{}")
    with pytest.raises(OutsideSandbox, match="control character"):
        confine_model(str(tmp_path / "a\nb"))
