"""Every gengroup error can be copied for one more task, and a cause chain always ends.

The producer raises one failure to every task waiting for a record of the
batch: each gets ``copy_error(failure)``, chained to the failure. A class whose
constructor is not ``(message)`` used to come back as the original itself, and
``raise e from e`` left a cause chain that a ``while e: e = e.__cause__`` loop
never leaves.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

import gengroup
import gengroup.broker
from gengroup import (
    AuthenticationError,
    BrokerError,
    ClusterUnreachable,
    CoordinatorUnavailable,
    GengroupError,
    GroupsNotDeleted,
    TLSError,
)
from gengroup._errors import error_for_code
from gengroup._producer_queue import copy_error

#: Codes whose errors get each class of BrokerError (any code for the others).
_CODES = {cls: code for code in map(int, ErrorCode) if code for cls in [type(error_for_code(code))]}


def _subclasses(cls: type[GengroupError]) -> Iterator[type[GengroupError]]:
    for sub in cls.__subclasses__():
        if sub.__module__.startswith("gengroup"):
            yield sub
        yield from _subclasses(sub)


#: Every gengroup error class, once (the package, its broker and the harness imported).
CLASSES = sorted({GengroupError, *_subclasses(GengroupError)}, key=lambda c: c.__qualname__)


def sample(cls: type[GengroupError]) -> GengroupError:
    """An instance of ``cls`` with every attribute its constructor sets."""
    if issubclass(cls, CoordinatorUnavailable):
        return cls("g", 61.5, exhausted=True, message="answered by broker 1")
    if issubclass(cls, BrokerError):
        return cls(_CODES.get(cls, ErrorCode.unknown_server_error), "t[0] on broker 1")
    if issubclass(cls, ClusterUnreachable):
        return cls({"h:1": "connection refused"}, 60.5, exhausted=True)
    if issubclass(cls, TLSError):
        return cls("h:1: certificate verify failed", broker="h:1", reason="hostname mismatch")
    if issubclass(cls, GroupsNotDeleted):
        return cls(["a"], {"b": error_for_code(69, "group 'b'"), "c": TimeoutError("late")})
    if issubclass(cls, AuthenticationError):
        return cls("PLAIN authentication failed", broker="h:1", mechanism="PLAIN")
    return cls(f"{cls.__name__} happened")


def raised(exc: BaseException) -> BaseException:
    """``exc`` after it was raised with a cause, as a batch's failure is."""
    try:
        raise exc from OSError("the socket broke")
    except BaseException as caught:
        return caught


def causes(exc: BaseException | None) -> list[BaseException]:
    """The cause chain from ``exc``, as a user walks it (stopped after 10 links)."""
    chain: list[BaseException] = []
    while exc is not None and len(chain) < 10:
        chain.append(exc)
        exc = exc.__cause__
    return chain


def test_every_error_class_is_found() -> None:
    names = {cls.__name__ for cls in CLASSES}
    assert {"AuthenticationError", "TLSError", "ClusterUnreachable"} <= names
    assert {"CoordinatorUnavailable", "BufferExhausted", "MissingDependency"} <= names
    assert gengroup.__name__ and gengroup.broker.__name__


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__qualname__)
def test_a_copy_is_a_distinct_error_of_the_same_class_message_and_attributes(
    cls: type[GengroupError],
) -> None:
    original = raised(sample(cls))
    original.add_note("seen by the sender")
    twin = copy_error(original)
    assert twin is not original
    assert (type(twin), str(twin), twin.args) == (cls, str(original), original.args)
    assert twin.__dict__ == original.__dict__
    # Its own traceback, cause, context and notes.
    assert (twin.__traceback__, twin.__cause__, twin.__context__) == (None, None, None)
    assert twin.__notes__ is not original.__notes__
    # Pickled and copied the same way, whatever the constructor takes.
    for other in (pickle.loads(pickle.dumps(original)), copy.copy(original)):
        assert (type(other), str(other), other.__dict__) == (cls, str(original), twin.__dict__)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__qualname__)
def test_raising_a_copy_from_its_original_makes_a_chain_that_ends(
    cls: type[GengroupError],
) -> None:
    original = raised(sample(cls))
    try:
        raise copy_error(original) from original
    except GengroupError as exc:
        chain = causes(exc)
    assert chain[1:] == [original, original.__cause__]
    assert chain[0] is not original and type(chain[0]) is cls


def test_a_foreign_error_keeps_its_class_whatever_its_constructor_takes() -> None:
    class Refused(Exception):
        def __init__(self, *, user: str) -> None:
            super().__init__(f"{user} refused")
            self.user = user

    original = raised(Refused(user="u"))
    twin = copy_error(original)
    assert (type(twin), str(twin), twin.__dict__) == (Refused, "u refused", {"user": "u"})
    assert twin is not original and twin.__cause__ is None
    # A builtin's own fields come with it.
    bad = raised(UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"))
    twin = copy_error(bad)
    assert isinstance(twin, UnicodeEncodeError) and twin is not bad
    assert (twin.object, twin.start, twin.reason, str(twin)) == (
        "\ud800",
        0,
        "surrogates not allowed",
        str(bad),
    )


def test_an_error_that_cannot_be_rebuilt_is_named_by_a_distinct_gengroup_error() -> None:
    class Stubborn(Exception):
        def __new__(cls, *args: object) -> Stubborn:
            if args:
                raise TypeError("takes no arguments")
            return super().__new__(cls)

        def __reduce__(self) -> tuple[object, ...]:
            raise TypeError("cannot be copied")

    original = Stubborn()
    original.args = ("odd",)
    twin = copy_error(original)
    assert type(twin) is GengroupError and str(twin) == "Stubborn: odd"
    try:
        raise twin from original
    except GengroupError as exc:
        assert causes(exc) == [twin, original]
