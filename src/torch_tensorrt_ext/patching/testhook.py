"""Named pause points, so tests can kill or race a real patch run at an exact moment.

Invariant: `pause(point)` does nothing unless the environment names `point`. With
TTE_PATCH_TEST_DELAY=`point`:SECONDS it sleeps that long there (racing runs then surely overlap
unless the lock keeps them apart). With TTE_PATCH_TEST_PAUSE=`point` it writes
`tte-test: paused at <point> (pid <pid>)` to stderr and waits until the file named by
TTE_PATCH_TEST_RESUME exists (at most 120 s; without that variable, the full 120 s), so a test
can SIGKILL the process there or let it go on. Points: `before-lock` (nothing done yet: a start
line for racing runs), `locked` (the site lock is held, nothing read yet), `after-stage`
(every new file staged beside its destination, none renamed), `after-first-rename` (the first
staged file renamed into place).
"""
from __future__ import annotations

import os
import sys
import time

PAUSE_ENV = "TTE_PATCH_TEST_PAUSE"
DELAY_ENV = "TTE_PATCH_TEST_DELAY"
RESUME_ENV = "TTE_PATCH_TEST_RESUME"
_LONGEST = 120.0


def pause(point: str) -> None:
    where, _, seconds = os.environ.get(DELAY_ENV, "").partition(":")
    if where == point:
        time.sleep(float(seconds))
    if os.environ.get(PAUSE_ENV) != point:
        return
    sys.stderr.write(f"tte-test: paused at {point} (pid {os.getpid()})\n")
    sys.stderr.flush()
    resume = os.environ.get(RESUME_ENV)
    deadline = time.monotonic() + _LONGEST
    while time.monotonic() < deadline and not (resume and os.path.exists(resume)):
        time.sleep(0.02)
