"""The one exception the engine lets out."""

from __future__ import annotations


class NotDeidentifiable(Exception):
    """The file must not be published.

    `reason` is a short fixed phrase chosen by the engine. It never contains a value taken
    from the file (no names, ids, UIDs, dates) nor the text of another exception, so it can
    be logged and stored next to the file's path.
    """

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
