"""Every malformed user input is rejected cleanly (docs/design.md §4.1): exit code 2, one message on
stderr that names each problem's field path and value and states the rule, no traceback, and
nothing written to the working directory (no mlflow.db, mlruns or scalesweep_runs).

The corpus is ``tests/bad_inputs/``: one small sweep or schedule file per mistake, each with a
comment saying what is wrong (JSON files cannot have one; their case row says it). ``CASES``
below is the expected-substring table: what stderr must contain for each file. Files that
cannot live in the repository sensibly (over 2 MiB, non-UTF-8 bytes, an alias bomb) are made
by the tests. Most cases run in process through ``scalesweep.orchestrator.cli.main`` (fast); a
representative subset runs the real CLI in a subprocess.

A case that does not behave as required is a product bug: it carries ``bug=...`` and runs as
``xfail(strict=True)``, so the fix shows up as an XPASS to remove the marker.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from scalesweep.orchestrator.cli import main
from scalesweep.orchestrator.spec.files import MAX_FILE_BYTES

ROOT = Path(__file__).resolve().parents[2]
BAD = Path(__file__).resolve().parents[1] / "bad_inputs"
PYTHON = Path(sys.executable)
SMOKE = str(ROOT / "sweeps" / "smoke.yaml")
WENET = str(ROOT / "recipes" / "wenet_conformer.yaml")
#: what a run would leave behind; a rejected input must leave nothing at all
RUN_ARTIFACTS = ("mlflow.db", "mlruns", "scalesweep_runs")


@dataclass(frozen=True)
class Case:
    file: str
    expect: tuple[str, ...]  # stderr must contain each: the field path, the value, the rule
    command: str = "plan"  # "plan" for sweep files, "lr" for schedule files
    problems: int | None = None  # the exact count, where the case is about several at once
    bug: str | None = None  # a product bug: the case is xfail(strict=True) with this reason


#: see tests/unit/test_recipes.py and tests/unit/test_cli_plan_lr.py, which show it on valid files too
OWN_FORM_BUG = ("our own {optimizer, scheduler} form is read as DeepSpeed (recipes.detect_kind: "
                "any mapping under scheduler means DeepSpeed), so the optimizer lr and every "
                "scheduler param, which DeepSpeed keeps under params, are dropped")

CASES: tuple[Case, ...] = (
    # --- the file itself: syntax, encoding, object-constructing tags, shape -------------------
    Case("yaml_unclosed_bracket.yaml", ("<file>", "line 8, column 1", "invalid YAML", "']'")),
    Case("yaml_bad_indent.yaml", ("<file>", "line 5, column 12", "invalid YAML",
                                  "mapping values are not allowed")),
    Case("yaml_tab_indent.yaml", ("<file>", "line 4, column 1", "invalid YAML", r"'\t'")),
    Case("tag_object_apply.yaml", ("<file>", "line 2, column 7", "YAML tags that construct objects "
                                   "are not allowed", "python/object/apply:os.system")),
    Case("tag_python_name.yaml", ("<file>", "line 3, column 18", "not allowed",
                                  "python/name:os.system")),
    Case("tag_object_new.yaml", ("<file>", "line 9, column 10", "not allowed",
                                 "python/object/new:subprocess.Popen")),
    Case("empty.yaml", ("<file>", "None", "file is empty")),
    Case("only_comments.yaml", ("<file>", "file is empty")),
    Case("top_list.yaml", ("<file>", "[{'name': 'bad'}", "top level must be a mapping, not list")),
    Case("top_scalar.yaml", ("<file>", "just a sentence", "top level must be a mapping, not str")),
    Case("non_string_key.yaml", ("4 = 4", "keys must be strings")),
    Case("missing_required.yaml", ("workload", "target", "axes", "is required"), problems=3),
    # --- wrong types ---------------------------------------------------------------------------
    Case("ws_string.yaml", ("axes.world_size[1]", "'4'", "valid integer")),
    Case("bool_as_number.yaml", ("training.epochs", "True", "valid number")),
    Case("lr_bool.yaml", ("optimizer.lr", "True", "must be a finite number > 0")),
    Case("list_for_mapping.yaml", ("training", "['per_worker_batch', 16]", "valid dictionary")),
    Case("workload_string.yaml", ("workload", "'mlp_regression'", "valid dictionary")),
    # --- out of range --------------------------------------------------------------------------
    Case("ws_zero.yaml", ("axes.world_size", "[0, 2]", "at least 1", "[0]")),
    Case("ws_negative.yaml", ("axes.world_size", "[2, -4]", "at least 1", "[-4]")),
    Case("batch_zero.yaml", ("training.per_worker_batch", "= 0", "greater than or equal to 1")),
    Case("accum_zero.yaml", ("training.accum_grad", "= 0", "greater than or equal to 1")),
    Case("target_per_seed.yaml", ("target", "per_seed: True is no longer accepted", "cross-fitted")),
    Case("reference_job_contradicts_recipe.yaml", ("reference_job.accum_grad = 2", "contradicts the recipe")),
    Case("epochs_negative.yaml", ("training.epochs", "-3", "greater than 0")),
    Case("epochs_inf.yaml", ("training.epochs", "inf")),
    Case("lr_negative.yaml", ("optimizer.lr", "-0.05", "must be a finite number > 0")),
    Case("lr_zero.yaml", ("optimizer.lr", "= 0", "must be a finite number > 0")),
    Case("lr_nan.yaml", ("optimizer.lr", "nan", "must be a finite number > 0")),
    Case("lr_inf.yaml", ("optimizer.lr", "inf")),
    Case("physical_workers_zero.yaml", ("physical_workers", "= 0", "at least 1 or 'auto'")),
    Case("more_workers_than_ranks.yaml", ("physical_workers = 6", "must be at most every world size",
                                          "physical_workers(6) > axes.world_size[0](2)",
                                          "physical_workers(6) > axes.world_size[1](4)",
                                          "play no virtual rank"), problems=2),
    Case("simulate_with_workers.yaml", ("physical_workers", "= 2", "simulate backend runs one "
                                        "process")),
    Case("global_batch_too_large.yaml", ("axes.world_size[1]", "= 8", "world_size(8)",
                                         "per_worker_batch(16)", "= 128", "64 samples"),
         problems=1),
    # --- unknown names -------------------------------------------------------------------------
    Case("unknown_top_key.yaml", ("epochs = 3", "unknown key", "'training'")),
    Case("unknown_nested_key.yaml", ("training.batch_size = 16", "unknown key",
                                     "'per_worker_batch'")),
    Case("unknown_axis.yaml", ("axes.batch", "[8, 16]", "unknown axis")),
    Case("unknown_scaling_rule.yaml", ("axes.scaling_rule[1]", "'cubic'", "'none', 'linear', "
                                       "'sqrt' or 'sqrt_adam'")),
    Case("unknown_warmup_rule.yaml", ("axes.warmup_rule[1]", "'doubled'",
                                      "'fixed', 'scaled' or 'proportional'")),
    Case("warmup_rule_negative.yaml", ("axes.warmup_rule", "[-7]", "update counts >= 0")),
    Case("unknown_workload.yaml", ("workload.name", "'imagenet_resnet'", "unknown workload",
                                   "mlp_regression")),
    Case("unknown_workload_option.yaml", ("workload.options.hidden_layers", "= 3", "unknown option",
                                          "train_size")),
    Case("unknown_metric.yaml", ("target.metric", "'dev_accuracy'", "reports", "'dev_loss'")),
    Case("unknown_backend.yaml", ("backend", "'horovod'", "'ddp', 'simulate' or 'auto'")),
    Case("unknown_scheduler_type.yaml", ("scheduler.type", "'CosineAnnealingLR'",
                                         "unknown schedule type", "warmuplr")),
    Case("unknown_scheduler_param.yaml", ("scheduler.warmup", "= 100", "unknown parameter of "
                                          "warmuplr", "warmup_steps")),
    Case("unknown_optimizer.yaml", ("optimizer.type", "'lamb'", "must be one of",
                                    "'adam', 'adamw', 'sgd'")),
    # --- bad values ----------------------------------------------------------------------------
    Case("scheduler_negative_warmup.yaml", ("scheduler.warmup_steps", "-100", "must be >= 0")),
    Case("scheduler_float_steps.yaml", ("scheduler.warmup_steps", "12.5", "must be an integer")),
    Case("bad_betas.yaml", ("optimizer.betas", "[0.9, 1.5]", "two numbers in [0, 1)")),
    Case("betas_one_value.yaml", ("optimizer.betas", "[0.9]", "two numbers in [0, 1)")),
    Case("sgd_momentum_range.yaml", ("optimizer.momentum", "1.2", "in [0, 1)")),
    Case("bad_free_axis_value.yaml", ("axes.optimizer.lr[1]", "-0.5", "must be a finite number > 0")),
    Case("bad_name.yaml", ("name", "'my study/../x'", "pattern")),
    Case("target_both.yaml", ("target", "exactly one of value or relative_to_baseline")),
    Case("explicit_warmup_no_warmup.yaml", ("axes.warmup_rule", "50", "constant")),
    Case("explicit_warmup_zero_deepspeed.yaml", ("axes.warmup_rule", "0", "warmup_num_steps")),
    # --- search, baseline, exclude, grid -------------------------------------------------------
    Case("random_without_samples.yaml", ("search", "random search needs samples")),
    Case("grid_with_distribution.yaml", ("axes.optimizer.lr", "loguniform", "search.type: random")),
    Case("bad_distribution.yaml", ("axes.optimizer.lr.loguniform", "[0.1, 0.001]",
                                   "low must be below high")),
    Case("exclude_non_axis.yaml", ("exclude[0].per_worker_batch", "= 16", "not an axis")),
    Case("duplicate_world_sizes.yaml", ("axes.world_size", "[2, 4, 2]", "must not repeat")),
    Case("empty_world_sizes.yaml", ("axes.world_size", "[]", "at least 1 item")),
    Case("duplicate_keys.yaml", ("axes", "duplicate")),
    # --- recipes -------------------------------------------------------------------------------
    Case("missing_recipe.yaml", ("recipe", "'no_such_recipe.yaml'", "not found")),
    Case("sweep_with_wenet_noam.yaml", ("recipe", "recipe_wenet_noam.yaml", "scheduler",
                                        "'NoamHoldAnnealing'", "warmuplr")),
    Case("sweep_with_ds_syntax.yaml", ("recipe", "recipe_ds_syntax.json", "line 6, column 40",
                                       "invalid JSON")),
    # --- several at once -----------------------------------------------------------------------
    Case("several_problems.yaml", ("training.batch_size = 4", "axes.world_size = [0, 4]",
                                   "axes.scaling_rule[0] = 'quadratic'", "colour = 'blue'",
                                   "backend = 'horovod'"), problems=5),
    Case("several_cross_field.yaml", ("optimizer.type = 'lamb'", "scheduler.warmup_steps = -5",
                                      "physical_workers(9)",
                                      "target.metric = 'dev_accuracy'", "= 128"), problems=6),
    Case("several_problems_mixed.yaml", ("colour = 'blue'", "optimizer.lr = -1",
                                         "optimizer.betas = [0.9, 2.0]",
                                         "scheduler.warmup_steps = -5", "scheduler.peak = 3")),
    # --- schedule files for `lr` ---------------------------------------------------------------
    Case("recipe_wenet_noam.yaml", ("scheduler", "'NoamHoldAnnealing'", "warmuplr"), "lr"),
    Case("recipe_wenet_bad_conf.yaml", ("optim", "'adafactor'", "must be one of"), "lr"),
    Case("recipe_wenet_no_lr.yaml", ("optimizer lr", "None", "the file must give it"), "lr"),
    Case("recipe_no_scheduler.yaml", ("scheduler", "None", "no scheduler block"), "lr"),
    Case("recipe_own_unknown_key.yaml", ("model", "{'layers': 4}", "unknown key"), "lr"),
    Case("recipe_tag.yaml", ("<file>", "line 3, column 18", "not allowed"), "lr"),
    Case("recipe_top_list.json", ("<file>", "top level must be a mapping, not list"), "lr"),
    # a DeepSpeed JSON with a trailing comma
    Case("recipe_ds_syntax.json", ("<file>", "line 6, column 40", "invalid JSON"), "lr"),
    # OneCycle with cycle_min_lr above cycle_max_lr
    Case("recipe_ds_bad_onecycle.json", ("scheduler.params.cycle_min_lr", "0.01",
                                         "must be <= cycle_max_lr (0.001)"), "lr"),
    # an optimizer DeepSpeed has but scalesweep does not run
    Case("recipe_ds_unknown_optimizer.json", ("optimizer.type", "'OneBitLamb'", "scalesweep runs"),
         "lr"),
    # warmup_num_steps 0 and an unknown warmup_type, both reported
    Case("recipe_ds_zero_warmup.json", ("scheduler.params.warmup_num_steps = 0", "must be >= 1",
                                        "scheduler.params.warmup_type = 'cubic'", "'log', 'linear'"),
         "lr", problems=2),
    Case("schedule_own_bad.yaml", ("warmup_steps", "is required by gradual_warmup", "-0.001",
                                   "must be > 0"), "lr", problems=2),
)


def _param(case: Case) -> object:
    marks = [pytest.mark.xfail(strict=True, reason=case.bug)] if case.bug else []
    return pytest.param(case, id=f"{case.command}-{case.file}", marks=marks)


def _argv(case: Case) -> list[str]:
    path = str(BAD / case.file)
    return ["plan", path] if case.command == "plan" else ["lr", path, "--updates", "10"]


def assert_rejected(rc: int, out: str, err: str, cwd: Path, expect: Sequence[str],
                    problems: int | None = None) -> None:
    """Exit 2; stderr one message whose head counts the problems listed below it, holding every
    expected substring; no traceback; stdout empty; the working directory untouched."""
    assert "Traceback" not in out + err, err
    assert rc == 2, f"exit {rc}, stderr:\n{err}"
    assert out == ""
    lines = err.rstrip("\n").split("\n")
    head = re.fullmatch(r"error: .+: (\d+) problems?", lines[0])
    assert head, f"not one 'error: SOURCE: N problems' message:\n{err}"
    assert sum(line.startswith("error") for line in lines) == 1, err
    listed = sum(line.startswith("  - ") for line in lines)
    assert listed == int(head.group(1)) >= 1, err
    if problems is not None:
        assert listed == problems, err
    for text in expect:
        assert text in err, f"{text!r} not in:\n{err}"
    assert sorted(p.name for p in cwd.iterdir()) == [], "something was written to the cwd"


def run_in_process(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def run_subprocess(argv: Sequence[str], cwd: Path, timeout: float = 180,
                   memory_bytes: int | None = None) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SCALESWEEP_DEBUG", "MLFLOW_TRACKING_URI")}

    def limit() -> None:
        if memory_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    proc = subprocess.run([str(PYTHON), "-m", "scalesweep", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, errors="replace", timeout=timeout,
                          preexec_fn=limit if memory_bytes else None)
    return proc.returncode, proc.stdout, proc.stderr


# --- the corpus, in process -------------------------------------------------------------------


def test_corpus_is_complete() -> None:
    """Every corpus file has a row in the table, and the table names no missing file."""
    on_disk = {p.name for p in BAD.iterdir() if p.is_file()}
    in_table = {c.file for c in CASES}
    assert in_table == on_disk, (in_table - on_disk, on_disk - in_table)
    assert len(CASES) >= 35
    assert len({c.file for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_bad_input_is_rejected(case: Case, cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run_in_process(_argv(case), capsys)
    assert_rejected(rc, out, err, cwd, case.expect, case.problems)


def test_object_tags_do_not_run_their_payload(cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("tag_object_apply.yaml", "tag_object_new.yaml", "tag_python_name.yaml"):
        rc, _, err = run_in_process(["plan", str(BAD / name)], capsys)
        assert rc == 2, err
    rc, _, err = run_in_process(["lr", str(BAD / "recipe_tag.yaml"), "--updates", "3"], capsys)
    assert rc == 2, err
    for payload in ("PWNED_APPLY", "PWNED_NEW", "PWNED_LR"):
        assert not (cwd / payload).exists()
        assert not (BAD / payload).exists()


# --- generated inputs: too large, not UTF-8, missing, a directory ----------------------------


def _big(tmp_path: Path, suffix: str) -> Path:
    path = tmp_path / f"big{suffix}"
    body = "# padding\n" * (MAX_FILE_BYTES // 10 + 1)  # just over 2 MiB of valid YAML comments
    path.write_text("name: big\n" + body)
    assert path.stat().st_size > 2 * 1024 * 1024
    return path


def _latin1(tmp_path: Path, suffix: str) -> Path:
    path = tmp_path / f"latin1{suffix}"
    path.write_bytes(b'{"name": "caf\xe9", "scheduler": {"type": "WarmupLR"}}\n')
    return path


@pytest.mark.parametrize("command", ["plan", "lr"])
def test_generated_files_are_rejected(tmp_path: Path, cwd: Path, command: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    suffix = ".yaml" if command == "plan" else ".json"
    extra = [] if command == "plan" else ["--updates", "5"]
    cases: list[tuple[Path, tuple[str, ...]]] = [
        (_big(tmp_path, suffix), ("<file>", "bytes", f"file is larger than {MAX_FILE_BYTES}")),
        (_latin1(tmp_path, suffix), ("<file>", r"b'\xe9", "not UTF-8", "offset 13")),
        (tmp_path / f"missing{suffix}", ("<file>", "missing", "file does not exist")),
        (tmp_path, ("<file>", str(tmp_path), "is not a regular file")),
    ]
    for path, expect in cases:
        rc, out, err = run_in_process([command, str(path), *extra], capsys)
        assert_rejected(rc, out, err, cwd, expect, problems=1)


# --- --set overrides and command-line arguments ----------------------------------------------

ARG_CASES: tuple[tuple[str, list[str], tuple[str, ...]], ...] = (
    ("set-no-equals", ["plan", SMOKE, "--set", "noequals"],
     ("--set", "'noequals'", "must be KEY=VALUE")),
    ("set-no-key", ["plan", SMOKE, "--set", "=5"], ("--set", "'=5'", "must be KEY=VALUE")),
    ("set-bad-yaml", ["plan", SMOKE, "--set", "axes.world_size=[4"],
     ("--set axes.world_size", "'[4'", "not valid YAML")),
    ("set-through-scalar", ["plan", SMOKE, "--set", "name.x=1"],
     ("--set name.x", "'smoke'", "name is not a mapping")),
    ("set-through-int", ["plan", SMOKE, "--set", "training.per_worker_batch.x=1"],
     ("--set training.per_worker_batch.x", "16", "training.per_worker_batch is not a mapping")),
    ("set-bad-value", ["plan", SMOKE, "--set", "axes.world_size=[0]"],
     ("axes.world_size", "[0]", "at least 1")),
    ("set-string-ws", ["plan", SMOKE, "--set", 'axes.world_size=["4"]'],
     ("axes.world_size[0]", "'4'", "valid integer")),
    ("set-tag", ["plan", SMOKE, "--set", 'name=!!python/object/apply:os.system ["touch PWNED_SET"]'],
     ("--set name", "python/object/apply:os.system", "not valid YAML")),
    ("set-several", ["plan", SMOKE, "--set", "nope", "--set", "alsonope"],
     ("'nope'", "'alsonope'", "KEY=VALUE")),
    ("plan-unknown-flag", ["plan", SMOKE, "--bogus"], ("arguments", "unrecognized arguments: --bogus")),
    ("plan-no-file", ["plan"], ("arguments", "required: SWEEP.yaml")),
    ("unknown-command", ["frobnicate"], ("arguments", "invalid choice: 'frobnicate'")),
    ("lr-updates-0", ["lr", WENET, "--updates", "0"], ("--updates", "= 0", "between 1 and")),
    ("lr-updates-negative", ["lr", WENET, "--updates", "-5"], ("--updates", "-5", "between 1 and")),
    ("lr-updates-huge", ["lr", WENET, "--updates", "99999999999"],
     ("--updates", "99999999999", "between 1 and 10000000")),
    ("lr-updates-abc", ["lr", WENET, "--updates", "abc"], ("--updates", "invalid int value: 'abc'")),
    ("lr-updates-missing", ["lr", WENET], ("--updates", "required")),
    ("lr-unknown-flag", ["lr", WENET, "--updates", "3", "--epochs", "2"],
     ("arguments", "unrecognized arguments: --epochs 2")),
    ("lr-world-size-alone", ["lr", WENET, "--updates", "3", "--world-size", "4"],
     ("--dataset-size", "needed to plot against epoch")),
    ("lr-world-size-0", ["lr", WENET, "--updates", "3", "--world-size", "4", "0", "--dataset-size",
                         "100"], ("--world-size", "= 0", "at least 1")),
    ("lr-world-size-abc", ["lr", WENET, "--updates", "3", "--world-size", "x"],
     ("--world-size", "invalid int value: 'x'")),
    ("lr-dataset-size-0", ["lr", WENET, "--updates", "3", "--dataset-size", "0"],
     ("--dataset-size", "= 0", "at least 1")),
)


@pytest.mark.parametrize(("argv", "expect"), [pytest.param(a, e, id=i) for i, a, e in ARG_CASES])
def test_bad_arguments_are_rejected(argv: list[str], expect: tuple[str, ...], cwd: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run_in_process(argv, capsys)
    assert_rejected(rc, out, err, cwd, expect)
    assert not (cwd / "PWNED_SET").exists()


def test_argument_errors_show_the_arguments_given_to_main(
        cwd: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["host-program", "--host-flag"])
    rc, _, err = run_in_process(["plan", SMOKE, "--bogus"], capsys)
    assert rc == 2
    assert "--host-flag" not in err
    assert re.search(r"arguments = '[^']*--bogus[^']*'", err), err


# --- the real CLI, in a subprocess ------------------------------------------------------------
# `lr` does not import torch (~0.2 s a run), `plan` does (~3-5 s a run): the default set runs
# every `lr` and argument case below and one `plan`; the rest of the `plan` subset is slow.

SUBPROCESS_FAST: tuple[tuple[list[str], tuple[str, ...]], ...] = (
    (["plan", "{bad}/tag_object_apply.yaml"], ("python/object/apply:os.system", "not allowed")),
    (["lr", "{bad}/recipe_tag.yaml", "--updates", "3"], ("not allowed",)),
    (["lr", "{bad}/recipe_ds_syntax.json", "--updates", "3"], ("line 6, column 40", "invalid JSON")),
    (["lr", "{bad}/recipe_wenet_noam.yaml", "--updates", "3"], ("'NoamHoldAnnealing'",)),
    (["lr", "{bad}/recipe_ds_zero_warmup.json", "--updates", "3"], ("warmup_num_steps = 0",)),
    (["lr", "{big}.json", "--updates", "3"], ("file is larger than",)),
    (["lr", "{latin1}.json", "--updates", "3"], ("not UTF-8",)),
    (["lr", WENET, "--updates", "0"], ("--updates", "= 0")),
    (["lr", WENET, "--updates", "abc"], ("--updates", "'abc'")),
    (["lr", WENET, "--updates", "3", "--bogus"], ("arguments = 'lr", "--bogus")),
    (["plan", SMOKE, "--bogus"], ("arguments = 'plan", "unrecognized arguments: --bogus")),
)
SUBPROCESS_SLOW: tuple[tuple[list[str], tuple[str, ...]], ...] = (
    (["plan", "{bad}/yaml_unclosed_bracket.yaml"], ("invalid YAML",)),
    (["plan", "{bad}/tag_object_new.yaml"], ("python/object/new:subprocess.Popen",)),
    (["plan", "{bad}/tag_python_name.yaml"], ("python/name:os.system",)),
    (["plan", "{big}.yaml"], ("file is larger than",)),
    (["plan", "{latin1}.yaml"], ("not UTF-8",)),
    (["plan", "{bad}/several_problems.yaml"], ("colour", "horovod", "quadratic")),
    (["plan", "{bad}/sweep_with_ds_syntax.yaml"], ("recipe_ds_syntax.json", "invalid JSON")),
    (["plan", "{bad}/missing_recipe.yaml"], ("no_such_recipe.yaml", "not found")),
    (["plan", "{bad}/global_batch_too_large.yaml"], ("world_size(8)", "64 samples")),
    (["plan", "{bad}/more_workers_than_ranks.yaml"], ("physical_workers(6) > axes.world_size[1](4)",)),
    (["plan", SMOKE, "--set", "noequals"], ("KEY=VALUE",)),
    (["plan", SMOKE, "--set", "axes.world_size=[4"], ("not valid YAML",)),
    (["plan", SMOKE, "--set", "name.x=1"], ("name is not a mapping",)),
)


def _expand(argv: list[str], tmp_path: Path) -> list[str]:
    out = []
    for arg in argv:
        for suffix in (".json", ".yaml"):
            if arg == "{big}" + suffix:
                arg = str(_big(tmp_path, suffix))
            elif arg == "{latin1}" + suffix:
                arg = str(_latin1(tmp_path, suffix))
        out.append(arg.replace("{bad}", str(BAD)))
    return out


def _subprocess_case(argv: list[str], expect: tuple[str, ...], tmp_path: Path, cwd: Path) -> None:
    rc, out, err = run_subprocess(_expand(argv, tmp_path), cwd)
    assert_rejected(rc, out, err, cwd, expect)
    for payload in ("PWNED_APPLY", "PWNED_NEW", "PWNED_LR"):
        assert not (cwd / payload).exists()


@pytest.mark.parametrize(("argv", "expect"), [pytest.param(a, e, id=" ".join(a[:2]).replace(
    str(ROOT) + "/", "")) for a, e in SUBPROCESS_FAST])
def test_real_cli_rejects_cleanly(argv: list[str], expect: tuple[str, ...], tmp_path: Path,
                                  cwd: Path) -> None:
    _subprocess_case(argv, expect, tmp_path, cwd)


@pytest.mark.parametrize(("argv", "expect"), [pytest.param(a, e, id=" ".join(a[:4]).replace(
    str(ROOT) + "/", "")) for a, e in SUBPROCESS_SLOW])
def test_real_cli_rejects_cleanly_more(argv: list[str], expect: tuple[str, ...], tmp_path: Path,
                                       cwd: Path) -> None:
    _subprocess_case(argv, expect, tmp_path, cwd)


def test_alias_bomb_is_rejected_quickly(tmp_path: Path, cwd: Path) -> None:
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\n")
    assert bomb.stat().st_size < 1024
    try:
        rc, out, err = run_subprocess(["plan", str(bomb)], cwd, timeout=60, memory_bytes=2 << 30)
    except subprocess.TimeoutExpired:
        pytest.fail("plan did not answer within 60 s")
    assert_rejected(rc, out, err, cwd, ("too many values", "YAML aliases"))
