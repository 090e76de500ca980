"""Demo: the join seed published to NATS JetStream and run over it, next to the file log.

The demo keeps its two runs in their own SQLite stores under `workdir`, because the join demo
owns the `join` pipeline's checkpoints in the shared store: a NATS run there would resume from
them instead of showing a run of its own."""

from __future__ import annotations

import os
import uuid

NATS_URL_ENV = "RISKSTREAM_NATS_SERVER"
DEFAULT_SERVER = "nats://127.0.0.1:4222"


def _results(url: str) -> dict:
    from streaming.cli.join import outcome_rows, pair_rows
    from streaming.store.ops import Store
    store = Store(url)
    out = {"pairs": pair_rows(store, include_retired=True), "outcomes": outcome_rows(store),
           "queue": [(q["topic"], q["partition"], q["offset"], q["reason"])
                     for q in store.queue("join")],
           "quarantine": [(q["topic"], q["partition"], q["offset"], q["reason"])
                          for q in store.quarantine_rows("join")]}
    store.dispose()
    return out


def run_demo(workdir: str, store_url: str) -> list[str]:
    """Publish the seed recording to a fresh stream, run the join over it and over the file
    log, and report whether pairs, outcomes, queue and quarantine agree. `store_url` is not
    written (see the module note). The stream is deleted at the end."""
    from streaming.host.loop import Worker
    from streaming.host.settings import RunSettings
    from streaming.pipelines.join import SPEC
    from streaming.sources.filelog import SourceError
    from streaming.sources.nats_publish import PublishError, delete_stream, publish_file_log

    from ..workloads.join_seed import generate

    server = os.environ.get(NATS_URL_ENV, DEFAULT_SERVER)
    seed = os.path.join(workdir, "nats-seed")
    generate(7, seed, 470)
    location = f"{server}?stream=riskstream_demo_{uuid.uuid4().hex[:8]}"
    lines = []
    try:
        summary = publish_file_log(seed, location)
    except PublishError as exc:
        return [f"nats: skipped, {exc}"]
    try:
        lines.append(f"nats: published {summary['messages']} messages to stream "
                     f"{summary['stream']!r} ({len(summary['subjects'])} subjects, partitions "
                     f"{summary['partitions']}) in {summary['seconds']:.2f}s")
        runs = {}
        for kind, source in (("nats", location), ("filelog", seed)):
            url = f"sqlite:///{os.path.join(workdir, f'nats-demo-{kind}.sqlite')}"
            if os.path.exists(url[len("sqlite:///"):]):
                os.remove(url[len("sqlite:///"):])
            res = Worker(SPEC, RunSettings(source=source, store_url=url,
                                           end_of_stream=True)).run()
            runs[kind] = _results(url)
            lines.append(f"nats: join over {kind}: {res.records} records, "
                         f"{res.facts_written} facts, {len(runs[kind]['pairs'])} pairs, "
                         f"{len(runs[kind]['queue'])} queued, "
                         f"{len(runs[kind]['quarantine'])} quarantined, {res.elapsed_s:.2f}s")
        same = [k for k in ("pairs", "outcomes", "queue", "quarantine")
                if runs["nats"][k] == runs["filelog"][k]]
        lines.append(f"nats: NATS run equals file-log run on {', '.join(same) or 'nothing'}"
                     f"{'' if len(same) == 4 else ' (MISMATCH)'}")
    except SourceError as exc:
        lines.append(f"nats: the run over NATS failed: {exc}")
    finally:
        delete_stream(location)
    return lines
