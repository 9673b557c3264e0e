"""ResourceStack: reverse-order release, also after failures and Ctrl-C (no device needed)."""

import pytest

from qpconform.adapters.resources import CloseErrors, ResourceStack


class Fake:
    """A closable that logs its close into a shared list, optionally failing."""

    def __init__(self, name: str, log: list[str], fail: BaseException | None = None) -> None:
        self.name, self.log, self.fail = name, log, fail

    def close(self) -> None:
        self.log.append(self.name)
        if self.fail is not None:
            raise self.fail


def _stack(log: list[str], **fail: BaseException) -> ResourceStack:
    stack = ResourceStack()
    for name in ("context", "pd", "mr", "cq", "qp"):
        stack.push(Fake(name, log, fail.get(name)), name)
    return stack


def test_closes_newest_first() -> None:
    log: list[str] = []
    _stack(log).close()
    assert log == ["qp", "cq", "mr", "pd", "context"]


def test_a_failing_close_does_not_stop_the_others() -> None:
    log: list[str] = []
    stack = _stack(log, cq=OSError(16, "busy"))
    with pytest.raises(CloseErrors) as err:
        stack.close()
    assert log == ["qp", "cq", "mr", "pd", "context"]
    assert [label for label, _ in err.value.errors] == ["cq"]


def test_ctrl_c_during_close_finishes_then_reraises() -> None:
    log: list[str] = []
    stack = _stack(log, mr=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        stack.close()
    assert log == ["qp", "cq", "mr", "pd", "context"]
    assert len(stack) == 0


def test_context_manager_releases_on_error_in_body() -> None:
    log: list[str] = []
    with pytest.raises(RuntimeError, match="boom"), _stack(log):
        raise RuntimeError("boom")
    assert log == ["qp", "cq", "mr", "pd", "context"]


def test_context_manager_releases_on_ctrl_c_in_body() -> None:
    log: list[str] = []
    with pytest.raises(KeyboardInterrupt), _stack(log):
        raise KeyboardInterrupt
    assert log == ["qp", "cq", "mr", "pd", "context"]


def test_forget_and_custom_closer() -> None:
    log: list[str] = []
    stack = ResourceStack()
    stack.push(object(), "ctx", lambda: log.append("ctx"))
    stack.push(object(), "qp#1", lambda: log.append("qp#1"))
    stack.push(object(), "qp#2", lambda: log.append("qp#2"))
    stack.forget("qp#1")  # destroyed by its owner already
    assert stack.labels() == ["ctx", "qp#2"]
    stack.close()
    assert log == ["qp#2", "ctx"]


def test_close_is_idempotent_and_refuses_new_resources() -> None:
    log: list[str] = []
    stack = _stack(log)
    stack.close()
    stack.close()
    assert log == ["qp", "cq", "mr", "pd", "context"]
    with pytest.raises(RuntimeError):
        stack.push(Fake("late", log), "late")
