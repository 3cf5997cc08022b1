"""Device profiles: schema validation, lookup, bundled files, TVM checks and the CLI."""

from __future__ import annotations

import argparse
import re
import textwrap
from pathlib import Path

import pytest

from edgetune.errors import ProfileError, TargetError
from edgetune.profile import (
    BUNDLED_DIR,
    DeviceProfile,
    list_profiles,
    load_profile,
    parse_profile,
    profile_search_path,
    validate_profile_file,
)
from edgetune.profile.cli import add_profiles_parser, run_profiles
from edgetune.profile.schema import ALL_KEYS
from edgetune.profile.tvm_support import debian_package_for

BUNDLED = sorted(path.stem for path in BUNDLED_DIR.glob("*.toml"))
MINIMAL = """
name = "board"
[target]
kind = "llvm"
mtriple = "aarch64-linux-gnu"
num-cores = 4
"""


@pytest.fixture(autouse=True)
def _no_user_profiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests see only the bundled profiles unless they set the path themselves."""
    monkeypatch.delenv("EDGETUNE_PROFILE_PATH", raising=False)


def write(directory: Path, text: str, stem: str = "board") -> Path:
    path = directory / f"{stem}.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load_text(tmp_path: Path, text: str) -> DeviceProfile:
    return load_profile(str(write(tmp_path, text)))


def cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="edgetune")
    add_profiles_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["profiles", *argv])
    return args.func(args)


# --------------------------------------------------------------------------- bundled profiles


def test_bundled_set_is_complete() -> None:
    expected = {"rk3399", "rk3399-mali", "rk3588", "opencl", "rpi3", "rpi4", "rpi5", "rpi3-32", "rpi4-32",
                "jetson-orin", "x86-64", "cuda", "host"}
    assert expected <= set(BUNDLED)
    assert [p.name for p in list_profiles()] == BUNDLED


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_profile_loads_and_builds_tvm_target(name: str) -> None:
    profile = load_profile(name)
    assert profile.name == name
    assert profile.source == BUNDLED_DIR / f"{name}.toml"
    assert profile.description
    assert profile.device.peak_gflops is None or profile.device.peak_gflops > 0
    # validate_profile_file also rejects an mcpu/mattr that LLVM would silently ignore
    assert validate_profile_file(profile.source) == profile
    target = profile.tvm_target()
    assert target.kind.name == profile.target["kind"]
    assert (target.host is not None) == (profile.host_target is not None)
    if profile.host_target is not None:
        assert target.host.kind.name == profile.host_target["kind"]


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_profile_round_trips_through_to_dict(name: str) -> None:
    profile = load_profile(name)
    data = profile.to_dict()
    assert parse_profile(data, origin="roundtrip", source=profile.source) == profile

    def toml_shaped(value: object) -> bool:  # what a TOML writer accepts: no tuples, no None
        if isinstance(value, dict):
            return all(toml_shaped(v) for v in value.values())
        if isinstance(value, list):
            return all(toml_shaped(v) for v in value)
        return isinstance(value, (str, int, float, bool))

    assert toml_shaped(data)


def test_bundled_board_details() -> None:
    rk3399 = load_profile("rk3399")
    assert rk3399.device.core_affinity == (4, 5)
    assert rk3399.is_cross_compiled and rk3399.build.cross_compiler == "aarch64-linux-gnu-g++"
    mali = load_profile("rk3399-mali")
    assert mali.target == {
        "kind": "opencl", "device": "mali", "max_num_threads": 256, "max_threads_per_block": 256,
        "max_shared_memory_per_block": 16384, "thread_warp_size": 1,
    }
    # the device's limits reach TVM's target, which MetaSchedule's GPU rules read (apache/tvm#3992)
    tvm_mali = mali.tvm_target()
    assert int(tvm_mali.attrs["max_num_threads"]) == 256 and int(tvm_mali.attrs["thread_warp_size"]) == 1
    assert int(tvm_mali.attrs["max_shared_memory_per_block"]) == 16384
    assert mali.rpc.device == "opencl"
    assert mali.host_target["mtriple"] == "aarch64-linux-gnu"
    orin = load_profile("jetson-orin")
    assert orin.target["arch"] == "sm_87" and orin.rpc.device == "cuda"
    host = load_profile("host")
    assert not host.is_cross_compiled
    assert host.rpc.key == "local"
    assert (host.tuning.trials, host.tuning.num_trials_per_iter) == (64, 8)
    assert (host.measure.number, host.measure.repeat, host.measure.min_repeat_ms) == (5, 3, 20)


def test_host_profile_is_buildable_here() -> None:
    load_profile("host").check_buildable()


def test_readme_documents_every_key() -> None:
    readme = (BUNDLED_DIR / "README.md").read_text(encoding="utf-8")
    for key in ("name", "description", "target.kind", "host_target.kind", *ALL_KEYS):
        assert f"`{key}`" in readme, key


# --------------------------------------------------------------------------- defaults


def test_defaults_applied(tmp_path: Path) -> None:
    profile = load_text(tmp_path, MINIMAL)
    assert profile.description == ""
    assert profile.host_target is None
    assert profile.build.cross_compiler == "" and profile.build.cross_compiler_flags == ()
    assert (profile.build.timeout_sec, profile.build.workers, profile.build.candidate_link) == (60.0, 0, "driver")
    assert not profile.is_cross_compiled
    assert (profile.rpc.key, profile.rpc.device, profile.rpc.session_timeout_sec) == ("board", "cpu", 120.0)
    m = profile.measure
    assert (m.number, m.repeat, m.min_repeat_ms, m.cooldown_sec, m.enable_cpu_cache_flush, m.timeout_sec) == (
        10,
        3,
        50,
        0.0,
        True,
        30.0,
    )
    t = profile.tuning
    assert (t.trials, t.num_trials_per_iter, t.max_trials_per_task) == (256, 16, 0)
    assert (t.cost_model, t.search_strategy, t.task_scheduler, t.seed) == ("rf", "evolutionary", "gradient", 0)
    # derived from the target: arch from mtriple, threads from num-cores
    assert profile.device.arch == "aarch64"
    assert profile.device.num_threads == 4
    assert profile.device.peak_gflops is None
    assert profile.device.core_affinity == ()


def test_int_accepted_for_float_and_stored_as_float(tmp_path: Path) -> None:
    profile = load_text(tmp_path, MINIMAL + "[build]\ntimeout_sec = 90\n")
    assert profile.build.timeout_sec == 90.0 and isinstance(profile.build.timeout_sec, float)


@pytest.mark.parametrize(
    ("target", "device"),
    [('kind = "cuda"\narch = "sm_80"', "cuda"), ('kind = "opencl"\ndevice = "mali"', "opencl"), ('kind = "c"', "cpu")],
)
def test_rpc_device_derived_from_target_kind(tmp_path: Path, target: str, device: str) -> None:
    profile = load_text(tmp_path, f'name = "board"\n[target]\n{target}\n')
    assert profile.rpc.device == device


def test_arch_and_threads_of_accelerator_come_from_host_target(tmp_path: Path) -> None:
    profile = load_text(
        tmp_path,
        """
        name = "board"
        [target]
        kind = "cuda"
        [host_target]
        kind = "llvm"
        mtriple = "armv7l-linux-gnueabihf"
        num-cores = 6
        """,
    )
    assert (profile.device.arch, profile.device.num_threads) == ("armv7l", 6)


# --------------------------------------------------------------------------- errors


def test_unknown_key_suggests_close_match(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "[measure]\nnumbr = 5\n")
    with pytest.raises(ProfileError) as info:
        load_profile(str(path))
    message = str(info.value)
    assert message.endswith("unknown key 'measure.numbr' (did you mean 'measure.number'?)")
    assert "board.toml" in message


def test_unknown_key_in_wrong_table_suggests_right_table(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"unknown key 'build.trials' \(did you mean 'tuning.trials'\?\)"):
        load_text(tmp_path, MINIMAL + "[build]\ntrials = 5\n")


def test_unknown_top_level_table_suggests(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"unknown key 'mesure' \(did you mean 'measure'\?\)"):
        load_text(tmp_path, MINIMAL + "[mesure]\nnumber = 5\n")


def test_unknown_key_without_match_lists_valid_keys(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as info:
        load_text(tmp_path, MINIMAL + "[rpc]\nzzzzzz = 1\n")
    assert "unknown key 'rpc.zzzzzz'; valid keys: rpc.key, rpc.device, rpc.session_timeout_sec" in str(info.value)


@pytest.mark.parametrize(
    ("snippet", "expected"),
    [
        ('[measure]\nrepeat = "three"', "key 'measure.repeat' must be an integer >= 1, got 'three' (str) instead"),
        ("[measure]\nnumber = true", "key 'measure.number' must be an integer >= 1, got True (bool) instead"),
        ("[measure]\nrepeat = 3.0", "key 'measure.repeat' must be an integer >= 1, got 3.0 (float) instead"),
        ("[measure]\nrepeat = 0", "key 'measure.repeat' must be an integer >= 1, got 0 (int) instead"),
        ("[build]\ntimeout_sec = 0", "key 'build.timeout_sec' must be a number > 0, got 0 (int) instead"),
        ("[build]\ntimeout_sec = inf", "key 'build.timeout_sec' must be a number > 0, got inf (float) instead"),
        ("[measure]\ncooldown_sec = -1.5", "key 'measure.cooldown_sec' must be a number >= 0, got -1.5 (float)"),
        ("[measure]\nenable_cpu_cache_flush = 1", "must be a boolean (true or false), got 1 (int) instead"),
        ('[tuning]\ndefault_schedule = "no"', "key 'tuning.default_schedule' must be a boolean (true or false), got 'no' (str) instead"),
        ('[build]\ncross_compiler_flags = "-O3"', "must be a list of strings, got '-O3' (str) instead"),
        ("[device]\ncore_affinity = [4, 4]", "must be a list of distinct integers >= 0, got [4, 4] (list)"),
        (
            '[tuning]\ncost_model = "xgbb"',
            "key 'tuning.cost_model' must be one of 'xgb', 'rf', 'random', 'meta', got 'xgbb' (str) instead "
            "(did you mean 'xgb'?)",
        ),
        ("[rpc]\nkey = 5", "key 'rpc.key' must be a non-empty string, got 5 (int) instead"),
        ("[tuning]\nmeta_handoff_samples = -1", "key 'tuning.meta_handoff_samples' must be an integer >= 0, got -1 (int) instead"),
        ('[measure]\nstop_rule = "median"', "key 'measure.stop_rule' must be one of 'auto', 'cv', 'ci', got 'median' (str) instead"),
        ("[measure]\nci_threshold = 0", "key 'measure.ci_threshold' must be a number > 0, got 0 (int) instead"),
        ('[build]\ncandidate_link = "gcc"', "key 'build.candidate_link' must be one of 'direct', 'driver', got 'gcc' (str) instead"),
    ],
)
def test_wrong_type_message(tmp_path: Path, snippet: str, expected: str) -> None:
    path = write(tmp_path, MINIMAL + snippet + "\n")
    with pytest.raises(ProfileError) as info:
        load_profile(str(path))
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert expected in message
    assert "must be" in message and "got" in message


def test_section_must_be_a_table(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"key 'rpc' must be a table, got 5 \(int\) instead"):
        load_text(tmp_path, "rpc = 5\n" + MINIMAL)


def test_malformed_toml_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, 'name = "board"\n[target\nkind = "llvm"\n')
    with pytest.raises(ProfileError) as info:
        load_profile(str(path))
    message = str(info.value)
    assert message.startswith(f"{path}: malformed TOML: ")
    assert "line 2" in message  # tomllib's own position
    assert "\n" not in message


@pytest.mark.parametrize(
    ("text", "missing"),
    [
        ('name = "board"\n[target]\nmtriple = "aarch64-linux-gnu"\n', "target.kind"),
        ('name = "board"\n', "target"),
        ('[target]\nkind = "llvm"\n', "name"),
        (MINIMAL + "[host_target]\nmcpu = 'cortex-a72'\n", "host_target.kind"),
    ],
)
def test_missing_required_key(tmp_path: Path, text: str, missing: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ProfileError, match=f"^{path}: missing required key '{missing}'$"):
        load_profile(str(path))


@pytest.mark.parametrize(
    ("snippet", "expected"),
    [
        ("[rpc]\ndevice = 'opencl'", "key 'rpc.device' is 'opencl' but target kind 'llvm' runs on 'cpu'"),
        ("[device]\nnum_threads = 4\ncore_affinity = [4, 5]", "pins the server to only 2 CPUs"),
        ("[target.host]\nkind = 'llvm'", "key 'target.host' is not allowed; put the host target in [host_target]"),
    ],
)
def test_inconsistent_keys_rejected(tmp_path: Path, snippet: str, expected: str) -> None:
    with pytest.raises(ProfileError, match=expected.replace("[", r"\[").replace("]", r"\]")):
        load_text(tmp_path, MINIMAL + snippet + "\n")


def test_unmapped_target_kind_needs_explicit_rpc_device(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="key 'rpc.device' is required for target kind 'rocm'"):
        load_text(tmp_path, 'name = "board"\n[target]\nkind = "rocm"\n')


def test_invalid_profile_name_rejected(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"key 'name' must be .*got 'my board' \(str\)"):
        load_text(tmp_path, MINIMAL.replace('"board"', '"my board"'))


# --------------------------------------------------------------------------- lookup


def test_unknown_profile_name_suggests() -> None:
    with pytest.raises(ProfileError) as info:
        load_profile("rk3398")
    message = str(info.value)
    assert message.startswith("unknown profile 'rk3398' (did you mean 'rk3399'?); available: cuda, host, ")
    assert message.endswith(", ".join(BUNDLED))


def test_missing_toml_file_is_a_profile_error(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="does not exist"):
        load_profile(str(tmp_path / "nope.toml"))


def test_profile_path_override_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user_dir = tmp_path / "profiles"
    user_dir.mkdir()
    write(user_dir, 'description = "lab copy"\n' + MINIMAL.replace('"board"', '"rk3399"'), stem="rk3399")
    write(user_dir, MINIMAL.replace('"board"', '"myboard"'), stem="myboard")
    monkeypatch.setenv("EDGETUNE_PROFILE_PATH", f"{tmp_path / 'missing'}:{user_dir}")
    assert profile_search_path() == [tmp_path / "missing", user_dir, BUNDLED_DIR]
    profile = load_profile("rk3399")
    assert profile.source == (user_dir / "rk3399.toml").resolve()
    assert profile.description == "lab copy"  # the user's copy, not the bundled one
    names = [p.name for p in list_profiles()]
    assert names == sorted(set(BUNDLED) | {"myboard"})
    assert next(p for p in list_profiles() if p.name == "rk3399").source.parent == user_dir.resolve()


def test_name_must_match_file_stem_on_search_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, MINIMAL.replace('"board"', '"other"'), stem="board")
    assert load_profile(str(path)).name == "other"  # loaded by path: any name is fine
    monkeypatch.setenv("EDGETUNE_PROFILE_PATH", str(tmp_path))
    with pytest.raises(ProfileError, match="key 'name' is 'other' but must equal the file name 'board'"):
        load_profile("board")


# --------------------------------------------------------------------------- overrides


def test_with_overrides_merges_and_revalidates() -> None:
    base = load_profile("rk3399")
    tuned = base.with_overrides(tuning={"trials": 8}, rpc={"key": "local"})
    assert tuned.tuning.trials == 8 and tuned.rpc.key == "local"
    assert tuned.tuning.num_trials_per_iter == base.tuning.num_trials_per_iter
    assert tuned.target == base.target and tuned.source == base.source
    assert base.tuning.trials == 256  # the original is untouched
    with pytest.raises(ProfileError, match=r"\(overrides\): key 'tuning.trials' must be an integer >= 1, got 0"):
        base.with_overrides(tuning={"trials": 0})
    with pytest.raises(ProfileError, match=r"unknown key 'tunning' \(did you mean 'tuning'\?\)"):
        base.with_overrides(tunning={"trials": 8})
    with pytest.raises(ProfileError, match=r"unknown key 'tuning.trails' \(did you mean 'tuning.trials'\?\)"):
        base.with_overrides(tuning={"trails": 8})


def test_with_overrides_rederives_defaults(tmp_path: Path) -> None:
    profile = load_text(tmp_path, MINIMAL)
    renamed = profile.with_overrides(name="board2", target={"num-cores": 8})
    assert renamed.rpc.key == "board2"  # rpc.key follows name when it was not written
    assert renamed.device.num_threads == 8
    gpu = profile.with_overrides(target={"kind": "cuda", "arch": "sm_80"})
    assert gpu.rpc.device == "cuda"


# --------------------------------------------------------------------------- TVM checks


def test_check_buildable_missing_cross_compiler(tmp_path: Path) -> None:
    profile = load_text(tmp_path, MINIMAL + "[build]\ncross_compiler = 'edgetune-no-such-cc'\n")
    with pytest.raises(TargetError, match="cross compiler 'edgetune-no-such-cc' .* is not on PATH"):
        profile.check_buildable()


def test_check_buildable_names_debian_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH
    with pytest.raises(TargetError, match="apt-get install g\\+\\+-aarch64-linux-gnu"):
        load_profile("rk3399").check_buildable()


def test_check_buildable_finds_existing_cross_compiler(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "aarch64-linux-gnu-g++"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    load_profile("rk3399").check_buildable()


def test_check_buildable_unknown_target_kind(tmp_path: Path) -> None:
    profile = load_text(tmp_path, 'name = "board"\n[target]\nkind = "nosuchkind"\n[rpc]\ndevice = "cpu"\n')
    with pytest.raises(TargetError, match=r"profile 'board': TVM rejects target \{\"kind\": \"nosuchkind\"\}"):
        profile.check_buildable()


def test_check_buildable_missing_codegen(tmp_path: Path) -> None:
    # the apache-tvm wheel is built without Vulkan
    profile = load_text(tmp_path, 'name = "board"\n[target]\nkind = "vulkan"\n')
    with pytest.raises(TargetError, match="no code generator for target kind 'vulkan'"):
        profile.check_buildable()


def test_tvm_target_error_is_one_line(tmp_path: Path) -> None:
    profile = load_text(tmp_path, MINIMAL + "bogus-option = 1\n")
    with pytest.raises(TargetError) as info:
        profile.tvm_target()
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("profile 'board': TVM rejects target {")
    assert "Unknown config option 'bogus-option'" in message


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("mcpu = 'cortex-a99'", "does not know target.mcpu 'cortex-a99' for mtriple 'aarch64-linux-gnu'"),
        ("mattr = ['+neon', '+nosuchfeature']", "does not recognise target.mattr +nosuchfeature"),
    ],
)
def test_llvm_options_tvm_only_warns_about_are_rejected(tmp_path: Path, option: str, expected: str) -> None:
    path = write(tmp_path, MINIMAL + option + "\n")
    load_profile(str(path)).tvm_target()  # TVM itself accepts it...
    with pytest.raises(TargetError, match=re.escape(expected)):
        validate_profile_file(path)  # ...but it would silently build generic code


def test_arm32_hard_float_triple_needs_hard_float_abi(tmp_path: Path) -> None:
    """TVM does not take the float ABI from the triple; a soft-float object would not link with gnueabihf."""
    arm32 = 'name = "board"\n[target]\nkind = "llvm"\nmtriple = "armv7l-linux-gnueabihf"\nmcpu = "cortex-a72"\n'
    with pytest.raises(TargetError, match=re.escape('target.mfloat-abi must be "hard", got nothing instead')):
        validate_profile_file(write(tmp_path, arm32, stem="soft"))
    validate_profile_file(write(tmp_path, arm32 + 'mfloat-abi = "hard"\n', stem="hard"))
    for name in ("rpi3-32", "rpi4-32"):
        profile = load_profile(name)
        assert profile.device.arch == "armv7l" and profile.target["mfloat-abi"] == "hard"
        assert profile.build.cross_compiler == "arm-linux-gnueabihf-g++"


def test_debian_package_for() -> None:
    assert debian_package_for("aarch64-linux-gnu-g++") == "g++-aarch64-linux-gnu"
    assert debian_package_for("/usr/bin/arm-linux-gnueabihf-gcc-12") == "gcc-12-arm-linux-gnueabihf"
    assert debian_package_for("clang") is None


# --------------------------------------------------------------------------- CLI


def test_cli_validate_good_and_bad(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write(tmp_path, MINIMAL, stem="good")
    bad = write(tmp_path, MINIMAL + "[measure]\nrepeat = 'three'\n", stem="bad")
    assert cli("validate", str(good)) == 0
    assert capsys.readouterr().out == f"ok: {good} (board)\n"
    assert cli("validate", str(good), str(bad)) == 2
    captured = capsys.readouterr()
    assert captured.out == f"ok: {good} (board)\n"
    assert "bad.toml: key 'measure.repeat' must be an integer >= 1, got 'three' (str) instead" in captured.err
    assert len(captured.err.strip().splitlines()) == 1


def test_cli_list_and_show(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("list") == 0
    out = capsys.readouterr().out
    for name in BUNDLED:
        assert name in out
    assert "cortex-a72" in out and "sm_87" in out
    assert cli("show", "rk3399") == 0
    out = capsys.readouterr().out
    assert out.startswith("rk3399: Rockchip RK3399")
    assert "pinned to CPUs 4, 5" in out and "aarch64-linux-gnu-g++" in out
    assert cli("show", "rk3398") == 2
    assert "did you mean 'rk3399'?" in capsys.readouterr().err


def test_cli_sets_dispatch_function() -> None:
    parser = argparse.ArgumentParser(prog="edgetune")
    add_profiles_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["profiles", "show", "host"])
    assert args.func is run_profiles and args.name == "host"


def test_each_key_is_declared_once_and_the_checks_flags_and_keywords_follow() -> None:
    """The settings dataclasses are the one declaration: the check table, CLI flags and tune() keywords read them."""
    import dataclasses
    import inspect

    import edgetune
    from edgetune.cli import _build_parser
    from edgetune.profile.schema import _DERIVED, _SECTION_CLASSES, PROFILE_FLAGS, SECTIONS

    for section, settings in _SECTION_CLASSES.items():
        declared = dataclasses.fields(settings)
        assert list(SECTIONS[section]) == [f.name for f in declared]
        for f in declared:
            expected = _DERIVED if f.metadata["derived"] else (None if f.default is dataclasses.MISSING else f.default)
            assert SECTIONS[section][f.name].default is expected or SECTIONS[section][f.name].default == expected
    assert {"sampler", "cost_model", "schedules", "graph_optimization", "library_schedules"} <= set(PROFILE_FLAGS)
    keywords = inspect.signature(edgetune.tune).parameters
    parser = _build_parser()
    for name, flag in PROFILE_FLAGS.items():
        assert flag.key in SECTIONS[flag.section]
        assert keywords[name].kind is inspect.Parameter.KEYWORD_ONLY and keywords[name].default is None
        assert f"[{flag.dotted}]" in edgetune.tune.__doc__
        if flag.type is bool:  # --x / --no-x
            assert getattr(parser.parse_args(["tune", "--model", "m.onnx", flag.option]), name) is True
            assert getattr(parser.parse_args(["tune", "--model", "m.onnx", flag.option.replace("--", "--no-", 1)]), name) is False
            assert getattr(parser.parse_args(["tune", "--model", "m.onnx"]), name) is None  # the profile's
            continue
        value = flag.choices[-1] if flag.choices else "3"
        args = parser.parse_args(["tune", "--model", "m.onnx", flag.option, value])
        assert getattr(args, name) == (int(value) if flag.type is int else value)
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_flag'"):
        edgetune.tune("demo:tiny-cnn", no_such_flag=1)


def test_a_flag_is_checked_like_its_profile_key() -> None:
    from edgetune.api import tune_options

    options = tune_options("demo:tiny-cnn", "host", library_schedules=2, sampler="none")
    assert options.profile.tuning.library_schedules == 2 and options.profile.tuning.sampler == "none"
    with pytest.raises(ProfileError, match=r"key 'tuning.library_schedules' must be an integer >= 1, got 0 \(int\) instead"):
        tune_options("demo:tiny-cnn", "host", library_schedules=0)


@pytest.mark.parametrize(("name", "instruction"), [("rpi5", "sdot"), ("rk3588", "sdot"), ("rpi4", "neon"), ("rk3399", "neon"),
                                                  ("rpi3", "neon"), ("rpi4-32", "none"), ("x86-64", "none"), ("cuda", "none")])
def test_each_profile_says_which_int8_instruction_it_uses(name: str, instruction: str) -> None:
    """Derived from the target's features (rpi5/rk3588: +dotprod; armv7 profiles: no int8 intrinsic in TVM)."""
    profile = load_profile(name)
    assert profile.int8_instruction() == instruction
    assert f"int8:        {instruction} " in profile.describe()


def test_the_host_profiles_int8_instruction_follows_this_cpu() -> None:
    """``mcpu = "native"``: VNNI exactly where /proc/cpuinfo lists it."""
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            flags = {flag for line in f if line.startswith("flags") for flag in line.split()}
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    expected = "avx512-vnni" if {"avx512_vnni", "avx512bw"} <= flags else "avx-vnni" if "avx_vnni" in flags else "none"
    assert load_profile("host").int8_instruction() == expected
