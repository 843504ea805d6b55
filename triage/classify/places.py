"""Where the failure happened, from the frames of the whole traceback: generic-layer hits.

The places are data (`rules/places.yaml`, `Knowledge.places`): frame patterns -> the stage that
was running (a checkpoint save or load, the data pipeline, process-group set-up, the launcher,
torch.compile, the optimizer step, an inference engine) and what that suggests. Every frame
counts, not only the innermost: a traceback cut before its exception line still ran through
`_save_checkpoint`. The innermost placed frame places the event; the hit enters fusion as a
generic-layer prior (it yields to a specific rule on the same lines, `fusion.yield_generic`)
and its stage enters `fusion.stage_scores`. On its lines, an exception family's prior of the
same layer yields to it the symptom it only assumed (`refine_priors`, `refines` in the file).

Frames come from what the parsers read: a traceback's frames (outermost first), a faulthandler
dump's (innermost first), a pasted py-spy stack's main thread. A paste the parser found no
event in (its whole text is the event) is read for frame lines here, leniently: a pasted stack
is often cut mid-line (`backward (torch/autograd/__ini`). So is a pasted traceback whose every
line carries a logger's prefix (vLLM's `ERROR 01-17 14:00:32 engine.py:366] `): the parser
reads each of its lines as an error line of its own, and the frame lines among them, close
together, are one stack.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

import regex

from triage import regex_cache, taxonomy
from triage.classify.fusion import same_lines
from triage.classify.types import RuleHit
from triage.knowledge.places import Place, Places
from triage.model import (
    Event,
    EventKind,
    FaultHandlerFacts,
    PySpyDump,
    RuleAction,
    SourceKind,
    TracebackFacts,
)

# frame lines of a pasted text: a Python traceback's or faulthandler's, and py-spy's (either
# may be cut at the end of the paste)
_FILE_FRAME = regex_cache.compile(r'File "(?P<file>[^"\n]+)", line \d+,? in (?P<func>[\w.<>]+)')
_PYSPY_FRAME = regex_cache.compile(r"^[ \t]+(?P<func>[\w.<>]+) \((?P<file>[^():\s]+)", regex.M)
_PYSPY_THREAD = regex_cache.compile(r"^Thread (?:0x)?[0-9A-Fa-f]+ \((?:idle|active|gil)", regex.M)
_FAULTHANDLER_FRAME = regex_cache.compile(r'File "[^"\n]+", line \d+ in ')

# a place's hits are named `frames:<place id>`
PLACE_PREFIX = "frames:"
# (file, function) innermost first, and whether the process was waiting (None: not known)
FrameList = tuple[tuple[tuple[str, str], ...], bool | None]
# frame lines of one prefixed traceback lie at most this many lines apart (a frame's source
# line and its `^^^^` marker between two frames); farther apart, they are another stack
_RUN_GAP = 4
# the kinds of event whose frames the parser already read (or that hold none of their own)
_FRAMED = (EventKind.TRACEBACK, EventKind.SIGNAL, EventKind.PYSPY)


def frame_hits(
    events: Sequence[Event],
    places: Places,
    source_kinds: dict[str, SourceKind] | None = None,
    cascade: Collection[Event] = (),
) -> list[RuleHit]:
    """One hit per event whose frames run through a place: the innermost placed frame's.
    `cascade`: events correlate found to be consequences. A fatal signal's stack among them
    (faulthandler's dump when the watchdog aborted the process) shows where the process
    waited, not where a failure was raised, and its hit is a cascade hit; a traceback among
    them still raised where its frames say."""
    if not places.places:
        return []
    kinds = source_kinds or {}
    consequences = set(cascade)
    out: list[RuleHit] = []
    for ev in events:
        found = _frames_of(ev, kinds.get(ev.source))
        if found is None:
            continue
        frames, waiting = found
        consequence = ev.kind is EventKind.SIGNAL and ev in consequences
        for file, function in frames:
            place = places.place_of(file, function, True if consequence else waiting)
            if place is not None:
                out.append(replace(_hit(place, ev, file, function), from_cascade=consequence))
                break
    for run in _line_frame_runs(events, kinds):
        # the text order is outermost first; the innermost placed frame places the stack
        for ev, file, function in reversed(run):
            place = places.place_of(file, function, None)
            if place is not None:
                out.append(_hit(place, ev, file, function))
                break
    return out


def refine_priors(hits: Sequence[RuleHit], places: Places) -> list[RuleHit]:
    """The family priors on a place's lines, their assumed symptoms (`places.refines`: a
    runtime exception in a training step) and those symptoms' stage left to the place.

    A generic rule that names an exception's family and a place are both priors of the
    generic layer, weighed by one feature (`rule_generic`): a `KeyError` raised inside a
    checkpoint save would otherwise be called a training-step exception as often as the
    family's prior outweighed the place's. The family's other labels (the causes its
    class suggests, the fixes) stay."""
    assumed = places.refines
    placed = [h.event for h in hits if h.rule_id.startswith(PLACE_PREFIX) and h.event is not None]
    if not assumed or not placed:
        return list(hits)
    tax = taxonomy.load()
    out: list[RuleHit] = []
    for h in hits:
        names = assumed & set(h.symptom)
        if (
            not h.generic
            or h.rule_id.startswith(PLACE_PREFIX)
            or not names
            or h.event is None
            or not any(same_lines(h.event, ev) for ev in placed)
        ):
            out.append(h)
            continue
        stages = {tax.symptoms[s].stage for s in names}
        out.append(
            replace(
                h,
                symptom={k: w for k, w in h.symptom.items() if k not in names},
                stage={k: w for k, w in h.stage.items() if k not in stages},
            )
        )
    return out


def _line_frame_runs(
    events: Sequence[Event], kinds: dict[str, SourceKind]
) -> list[list[tuple[Event, str, str]]]:
    """The stacks of a paste that the parser read one line per event (a prefixed traceback):
    runs of one-line events that each show a frame, in text order."""
    runs: list[list[tuple[Event, str, str]]] = []
    for ev in events:
        if kinds.get(ev.source) is not SourceKind.TEXT or ev.kind in _FRAMED or "\n" in ev.text:
            continue
        m = _FILE_FRAME.search(ev.text)
        if m is None or ev.line is None:
            continue
        last = runs[-1][-1][0] if runs else None
        if (
            last is None
            or last.source != ev.source
            or last.line is None
            or ev.line - last.line > _RUN_GAP
        ):
            runs.append([])
        runs[-1].append((ev, m["file"], m["func"]))
    return runs


def _frames_of(ev: Event, kind: SourceKind | None) -> FrameList | None:
    record = ev.payload
    if ev.kind is EventKind.TRACEBACK and isinstance(record, TracebackFacts) and record.frames:
        frames = tuple((str(f[0]), str(f[2])) for f in record.frames)
        raised = ev.exception is not None and bool(
            ev.exception.exc_type or ev.exception.exc_message
        )
        if record.headerless and not raised and _faulthandler_order(ev.text):
            # faulthandler's "File ..., line N in f" lines: innermost first already
            return frames, None
        return tuple(reversed(frames)), (False if raised else None)
    if ev.kind is EventKind.SIGNAL and isinstance(record, FaultHandlerFacts) and record.frames:
        return tuple((str(f[0]), str(f[2])) for f in record.frames), None
    if ev.kind is EventKind.PYSPY and isinstance(ev.payload, PySpyDump):
        # a job's dumps are read across ranks by correlate (who waited where); a pasted stack
        # is the user's evidence of where this process was
        thread = ev.payload.main_thread()
        if kind is not SourceKind.TEXT or thread is None:
            return None
        return tuple((f.filename or "", f.function or "") for f in thread.frames), True
    if ev.kind is EventKind.TRACEBACK or ev.kind is EventKind.SIGNAL:
        return None
    if "\n" in ev.text and ('File "' in ev.text or _PYSPY_THREAD.search(ev.text)):
        return _text_frames(ev.text)
    return None


def _faulthandler_order(text: str) -> bool:
    """faulthandler writes `File "...", line N in f` (no comma), most recent call first."""
    return bool(_FAULTHANDLER_FRAME.search(text))


def _text_frames(text: str) -> FrameList | None:
    """The frames of a pasted stack the parser kept only as text, innermost first."""
    if _PYSPY_THREAD.search(text):
        frames = [(m["file"], m["func"]) for m in _PYSPY_FRAME.finditer(text)]
        return (tuple(frames), True) if frames else None
    frames = [(m["file"], m["func"]) for m in _FILE_FRAME.finditer(text)]
    if not frames:
        return None
    if _faulthandler_order(text):
        return tuple(frames), None
    return tuple(reversed(frames)), None


def _hit(place: Place, ev: Event, file: str, function: str) -> RuleHit:
    text, offset = _quote(ev.text, file, function)
    line = ev.line + offset if ev.line is not None else None
    numbers = ev.line_numbers
    if numbers and offset < len(numbers) and numbers[offset] is not None:
        line = numbers[offset]
    return RuleHit(
        rule_id=f"{PLACE_PREFIX}{place.id}",
        title=place.title,
        event=ev,
        symptom=dict(place.symptom),
        root_cause=dict(place.root_cause),
        fix=dict(place.fix),
        stage=dict(place.stage),
        # a place says where the stack stood, not why: its advice is for any likely cause (the
        # generic prior it gives stays a prior; on the reference cases and bundles tying it to
        # those causes moved it below other advice)
        actions={
            f: (
                RuleAction(
                    _for_rank(a, ev.rank), frameworks=place.action_frameworks.get(f, frozenset())
                ),
            )
            for f, a in place.actions.items()
        },
        evidence_text=text,
        evidence_line=line,
        generic=True,
    )


def _for_rank(template: str, rank: int | None) -> str:
    """The action with the stack's rank; the sentences that name it left out where the rank is
    unknown ("This rank waits ..." said of no rank in particular says nothing true)."""
    if "{rank}" not in template:
        return template
    if rank is not None:
        return template.replace("{rank}", str(rank))
    sentences = regex.split(r"(?<=[.:])\s+(?=[A-Z`])", template)
    return " ".join(x for x in sentences if "{rank}" not in x)


def _quote(text: str, file: str, function: str) -> tuple[str, int]:
    """The event's line that shows the frame, and its offset in the event's text."""
    base = file.replace("\\", "/").rsplit("/", 1)[-1][:12]
    for i, line in enumerate(text.splitlines()):
        if function in line and base in line:
            return line.strip(), i
    return text.splitlines()[0].strip() if text else "", 0
