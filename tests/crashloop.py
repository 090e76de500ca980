"""Crash loop: follow-mode workers SIGKILLed at seeded random moments while a paced producer
publishes, restarted each time, then compared with the reference.

For each pipeline (join, ledger, receipts) the harness
1. writes a workload whose records stay within the pipeline's lateness bound (so the result
   does not depend on the interleaving consumed), and runs the reference: one uninterrupted
   replay of the file log with --end-of-stream, in a store of its own;
2. creates a stream with the recording's layout and publishes the recording at a steady rate
   in the background (`riskstream nats publish --rate`);
3. starts `riskstream <pipeline> run --follow` on the PostgreSQL store, lets it run a seeded
   random 0.2-2.0 s, SIGKILLs it, and restarts it, until its share of the kills is done;
4. starts it once more, waits until it has consumed every published record, stops it with
   SIGTERM, and finalizes with `run --follow --end-of-stream`;
5. compares: current rows missing from or differing with the reference (for receipts, all but
   the watermark a decision was scored at, which depends on the interleaving consumed), current
   rows the reference does not have, fact rows beyond the reference's (repeats), sink
   exceptions, and whether accounting closes over every partition with every record read once.

Run alone: `python -m tests.crashloop --kills 30 [--seed N] [--store postgresql://...]`
(without --store a fresh database is created on the test PostgreSQL and dropped at the end).
Exit status 0 when every pipeline matches."""

from __future__ import annotations

import argparse
import collections
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

from tests.followutil import (cli, comparable, current_rows, fact_rows, new_stream_url,
                              publish, recording_positions, sink_positions, split_recording,
                              start_follow, stop, wait_consumed, wait_lease)

PIPELINES = ("join", "ledger", "receipts")
FOLLOW_ARGS = ["--batch-size", "50", "--checkpoint-every", "300"]
MAX_BATCH_DELAY_MS = 100


@dataclass
class Outcome:
    pipeline: str
    kills: int = 0
    records: int = 0
    reference_rows: int = 0
    missing: list = field(default_factory=list)
    extra: list = field(default_factory=list)
    repeated_facts: int = 0
    sink_exceptions: int = 0
    repeated_positions: int = 0
    unread_positions: int = 0
    accounting_closes: bool = False
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return (not self.missing and not self.extra and self.repeated_facts == 0
                and self.sink_exceptions == 0 and self.repeated_positions == 0
                and self.unread_positions == 0 and self.accounting_closes)

    def line(self) -> str:
        return (f"{self.pipeline}: {self.kills} kills, {self.records} records, "
                f"{self.reference_rows} reference current rows; missing {len(self.missing)}, "
                f"extra {len(self.extra)}, repeated facts {self.repeated_facts}, sink "
                f"exceptions {self.sink_exceptions}, positions read twice "
                f"{self.repeated_positions}, never read {self.unread_positions}, accounting "
                f"{'closes' if self.accounting_closes else 'DOES NOT close'}; "
                f"{self.seconds:.1f}s -> {'OK' if self.ok else 'MISMATCH'}")


def workload(pipeline: str, out: str, seed: int) -> None:
    """Inputs within the lateness bound of each pipeline."""
    if pipeline == "join":
        from riskstream_tools.workloads.join_seed import generate_bulk
        generate_bulk(seed, out, 2400, merchants=40, events_per_minute=40)
    elif pipeline == "ledger":
        from riskstream_tools.workloads.ledger_seed import generate
        generate(seed, out, 1200, rate=2.0, scenario=False)
    else:
        steady_receipts(seed, out, 1200)


def steady_receipts(seed: int, out: str, n: int, merchants: int = 40) -> None:
    """Receipts occurring every ~4.5 s over 90 minutes, each uploaded 5-60 s later, routed by
    crc32(merchant) % 4 (what `nats publish --pipeline receipts --partitions 4` does, so a
    re-keyed stream keeps this routing): within each partition the disorder of occurrence
    times stays under a minute, inside the scorer's 2-minute watermark delay."""
    import zlib
    from datetime import timedelta

    import orjson

    from riskstream_tools.workloads.receipts_seed import T0, receipt
    rng = random.Random(seed)
    parts: dict[int, list] = {p: [] for p in range(4)}
    for i in range(n):
        occurred = T0 + timedelta(milliseconds=int(i * 4500 + rng.randrange(1000)))
        uploaded = occurred + timedelta(seconds=rng.uniform(5, 60))
        s = rng.randrange(120)
        merchant = f"merchant-{s % merchants:03d}"
        r = receipt(f"receipt-{i:06d}", f"store-{s:03d}", merchant,
                    rng.randint(100, 20_000), occurred, uploaded)
        parts[zlib.crc32(merchant.encode()) % 4].append((uploaded, i, orjson.dumps(r)))
    tdir = os.path.join(out, "receipts")
    os.makedirs(tdir, exist_ok=True)
    for p, rows in parts.items():
        with open(os.path.join(tdir, f"p{p}.jsonl"), "wb") as fh:
            for _, _, line in sorted(rows):
                fh.write(line + b"\n")


def extra_args(pipeline: str, work: str) -> list[str]:
    return ["--model-dir", os.path.join(work, "models")] if pipeline == "receipts" else []


def run_pipeline(pipeline: str, kills: int, store_url: str, work: str, rng: random.Random,
                 log=print, max_batch_delay_ms: int = MAX_BATCH_DELAY_MS) -> Outcome:
    t0 = time.monotonic()
    res = Outcome(pipeline)
    rec = os.path.join(work, f"{pipeline}-rec")
    workload(pipeline, rec, rng.randrange(1 << 30))
    positions = recording_positions(rec)
    res.records = len(positions)
    ref_url = f"sqlite:///{os.path.join(work, pipeline + '-ref.sqlite')}"
    cli(pipeline, "run", "--source", rec, "--store", ref_url, "--end-of-stream", "--quiet",
        *extra_args(pipeline, work))
    url = new_stream_url(f"crash_{pipeline}")
    empty = os.path.join(work, f"{pipeline}-empty")
    split_recording(rec, empty, os.path.join(work, f"{pipeline}-all"), 0.0)
    publish(empty, url)  # the layout, no messages
    # Publishing spans about the kill phase: each life lasts 0.2-2.0 s, start-up included
    # (1.1 s on average), and the kill and the next start take a few hundredths more.
    rate = max(50.0, res.records / max(1.0, kills * 1.15))
    producer = threading.Thread(target=publish, args=(rec, url, "--rate", f"{rate:.0f}"))
    producer.start()
    args = [*FOLLOW_ARGS, "--max-batch-delay", str(max_batch_delay_ms),
            *extra_args(pipeline, work)]
    try:
        while res.kills < kills:
            proc = start_follow(pipeline, url, store_url, *args)
            time.sleep(rng.uniform(0.2, 2.0))
            if proc.poll() is not None:
                out, err = proc.communicate()
                raise RuntimeError(f"{pipeline} worker exited {proc.returncode} before its "
                                   f"kill: {out}{err}")
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            res.kills += 1
        producer.join(timeout=120)
        proc = start_follow(pipeline, url, store_url, *args)
        try:
            # Up (its lease taken, so its stop handler set) before anything can stop it: the
            # killed lives may already have consumed every record.
            wait_lease(store_url, pipeline, proc.pid)
            wait_consumed(store_url, pipeline, res.records, [proc], timeout=120)
        finally:
            code, out, err, _ = stop(proc)
        if code != 0:
            raise RuntimeError(f"{pipeline} worker did not stop cleanly ({code}): {out}{err}")
        cli(pipeline, "run", "--source", url, "--store", store_url, "--follow",
            "--end-of-stream", "--quiet", *extra_args(pipeline, work))
        ref = comparable(current_rows(ref_url, pipeline), pipeline)
        got = comparable(current_rows(store_url, pipeline), pipeline)
        res.reference_rows = len(ref)
        res.missing = sorted(set(ref) - set(got))
        res.extra = sorted(set(got) - set(ref))
        # Fact identity: key, kind, logical key, status (a receipt's payload hash covers the
        # watermark it was scored at, see `comparable`).
        ref_facts = collections.Counter(f[:4] for f in fact_rows(ref_url, pipeline))
        got_facts = collections.Counter(f[:4] for f in fact_rows(store_url, pipeline))
        res.repeated_facts = sum((got_facts - ref_facts).values())
        read = collections.Counter(sink_positions(store_url, pipeline))
        res.repeated_positions = sum(n - 1 for n in read.values() if n > 1)
        res.unread_positions = len(positions - set(read))
        from streaming.store.ops import Store
        store = Store(store_url)
        try:
            res.sink_exceptions = len(store.sink_exception_rows(pipeline))
            acc = store.accounting(pipeline)
            res.accounting_closes = (all(r["closes"] for r in acc)
                                     and sum(r["read"] for r in acc) == res.records)
        finally:
            store.dispose()
    finally:
        producer.join(timeout=120)
        from streaming.sources.nats_publish import delete_stream
        delete_stream(url)
    res.seconds = time.monotonic() - t0
    log(res.line())
    return res


def crash_loop(kills: int, store_url: str, seed: int = 1, pipelines=PIPELINES,
               log=print, max_batch_delay_ms: int = MAX_BATCH_DELAY_MS) -> list[Outcome]:
    rng = random.Random(seed)
    work = tempfile.mkdtemp(prefix="rs-crashloop-")
    try:
        share = [kills // len(pipelines) + (1 if i < kills % len(pipelines) else 0)
                 for i in range(len(pipelines))]
        return [run_pipeline(p, n, store_url, work, rng, log, max_batch_delay_ms)
                for p, n in zip(pipelines, share, strict=True)]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--store", default=None, help="PostgreSQL URL (default: a fresh database)")
    ap.add_argument("--pipelines", default=",".join(PIPELINES))
    ap.add_argument("--max-batch-delay", type=int, default=MAX_BATCH_DELAY_MS,
                    help="the workers' --max-batch-delay, ms (0: batches do not linger)")
    a = ap.parse_args(argv)
    os.environ.setdefault("RISKSTREAM_REPAIR_KEY", "crashloop-key")
    fresh = None
    store_url = a.store
    if store_url is None:
        from tests.conftest import FreshPostgres
        fresh = FreshPostgres()
        store_url = fresh.new_url()
    try:
        outcomes = crash_loop(a.kills, store_url, a.seed, a.pipelines.split(","),
                              max_batch_delay_ms=a.max_batch_delay)
    finally:
        if fresh is not None:
            fresh.drop_all()
    total = sum(o.kills for o in outcomes)
    ok = all(o.ok for o in outcomes)
    print(f"crash loop: {total} kills across {len(outcomes)} pipelines -> "
          f"{'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
