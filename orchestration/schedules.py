"""Schedules: reconciliation every hour."""

from dagster import DefaultScheduleStatus, ScheduleDefinition

from .jobs import reconciliation

reconciliation_hourly = ScheduleDefinition(
    name="reconciliation_hourly", job=reconciliation, cron_schedule="0 * * * *",
    execution_timezone="UTC", default_status=DefaultScheduleStatus.STOPPED,
    description="dbt build of the reconciliation models (and their gates) over a fresh ingest.")
