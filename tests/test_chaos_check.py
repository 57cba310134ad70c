"""The chaos driver's verdict (``tests/dist/chaos.py``, ``make chaos``) has teeth: on logs laid out
as the ranks write them, a clean kill-and-resume passes, and a sequence delivered twice, one never
delivered, or ranks consuming different steps are each counted. (The driver itself launches
torchrun for minutes, so it is not part of the suite.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "dist"))
import chaos
from ddp_common import build_corpus, log_path

TAGS = sorted(build_corpus().tags)
SETUP = chaos.Setup("test", (), epochs=1)


def write_log(out: Path, phase: str, rank: int, records: list[tuple[int, list[str]]]) -> None:
    with open(log_path(out, phase, rank), "w") as f:
        for step, tags in records:
            f.write(json.dumps({"epoch": 1, "step": step, "tags": tags}) + "\n")


def run(tmp_path: Path, edit=None) -> chaos.Outcome:
    """Segment 0: 2 ranks, killed after 2 checkpointed steps (each rank also logged step 2, the
    batch it died on); segment 1: 1 rank delivers the rest from step 2."""
    first = [TAGS[i : i + 4] for i in range(0, 16, 4)]  # steps 0, 1 of ranks 0 and 1
    write_log(tmp_path, "s0", 0, [(0, first[0]), (1, first[2]), (2, TAGS[16:18])])
    write_log(tmp_path, "s0", 1, [(0, first[1]), (1, first[3]), (2, TAGS[18:20])])
    rest = [(2 + k, TAGS[16 + 5 * k : 21 + 5 * k]) for k in range((len(TAGS) - 16 + 4) // 5)]
    if edit is not None:
        edit(rest)
    write_log(tmp_path, "s1", 0, rest)
    outcome = chaos.Outcome("test")
    outcome.segments = [
        chaos.Segment(2, 1, (1, 1, 2), None, end={"epoch": 1, "steps": 2}, rc=1),
        chaos.Segment(1, 0, None, {"epoch": 1, "steps": 2}, rc=0),
    ]
    chaos.check(outcome, tmp_path, SETUP)
    return outcome


def test_clean_resume_passes(tmp_path: Path) -> None:
    outcome = run(tmp_path)
    assert outcome.problems == [] and (outcome.duplicated, outcome.lost) == (0, 0)


@pytest.mark.parametrize(
    ("edit", "field", "count"),
    [
        (lambda rest: rest[0][1].append(TAGS[0]), "duplicated", 1),
        (lambda rest: rest[-1][1].pop(), "lost", 1),
    ],
)
def test_duplicates_and_losses_are_counted(tmp_path: Path, edit, field: str, count: int) -> None:
    outcome = run(tmp_path, edit)
    assert getattr(outcome, field) == count and outcome.problems


def test_unequal_steps_are_counted(tmp_path: Path) -> None:
    run(tmp_path)
    with open(log_path(tmp_path, "s0", 1), "a") as f:  # rank 1 consumed one step more
        f.write(json.dumps({"epoch": 1, "step": 1, "tags": []}) + "\n")
    outcome = chaos.Outcome("test")
    outcome.segments = [
        chaos.Segment(2, 1, (1, 1, 2), None, end={"epoch": 1, "steps": 2}, rc=1),
        chaos.Segment(1, 0, None, {"epoch": 1, "steps": 2}, rc=0),
    ]
    chaos.check(outcome, tmp_path, SETUP)
    assert outcome.unequal == 1


def test_mix_counts_uses_per_corpus(tmp_path: Path) -> None:
    """With ``mix``: over E epochs corpus c's sequences must each come E * rate times."""
    setup = chaos.Setup("mix", (), epochs=2, mix=True)
    order = list(build_corpus().tags)
    uses = {t: round(2 * chaos.MIX_RATES["a" if i < chaos.MIX_SPLIT else "b"]) for i, t in
            enumerate(order)}  # fmt: skip
    records = [tag for tag, n in uses.items() for _ in range(n)]
    records.remove(order[-1])  # one use of a "b" sequence never delivered
    records.append(order[0])  # an "a" sequence delivered once too often
    write_log(tmp_path, "s0", 0, [(k, records[k * 10 : k * 10 + 10]) for k in range(30)])
    outcome = chaos.Outcome("mix")
    outcome.segments = [chaos.Segment(1, 0, None, None, rc=0)]
    chaos.check(outcome, tmp_path, setup)
    assert (outcome.duplicated, outcome.lost) == (1, 1), outcome.problems
