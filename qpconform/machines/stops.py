"""A stop that arrived by signal and may have been swallowed, delivered between steps.

A signal handler's exception is raised wherever the interpreter is; inside a gc
callback (Hypothesis times the collector with one) Python prints "Exception ignored"
and drops it. So the handlers (fixtures/stops.py) keep the stop here as pending until
it is seen to leave the test, and the machines call `deliver_pending()` between steps,
where raising is safe.
"""

from __future__ import annotations

from typing import NoReturn

#: The stop raised by a signal handler and not yet seen leaving a test phase.
_pending: KeyboardInterrupt | None = None


def raise_stop(stop: KeyboardInterrupt) -> NoReturn:
    """Raise `stop` from a signal handler, kept as pending in case it is swallowed."""
    global _pending
    _pending = stop
    raise stop


def deliver_pending() -> None:
    """Raise the stop a gc callback swallowed, if any: call it where raising is safe."""
    global _pending
    if _pending is not None:
        stop, _pending = _pending, None
        raise type(stop)(*stop.args)


def forget_pending() -> None:
    """The stop left the test (or was delivered): nothing is pending any more."""
    global _pending
    _pending = None
