"""The drop-in's settings: every wrong one is reported at once, naming its variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from admission_authority_client.litellm import Settings, SettingsError

BASE = {"ADMISSION_AUTHORITY_URL": "127.0.0.1:50051", "ADMISSION_HOST_ID": "litellm"}


def test_defaults() -> None:
    s = Settings.from_env(BASE)
    assert (s.target, s.host_id, s.subject, s.account, s.mode, s.failure_mode) == (
        "127.0.0.1:50051", "litellm", "key", "model_group", "queue", "closed",
    )
    assert s.reserve_tokens and s.default_max_tokens == 4096 and s.limits_token is None


def test_several_addresses_are_one_round_robin_target() -> None:
    s = Settings.from_env({**BASE, "ADMISSION_AUTHORITY_URL": "10.0.0.5:50051, 10.0.0.6:50051"})
    assert s.target == "ipv4:10.0.0.5:50051,10.0.0.6:50051"
    with pytest.raises(SettingsError, match="ADMISSION_AUTHORITY_URL: 'a.example:1': several addresses must be IP"):
        Settings.from_env({**BASE, "ADMISSION_AUTHORITY_URL": "a.example:1,b.example:1"})


def test_every_problem_is_named(tmp_path: Path) -> None:
    env = {
        "ADMISSION_AUTHORITY_URL": "no-port",
        "ADMISSION_SUBJECT": "org",
        "ADMISSION_FAILURE_MODE": "local",
        "ADMISSION_TIMEOUT": "soon",
        "ADMISSION_AUTHORITY_TOKEN": "t",
        "ADMISSION_AUTHORITY_TOKEN_FILE": str(tmp_path / "missing"),
    }
    with pytest.raises(SettingsError) as e:
        Settings.from_env(env)
    message = str(e.value)
    for expected in (
        "ADMISSION_AUTHORITY_URL: 'no-port' is not host:port",
        "ADMISSION_HOST_ID: required",
        "ADMISSION_SUBJECT: must be one of key, team, user, end_user, got 'org'",
        "ADMISSION_LOCAL_MAX_PARALLEL: required (at least 1) with ADMISSION_FAILURE_MODE=local",
        "ADMISSION_TIMEOUT: must be a number, got 'soon'",
        "ADMISSION_AUTHORITY_TOKEN_FILE: give ADMISSION_AUTHORITY_TOKEN or a file holding it, not both",
        "ADMISSION_AUTHORITY_TOKEN_FILE: cannot read",
    ):
        assert expected in message, message


def test_tokens_from_files(tmp_path: Path) -> None:
    (tmp_path / "gw").write_text("gateway-token\n")
    (tmp_path / "op").write_text("")
    with pytest.raises(SettingsError, match="ADMISSION_LIMITS_TOKEN_FILE: .* is empty"):
        Settings.from_env({**BASE, "ADMISSION_LIMITS_TOKEN_FILE": str(tmp_path / "op")})
    s = Settings.from_env({**BASE, "ADMISSION_AUTHORITY_TOKEN_FILE": str(tmp_path / "gw")})
    assert s.token == "gateway-token"


def test_the_account_is_a_model_group_a_deployment_or_none() -> None:
    for account in ("model_group", "deployment", "none"):
        assert Settings.from_env({**BASE, "ADMISSION_ACCOUNT": account}).account == account
    with pytest.raises(SettingsError, match="ADMISSION_ACCOUNT: must be one of model_group, deployment, none, got 'region'"):
        Settings.from_env({**BASE, "ADMISSION_ACCOUNT": "region"})
