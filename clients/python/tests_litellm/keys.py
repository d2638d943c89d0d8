"""The proxies' keys, without a database: LiteLLM's ``custom_auth`` returns each key's record
with the limits set on it in LiteLLM (``general_settings: custom_auth: keys.user_api_key_auth``).
Keys not listed here are plain keys of their own (``sk-<anything>``) without limits."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from litellm.proxy._types import UserAPIKeyAuth

#: Limits set in LiteLLM on some keys.
LIMITS: dict[str, dict[str, Any]] = {
    "sk-parallel-2": {"max_parallel_requests": 2},
    "sk-rpm-3": {"rpm_limit": 3},
    "sk-tpm-40": {"tpm_limit": 40},
    "sk-tpm-1000": {"tpm_limit": 1000},
    "sk-team-rpm-a": {"team_id": "team-rpm", "team_rpm_limit": 2},
    "sk-team-rpm-b": {"team_id": "team-rpm", "team_rpm_limit": 2},
}


async def user_api_key_auth(request: Request, api_key: str) -> UserAPIKeyAuth:
    if not api_key.startswith("sk-") or api_key == "sk-master":
        raise Exception("unknown key")
    return UserAPIKeyAuth(api_key=api_key, **LIMITS.get(api_key, {}))
