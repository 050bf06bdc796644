"""The schedule families (docs/design.md §1.3): every family module registers its types, the
registry is the only place names are listed, and no code outside the package branches on a
schedule's name."""

from __future__ import annotations

import importlib
import pkgutil
import re
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from scalesweep.science import schedules as S
from scalesweep.science.schedules import _registry

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "scalesweep" / "science" / "schedules"
#: every family module: the package's public modules (private ones are shared machinery)
FAMILY_MODULES = sorted(m.name for m in pkgutil.iter_modules([str(PACKAGE)])
                        if not m.name.startswith("_"))


def _family(name: str) -> ModuleType:
    return importlib.import_module(f"scalesweep.science.schedules.{name}")


def test_every_family_module_is_registered_once() -> None:
    assert sorted(f.__name__.rsplit(".", 1)[1] for f in _registry.FAMILIES) == FAMILY_MODULES
    assert FAMILY_MODULES == ["constant", "deepspeed", "gradual_warmup", "wenet", "wsd"]


def test_the_registry_is_the_union_of_the_families_types() -> None:
    names = [t.name for f in _registry.FAMILIES for t in f.TYPES]
    assert len(names) == len(set(names))
    assert list(S.SCHEDULE_TYPES) == names
    aliases = {k: v for f in _registry.FAMILIES for k, v in f.ALIASES.items()}
    assert aliases == S.ALIASES
    # an alias names a type of its own family
    for f in _registry.FAMILIES:
        assert set(f.ALIASES.values()) <= {t.name for t in f.TYPES}


@pytest.mark.parametrize(("module", "types"), [
    ("wenet", {"warmuplr"}),
    ("deepspeed", {"onecycle", "ds_warmuplr", "ds_warmup_decay", "ds_warmup_cosine"}),
    ("gradual_warmup", {"gradual_warmup"}),
    ("wsd", {"wsd"}),
    ("constant", {"constant"}),
])
def test_each_family_owns_its_types_and_builds_its_own_classes(module: str,
                                                               types: set[str]) -> None:
    family = _family(module)
    assert {t.name for t in family.TYPES} == types
    for kind in family.TYPES:
        assert S.SCHEDULE_TYPES[kind.name] is kind
        # the typed config (and so the builder) is defined in the family's own module
        assert kind.config.__module__ == family.__name__


def test_each_type_has_a_keyword_only_typed_config_that_builds_its_schedule() -> None:
    """torchtitan's configurable pattern: a frozen, keyword-only dataclass per type whose fields
    are the type's params (order, defaults and rules), and whose build makes the schedule."""
    import dataclasses

    counts = {"warmup_steps": 2, "decay_steps": 3, "total_steps": 10, "total_num_steps": 10,
              "cycle_min_lr": 0.1, "cycle_max_lr": 1.0}
    for name, kind in S.SCHEDULE_TYPES.items():
        config = kind.config
        assert config.name == name and dataclasses.is_dataclass(config)
        assert config.__dataclass_params__.frozen  # type: ignore[attr-defined]
        assert all(f.kw_only for f in dataclasses.fields(config)), name
        assert list(kind.params) == [f.name for f in dataclasses.fields(config)]
        spec = S.resolve({"type": name, **{k: counts[k] for k, p in kind.params.items()
                                           if p.required}})
        assert isinstance(spec.config, config)
        assert spec.config == config(**spec.params)
        assert type(S.build(spec, 0.5)) is type(spec.config.build(0.5))
        if spec.params:
            with pytest.raises(TypeError):  # keyword-only: no value lands in the wrong field
                config(*spec.params.values())
    wenet = S.resolve({"type": "warmuplr", "warmup_steps": 8}).config
    assert isinstance(wenet, S.WeNetWarmupLRConfig) and wenet.warmup_steps == 8
    assert wenet.build(0.1).lr(8) == 0.1


def test_a_total_still_auto_has_no_config() -> None:
    spec = S.resolve({"type": "wsd", "warmup_steps": 2, "decay_steps": 3, "total_steps": "auto"})
    with pytest.raises(ValueError, match="fill_auto"):
        spec.config  # noqa: B018
    assert S.fill_auto(spec, 10).config.total_steps == 10  # type: ignore[attr-defined]


def test_the_schedule_sets_betas_only_where_its_family_cycles_momentum() -> None:
    cycle = {"type": "onecycle", "cycle_min_lr": 0.1, "cycle_max_lr": 1.0}
    onecycle = S.build(S.resolve(cycle), 0.5)
    assert onecycle.betas(5) == (onecycle.momentum(5), 0.99)
    off = S.build(S.resolve({**cycle, "cycle_momentum": False}), 0.5)
    assert off.betas(5) is None
    counts = {"warmup_steps": 2, "decay_steps": 3, "total_steps": 10, "total_num_steps": 10}
    for name, kind in S.SCHEDULE_TYPES.items():
        if not kind.drives_momentum:
            spec = {"type": name, **{k: counts[k] for k, p in kind.params.items() if p.required}}
            assert all(S.build(S.resolve(spec), 0.1).betas(k) is None for k in range(1, 12)), name


def test_no_code_outside_the_package_branches_on_a_schedule_name() -> None:
    # names as data (a workload's default scheduler, a recipe's name map) are fine; a
    # comparison with one is a family's behaviour leaking out of its module
    names = "|".join(re.escape(n) for n in [*S.SCHEDULE_TYPES, *S.ALIASES])
    quoted = f"[\"']({names})[\"']"
    branch = f"(==|!=)\\s*{quoted}|{quoted}\\s*(==|!=)|\\bin\\s*[({{[][^)}}\\]]*{quoted}"
    out = subprocess.run(["git", "grep", "-nE", branch, "--", "scalesweep",
                          ":!scalesweep/science/schedules"],
                         cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode == 1 and out.stdout == "", out.stdout + out.stderr
