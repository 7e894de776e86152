"""One call of a Lua script waiting in a pipeline (the append script's), answered exactly once.

A call is answered either to the future its caller awaits or to the callback it gave instead
(``then``: told once, from where the reply is read). The standalone pipeline
(``app/compat/redis_fast/script_pipeline.py``) and the cluster one
(``app/backends/redis/cluster_scripts.py``) both keep their calls as :class:`AppendCall`; it
lives here, outside both packages, so the cluster path does not depend on the removable fast
paths and the fast paths do not import the backend package (as :mod:`app.tasks`). One is made
per append: a slotted record, its methods called directly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["AppendCall", "Args", "Then", "fail"]

#: A call's arguments: str, bytes or int only.
Args = Sequence[str | bytes | int]

#: What a caller that does not await is told: the reply, or the error (an exception object:
#: the script's, the round trip's, ``CancelledError`` when withdrawn).
Then = Callable[[Any], None]


@dataclass(slots=True, eq=False)
class AppendCall:
    keys: Sequence[str | bytes]
    #: The arguments, or what builds them when the call is packed (called once).
    args: Args | Callable[[], Args]
    #: Settled with the reply; None: ``then`` is told instead.
    done: asyncio.Future[Any] | None
    #: The arguments of a send that may repeat an earlier one, made from ``args``.
    again: Callable[[Args], Args] | None = None
    then: Then | None = None

    def packed_args(self, again: bool = False) -> Args:
        """The arguments to send (built on first use); ``again``: for a send that may repeat
        an earlier one (through ``self.again`` when the call has one)."""
        args = self.args
        if callable(args):
            args = self.args = args()
        if again and self.again is not None:
            return self.again(args)
        return args

    def live(self) -> bool:
        """Still wanted: not a call whose caller cancelled it before it was sent."""
        return self.done is None or not self.done.done()

    def answer(self, reply: Any) -> None:
        """Settle the call with its reply, or its error (a reply that is an exception: FENCED).
        A ``then`` that raises is reported to the loop's exception handler, as a future's
        callback would be; a future its caller gave up on is left alone."""
        done = self.done
        if done is None:
            then, self.then = self.then, None  # told once
            if then is not None:
                try:
                    then(reply)
                except Exception as exc:
                    asyncio.get_running_loop().call_exception_handler(
                        {"message": "a script pipeline reply callback failed", "exception": exc}
                    )
            return
        if done.done():  # its caller gave up
            return
        if isinstance(reply, BaseException):
            done.set_exception(reply)
        else:
            done.set_result(reply)

    def withdraw(self) -> None:
        """The call will not be answered (the pipeline closed, its send was cancelled): its
        future is cancelled, or its ``then`` told ``CancelledError()``."""
        if self.done is not None:
            self.done.cancel()
        else:
            self.answer(asyncio.CancelledError())


def fail(calls: Sequence[AppendCall], error: BaseException) -> None:
    """Answer every one of ``calls`` with ``error``."""
    for call in calls:
        call.answer(error)
