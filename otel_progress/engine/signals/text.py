"""Text and reasoning repeats (``text_repeat``): the model says again what it already said,
while nothing new reaches the run.

A model output's text, and separately its reasoning, is compared with what the model said
since something new last reached the run (:attr:`ModelStep.news <.model_base.ModelStep>`:
a tool step that admitted a result the run had not seen, wrote, changed the world or
advanced the plan or goal, or a new user message). Two texts are the same when they are
identical once normalised (volatile tokens masked as in a tool's answer,
:func:`~otel_progress.evidence.volatile.answer_text`, white space folded, lower case), or
when one says what the other said in other words by the comparison the engine uses for a
re-transcribed page (:func:`~otel_progress.evidence.content.same_prose`: the same content
words, no new figure). The ``text_repeat_count``-th time (3) with nothing new between is
the detection.

Its healthy twins stay quiet:

* **a final answer that restates the conclusion once**: two occurrences. That is why the
  threshold is three and not two: saying a conclusion twice (once while working, once as
  the answer) is how answers are written; a third time with nothing new between is the
  model going round (the same three visits with nothing new between as the state
  signature's, seed 003);
* **a streamed answer split over spans**: an output that is a part of another (a prefix,
  the next fragment of a cumulative stream, the whole answer after its chunks) continues
  that answer, never repeats it; and an output whose span overlaps in time the one it
  matches is the same model call reported by two spans (a wrapper and its inner call);
* **a chat agent answering different questions the same way**: each new user message is
  news;
* **tool calls that brought something new between**: news too;
* **very short texts** ("ok", "Done.", "Yes."): a text without a content word
  (:func:`~otel_progress.evidence.content.content_words`) says nothing a repeat could be
  judged by; the requests it goes with are the tool signals' to judge. A short text with
  content ("I cannot open that file.") is compared, identical only (rewording is judged
  on prose, six content words or more, as for a page).

Memory is bounded: per part (text, reasoning), the latest four distinct texts said since
the last news, each kept up to 16 KiB (a longer one is compared by its digest alone).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...evidence.canonical import Digester
from ...evidence.content import content_words, same_prose
from ...evidence.volatile import answer_text
from ...model import Finding, Reason
from .model_base import ModelSignal, ModelStep

if TYPE_CHECKING:
    from ..runstate import RunState

__all__ = ["TextRepeatSignal"]

_KEEP = 4  # distinct texts remembered per part
_MAX_TEXT = 16384  # longer texts are compared by digest only (same_prose's own limit)


class _Said:
    """One thing the model said since the last news: its normalised text, digest, how many
    times, and the span times of its latest occurrence."""

    __slots__ = ("count", "digest", "end_ns", "start_ns", "text")

    def __init__(self, text: str, digest: int, start_ns: int, end_ns: int) -> None:
        self.text = text
        self.digest = digest
        self.count = 1
        self.start_ns = start_ns
        self.end_ns = end_ns

    def overlaps(self, start_ns: int, end_ns: int) -> bool:
        """Whether a span at these times overlaps this text's latest occurrence (both known)."""
        return bool(self.end_ns and end_ns and start_ns < self.end_ns and self.start_ns < end_ns)


class _State:
    __slots__ = ("reasoning", "sets", "text")

    def __init__(self) -> None:
        self.text: list[_Said] = []
        self.reasoning: list[_Said] = []
        self.sets: dict[str, list[set[str] | None]] = {}  # same_prose's word sets, kept a while


class TextRepeatSignal(ModelSignal):
    """See the module docstring."""

    name = "text_repeat"

    def __init__(self, config: Any, digester: Digester) -> None:
        super().__init__(config, digester)
        self._need = config.text_repeat_count

    def new_state(self) -> _State:
        return _State()

    def evaluate(self, step: ModelStep, state: Any, run: RunState) -> Finding | None:
        if step.news:
            del state.text[:]
            del state.reasoning[:]
        output = step.output
        if output is None:
            return None
        best: tuple[int, str, _Said] | None = None
        for part, said, kept in (("text", output.text, state.text),
                                 ("reasoning", output.reasoning, state.reasoning)):
            if not isinstance(said, str) or not said:
                continue
            found = self._see(kept, said, step, state.sets)
            if found is not None and found.count >= self._need and (best is None or found.count > best[0]):
                best = (found.count, part, found)
        if best is None:
            return None
        count, part, found = best
        what = "said" if part == "text" else "reasoned"
        return Finding(
            Reason.TEXT_REPEAT,
            {"repeats": count, "part": part},
            f"the model {what} the same thing {count} times with nothing new reaching the run in between",
            loop=found.digest,
        )

    def join(self, kept: Any, said: Any) -> tuple[int, str, int] | None:
        """Add what one turn of a conversation said (its run's state, or a sub-agent's) to
        what the conversation said since something new last reached it (``kept``, a
        :meth:`new_state`): a text counts as many times as the turn said it, a reworded one
        as the same (the comparison above). The text said before, now said
        ``text_repeat_count`` times or more (``(count, part, digest)``: the most repeated),
        or None; a text the turn said alone never is (its run judged it)."""
        best: tuple[int, str, int] | None = None
        for part in ("text", "reasoning"):
            into: list[_Said] = getattr(kept, part)
            for entry in getattr(said, part):
                found = self._add(into, entry, kept.sets)
                if found is not None and found.count >= self._need and (best is None or found.count > best[0]):
                    best = (found.count, part, found.digest)
        return best

    @staticmethod
    def _add(into: list[_Said], entry: _Said, sets: dict[str, list[set[str] | None]]) -> _Said | None:
        for mine in into:
            if mine.digest == entry.digest or (mine.text and entry.text and same_prose(entry.text, mine.text, sets)):
                mine.count += entry.count
                return mine
        if len(into) >= _KEEP:
            del into[0]
        new = _Said(entry.text, entry.digest, entry.start_ns, entry.end_ns)
        new.count = entry.count
        into.append(new)
        return None

    def _see(self, kept: list[_Said], said: str, step: ModelStep,
             sets: dict[str, list[set[str] | None]]) -> _Said | None:
        """Count ``said`` against what was said before; the entry it counted for (None:
        not comparable, a continuation or the same call reported twice)."""
        text = answer_text(said).lower()
        if not content_words(text):
            return None  # says nothing a repeat could be judged by (module docstring)
        digest = Digester.local_text(text)
        long = len(text) > _MAX_TEXT
        for entry in kept:
            if entry.digest != digest:
                if long or not entry.text:
                    continue
                if entry.text in text or text in entry.text:
                    # a part of the same answer (streamed): it continues it, the longer stands
                    if len(text) > len(entry.text):
                        entry.text, entry.digest = text, digest
                    entry.start_ns, entry.end_ns = step.start_ns, step.end_ns
                    return None
                if not same_prose(text, entry.text, sets):
                    continue
            if entry.overlaps(step.start_ns, step.end_ns):
                return None  # one model call reported by two spans
            entry.count += 1
            entry.start_ns, entry.end_ns = step.start_ns, step.end_ns
            return entry
        if len(kept) >= _KEEP:
            del kept[0]
        kept.append(_Said("" if long else text, digest, step.start_ns, step.end_ns))
        return None
