"""Messages and answers that carry no information about what happened.

* :func:`uninformative_failure`: a failure whose message and error type say only that
  something failed or timed out (Claude Code's ``Shell command failed``, Qwen Code's
  ``Tool execution failed``, ``no reply from the delegate (timed out)``, ``Error``):
  every word is generic failure vocabulary or a word of the tool's name, and any number
  is a short code. Such a failure is told apart by its request, exactly as a failure with
  no message is: six unrelated failing commands are six failures, not one failure six
  times, while the same request failing again is the same failure.
* :func:`bare_acknowledgement`: a short affirmative answer with no figure in it
  (``Navigated back``, ``Scrolled down``, ``Done``). To an argument-free request
  (``go_back``, ``next``, ``scroll``, ``undo``) it is the same text each time although
  every call moved something: it tells nothing about the state, so it is never "the
  same result" (unless the answer names a location, which says where the call went).
"""

from __future__ import annotations

import re

__all__ = ["GENERIC_FAILURE_WORDS", "bare_acknowledgement", "uninformative_failure"]

#: Words that say that a call failed, timed out or got no answer, and nothing about why.
GENERIC_FAILURE_WORDS: frozenset[str] = frozenset((
    "a", "an", "the", "of", "to", "in", "on", "at", "by", "for", "from", "with", "while", "during",
    "after", "before", "and", "or", "is", "are", "was", "were", "be", "been", "being", "has", "have",
    "had", "did", "does", "do", "not", "no", "could", "cannot", "can't", "couldn't", "error", "errors",
    "failed", "failure", "failures", "fail", "fails", "failing", "unsuccessful", "unsuccessfully",
    "unknown", "unexpected", "unexpectedly", "occurred", "internal", "exception", "problem", "issue",
    "something", "went", "wrong", "command", "commands", "shell", "bash", "tool", "tools", "function",
    "execution", "executing", "execute", "executed", "call", "calls", "called", "request", "requests",
    "operation", "process", "task", "job", "step", "action", "run", "running", "ran", "exited", "exit",
    "exits", "status", "code", "codes", "nonzero", "non", "zero", "returned", "return", "returns",
    "timed", "out", "timeout", "timeouts", "time", "deadline", "exceeded", "expired", "reply",
    "replies", "response", "responses", "answer", "answers", "result", "results", "output", "received",
    "got", "delegate", "agent", "server", "service", "remote", "worker", "please", "try", "again",
    "later", "see", "logs", "log", "details", "more", "information"
))

_WORD = re.compile(r"[^\W\d_]+|\d+", re.UNICODE)
_CAMEL = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_MAX_MESSAGE = 200  # a longer message carries something (an output, a trace)
_ACK_MAX = 60
_NEGATIVE = frozenset({
    "no", "not", "none", "nothing", "never", "cannot", "can't", "unable", "error", "failed", "fail", "failure",
    "invalid", "denied", "refused", "missing", "unknown", "empty", "end", "last", "already",
})


def _name_words(name: str | None) -> set[str]:
    if not name:
        return set()
    return {w.lower() for w in _CAMEL.findall(name)}


def uninformative_failure(message: str | None, error_type: str | None = None, tool: str | None = None) -> bool:
    """Whether a failure carries no information about what went wrong: its message (none,
    or at most 200 characters) and its error type are made only of generic failure words
    (:data:`GENERIC_FAILURE_WORDS`), words of the tool's own name, and numbers of up to
    three digits (an exit or status code). ``ShellError: Shell command failed`` and
    ``timeout: no reply from the delegate (timed out)`` say nothing; ``ToolNotFound:
    Tool exec not found`` and ``Error: file does not exist`` do."""
    text = (message or "").strip()
    if len(text) > _MAX_MESSAGE:
        return False
    own = _name_words(tool)
    words = [w.lower() for w in _CAMEL.findall(error_type or "")]
    words += [w.lower() for w in _WORD.findall(text)]
    for w in words:
        if w.isdigit():
            if len(w) > 3:
                return False
            continue
        if len(w) == 1:
            continue  # a contraction's tail ("couldn't"), an initial
        if w not in GENERIC_FAILURE_WORDS and w not in own:
            return False
    return True


def bare_acknowledgement(text: str) -> bool:
    """Whether a text is a bare acknowledgement: one line of at most 60 characters and
    at most six words, no digit, no URL or path, and nothing negative (``no``, ``not``,
    ``cannot``, ``error``, ``end``, ...): it confirms that a request was carried out
    and says nothing about the state it led to."""
    text = text.strip()
    if not text or len(text) > _ACK_MAX or "\n" in text or "/" in text:
        return False
    if any(c.isdigit() for c in text):
        return False
    words = [w.lower() for w in _WORD.findall(text)]
    return 0 < len(words) <= 6 and not any(w in _NEGATIVE for w in words)
