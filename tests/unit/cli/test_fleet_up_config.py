"""`artfleet fleet up`'s configuration without a fleet: settings files and precedence, which
service gets which setting, the ports a workdir keeps, fleet.env, and the CLI's refusals."""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fake_policy import fake_policy

from artfleet_cli.fleet import PORT_NAMES, FleetProcess, LocalFleet, ServiceExited
from artfleet_cli.fleet_config import (
    ConfigError,
    env_file_text,
    known_keys,
    load_ports,
    load_remembered,
    merge_settings,
    parse_env_file,
    parse_sets,
    plan_ports,
    port_is_free,
    save_ports,
    save_remembered,
    taken_ports,
    write_private,
)
from artfleet_cli.fleet_up import banner


def _fleet(tmp_path: Path, **fields: object) -> LocalFleet:
    ports = {name: 20000 + i for i, name in enumerate(PORT_NAMES)}
    return LocalFleet(tmp_path, ports=ports, **fields)  # type: ignore[arg-type]


def test_env_file_lines() -> None:
    text = "\n".join(
        [
            "# a judge on this fleet",
            "",
            'ARTFLEET_JUDGE_MODEL_MAP={"gpt-4o": "policy"}',
            "export ARTFLEET_JUDGE_TIMEOUT_S=30   # seconds",
            "OPENAI_API_KEY='sk-#not-a-comment'",
            'ARTFLEET_ENVIRONMENT="math \\"single\\""',
            "ARTFLEET_LOG_LEVEL=",
        ]
    )
    assert parse_env_file(text, "f.env") == {
        "ARTFLEET_JUDGE_MODEL_MAP": '{"gpt-4o": "policy"}',
        "ARTFLEET_JUDGE_TIMEOUT_S": "30",
        "OPENAI_API_KEY": "sk-#not-a-comment",
        "ARTFLEET_ENVIRONMENT": 'math "single"',
        "ARTFLEET_LOG_LEVEL": "",
    }


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("ARTFLEET_LOG_LEVEL DEBUG", "expected KEY=VALUE"),
        ("1ABC=x", "not a variable name"),
        ("ARTFLEET_ENVIRONMENT='math", "no closing '"),
        ('ARTFLEET_ENVIRONMENT="math" x', "text after the closing"),
    ],
)
def test_a_malformed_env_file_line_is_named_by_file_and_line(line: str, why: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_env_file(f"# settings\nARTFLEET_LOG_LEVEL=INFO\n{line}\n", "/x/f.env")
    assert str(caught.value).startswith("/x/f.env:3: ") and why in str(caught.value)


def test_set_values_are_literal_and_malformed_ones_refused() -> None:
    assert parse_sets(["A_B='x' #y", "C=a=b"]) == {"A_B": "'x' #y", "C": "a=b"}
    with pytest.raises(ConfigError, match="--set 'novalue': expected KEY=VALUE"):
        parse_sets(["novalue"])


KNOWN = {"api": frozenset({"ARTFLEET_JUDGE_MODEL_MAP"}), "reward": frozenset({"ARTFLEET_X_S"})}
OWNED = frozenset({"ARTFLEET_API_TOKEN", "ARTFLEET_API_URL"})


def test_set_wins_over_the_env_file_which_wins_over_the_environment() -> None:
    environ = {
        "ARTFLEET_JUDGE_MODEL_MAP": "{}",
        "ARTFLEET_X_S": "1",
        "ARTFLEET_API_TOKEN": "from a sourced fleet.env",  # the fleet's own: dropped
        "ARTFLEET_TYPO": "1",  # no service reads it: reported, not passed
        "HOME": "/home/u",  # not a setting (services get the environment anyway)
    }
    merged, ignored = merge_settings(
        environ, {"ARTFLEET_X_S": "2", "OPENAI_API_KEY": "k"}, {"ARTFLEET_X_S": "3"}, KNOWN, OWNED
    )
    assert merged == {"ARTFLEET_JUDGE_MODEL_MAP": "{}", "ARTFLEET_X_S": "3", "OPENAI_API_KEY": "k"}
    assert ignored == ["ARTFLEET_TYPO"]
    merged, _ = merge_settings(environ, {"ARTFLEET_X_S": "2"}, {}, KNOWN, OWNED)
    assert merged["ARTFLEET_X_S"] == "2"


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"ARTFLEET_JUDGE_MODEL_MAPP": "{}"}, "no service reads ARTFLEET_JUDGE_MODEL_MAPP"),
        ({"ARTFLEET_API_TOKEN": "mine"}, "ARTFLEET_API_TOKEN is set by fleet up itself"),
    ],
)
def test_unknown_and_fleet_owned_keys_are_refused(given: dict[str, str], message: str) -> None:
    for env_file, sets, origin in ((given, {}, "env file"), ({}, given, "--set")):
        with pytest.raises(ConfigError) as caught:
            merge_settings({}, env_file, sets, KNOWN, OWNED)
        assert str(caught.value).startswith(f"{origin}: {message}")
    with pytest.raises(ConfigError, match="did you mean ARTFLEET_JUDGE_MODEL_MAP"):
        merge_settings({}, {}, {"ARTFLEET_JUDGE_MODEL_MAPP": "{}"}, KNOWN, OWNED)


def test_known_keys_come_from_the_services_settings_classes() -> None:
    known = known_keys()
    assert "ARTFLEET_JUDGE_MODEL_MAP" in known["api"]
    assert "ARTFLEET_JUDGE_CONCURRENCY" in known["reward"]
    assert "ARTFLEET_INFERENCE_VLLM_PYTHON" in known["inference"]
    assert "ARTFLEET_HEALTH_INTERVAL_S" in known["sandbox"]  # the shared mixin's too
    assert "ARTFLEET_JUDGE_MODEL_MAP" not in known["trainer"]


def test_each_setting_reaches_the_services_that_read_it(tmp_path: Path) -> None:
    fleet = _fleet(
        tmp_path,
        settings={
            "ARTFLEET_JUDGE_MODEL_MAP": '{"gpt-4o": "policy"}',
            "ARTFLEET_JUDGE_CONCURRENCY": "2",
            "ARTFLEET_SANDBOX_ALLOW_UNISOLATED": "0",  # the fleet's default, overridden
            "OPENAI_API_KEY": "k",
        },
    )
    api, reward, sandbox = (fleet.service_env(n) for n in ("api", "reward", "sandbox"))
    assert api["ARTFLEET_JUDGE_MODEL_MAP"] == '{"gpt-4o": "policy"}'
    assert "ARTFLEET_JUDGE_MODEL_MAP" not in reward and "ARTFLEET_JUDGE_CONCURRENCY" not in api
    assert reward["ARTFLEET_JUDGE_CONCURRENCY"] == "2"
    assert sandbox["ARTFLEET_SANDBOX_ALLOW_UNISOLATED"] == "0"
    assert api["OPENAI_API_KEY"] == reward["OPENAI_API_KEY"] == "k"
    # The metrics ports are the fleet's, so fleet.env can name them.
    assert reward["ARTFLEET_METRICS_PORT"] == str(fleet.ports["reward_metrics"])
    assert fleet.endpoints()["ARTFLEET_REWARD_METRICS_URL"].endswith(
        f":{fleet.ports['reward_metrics']}/metrics"
    )


def test_a_bad_value_is_named_before_anything_starts(tmp_path: Path) -> None:
    for key, value in (("ARTFLEET_JUDGE_MODEL_MAP", "gpt-4o=policy"), ("ARTFLEET_PORT", "x")):
        fleet = _fleet(tmp_path, settings={key: value})
        if key == "ARTFLEET_PORT":  # the fleet's own: only extra_env can break it
            fleet = _fleet(tmp_path, extra_env={key: value})
        with pytest.raises(ConfigError, match=f"^{key}: "):
            fleet.check_settings()
    fleet = _fleet(tmp_path, settings={"ARTFLEET_JUDGE_CONCURRENCY": "0"})
    with pytest.raises(ConfigError, match=r"^ARTFLEET_JUDGE_CONCURRENCY: .*reward"):
        fleet.check_settings()
    _fleet(tmp_path, settings={"ARTFLEET_JUDGE_CONCURRENCY": "3"}).check_settings()


def test_owned_keys_cover_both_engines_and_every_endpoint(tmp_path: Path) -> None:
    owned = _fleet(tmp_path).owned_keys()
    for key in (
        "ARTFLEET_PORT",
        "ARTFLEET_METRICS_PORT",
        "ARTFLEET_INFERENCE_ENGINE",  # either engine: --engine chooses
        "ARTFLEET_INFERENCE_PORT",  # torch's
        "ARTFLEET_INFERENCE_METRICS_URL",
        "ARTFLEET_API_URL",
        "ARTFLEET_REDIS_URL",
        "ARTFLEET_PROMETHEUS_URL",  # fleet.env's, once fleet up runs a Prometheus
    ):
        assert key in owned
    assert "ARTFLEET_JUDGE_MODEL_MAP" not in owned


def test_recorded_ports_are_kept_and_missing_ones_picked_distinct() -> None:
    picks = iter([7001, 7002, 7001, 7003])  # a free port may come up twice
    ports = plan_ports(("a", "b", "c"), {"a": 7001, "z": 1}, lambda: next(picks))
    assert ports == {"a": 7001, "b": 7002, "c": 7003}  # "z": no longer a fleet port


def test_a_port_another_process_listens_on_is_reported(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert not port_is_free(port)
        free = {"trainer": port, "api": _free_port()}
        assert taken_ports(free, port_is_free) == {"trainer": port}
    assert port_is_free(port)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_ports_record_roundtrip_and_a_corrupt_one_is_named(tmp_path: Path) -> None:
    assert load_ports(tmp_path) == {}
    save_ports(tmp_path, {"trainer": 7001})
    assert load_ports(tmp_path) == {"trainer": 7001}
    (tmp_path / "ports.json").write_text("[1, 2")
    with pytest.raises(ConfigError, match=r"ports\.json: not a ports record"):
        load_ports(tmp_path)


def test_fleet_env_is_private_and_sourceable(tmp_path: Path) -> None:
    values = {"ARTFLEET_API_TOKEN": "a'b c$HOME`x`", "ARTFLEET_API_URL": "http://127.0.0.1:1"}
    path = tmp_path / "fleet.env"
    path.write_text("old")
    path.chmod(0o644)
    write_private(path, env_file_text(values, "a comment\nsecond line"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    out = subprocess.run(
        [
            "bash",
            "-c",
            f'source {path} && printf "%s\\n" "$ARTFLEET_API_TOKEN" "$ARTFLEET_API_URL"',
        ],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.environ["PATH"]},
    )
    assert out.stdout.splitlines() == list(values.values())


def test_banner_lines_fit_80_columns_and_hold_no_token(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path)
    lines = banner(fleet, Path.cwd() / ".artfleet" / "fleet.env")
    assert all(len(line) <= 80 for line in lines), lines
    assert lines[-1] == "  source .artfleet/fleet.env"
    assert fleet.token not in "\n".join(lines)


def test_cli_refuses_bad_settings_with_exit_2(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from artfleet_cli.main import app

    bad = tmp_path / "bad.env"
    bad.write_text("# ok\nARTFLEET_LOG_LEVEL=INFO\nnot a line\n")
    cases = [
        (["--set", "ARTFLEET_NOPE=1"], "no service reads ARTFLEET_NOPE"),
        (["--set", "oops"], "--set 'oops': expected KEY=VALUE"),
        (["--env-file", str(bad)], f"{bad}:3: expected KEY=VALUE"),
        (["--env-file", str(tmp_path / "missing.env")], "missing.env"),
        (["--set", "ARTFLEET_JUDGE_MODEL_MAP=gpt-4o"], "ARTFLEET_JUDGE_MODEL_MAP: not valid JSON"),
        (["--set", "ARTFLEET_PORT=1"], "ARTFLEET_PORT is set by fleet up itself"),
        (
            ["--set", "ARTFLEET_FLEET_START_TIMEOUT_S=soon"],
            "ARTFLEET_FLEET_START_TIMEOUT_S: Input should be a valid number",
        ),
        (["--set", "ARTFLEET_FLEET_MAX_RESTARTS=-1"], "(fleet up's setting)"),
        (["--start-timeout", "0"], "--start-timeout: a number of seconds above 0"),
        (["--start-timeout", "-5"], "--start-timeout: a number of seconds above 0"),
    ]
    up = ["fleet", "up", "--workdir", str(tmp_path), "--engine", "torch"]
    for args, message in cases:
        result = CliRunner().invoke(app, [*up, *args])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.stderr, result.output
    assert not (tmp_path / "ports.json").exists()  # nothing recorded for a refused start


def test_cli_says_which_recorded_port_is_taken(tmp_path: Path) -> None:
    """The real command line: a message and exit 1, no traceback."""
    cmd = [sys.executable, "-m", "artfleet_cli.main", "fleet", "up", "--workdir", str(tmp_path)]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ARTFLEET_")}
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        (tmp_path / "ports.json").write_text(json.dumps({"trainer": port}))
        result = subprocess.run(
            [*cmd, "--engine", "torch"], capture_output=True, text=True, timeout=120, env=clean
        )
    assert result.returncode == 1, result.stderr
    assert f"{port} (trainer)" in result.stderr and "--new-ports" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_restart_reuses_the_workdirs_token_and_new_ports_picks_again(tmp_path: Path) -> None:
    from artfleet_cli.fleet_up import _configured_fleet

    first = _configured_fleet(tmp_path, "torch", None, [], new_ports=False)
    (tmp_path / "token").write_text(first.token + "\n")  # as a started fleet up leaves it
    again = _configured_fleet(tmp_path, "torch", None, [], new_ports=False)
    assert (again.ports, again.token, again.redis_url) == (
        first.ports,
        first.token,
        first.redis_url,
    )
    # Held from their choice (no other process takes one before its service listens) ...
    assert first.held.held() == set(first.ports.values())
    for fleet in (first, again):  # ... until their stop() lets them go
        fleet.held.release()
    with socket.socket() as held:
        held.bind(("127.0.0.1", first.ports["trainer"]))
        held.listen()
        with pytest.raises(SystemExit) as caught:
            _configured_fleet(tmp_path, "torch", None, [], new_ports=False)
        assert caught.value.code == 1
        moved = _configured_fleet(tmp_path, "torch", None, [], new_ports=True)
        moved.held.release()
    assert moved.ports["trainer"] != first.ports["trainer"] and moved.token == first.token
    assert load_ports(tmp_path) == moved.ports


TOKEN = "fleet-up-config-token-0123456789"


def test_the_fleet_is_up_only_once_its_policy_lists_its_models_to_the_token(
    tmp_path: Path,
) -> None:
    """The readiness wait asks the policy as the API's /health does: vLLM answers long
    after the gRPC services serve, and a refused token never becomes ready."""
    assert _fleet(tmp_path).policy_server == "trainer"  # torch: the trainer's own server
    with fake_policy(TOKEN) as policy:
        fleet = _fleet(tmp_path, engine="vllm", token=TOKEN)
        fleet.ports["inference"] = policy.port
        vllm = subprocess.Popen(["sleep", "60"])  # stands in for the inference process
        fleet.processes.append(FleetProcess("inference", vllm))
        try:
            policy.serving = False  # its vLLM still loading
            threading.Timer(0.5, lambda: setattr(policy, "serving", True)).start()
            began = time.monotonic()
            fleet._wait_policy(began + 30)
            assert time.monotonic() - began >= 0.4, "it waited for the policy"
            policy.token = "another-fleets-token"
            refused = r"the policy \(inference\) is not served: 401: the fleet token is refused"
            with pytest.raises(TimeoutError, match=refused):
                fleet._wait_policy(time.monotonic() + 0.5)
            vllm.kill()
            vllm.wait()
            with pytest.raises(ServiceExited, match=r"^inference exited"):
                fleet._wait_policy(time.monotonic() + 30)
        finally:
            vllm.kill()
            vllm.wait()


@pytest.fixture
def no_artfleet_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("ARTFLEET_")]:
        monkeypatch.delenv(key)


@pytest.mark.usefixtures("no_artfleet_environ")
def test_settings_given_once_are_remembered_privately_until_reset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from artfleet_cli.fleet_up import _configured_fleet

    given = tmp_path / "given.env"
    given.write_text("OPENAI_API_KEY=sk-secret-value\nARTFLEET_JUDGE_CONCURRENCY=2\n")
    workdir = tmp_path / "fleet"
    judge = 'ARTFLEET_JUDGE_MODEL_MAP={"gpt-4o": "policy"}'
    first = _configured_fleet(workdir, "torch", given, [judge], new_ports=False)
    record = workdir / "fleet-settings.json"
    assert stat.S_IMODE(record.stat().st_mode) == 0o600  # a key may be among them
    assert "remembered" not in capsys.readouterr().out

    again = _configured_fleet(workdir, "torch", None, [], new_ports=False)
    assert again.settings == first.settings
    said = capsys.readouterr().out
    assert re.search(
        r"^using the settings remembered from \d{4}-\d\d-\d\d \d\d:\d\d: 3 values; "
        r"--reset-settings to drop them$",
        said,
        re.M,
    ), said
    assert "sk-secret-value" not in said

    # A later --set wins over what is remembered, and is remembered in turn.
    later = _configured_fleet(workdir, "torch", None, ["ARTFLEET_JUDGE_CONCURRENCY=4"], False)
    assert later.settings == {**first.settings, "ARTFLEET_JUDGE_CONCURRENCY": "4"}
    assert "3 values, 1 replaced by this start's;" in capsys.readouterr().out
    remembered = load_remembered(workdir)
    assert remembered is not None and remembered.values == later.settings

    reset = _configured_fleet(workdir, "torch", None, [], False, reset_settings=True)
    assert reset.settings == {} and not record.exists()
    assert "dropped the remembered settings" in capsys.readouterr().out


@pytest.mark.usefixtures("no_artfleet_environ")
def test_remembered_settings_refused_now_name_the_record_and_the_reset(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from artfleet_cli.main import app

    up = ["fleet", "up", "--workdir", str(tmp_path), "--engine", "torch"]
    record = tmp_path / "fleet-settings.json"
    save_remembered(tmp_path, {"ARTFLEET_NO_LONGER_READ": "1"})
    result = CliRunner().invoke(app, up)
    assert result.exit_code == 2, result.output
    assert (
        "fleet-settings.json (remembered; --reset-settings drops it): no service reads "
        "ARTFLEET_NO_LONGER_READ" in result.stderr
    )
    record.write_text("{not json")
    result = CliRunner().invoke(app, up)
    assert result.exit_code == 2 and "not a settings record" in result.stderr
    assert "--reset-settings" in result.stderr


@pytest.mark.parametrize(
    ("settings", "start_s"), [({}, 600.0), ({"ARTFLEET_INFERENCE_START_TIMEOUT_S": "1500"}, 1500.0)]
)
def test_an_inference_replica_gets_its_own_start_timeout(
    tmp_path: Path, settings: dict[str, str], start_s: float
) -> None:
    """`fleet up` waits for vLLM as long as the inference service itself would (it stops
    itself past that), not the 3 minutes the other services get: on a busy machine vLLM's
    start took about 3 minutes and the fleet gave up while it was still coming up."""
    fleet = _fleet(tmp_path, engine="vllm", settings=settings)
    before = time.monotonic()
    wait_s = fleet._replica_deadline("inference") - before
    assert start_s + 60 <= wait_s < start_s + 61


@pytest.mark.usefixtures("no_artfleet_environ")
def test_fleet_ups_own_settings_are_given_as_the_services_are(tmp_path: Path) -> None:
    """ARTFLEET_FLEET_* (the start deadline, the restarts) come from the same places as
    the services' settings, remembered too, and reach no service."""
    from artfleet_cli.fleet_up import _configured_fleet

    sets = ["ARTFLEET_FLEET_START_TIMEOUT_S=600", "ARTFLEET_FLEET_MAX_RESTARTS=1"]
    fleet = _configured_fleet(tmp_path, "torch", None, sets, new_ports=False)
    own = fleet.own_settings()
    assert (own.fleet_start_timeout_s, own.fleet_max_restarts) == (600.0, 1)
    assert not any("ARTFLEET_FLEET_" in str(fleet.service_env(n)) for n in fleet.started())
    again = _configured_fleet(tmp_path, "torch", None, [], new_ports=False)
    assert again.own_settings().fleet_start_timeout_s == 600.0
    defaults = _configured_fleet(tmp_path, "torch", None, [], False, reset_settings=True)
    assert defaults.own_settings().fleet_start_timeout_s == 180.0
