"""Python client for admission-authority: installation-wide admission for AI-agent gateway
replicas.

* :class:`AdmissionClient` (blocking) and :class:`AsyncAdmissionClient` (asyncio):
  ``slot(...)`` holds a scheduler slot for a ``with`` block (and reports on release what the
  block's provider call came to, see :func:`outcome_of`); ``authorize`` / ``settle`` reserve
  and record model-step budgets; ``check_auth_attempt`` counts auth attempts.
* Refusals raise :class:`AdmissionRefused` subclasses (:class:`Busy`, :class:`QueueFull`,
  :class:`MemoryPressure`, :class:`Draining`, :class:`KeyBusy`) with ``reason`` and
  ``retry_after`` (seconds); a waiting slot a newer ticket of its key took over raises
  :class:`Superseded` (a :class:`TicketEnded`).
* :class:`OperatorClient`: a host's limits while the fleet runs (``get_limits``,
  ``update_limits``, ``set_limits``, ``reset_limits``).
* The generated messages and stubs are in :mod:`admission_authority_client.v1`.
"""

from ._client import (
    AdmissionClient,
    AsyncAdmissionClient,
    AuthAttempt,
    Authorization,
    Coverage,
    KeyPolicy,
    Mode,
    OperatorClient,
    Outcome,
    Slot,
    outcome_of,
)
from .errors import (
    AdmissionError,
    AdmissionRefused,
    AuthorityUnavailable,
    Busy,
    ClientClosed,
    Draining,
    KeyBusy,
    MemoryPressure,
    QueueFull,
    Superseded,
    TicketEnded,
)

__all__ = [
    "Outcome",
    "outcome_of",
    "AdmissionClient",
    "AdmissionError",
    "AdmissionRefused",
    "OperatorClient",
    "AsyncAdmissionClient",
    "AuthAttempt",
    "AuthorityUnavailable",
    "Authorization",
    "Busy",
    "ClientClosed",
    "Coverage",
    "Draining",
    "KeyBusy",
    "KeyPolicy",
    "MemoryPressure",
    "Mode",
    "QueueFull",
    "Slot",
    "Superseded",
    "TicketEnded",
]
