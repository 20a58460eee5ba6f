"""Fault injection for the embedded broker (kfake-style controls).

Theory of operation:

Like franz-go's ``kfake.ControlKey``, a test installs a *control* for an API key
(or for every key) with :meth:`Faults.install` (usually through
:meth:`gengroup.broker.FakeCluster.control`). Every decoded request is shown to
the installed controls, oldest first, as an :class:`Intercepted` value (header,
decoded kio request, broker id). A handler returns ``None`` (or :data:`PASS`) to
let the request through untouched -- then the next control is asked -- or an
action that *handles* it:

* :class:`Delay` -- hold the request for some seconds of event-loop time, then
  serve it normally (or apply a follow-up action);
* :class:`Drop` -- swallow it: no response is ever sent, so the client times out.
  Kafka answers a connection's requests in order, so a request that never
  completes stalls its connection: nothing after it is answered either, until
  the client gives up and closes it (what a hung broker looks like);
* :class:`Fail` -- answer it with an error code, in the shape Kafka uses for
  that API and version (each API's ``error_response`` in
  :mod:`gengroup.broker.apis`);
* :class:`Respond` -- answer it with a response object the test built;
* :class:`Disconnect` -- close the client's connection without answering.

A control added with ``once=True`` removes itself the first time it handles a
request; a persistent control stays until :meth:`Control.remove` is called.
Handlers run synchronously on the event loop and must not block.

The handlers build their NOT_COORDINATOR and similar whole-request refusals
with the same ``error_response``, so injected errors look exactly like real
ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

__all__ = [
    "PASS",
    "Action",
    "Control",
    "ControlHandler",
    "Delay",
    "Disconnect",
    "Drop",
    "Fail",
    "Faults",
    "Intercepted",
    "Pass",
    "Respond",
]


@dataclass(frozen=True, slots=True)
class Intercepted:
    """A request as a control handler sees it.

    Attributes:
        broker_id: the node id of the broker that received it.
        api_key: the request's API key.
        api_version: the request's version.
        correlation_id: the header's correlation id.
        client_id: the header's client id (may be ``None``).
        header: the decoded kio request header.
        request: the decoded kio request.
    """

    broker_id: int
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header: Any
    request: Any


@dataclass(frozen=True, slots=True)
class Pass:
    """Let the request through (the same as returning ``None``)."""


PASS: Final = Pass()


@dataclass(frozen=True, slots=True)
class Delay:
    """Hold the request for ``seconds`` of event-loop time.

    Attributes:
        seconds: how long to hold it.
        then: what to do afterwards; ``None`` serves the request normally.
    """

    seconds: float
    then: Action | None = None


@dataclass(frozen=True, slots=True)
class Drop:
    """Never answer the request.

    The connection stays open but stalls: later requests on it are read and
    discarded, as behind a request that never completes on a real broker.
    """


@dataclass(frozen=True, slots=True)
class Fail:
    """Answer the request with ``error_code`` everywhere the API carries one.

    Attributes:
        error_code: the Kafka error code, e.g. 15 for COORDINATOR_NOT_AVAILABLE.
        message: the error message, for APIs whose responses carry one.
    """

    error_code: int
    message: str | None = None


@dataclass(frozen=True, slots=True)
class Respond:
    """Answer the request with this kio response (it must match the request's version)."""

    response: Any


@dataclass(frozen=True, slots=True)
class Disconnect:
    """Close the client's connection instead of answering."""


Action: TypeAlias = Pass | Delay | Drop | Fail | Respond | Disconnect
ControlHandler: TypeAlias = Callable[[Intercepted], Action | None]


def _check_action(action: object) -> None:
    """Refuse a handler's answer that is not an action (the class ``Fail`` itself,
    an error code, True): served as if nothing were injected, a fault test would
    pass for the wrong reason."""
    seen = action
    while isinstance(seen, Delay):
        seen = seen.then
    if seen is not None and not isinstance(seen, Pass | Drop | Fail | Respond | Disconnect):
        raise TypeError(
            f"a control's handler returned {action!r}: return an action instance "
            "(Fail(code), Drop(), Delay(seconds), Respond(response), Disconnect()), "
            "Pass() or None"
        )


@dataclass(eq=False)
class Control:
    """A control, installed with :meth:`Faults.install`.

    Attributes:
        api_key: the API it intercepts (``None``: every API).
        handler: the function deciding what to do with each request.
        once: remove the control after it handled one request.
        broker_id: only intercept requests to this broker (``None``: any).
        handled: how many requests it handled so far.
    """

    api_key: int | None
    handler: ControlHandler
    once: bool = False
    broker_id: int | None = None
    handled: int = 0
    _owner: Faults | None = field(default=None, repr=False)

    @property
    def active(self) -> bool:
        """Whether the control is still installed."""
        return self._owner is not None

    def remove(self) -> None:
        """Uninstall the control (idempotent)."""
        owner, self._owner = self._owner, None
        if owner is not None and self in owner.controls:
            owner.controls.remove(self)


class Faults:
    """The ordered list of installed controls, shared by every broker of a cluster."""

    def __init__(self) -> None:
        self.controls: list[Control] = []

    def install(self, control: Control) -> Control:
        """Install a control, after every control installed before it.

        Returns:
            ``control``; call :meth:`Control.remove` to uninstall it.
        """
        if not callable(control.handler):
            raise TypeError(
                f"a control's handler is a function of the intercepted request returning "
                f"an action or None, not {control.handler!r}"
            )
        if control.api_key is not None:
            control.api_key = int(control.api_key)
        control._owner = self
        self.controls.append(control)
        return control

    def clear(self) -> None:
        """Remove every control."""
        for control in list(self.controls):
            control.remove()

    def decide(self, call: Intercepted) -> Action | None:
        """Ask the matching controls, oldest first, what to do with ``call``.

        Returns:
            The first action other than :class:`Pass`, or ``None``.
        """
        for control in list(self.controls):
            if not control.active:
                continue
            if control.api_key is not None and control.api_key != call.api_key:
                continue
            if control.broker_id is not None and control.broker_id != call.broker_id:
                continue
            action = control.handler(call)
            if action is None or isinstance(action, Pass):
                continue
            _check_action(action)
            control.handled += 1
            if control.once:
                control.remove()
            return action
        return None
