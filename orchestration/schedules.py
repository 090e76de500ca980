"""Schedules: reconciliation every hour (running by default, see automation.py)."""

from dagster import ScheduleDefinition

from .automation import default_schedule_status
from .jobs import reconciliation

reconciliation_hourly = ScheduleDefinition(
    name="reconciliation_hourly", job=reconciliation, cron_schedule="0 * * * *",
    execution_timezone="UTC", default_status=default_schedule_status(),
    description="Every hour: ingest the store and dbt-build the reconciliation models and the "
                "release gates (accounting closes, queued records accounted, one current row).")
