"""Hosting a user task so that a stuck one can be abandoned.

Theory of operation:

A task that ignores cancellation (a shielded wait, a blocking call in a
thread) cannot be ended by anyone, and in structured concurrency it keeps
every enclosing task group, and so ``async with group``, from exiting. To let a
group that reported :class:`~gengroup.TaskStuckError` close within a bounded
time, a generation's user task does not run *in* the generation's task group:
a small host task does. :func:`host` starts the user's coroutine as a task of
the event loop itself (a trio system task, or a plain asyncio task) inside a
cancel scope of its own, waits for it, and re-raises what it raised. When the
host is cancelled (the generation is ending) it cancels that scope and keeps
waiting, shielded, until the task returns or :meth:`Hosted.abandon` is
called. Abandoning stops the wait only: the task's cancel scope stays
cancelled, and the task runs on in the background until it returns by itself;
what it raises then is logged, not raised.

Everything else is as if the task ran in the generation's task group: it
starts with a copy of the starting task's context variables, its exception
comes out of the generation, and the generation ends only once it returned.
A KeyboardInterrupt or SystemExit it raises comes out of the host in an
:class:`Interrupted` group (an asyncio task ending with either would stop
the event loop before the teardown and the final commit); the run loop takes
it out (:func:`interrupt_in`) and it wins over the exceptions beside it
(:func:`first_failure`).

Ctrl-C on trio: the host is KI-protected (trio delivers the KeyboardInterrupt
to the main task at a checkpoint instead of raising it inside the host).
``trio.Event.wait`` registers the waiting task and then parks it, and is not
itself protected: a KeyboardInterrupt raised between the two ends the host
while it is still registered, and the hosted task's later ``set()`` wakes a
task that no longer exists (TrioInternalError). The hosted task itself runs
as a trio system task, which trio protects.

The generation's records of its user tasks live here too: :class:`UserTask`,
how ``Generation.start`` starts one and waits for its ``task_status``
(:func:`start_and_wait`, holding ``started()`` back: :class:`HeldStatus`),
and :func:`describe_stack`, which says where a stuck task is suspended
(:func:`stuck`), and :func:`abandon`.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
from collections.abc import Awaitable, Callable, Collection, Coroutine
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import anyio
import anyio.abc
import sniffio
import trio

from .._errors import GenerationEnded

__all__ = [
    "INTERRUPTS",
    "HeldStatus",
    "Hosted",
    "Started",
    "UserTask",
    "Interrupted",
    "abandon",
    "awaitable",
    "bare",
    "describe_stack",
    "first_failure",
    "holds_interrupt",
    "host",
    "interrupt_in",
    "start_and_wait",
    "start_or_drop",
    "told_it_ended",
]

log = logging.getLogger("gengroup")

#: What a task raises to stop the program: never caught or reordered on its
#: way out of the group, and it wins over the exceptions beside it.
INTERRUPTS = (KeyboardInterrupt, SystemExit)

# asyncio keeps only weak references to tasks: the running ones live here.
_asyncio_tasks: set[Any] = set()


class Hosted:
    """One hosted task's state, shared by the host and the task.

    Attributes:
        name: the task's name.
        finished: whether the task returned (or raised).
        abandoned: whether the host stopped waiting for it.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.finished = False
        self.abandoned = False
        self.error: BaseException | None = None
        self._scope = anyio.CancelScope()
        self._released = anyio.Event()

    def cancel(self) -> None:
        """Cancel the task's own scope."""
        self._scope.cancel()

    def abandon(self) -> None:
        """Stop waiting for the task (if it has not returned); its scope stays cancelled."""
        self._scope.cancel()
        if not self.finished:
            self.abandoned = True
            self._released.set()

    async def _run(self, coro: Awaitable[Any]) -> None:
        try:
            with self._scope:
                await coro
        except anyio.get_cancelled_exc_class():
            raise  # the event loop is shutting down
        except BaseException as exc:
            if self.abandoned:
                log.warning("abandoned task %r raised %r after it was abandoned", self.name, exc)
            else:
                self.error = exc
        finally:
            self.finished = True
            self._released.set()


#: True in every task gengroup runs for the application (a generation's or a
#: partition's, and the tasks they start): ``Generation.start`` tells by it
#: whether its caller is one of them.
IN_USER_TASK: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "gengroup_in_user_task", default=False
)


def _spawn(fn: Callable[[], Awaitable[None]], name: str) -> None:
    context = contextvars.copy_context()
    context.run(IN_USER_TASK.set, True)
    if sniffio.current_async_library() == "trio":
        trio.lowlevel.spawn_system_task(fn, name=name, context=context)
    else:
        import asyncio

        async def main() -> None:
            await fn()

        task = asyncio.get_running_loop().create_task(main(), name=name, context=context)
        _asyncio_tasks.add(task)
        task.add_done_callback(_asyncio_tasks.discard)


@trio.lowlevel.enable_ki_protection
async def host(hosted: Hosted, coro: Awaitable[Any]) -> None:
    """Run ``coro`` as a task of the event loop and wait for it (see the module doc).

    Raises:
        BaseException: what ``coro`` raised; a KeyboardInterrupt or SystemExit
            in an :class:`Interrupted` group around it.
    """

    async def run() -> None:
        await hosted._run(coro)

    _spawn(run, hosted.name)
    try:
        await hosted._released.wait()
    except anyio.get_cancelled_exc_class():
        hosted.cancel()
        with anyio.CancelScope(shield=True):
            await hosted._released.wait()
        if hosted.error is not None:
            raise Interrupted.around(hosted.name, hosted.error) from None
        raise
    if hosted.error is not None:
        raise Interrupted.around(hosted.name, hosted.error)


class Interrupted(BaseExceptionGroup):
    """A task's KeyboardInterrupt or SystemExit, on its way to the group's run loop.

    An asyncio task that ends with either stops the event loop at once (before
    the generation's teardown and final commit); in this group it ends as with
    any other exception, and the run loop takes the interrupt out of it
    (:func:`interrupt_in`).
    """

    @staticmethod
    def around(name: str, exc: BaseException) -> BaseException:
        """``exc`` itself, or an Interrupted group around it if it is an interrupt."""
        if isinstance(exc, INTERRUPTS):
            return Interrupted(f"task {name!r} raised {exc!r}", [exc])
        return exc


def bare(exc: BaseException) -> BaseException:
    """The interrupt an :class:`Interrupted` group carries, or ``exc`` itself."""
    return exc.exceptions[0] if isinstance(exc, Interrupted) else exc


@dataclass(eq=False)
class UserTask:
    """A task the application started in a generation or a span, and its host's state."""

    name: str
    coro: Any = None
    done: bool = False
    #: Started with ``Generation.start`` and not started yet: an exception
    #: goes to the caller of ``start()``, not to the generation.
    starting: bool = False
    #: The caller of ``Generation.start`` is itself a task gengroup runs for
    #: the application (see :data:`IN_USER_TASK`).
    caller_in_task: bool = False
    hosted: Hosted = field(init=False)

    def __post_init__(self) -> None:
        self.hosted = Hosted(self.name)


class Started:
    """The ``task_status`` a hosted task started with ``Generation.start`` receives."""

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.value: Any = None

    def started(self, value: Any = None) -> None:
        self.value = value
        self.event.set()


def awaitable(fn: Callable[..., Any], result: Any) -> Any:
    """``result`` of calling ``fn`` if it can be awaited; else a TypeError naming ``fn``."""
    if not inspect.isawaitable(result):
        raise TypeError(
            f"start_soon/start expect an async function; {fn!r} returned {result!r}, "
            "which cannot be awaited"
        )
    return result


class HeldStatus:
    """A ``task_status`` that holds a ``started()`` call back until released."""

    def __init__(self, status: anyio.abc.TaskStatus[Any] | Started) -> None:
        self._status = status
        self._released = False
        self._held: tuple[Any] | None = None

    def started(self, value: Any = None) -> None:
        if self._released:
            self._status.started(value)
        else:
            self._held = (value,)

    def release(self) -> None:
        self._released = True
        if self._held is not None:
            self._status.started(self._held[0])


async def start_and_wait(
    tg: anyio.abc.TaskGroup,
    task: UserTask,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    run: Callable[[UserTask, Awaitable[Any]], Awaitable[None]],
    where: str,
) -> Any:
    """Start ``fn(*args, task_status=...)`` as ``task`` in ``tg``, run by ``run``
    (which hosts it), and wait until it calls ``task_status.started(value)``.

    ``started()`` is held back until ``fn`` proved to be async, so that a plain
    function fails the start (a TypeError) without ending the generation; the
    hosted task's ``started()`` is passed on from the task in ``tg``. Until
    then ``task.starting`` is set: an exception of ``fn`` goes to the caller,
    as itself on every backend (the task group passing it on wraps it in an
    exception group, which is taken off again: see :func:`_unwrapped`). A
    KeyboardInterrupt or SystemExit goes to the caller as itself too, taken
    out of the exception group it came in (:func:`interrupt_in`, ``where``
    naming the generation) as from a task that started: raised by the call of
    ``fn`` itself it goes in an :class:`Interrupted` group, as a hosted task's
    does, since an asyncio task ending with it would stop the event loop.

    Returns:
        The value passed to ``task_status.started``.

    Raises:
        Exception: what ``fn`` raised before it started, the same object (under
            trio also when the caller was cancelled at that moment; under
            asyncio the cancellation goes on then, and the exception is
            logged at ERROR; an interrupt wins over the cancellation).
        KeyboardInterrupt, SystemExit: the same, raised by ``fn`` before it
            started, also from inside a task group of its own.
    """
    early: list[BaseException] = []  # what the task raised before it started

    async def runner(*, task_status: anyio.abc.TaskStatus[Any]) -> None:
        started = Started()
        status = HeldStatus(started)
        try:
            coro = awaitable(fn, fn(*args, task_status=status))
        except INTERRUPTS as exc:
            early.append(Interrupted.around(task.name, exc))
            raise early[-1] from None
        status.release()

        async def pass_on_started() -> None:
            await started.event.wait()
            task_status.started(started.value)
            task.starting = False

        task.starting = True
        async with anyio.create_task_group() as inner:
            inner.start_soon(pass_on_started)
            try:
                await run(task, coro)
            except BaseException as exc:
                # For the caller of start(): not a failure of ``run``.
                if task.starting and (isinstance(exc, Exception) or holds_interrupt(exc)):
                    early.append(exc)
                raise
            inner.cancel_scope.cancel()

    try:
        return await tg.start(runner, name=task.name)
    except BaseException as exc:
        own = _unwrapped(exc, early)
        if own is None:
            raise
        if (
            _leaves(exc) != _leaves(own)
            and sniffio.current_async_library() != "trio"
            and not holds_interrupt(own)
        ):
            # The caller was cancelled too. asyncio delivers a cancellation
            # once: it goes on, and the task's exception, which it would
            # hide, is logged. A KeyboardInterrupt or SystemExit wins over
            # the cancellation, as it does everywhere else.
            if not any(leaf is own for leaf in _leaves(exc)):
                log.error(
                    "task %r raised %r before it started, as its caller was cancelled",
                    task.name,
                    own,
                    exc_info=own,
                )
            raise
    # Raised outside the handler, so that the group is not its __context__.
    raise interrupt_in(own, where) or own


def _unwrapped(raised: BaseException, early: list[BaseException]) -> BaseException | None:
    """The task's own exception ``early[0]`` if ``raised`` is it, wrapped, or a
    cancellation of the caller beside it or instead of it; else None.

    The task groups on the way wrap it in exception groups, and a trio cancel
    scope it passes through splits the cancellations off a group, which copies
    a group the task raised itself: either way the caller gets the very object
    the task raised, with its traceback. Under trio a caller cancelled at the
    moment the task failed gets the task's exception, not the cancellation
    beside it: an exception wins over a cancellation, and the caller's
    cancelled scope cancels it again at its next checkpoint (under asyncio,
    which delivers a cancellation once, :func:`start_and_wait` lets the
    cancellation go on and logs the exception). Anything else beside it
    (another exception) is raised as it is, the task's among it.
    """
    if not early:
        return None
    cancelled = anyio.get_cancelled_exc_class()
    ours = _leaves(early[0])
    others = [leaf for leaf in _leaves(raised) if not any(leaf is own for own in ours)]
    if any(not isinstance(leaf, cancelled) for leaf in others):
        return None
    return early[0]


def start_or_drop(
    tg: anyio.abc.TaskGroup | None,
    task: UserTask,
    coro: Awaitable[Any],
    run: Callable[[UserTask, Awaitable[Any]], Coroutine[Any, Any, None]],
    ending: bool,
) -> bool:
    """Start ``run(task, coro)`` in ``tg``; False if ``tg`` is closed (or None)
    while its generation is ``ending`` (a cooperative phase one ends as handed
    out): ``coro`` is then closed, never awaited (no warning).

    Raises:
        RuntimeError: ``tg`` refused the task although its generation is not ending.
    """
    try:
        # (anyio's TaskGroup over a trio nursery that closed still says it is active)
        if tg is not None and not getattr(getattr(tg, "_nursery", None), "_closed", False):
            tg.start_soon(run, task, coro, name=task.name)
            return True
    except RuntimeError:
        if not ending:
            raise
    getattr(coro, "close", lambda: None)()
    return False


def abandon(tasks: list[UserTask]) -> list[str]:
    """Stop waiting for those of ``tasks`` whose hosted task has not finished; their names."""
    names = []
    for task in tasks:
        if not task.hosted.finished:
            task.hosted.abandon()
            names.append(task.name)
    return names


def _innermost_frames(coro: Any) -> list[FrameType]:
    frames: list[FrameType] = []
    obj = coro
    seen = 0
    while obj is not None and seen < 200:
        seen += 1
        frame = getattr(obj, "cr_frame", None) or getattr(obj, "gi_frame", None)
        if frame is not None:
            frames.append(frame)
        nxt = getattr(obj, "cr_await", None)
        if nxt is None:
            nxt = getattr(obj, "gi_yieldfrom", None)
        obj = nxt
    return frames


def describe_stack(coro: Any) -> str:
    """Where a coroutine is suspended, as 'file:line in func' lines (outermost first)."""
    lines = [
        f"  {f.f_code.co_filename}:{f.f_lineno} in {f.f_code.co_name}"
        for f in _innermost_frames(coro)
    ]
    return "\n".join(lines) if lines else "  (no Python frame: not started or finished)"


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions in ``exc``, groups flattened, in the order they were raised."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def told_it_ended(exc: BaseException, identity: object) -> bool:
    """Whether ``exc`` is the :class:`~gengroup.GenerationEnded` of the
    generation ``identity``, alone or in (nested) groups of its own."""
    return all(isinstance(e, GenerationEnded) and e.identity == identity for e in _leaves(exc))


def task_failed(where: str, name: str, exc: BaseException) -> None:
    """Log a user task's exception once, at ERROR with its traceback, as it happens.

    It ends the generation and normally comes out of ``async for``; logged
    here too, it is not lost if something else comes out instead (a
    :class:`~gengroup.TaskStuckError`, which carries it as ``__cause__``).
    """
    exc = bare(exc)
    log.error("%s: task %r raised %r", where, name, exc, exc_info=exc)


def first_failure(
    exc: BaseException, where: str, logged: Collection[BaseException] = ()
) -> BaseException:
    """What a generation's failure comes out of ``async for`` as: the first exception itself.

    Tasks that fail together (one raises, another raises while being
    cancelled) reach the generation's task group as an exception group; the
    application gets the first one as itself, so ``except ValueError`` works.
    A KeyboardInterrupt or SystemExit wins over the exceptions beside it: it
    is the one that comes out. Each other one is logged once, with its
    traceback (unless it is in ``logged``: :func:`task_failed` logged it),
    and named in a note on the one that comes out (``add_note``), so
    nothing is lost.
    """
    leaves = _leaves(exc)
    first = next((leaf for leaf in leaves if isinstance(leaf, INTERRUPTS)), leaves[0])
    for other in leaves:
        if other is first:
            continue
        if not any(other is seen for seen in logged):
            log.error("%s: another task also raised %r", where, other, exc_info=other)
        first.add_note(f"{where}: another task also raised {type(other).__name__}: {other}")
    return first


def holds_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is or holds a KeyboardInterrupt or SystemExit, and only
    exceptions beside it (no cancellation): what :func:`interrupt_in` takes out."""
    leaves = _leaves(exc)
    if not any(isinstance(leaf, INTERRUPTS) for leaf in leaves):
        return False
    return all(isinstance(leaf, (Exception, *INTERRUPTS)) for leaf in leaves)


def interrupt_in(
    exc: BaseException, where: str, logged: Collection[BaseException] = ()
) -> BaseException | None:
    """The KeyboardInterrupt or SystemExit that ``exc`` is or holds, as :func:`first_failure`
    gives it; None if it holds none, or anything but exceptions beside it (a cancellation)."""
    if not holds_interrupt(exc):
        return None
    return first_failure(exc, where, [*logged, *map(bare, logged)])
