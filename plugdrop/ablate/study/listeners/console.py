"""What the person watching reads of a study besides the runs' own progress: a header line
per round (what trains, how many runs, through which launcher) and the driver's messages."""

from __future__ import annotations

import sys

from ..listener import Listener, StudyInfo
from ..round import Round

__all__ = ["Console"]


class Console(Listener):
    """The header line of each round, on rank 0."""

    def on_round_start(self, study: StudyInfo, round: Round) -> None:
        if not study.main:
            return
        through = f" through {study.launcher}" if study.launcher != "local" else ""
        if study.command != "ablate" or study.program is None:
            print(f"plugdrop {study.command}: {round.title}{through}", flush=True)
            return
        trains, each = study.program.headline(study.d)
        shard = f" (shard {study.shard[0]}/{study.shard[1]})" if study.shard else ""
        before = f", {round.finished} finished already" if round.finished else ""
        judged = sum(study.program.rejudges(rd) for rd in round.runs)
        again = f", {judged} to judge again (trained before)" if judged else ""
        print(f"plugdrop ablate: {trains}, {len(study.cfg.variants)} variants x {round.title}"
              f"{each}; {len(round.runs) - judged} runs to train{again}{before}{shard}"
              f"{through}", flush=True)

    def on_message(self, study: StudyInfo, text: str) -> None:
        if study.main:
            print(text, file=sys.stderr, flush=True)
