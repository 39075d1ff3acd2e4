"""A tolerant, incremental JSON parser: the best-effort value of a JSON text that is still
arriving, for :class:`~agent_sync.events.PartialOutput`.

Design: the text is fed in chunks and never re-read. The parser keeps a stack of the open
containers (each holding only its *complete* members) and the token in progress (a string's
decoded pieces, a number's characters, a literal's letters). :meth:`PartialJSON.feed` costs
time in the chunk's length; :meth:`PartialJSON.snapshot` builds the value so far by copying,
shallowly, only the open containers along the stack, so complete members are shared and
never copied again (a member is never changed once complete, so sharing it is safe). So a
stream of ``n`` chunks costs time linear in the text, not quadratic as re-parsing the whole
text per chunk would (pydantic's ``jiter`` partial mode, ``partial-json-parser``).

A partial never holds a lone surrogate: a ``\\ud83d`` escape waits for its low half
(``\\ude00``, maybe in a later chunk) before the character shows, and a half that stays
alone becomes U+FFFD, as in the final answer (:func:`agent_sync._encodable.clean_text`).

What a partial holds: complete members; the string in progress so far (as a value, not as a
key); a number in progress once it reads as one (``"12"``, not ``"-"``); an open container
as far as it goes. A key without its value yet, and an unfinished ``true``/``false``/
``null``, are left out. Text before the first ``{`` or ``[`` (a code fence) and after the
root value is ignored; text that cannot be JSON stops the parser, keeping the last value.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .._encodable import clean_text

__all__ = ["PartialJSON"]

_PLAIN = re.compile(r'[^"\\]+')
_SPACE = re.compile(r"[ \t\r\n]+")
_NUMBER = re.compile(r"[-+0-9.eE]+")
_LITERALS = {"true": True, "false": False, "null": None}
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_MISSING: Any = object()
_REPLACEMENT = "\ufffd"  # what a lone surrogate becomes


class _Frame:
    """An open container: its complete members, and where the parser is inside it."""

    __slots__ = ("expect", "key", "value")

    def __init__(self, value: dict[str, Any] | list[Any]) -> None:
        self.value = value
        self.key: str | None = None  # an object's key whose value is in progress
        # "value" | "comma" (arrays); "key" | "colon" | "value" | "comma" (objects)
        self.expect = "key" if isinstance(value, dict) else "value"


class PartialJSON:
    """Feed JSON text in pieces; read the value so far at any point. Not thread-safe."""

    __slots__ = (
        "_done",
        "_escape",
        "_high",
        "_is_key",
        "_parts",
        "_root",
        "_stack",
        "_started",
        "_token",
        "broken",
    )

    def __init__(self) -> None:
        self._stack: list[_Frame] = []
        self._root: Any = _MISSING
        self._started = False
        self._done = False
        self._token: str | None = None  # "string" | "number" | "literal"
        self._parts: list[str] = []  # the token's text (a string's decoded pieces)
        self._is_key = False
        self._escape = ""  # an escape sequence in progress ("\\", "\\u00")
        self._high = ""  # a high surrogate waiting for its low half
        self.broken = False
        """The text stopped being JSON: later chunks are ignored."""

    @property
    def done(self) -> bool:
        """Whether the root value is complete."""
        return self._done

    def feed(self, chunk: str) -> bool:
        """Parse the next piece of text.

        Returns:
            Whether the value so far changed (something new to show).
        """
        if self._done or self.broken or not chunk:
            return False
        try:
            return self._feed(chunk)
        except (ValueError, KeyError, IndexError):
            self.broken = True
            return False

    def snapshot(self) -> Any:
        """The value so far (``None`` before any of it): fresh containers along the open
        path, complete members shared."""
        if self._done:
            return self._root
        child = self._pending()
        for frame in reversed(self._stack):
            container = frame.value
            if isinstance(container, list):
                copied_list = list(container)
                if child is not _MISSING:
                    copied_list.append(child)
                child = copied_list
            else:
                copied = dict(container)
                if child is not _MISSING and frame.key is not None and frame.expect == "value":
                    copied[frame.key] = child
                child = copied
        return None if child is _MISSING else child

    # -- internals --

    def _pending(self) -> Any:
        """The value of the token in progress, if it has one yet."""
        token = self._token
        if token == "string" and not self._is_key:
            # a high surrogate waiting for its low half is held back: half a pair is no
            # character, and no UTF-8 encoder (a store, a frame) accepts it
            return "".join(self._parts)
        if token == "number":
            return _number("".join(self._parts))
        return _MISSING

    def _feed(self, text: str) -> bool:
        changed = False
        i, end = 0, len(text)
        while i < end:
            token = self._token
            if token == "string":
                i, grew = self._string(text, i)
                changed = changed or grew
                continue
            if token is not None:  # a number or literal: its characters, then what ends it
                pattern = _NUMBER if token == "number" else _WORD
                match = pattern.match(text, i)
                if match is not None:
                    if token == "number":
                        before = _number("".join(self._parts))
                        self._parts.append(match.group())
                        after = _number("".join(self._parts))
                        changed = changed or not _same(before, after)
                    else:
                        self._parts.append(match.group())
                    i = match.end()
                    continue
                changed = self._end_scalar() or changed
                continue
            if not self._started:
                brace = _first_open(text, i)
                if brace < 0:
                    return changed
                i = brace
                self._started = True
            match = _SPACE.match(text, i)
            if match is not None:
                i = match.end()
                continue
            if self._done:
                return changed
            changed = self._structural(text[i]) or changed
            i += 1
        return changed

    def _structural(self, char: str) -> bool:
        """One character outside any token; whether the value changed."""
        frame = self._stack[-1] if self._stack else None
        if frame is not None and frame.expect == "comma":
            if char == ",":
                frame.expect = "key" if isinstance(frame.value, dict) else "value"
                return False
            if char in "}]":
                return self._close(char)
            raise ValueError(char)
        if frame is not None and frame.expect == "colon":
            if char != ":":
                raise ValueError(char)
            frame.expect = "value"
            return False
        if frame is not None and frame.expect == "key":
            if char == '"':
                self._start("string", key=True)
                return False
            if char == "}" and not frame.value:
                return self._close(char)
            raise ValueError(char)
        # a value is expected (or the root)
        if char == "{" or char == "[":
            self._stack.append(_Frame({} if char == "{" else []))
            return True
        if char == "]" and isinstance(frame, _Frame) and isinstance(frame.value, list):
            if frame.value:
                raise ValueError(char)  # "[1,]"
            return self._close(char)
        if char == '"':
            self._start("string", key=False)
            return True  # an empty string is a value already
        if char in "-0123456789":
            self._start("number", key=False)
            self._parts.append(char)
            return char != "-"
        if char in "tfn":
            self._start("literal", key=False)
            self._parts.append(char)
            return False
        raise ValueError(char)

    def _start(self, token: str, *, key: bool) -> None:
        if not self._stack:
            raise ValueError("a root value must be an object or an array")
        self._token, self._parts, self._is_key = token, [], key

    def _string(self, text: str, i: int) -> tuple[int, bool]:
        """Consume string characters from ``text[i]``; the new index and whether it grew."""
        grew = False
        end = len(text)
        while i < end:
            if self._escape:
                decoded = len(self._parts)
                i = self._escaped(text, i)
                grew = grew or len(self._parts) != decoded  # a character shows (not half)
                continue
            match = _PLAIN.match(text, i)
            if match is not None:
                piece = match.group()
                if self._high or not piece.isascii():
                    piece = self._joined(piece)
                i = match.end()
                if piece:
                    self._parts.append(piece)
                    grew = True
                continue
            char = text[i]
            i += 1
            if char == '"':
                self._flush_high()
                value = "".join(self._parts)
                self._token, self._parts = None, []
                if self._is_key:
                    frame = self._stack[-1]
                    frame.key, frame.expect = value, "colon"
                    return i, False
                self._add(value)
                return i, grew  # the string was shown as far as it went
            self._escape = "\\"
        return i, grew and not self._is_key

    def _escaped(self, text: str, i: int) -> int:
        """Consume an escape sequence's characters (it may span chunks)."""
        escape = self._escape
        if escape == "\\":
            char = text[i]
            if char != "u":
                self._flush_high()
                self._parts.append(_ESCAPES[char])
                self._escape = ""
                return i + 1
            self._escape = "\\u"
            return i + 1
        need = 6 - len(escape)
        piece = text[i : i + need]
        escape += piece
        if len(escape) < 6:
            self._escape = escape
            return i + len(piece)
        self._escape = ""
        unit = int(escape[2:], 16)
        if 0xD800 <= unit < 0xDC00:
            self._flush_high()
            self._high = chr(unit)
        elif 0xDC00 <= unit < 0xE000:
            if not self._high:
                self._parts.append(_REPLACEMENT)  # a lone low half
                return i + len(piece)
            high = ord(self._high)
            self._high = ""
            self._parts.append(chr(0x10000 + ((high - 0xD800) << 10) + (unit - 0xDC00)))
        else:
            self._flush_high()
            self._parts.append(chr(unit))
        return i + len(piece)

    def _joined(self, piece: str) -> str:
        """Unescaped text, surrogates as UTF-16 means them (a provider's JSON may split
        an emoji's halves across two deltas): a pair is joined, a high half at the end
        waits for the next piece, any other half is replaced."""
        piece = self._high + piece
        self._high = ""
        if "\ud800" <= piece[-1] < "\udc00":
            piece, self._high = piece[:-1], piece[-1]
        return clean_text(piece)

    def _flush_high(self) -> None:
        if self._high:
            # a lone high half: replaced, as the answer's final parse replaces it
            # (agent_sync._encodable.clean_text)
            self._parts.append(_REPLACEMENT)
            self._high = ""

    def _end_scalar(self) -> bool:
        """A number or literal ended (the next character is not part of it); whether
        that shows something new (a number read as far as it went shows nothing new)."""
        text = "".join(self._parts)
        token = self._token
        self._token, self._parts = None, []
        if token == "number":
            shown = _number(text)
            value = json.loads(text)  # ValueError: not a number after all
            self._add(value)
            return not _same(shown, value)
        self._add(_LITERALS[text])  # KeyError: not a literal
        return True

    def _add(self, value: Any) -> None:
        """A complete value: into the open container (or as the root)."""
        frame = self._stack[-1]
        if isinstance(frame.value, list):
            frame.value.append(value)
        else:
            assert frame.key is not None
            frame.value[frame.key] = value
            frame.key = None
        frame.expect = "comma"

    def _close(self, char: str) -> bool:
        if (char == "}") != isinstance(self._stack[-1].value, dict):
            raise ValueError(char)  # checked before the pop: a broken parser keeps its value
        frame = self._stack.pop()
        if not self._stack:
            self._root, self._done = frame.value, True
        else:
            self._add(frame.value)
        return False  # the open container was shown as far as it went: nothing new


_WORD = re.compile(r"[a-z]+")


def _first_open(text: str, start: int) -> int:
    """The index of the first ``{`` or ``[`` from ``start`` (-1: none)."""
    brace, bracket = text.find("{", start), text.find("[", start)
    if brace < 0:
        return bracket
    return brace if bracket < 0 else min(brace, bracket)


def _same(shown: Any, value: Any) -> bool:
    """Whether a number shown before is the number now (``1`` and ``1.0`` differ)."""
    return shown is not _MISSING and shown == value and type(shown) is type(value)


def _number(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        # "1." or "1e" read as far as they go; "-" is nothing yet
        trimmed = text.rstrip(".eE+-")
        if not trimmed or trimmed == "-":
            return _MISSING
        try:
            return json.loads(trimmed)
        except ValueError:
            return _MISSING
