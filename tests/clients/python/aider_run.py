"""Runs aider (its own virtualenv, .venv/aider) on a clock of its own, for
tests/e2e/test_aider.py: aider's retries sleep up to 60 s in all, so each sleep of at least
RECORDED seconds is written down (as a JSON list, in the file AIDER_WAITS names) instead of
slept. Shorter ones, its spinner's, are slept as usual.

    AIDER_WAITS=waits.json .venv/aider/bin/python aider_run.py [aider's arguments]
"""

from __future__ import annotations

import json
import os
import sys
import time

RECORDED = 0.2  # aider's retries wait 0.25 s first, its spinner 0.15 s a turn

waits: list[float] = []
sleep = time.sleep


def recorded_sleep(seconds: float) -> None:
    if seconds < RECORDED:
        sleep(seconds)
        return
    waits.append(round(seconds, 3))
    with open(os.environ["AIDER_WAITS"], "w") as out:
        json.dump(waits, out)


if __name__ == "__main__":
    time.sleep = recorded_sleep
    from aider.main import main

    sys.argv[0] = "aider"
    sys.exit(main())
