"""The drop-in's settings, read from the environment and checked at start-up: every problem
is reported at once, each naming its variable."""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Subject = Literal["key", "team", "user", "end_user"]
Account = Literal["model_group", "deployment", "none"]


class SettingsError(ValueError):
    """A setting of the environment is wrong; the message names the variable."""


@dataclass(frozen=True)
class Settings:
    """The drop-in's settings (see the module documentation for each variable)."""

    target: str
    token: str | None
    host_id: str
    replica: str
    subject: Subject = "key"
    account: Account = "model_group"
    mode: Literal["queue", "reject"] = "queue"
    wait_timeout: float = 600.0
    reserve_tokens: bool = True
    default_max_tokens: int = 4096
    failure_mode: Literal["closed", "local"] = "closed"
    local_max_parallel: int = 0
    timeout: float = 10.0
    limits_token: str | None = None
    limits_recheck: float = 5.0
    rate_limit_domain: str | None = None
    #: The request header whose value keys a call's ticket (lower case), e.g. a conversation
    #: id; None: calls carry no key.
    key_header: str | None = None
    key_policy: str = "serial_keep_newest"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read and check the environment; every problem is raised at once, each naming its
        variable."""
        e = os.environ if env is None else env
        problems: list[str] = []

        def choice(name: str, allowed: tuple[str, ...], default: str) -> str:
            value = e.get(name, "").strip() or default
            if value not in allowed:
                problems.append(f"{name}: must be one of {', '.join(allowed)}, got {value!r}")
                return default
            return value

        def number(name: str, default: float, low: float, high: float) -> float:
            text = e.get(name, "").strip()
            if not text:
                return default
            try:
                value = float(text)
            except ValueError:
                problems.append(f"{name}: must be a number, got {text!r}")
                return default
            if not low <= value <= high:
                problems.append(f"{name}: must be between {low:g} and {high:g}, got {text}")
                return default
            return value

        url = e.get("ADMISSION_AUTHORITY_URL", "").strip()
        target = ""
        if not url:
            problems.append("ADMISSION_AUTHORITY_URL: required (host:port of the authority)")
        else:
            try:
                target = _target(url)
            except ValueError as why:
                problems.append(f"ADMISSION_AUTHORITY_URL: {why}")
        def secret(name: str) -> str | None:
            """``name`` or ``name_FILE`` (a file holding it), not both."""
            value = e.get(name, "").strip() or None
            path = e.get(f"{name}_FILE", "").strip()
            if not path:
                return value
            if value is not None:
                problems.append(f"{name}_FILE: give {name} or a file holding it, not both")
            try:
                with open(path, encoding="utf-8") as f:
                    value = f.read().strip() or None
            except OSError as why:
                problems.append(f"{name}_FILE: cannot read {path}: {why}")
                return None
            if value is None:
                problems.append(f"{name}_FILE: {path} is empty")
            return value

        token = secret("ADMISSION_AUTHORITY_TOKEN")
        limits_token = secret("ADMISSION_LIMITS_TOKEN")
        domain = e.get("ADMISSION_RATE_LIMIT_DOMAIN", "").strip() or None
        if domain is not None and not _printable(domain):
            problems.append("ADMISSION_RATE_LIMIT_DOMAIN: must be 1..128 printable ASCII characters")
        host_id = e.get("ADMISSION_HOST_ID", "").strip()
        if not host_id:
            problems.append("ADMISSION_HOST_ID: required (the installation these proxies are)")
        elif not _printable(host_id):
            problems.append("ADMISSION_HOST_ID: must be 1..128 printable ASCII characters")
        replica = e.get("ADMISSION_REPLICA_ID", "").strip() or f"{socket.gethostname()}-{os.getpid()}"
        if not _printable(replica) or len(replica) > 60:
            problems.append("ADMISSION_REPLICA_ID: must be 1..60 printable ASCII characters")
        subject = choice("ADMISSION_SUBJECT", ("key", "team", "user", "end_user"), "key")
        account = choice("ADMISSION_ACCOUNT", ("model_group", "deployment", "none"), "model_group")
        mode = choice("ADMISSION_MODE", ("queue", "reject"), "queue")
        failure_mode = choice("ADMISSION_FAILURE_MODE", ("closed", "local"), "closed")
        reserve = choice("ADMISSION_RESERVE_TOKENS", ("true", "false"), "true")
        wait_timeout = number("ADMISSION_WAIT_TIMEOUT", 600.0, 0.001, 86_400.0)
        default_max_tokens = number("ADMISSION_DEFAULT_MAX_TOKENS", 4096, 1, 10_000_000)
        timeout = number("ADMISSION_TIMEOUT", 10.0, 0.1, 600.0)
        limits_recheck = number("ADMISSION_LIMITS_RECHECK", 5.0, 0, 3600)
        local_max = number("ADMISSION_LOCAL_MAX_PARALLEL", 0, 0, 1_000_000)
        key_header = e.get("ADMISSION_KEY_HEADER", "").strip().lower() or None
        if key_header is not None and not all(c.isalnum() or c in "-_" for c in key_header):
            problems.append(f"ADMISSION_KEY_HEADER: must be a header name (letters, digits, - and _), got {key_header!r}")
        key_policy = choice(
            "ADMISSION_KEY_POLICY",
            ("serial_keep_newest", "keep_newest", "serial", "reject_new", "none"),
            "serial_keep_newest",
        )
        if e.get("ADMISSION_KEY_POLICY", "").strip() and key_header is None:
            problems.append("ADMISSION_KEY_POLICY: needs ADMISSION_KEY_HEADER (the header that keys a call)")
        if failure_mode == "local" and local_max < 1:
            problems.append(
                "ADMISSION_LOCAL_MAX_PARALLEL: required (at least 1) with ADMISSION_FAILURE_MODE=local"
            )
        if problems:
            raise SettingsError("; ".join(problems))
        return cls(
            target=target,
            token=token,
            host_id=host_id,
            replica=replica,
            subject=subject,  # type: ignore[arg-type]
            account=account,  # type: ignore[arg-type]
            mode=mode,  # type: ignore[arg-type]
            wait_timeout=wait_timeout,
            reserve_tokens=reserve == "true",
            default_max_tokens=int(default_max_tokens),
            failure_mode=failure_mode,  # type: ignore[arg-type]
            local_max_parallel=int(local_max),
            timeout=timeout,
            limits_token=limits_token,
            limits_recheck=limits_recheck,
            rate_limit_domain=domain,
            key_header=key_header,
            key_policy=key_policy,
        )


def _printable(s: str) -> bool:
    return 0 < len(s) <= 128 and all(33 <= ord(c) <= 126 for c in s)


def _target(url: str) -> str:
    """The gRPC target of ``ADMISSION_AUTHORITY_URL``: one ``host:port``, or several IP
    addresses as one ``ipv4:``/``ipv6:`` target."""
    parts = [p.strip() for p in url.split(",") if p.strip()]
    for p in parts:
        host, _, port = p.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{p!r} is not host:port")
    if len(parts) == 1:
        return parts[0]
    families = set()
    for p in parts:
        host = p.rpartition(":")[0].strip("[]")
        try:
            families.add(ipaddress.ip_address(host).version)
        except ValueError:
            raise ValueError(
                f"{p!r}: several addresses must be IP addresses (for names, give one name "
                "that resolves to every replica)"
            ) from None
    if len(families) > 1:
        raise ValueError("several addresses must all be IPv4 or all IPv6")
    return f"ipv{families.pop()}:{','.join(parts)}"
