"""The LiteLLM proxy drop-in: every replica of a LiteLLM proxy asks the authority before a model
call, so the fleet shares one cap, one fair queue and one token budget.

Register it in the proxy's ``config.yaml``::

    litellm_settings:
      callbacks: ["admission_authority_client.litellm.handler"]

and configure it from the environment (read, and checked, when the proxy loads the callback: a
wrong setting stops the proxy with the variable named):

=================================  ===========================================================
``ADMISSION_AUTHORITY_URL``        the authority, ``host:port`` (required); several,
                                   comma-separated IP addresses (``10.0.0.5:50051,10.0.0.6:50051``)
                                   are balanced round robin
``ADMISSION_AUTHORITY_TOKEN``      the gateway credential's token (or ``_TOKEN_FILE``: a file
                                   holding it); none against an authority without credentials
``ADMISSION_HOST_ID``              the installation these proxies are (required)
``ADMISSION_SUBJECT``              who a call counts against: ``key`` (default), ``team``,
                                   ``user`` or ``end_user`` (each falls back to the key)
``ADMISSION_ACCOUNT``              the provider account: ``model_group`` (default: the model
                                   the request names), ``deployment`` (one deployment of it,
                                   picked with a free slot) or ``none``
``ADMISSION_MODE``                 ``queue`` (default: wait in the fair queue) or ``reject``
                                   (429 with ``retry-after`` when no slot is free)
``ADMISSION_WAIT_TIMEOUT``         seconds a call may wait in the queue (default 600), then 429
``ADMISSION_RESERVE_TOKENS``       ``true`` (default): Authorize the call's tokens before it and
                                   Settle its usage after; ``false``: slots only
``ADMISSION_DEFAULT_MAX_TOKENS``   output tokens reserved for a request without ``max_tokens``
                                   (default 4096)
``ADMISSION_FAILURE_MODE``         ``closed`` (default: 503 when the authority cannot be
                                   reached) or ``local`` (a local bound per proxy meanwhile)
``ADMISSION_LOCAL_MAX_PARALLEL``   that local bound (required with ``local``)
``ADMISSION_REPLICA_ID``           this proxy in run ids and logs (default ``hostname-pid``)
``ADMISSION_TIMEOUT``              seconds per authority call, retries included (default 10)
``ADMISSION_LIMITS_TOKEN``         an operator credential's token (or ``_TOKEN_FILE``): a key's
                                   ``max_parallel_requests`` becomes its subject's cap, at most
                                   the host's ``per_subject`` (unset: it holds per proxy only)
``ADMISSION_LIMITS_RECHECK``       seconds a key's cap, once written, is trusted before it is
                                   read again (default 5; 0: before every call)
``ADMISSION_RATE_LIMIT_DOMAIN``    the rate limit domain LiteLLM's ``rpm_limit`` and
                                   ``tpm_limit`` are counted in, installation-wide (unset: per
                                   proxy only)
``ADMISSION_KEY_HEADER``           a request header (e.g. ``x-conversation-id``) whose value
                                   keys the call's ticket; a call without it has no key
``ADMISSION_KEY_POLICY``           what a keyed call asks of its key's others:
                                   ``serial_keep_newest`` (default: one call per key at a time,
                                   the newest waiting; an older waiting call answers 409),
                                   ``keep_newest``, ``serial``, ``reject_new`` (429 ``KEY_BUSY``
                                   while the key has a call) or ``none``
=================================  ===========================================================

What a call gets (docs/litellm.md says more):

* **A slot.** Before LiteLLM calls the model, a ticket for the call's subject (and account) is
  submitted; the call waits in the authority's fair queue, or gets 429 in ``reject`` mode or
  past ``ADMISSION_WAIT_TIMEOUT``. The slot is renewed while the call or its stream runs and
  released exactly once, whichever way the call ends: success, the end of a stream, an LLM
  error, a rejection after admission, a client that disconnects mid-stream or while queued. The
  run id is LiteLLM's call id (``x-litellm-call-id`` lets a client choose it) prefixed by the
  replica. A proxy killed outright stops renewing: its slots free within one lease.
* **Tokens.** The call's input (estimated at 4 characters a token) and ``max_tokens`` (or the
  default) are reserved with Authorize; a denial is 429. The grant may lower ``max_tokens``.
  The usage LiteLLM reports (a stream's final usage chunk included: the proxy asks for it) is
  settled; a stream cut short settles what it streamed as partial usage, an LLM error as none.
* **LiteLLM's own limits, fleet-wide.** Keys' and deployments' ``max_parallel_requests``
  (with ``ADMISSION_LIMITS_TOKEN``), and ``rpm_limit`` / ``tpm_limit`` (with
  ``ADMISSION_RATE_LIMIT_DOMAIN``): a call's token estimate is charged before it, so a burst
  cannot pass a ``tpm_limit``, and corrected by its usage after. The proxy says at start, in
  one line, which of them it holds fleet-wide and which per proxy.
* **Never open.** The authority unreachable answers 503 before the model is called, unless
  ``ADMISSION_FAILURE_MODE=local``.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from .callback import AdmissionHandler
from .settings import Settings, SettingsError

__all__ = ["AdmissionHandler", "Settings", "SettingsError"]

_handler: AdmissionHandler | None = None


def __getattr__(name: str) -> Any:
    """``handler``, the instance to register (``litellm_settings: callbacks:
    ["admission_authority_client.litellm.handler"]``), made from the environment the first
    time LiteLLM looks it up: importing the module needs no settings."""
    global _handler
    if name != "handler":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if _handler is None:
        _log_to_stderr()
        try:
            _handler = AdmissionHandler()
        except SettingsError as e:
            # LiteLLM would log the error and start without the callback: stop it instead.
            print(f"admission_authority_client.litellm: {e}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None
    return _handler


def _log_to_stderr() -> None:
    """The drop-in's log lines on the proxy's stderr, from INFO up, where nothing else sends
    them anywhere (LiteLLM configures only its own loggers, and Python's last resort prints
    warnings alone): its start line says which limits it holds fleet-wide."""
    log = logging.getLogger(__name__)
    if log.handlers or logging.getLogger().handlers:
        return
    out = logging.StreamHandler(sys.stderr)
    out.setFormatter(logging.Formatter("%(name)s: %(levelname)s: %(message)s"))
    log.addHandler(out)
    log.setLevel(logging.INFO)
    log.propagate = False
