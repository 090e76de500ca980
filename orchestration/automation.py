"""Whether the sensors and the hourly schedule start running on a fresh instance.

  RISKSTREAM_AUTOMATION   running | stopped   default running

Running by default: the replay-queue sensor is how a late correction reaches a published
generation (its blocking checks guard publication), the two repair sensors only act on signed
repair requests and reconciliation records the pipelines wrote, and the hourly reconciliation is
what tells an operator that accounting still closes. Each skips cheaply when there is nothing to
do. `stopped` is for instances where an operator launches everything by hand (and for tests
that must not race a sensor). An operator's start/stop in the UI overrides the default."""

from __future__ import annotations

import os

from dagster import DefaultScheduleStatus, DefaultSensorStatus

ENV = "RISKSTREAM_AUTOMATION"


def automation_running() -> bool:
    value = os.environ.get(ENV, "running").strip().lower()
    if value not in ("running", "stopped"):
        raise ValueError(f"{ENV}={value!r}: expected running or stopped")
    return value == "running"


def default_sensor_status() -> DefaultSensorStatus:
    return DefaultSensorStatus.RUNNING if automation_running() else DefaultSensorStatus.STOPPED


def default_schedule_status() -> DefaultScheduleStatus:
    return DefaultScheduleStatus.RUNNING if automation_running() else \
        DefaultScheduleStatus.STOPPED
