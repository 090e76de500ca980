"""`scenarios.limited_by`: what set a store scenario's pace, read off the figures its run
reported. The cases are the figures of a 1,000,000-event `make bench` (docs/performance.md,
thirty-eighth round), where the profile said what bound each run; and the edges of each rule."""

from __future__ import annotations

import pytest

from riskstream_tools.benchmarks.scenarios import (EVEN_SHARE, SERIAL_COMMIT_SHARE,
                                                   WRITER_CPU_SHARE, limited_by)


def one_worker(worker_cpu: float, commit: float, writer_cpu: float | None) -> dict:
    return {"seconds": max(worker_cpu, commit) + 2.0, "overlap_commits": True,
            "worker_cpu_s": worker_cpu, "sink_commit_s": commit, "writer_cpu_s": writer_cpu}


def two_workers(seconds: list[float], commit: float) -> dict:
    return {"seconds": max(seconds), "workers": 2, "worker_seconds": seconds,
            "worker_cpu_s": sum(seconds) * 0.9, "sink_commit_s": commit, "writer_cpu_s": None}


@pytest.mark.parametrize(("name", "result", "expected"), [
    # The join's writer inserts at random keys on its own CPU.
    ("join-sqlite", one_worker(15.1, 28.9, 28.4), "writer CPU"),
    ("join-sqlite-ordered-ids", one_worker(14.4, 18.2, 18.9), "writer CPU"),
    # On PostgreSQL the writer mostly waits for the server.
    ("join-postgres", one_worker(14.6, 57.5, 10.7), "writer waiting on the database"),
    ("ledger-sqlite", one_worker(10.1, 3.9, 6.0), "worker"),
    # The receipt scorer's worker and writer are busy about as long.
    ("receipts-sqlite", one_worker(26.8, 27.2, 26.7), "worker and writer"),
    ("join-sqlite-2-workers", two_workers([33.0, 32.5], 44.0), "serial commits"),
    ("ledger-sqlite-2-workers", two_workers([7.7, 7.5], 4.9), "workers"),
    ("receipts-sqlite-2-workers", two_workers([38.0, 37.1], 52.6), "serial commits"),
])
def test_the_benchs_scenarios_are_named_by_what_bound_them(name, result, expected):
    assert limited_by(result) == expected, name


def test_a_run_without_commit_figures_names_nothing():
    # The operator alone (no store) and the extra scenarios report no commits.
    assert limited_by({"seconds": 8.0, "stages": {"operator_s": 8.0}}) is None
    assert limited_by({"worker_cpu_s": 3.0}) is None
    assert limited_by({"sink_commit_s": 3.0}) is None


def test_busy_times_within_the_even_share_are_even_and_past_it_are_not():
    inside = 10.0 * (1 - EVEN_SHARE) + 0.01
    outside = 10.0 * (1 - EVEN_SHARE) - 0.01
    assert limited_by(one_worker(inside, 10.0, 10.0)) == "worker and writer"
    assert limited_by(one_worker(10.0, inside, 1.0)) == "worker and writer"
    assert limited_by(one_worker(outside, 10.0, 10.0)) == "writer CPU"
    assert limited_by(one_worker(10.0, outside, 1.0)) == "worker"


def test_the_writers_cpu_share_splits_its_own_work_from_its_waits():
    assert limited_by(one_worker(5.0, 20.0, 20.0 * WRITER_CPU_SHARE)) == "writer CPU"
    assert limited_by(one_worker(5.0, 20.0, 20.0 * WRITER_CPU_SHARE - 0.1)) == \
        "writer waiting on the database"
    # A writer whose CPU was not read (no /proc) is not credited with work it may not have done.
    assert limited_by(one_worker(5.0, 20.0, None)) == "writer waiting on the database"


def test_serial_commits_bind_past_their_share_of_the_workers_time():
    spent = [10.0, 10.0]
    at = SERIAL_COMMIT_SHARE * sum(spent)
    assert limited_by(two_workers(spent, at + 0.1)) == "serial commits"
    assert limited_by(two_workers(spent, at)) == "workers"


def test_one_worker_committing_serially_is_measured_against_its_run():
    serial = {"seconds": 20.0, "overlap_commits": False, "worker_cpu_s": 18.0,
              "sink_commit_s": 12.0, "writer_cpu_s": None}
    assert limited_by(serial) == "serial commits"
    assert limited_by({**serial, "sink_commit_s": 6.0}) == "worker"


def test_one_worker_whose_batches_all_committed_in_it_is_serial():
    # Overlap on, but no batch went to a writer process (a run of one batch starts none): the
    # commits are the worker's own, whatever the writer's absent CPU would say.
    alone = {**one_worker(5.0, 20.0, None), "seconds": 26.0, "overlapped_batches": 0}
    assert limited_by(alone) == "serial commits"
    assert limited_by({**alone, "sink_commit_s": 4.0}) == "worker"
    assert limited_by({**alone, "overlapped_batches": 3}) == "writer waiting on the database"
