"""The loader's resume state: where consumption stands, as a small versioned JSON-able dict
(a mid-epoch state of indexed ``files`` also carries its segment's units and their consumption,
``EpochPlan.resume_fields``, which a resume reuses: ``Planner.carry``).

Pure (no torch, no I/O): ``LoaderState`` is what ``SeqLoader.state_dict()`` saves and
``load_state_dict()`` restores, and what ``epoch()`` starts from. The training loop only counts
consumed steps (``consumed += 1``, the cheapest thing per batch); ``position()`` folds them into a
``Position`` when it is read, without changing anything (5x5 runs at a 10 ms step: a new validated
``Position`` per batch cost ~0.012 ms of the trainer's wait per batch).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping

from seqloader.errors import ResumeError
from seqloader.plan.ahead import PlanAhead
from seqloader.plan.planners import GLOBAL_ALGORITHM, EpochPlan, Planner
from seqloader.plan.position import (
    Position,
    check_resumable,
    continue_plan,
    is_finished,
    segment_plan,
)

STATE_FORMAT = "seqloader.loader_state"
STATE_VERSION = 1


class LoaderState:
    """One rank's consumption of a loader's epochs, and a loaded state not started yet.

    ``consumed``: steps consumed since the current run's start position (counted by the loop)."""

    def __init__(
        self,
        planner: Planner,
        fingerprint: str,
        world_size: int,
        plan_ahead: bool = True,
        rank: int | None = None,
    ) -> None:
        """``plan_ahead``: plan the next epoch on a background thread once an epoch begins
        (``seqloader.plan.ahead``), so the next ``begin`` finds it ready; with ``rank``, that
        rank's share of it too (an indexed plan draws a share when it is first asked for)."""
        self.planner = planner
        self.fingerprint = fingerprint
        self.world_size = world_size
        self._start = Position(epoch=0, segment_world_size=world_size)
        self._segment: EpochPlan | None = None  # the plan _start's steps index
        self.consumed = 0
        self._resume: Position | None = None  # loaded by load(), not started yet
        self._resume_plan: EpochPlan | None = None  # the segment plan of _resume
        self._continued: tuple[EpochPlan, Position] | None = None  # _resume on this world size
        self._rank = rank
        self._ahead = PlanAhead(self._epoch_plan) if plan_ahead else None

    def position(self) -> Position:
        """Where the consumed batches end (reading it changes nothing)."""
        return self._start.advanced(self.consumed) if self.consumed else self._start

    @property
    def segment(self) -> EpochPlan | None:
        """The global plan of the current run (None before the first epoch)."""
        return self._segment

    def begin(self, epoch: int, after: threading.Event | None = None) -> tuple[EpochPlan, Position]:
        """Start ``epoch``: from the loaded state if it lies in it, else from its start. Returns
        the plan to run and the position its steps count from (``consumed`` restarts at 0).
        ``after``: the next epoch is planned ahead once it is set (``PlanAhead.request``)."""
        start, segment = self._start_of(epoch)
        if segment is None and self._ahead is not None:  # from the epoch's start: planned ahead?
            segment = self._ahead.take(epoch)
        if start is self._resume and self._continued is not None:  # planned at load()
            plan, position = self._continued
        else:
            plan, position = continue_plan(self.planner, start, self.world_size, segment)
        self._resume = self._resume_plan = self._continued = None
        self._segment, self._start, self.consumed = plan, position, 0
        if self._ahead is not None:
            self._ahead.request(epoch + 1, after)
        return plan, position

    def planned_next(self, ended: int) -> tuple[EpochPlan, Position] | None:
        """What ``begin(ended + 1)`` returns after the current run of epoch ``ended``, if nothing
        is loaded and that plan is planned ahead (waiting for it if it is being planned): the run
        whose first batches the workers may build while epoch ``ended`` ends. It is a guess: the
        caller uses those batches only if ``begin`` returns this very plan and position."""
        ahead, epoch = self._ahead, ended + 1
        if ahead is None or self._resume is not None or not self.starts_planned_next(epoch):
            return None
        plan = ahead.peek(epoch)
        if plan is None:
            return None
        return plan, Position(epoch, 0, self.world_size, 0)

    def starts_planned_next(self, epoch: int) -> bool:
        """Whether ``begin(epoch)`` now starts the run ``planned_next`` answers at the end of the
        current run: the epoch after it, from its start, on the plan computed ahead (the same
        plan object, so batches the workers prepared for that run are used). A loaded state that
        ends an earlier epoch leaves it so (``begin`` starts ``epoch`` from its start then too);
        a loaded position inside ``epoch``, or any other epoch, does not. Asks nothing of the
        planning thread (no wait)."""
        ahead, current = self._ahead, self._segment
        if ahead is None or current is None or ahead.pending != epoch:
            return False
        if self._start.epoch != epoch - 1:  # another run began meanwhile
            return False
        try:
            _, segment = self._start_of(epoch)
        except ResumeError:  # begin(epoch) raises it
            return False
        return segment is None  # from the epoch's start, planned ahead

    def _epoch_plan(self, epoch: int) -> EpochPlan:
        """The plan of ``epoch`` from its start on this world size (what ``begin`` would plan),
        with this rank's share drawn (kept by plans that draw shares on demand)."""
        plan = segment_plan(self.planner, Position(epoch, 0, self.world_size, 0))
        if self._rank is not None:
            plan.rank_share(self._rank)
        return plan

    def _start_of(self, epoch: int) -> tuple[Position, EpochPlan | None]:
        """The loaded resume position if it is in ``epoch``, else the epoch's start (with the
        segment plan when it is known). A loaded position is never skipped silently: asking for
        another epoch than a mid-epoch state's, or an earlier one than a finished state's, raises."""
        resume, plan = self._resume, self._resume_plan
        if resume is None or plan is None:
            return Position(epoch, 0, self.world_size, 0), None
        if epoch == resume.epoch:
            return resume, plan
        if epoch < resume.epoch or not is_finished(resume, plan):
            total = resume.prior_steps + plan.steps
            effect = "go back before" if epoch < resume.epoch else "skip the rest of"
            raise ResumeError(
                f"epoch({epoch}) asked, but the loaded state is at step {resume.epoch_steps} of "
                f"{total} of epoch {resume.epoch}: that would {effect} epoch {resume.epoch}. "
                f"Call loader.epoch({resume.epoch}) first (the state's 'epoch' field), or build a "
                "new loader without load_state_dict to start elsewhere."
            )
        return Position(epoch, 0, self.world_size, 0), None

    def loaded_text(self) -> str:
        """The loaded, not yet started position as JSON, or "none" (what ranks compare, C7)."""
        return "none" if self._resume is None else json.dumps(self._resume.to_fields())

    def to_dict(self) -> dict:
        """The state of the *consumed* batches (see ``SeqLoader.state_dict``)."""
        plan: EpochPlan | None
        if self._resume is not None and self._resume_plan is not None:  # loaded, not started
            position, plan = self._resume, self._resume_plan
        else:
            position, plan = self.position(), self._segment
        finished = plan is not None and is_finished(position, plan)
        carried = plan.resume_fields(position.steps) if plan is not None and not finished else {}
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "plan_fingerprint": self.fingerprint,
            **position.to_fields(),
            "steps": position.epoch_steps,
            "seqs_consumed": position.seq_offset(plan) if plan is not None else 0,
            "epoch_complete": finished,
            "world_size": self.world_size,
            **self._planning_field(),
            **carried,
        }

    def _planning_field(self) -> dict[str, str]:
        """``planning`` and ``plan_algorithm`` in the state only when not the default planning
        (states keep their format)."""
        planning = self.planner.options.planning
        if planning == "global":
            return {}
        return {"planning": planning, "plan_algorithm": self.planner.algorithm}

    def load(self, state: Mapping) -> dict[str, object] | None:
        """Check ``state`` against this plan and keep it for the next ``begin``. Returns the
        loaded position's fields with its derived ``steps`` and ``seqs_consumed`` (None for a
        state taken before any epoch)."""
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
            raise ResumeError(
                f"not a seqloader loader state: got {type(state).__name__} with format "
                f"{state.get('format') if isinstance(state, Mapping) else None!r}, expected a "
                f"dict from SeqLoader.state_dict() with format {STATE_FORMAT!r}"
            )
        if state.get("version") != STATE_VERSION:
            raise ResumeError(
                f"loader state version: got {state.get('version')!r}, expected {STATE_VERSION}"
            )
        self._check_planning(state)
        self._check_algorithm(state)
        if state.get("plan_fingerprint") != self.fingerprint:
            raise ResumeError(
                f"loader state plan fingerprint {state.get('plan_fingerprint')!r} differs from "
                f"this loader's {self.fingerprint!r}: the data, the options or the seed changed "
                "since the state was saved, so its position means nothing here. Resume with the "
                "same files (in the same order), options and seed."
            )
        position = Position.from_fields(state)
        if position.epoch == 0:
            self._resume = self._resume_plan = self._continued = None
            return None
        self.planner.carry(state)  # what the state carries besides its position (files units)
        with self.planner.reusing_orders():  # one order for the saved and the new segment
            plan = segment_plan(self.planner, position)
            continued = self._checked(state, position, plan)
        self._resume, self._resume_plan, self._continued = position, plan, continued
        return {
            **position.to_fields(),
            "steps": position.epoch_steps,
            "seqs_consumed": position.seq_offset(plan),
            "epoch_complete": is_finished(position, plan),
        }

    def _check_planning(self, state: Mapping) -> None:
        """Refuse a state of the other planning by name, with the fix. A state without
        ``planning`` is the greedy global algorithm's (``GLOBAL_ALGORITHM``; the default
        planning before ``planning="auto"``, which resolves to ``indexed`` wherever indexed
        planning plans the options)."""
        saved = state.get("planning", "global")
        ours = self.planner.options.planning
        if saved == ours:
            return
        by = state.get("plan_algorithm") or (GLOBAL_ALGORITHM if saved == "global" else None)
        algorithm = f"plan_algorithm {by!r}" if by else "no plan_algorithm"
        raise ResumeError(
            f"loader state planning: saved with planning={saved!r} ({algorithm}), but this "
            f"loader plans with planning={ours!r} ({self.planner.algorithm!r}; "
            "planning='auto' resolves to 'indexed' wherever indexed planning plans the "
            "options): the two plan the same options differently, so the state's position "
            f"means nothing here. Fix: pass planning={saved!r} to resume it (the loader's "
            f"option, or --planning {saved} on the command line)."
        )

    def _check_algorithm(self, state: Mapping) -> None:
        """Refuse an indexed state of another planning algorithm by name (its plan fingerprint
        differs too, but that alone would blame the data or options). States of
        ``seqloader-plan-indexed/2`` and before carry no ``plan_algorithm``; every later indexed
        state does, so one without it is refused even where its fingerprint matches (no run
        writes it)."""
        ours = self.planner.algorithm
        if state.get("planning") != "indexed":
            return
        saved = state.get("plan_algorithm")
        if saved == ours:
            return
        if saved is None and state.get("plan_fingerprint") == self.fingerprint:
            raise ResumeError(
                f"loader state plan_algorithm: missing, but an indexed state of {ours!r} (whose "
                "plan fingerprint this state carries) always names it: the state was edited. "
                "Load the state as SeqLoader.state_dict() wrote it, or start the epoch anew (a "
                "new loader without load_state_dict)."
            )
        named = repr(saved) if saved else "'seqloader-plan-indexed/2' or earlier"
        raise ResumeError(
            f"loader state saved by planning algorithm {named}, but this loader plans with "
            f"{ours!r}: the same data and options give other batches, so the state's position "
            "means nothing here. Resume with the seqloader version that saved the state, or "
            "start the epoch anew (a new loader without load_state_dict)."
        )

    def _checked(
        self, state: Mapping, position: Position, plan: EpochPlan
    ) -> tuple[EpochPlan, Position] | None:
        """Refuse a state whose derived fields disagree with its position, or that cannot resume
        on this world size; the continuation on this world size when it is another one (planned
        now, while the saved segment's order is at hand)."""
        derived: dict[str, object] = {
            "steps": position.epoch_steps,
            "seqs_consumed": position.seq_offset(plan),
            "epoch_complete": is_finished(position, plan),
        }
        for key, value in derived.items():
            got = state.get(key, value)
            if type(got) is not type(value) or got != value:  # True is not 1 here
                at = (  # the position fields it follows from: either side may be the edit
                    f"prior_steps {position.prior_steps} + segment_steps {position.steps} of "
                    f"{plan.steps}, segment_start {position.segment_start}"
                )
                raise ResumeError(
                    f"loader state {key}: got {got!r}, but its position ({at}, epoch "
                    f"{position.epoch}) gives {value!r} with this loader's plan: the state was "
                    "edited or written by a seqloader version that plans differently. Fix: load "
                    "the state as SeqLoader.state_dict() wrote it (its derived fields follow "
                    "from the position), or start without load_state_dict"
                )
        check_resumable(self.planner, position, plan, self.world_size)
        if self.world_size == position.segment_world_size or is_finished(position, plan):
            return None
        return continue_plan(self.planner, position, self.world_size, plan)
