"""Demo: the ledger scenario end to end (revisions, temporal join, signed repair, oracle,
reconciliation) and a throttled pressure run with its backlog calculation."""

from __future__ import annotations

import os


def run_demo(workdir: str, store_url: str) -> list[str]:
    from streaming.cli.ledger import summary_lines, window_rows
    from streaming.host.loop import Worker
    from streaming.host.settings import RunSettings
    from streaming.host.throttle import ThrottleSettings
    from streaming.pipelines.ledger import make_spec, run_extra
    from streaming.pipelines.ledger_accounting import equation, reconcile
    from streaming.repairs.ledger import resolve_key, run_ledger_repairs
    from streaming.store.ops import Store
    from streaming.timeutil import parse_utc_us

    from ..references.ledger import reference_totals
    from ..workloads.ledger_seed import generate

    key = resolve_key(store_url)
    src = os.path.join(workdir, "ledger_seed")
    generate(11, src, payments=300)
    lines = ["ledger: account-hour windows from the seed scenario"]
    store = Store(store_url)
    try:
        res = Worker(make_spec(key), RunSettings(source=src, store_url=store_url,
                                                 end_of_stream=True, extra=run_extra(key)),
                     store=store).run()
        lines += summary_lines(res)
        repairs = run_ledger_repairs(store, key)
        lines.append(f"repair ({repairs['key']}): repaired {len(repairs['repaired'])}, held "
                     f"{len(repairs['held'])}, published {', '.join(repairs['published'])}")
        lines.append("revision history of acct-8 10:00 and acct-9 09:00:")
        for r in window_rows(store, include_all=True):
            if (r["account_id"], r["event_hour"]) in (("acct-8", "2026-10-06T10:00Z"),
                                                      ("acct-9", "2026-10-06T09:00Z")):
                lines.append(f"  {r['fact_key']}: {r['status']} total {r['total_cents']} "
                             f"payments {r['payment_count']} risk {r['risk_count']} "
                             f"(predecessor {r['predecessor_key']})")
        current = {(r["account_id"], parse_utc_us(r["event_hour"].replace("Z", ":00Z"))):
                   r["total_cents"] for r in window_rows(store, include_all=False)}
        ref = reference_totals(src)
        lines.append(f"ledger_snapshot oracle: {len(ref)} account-hours, "
                     f"{'agrees' if ref == current else 'DISAGREES'} with the current totals")
        lines += [equation(r) for r in reconcile(store)]
    finally:
        store.dispose()
    pressure = os.path.join(workdir, "ledger_pressure")
    generate(5, pressure, payments=600, rate=4.0, scenario=False)
    p_url = f"sqlite:///{os.path.join(workdir, 'ledger_pressure.sqlite')}"
    p_store = Store(p_url)
    try:
        res = Worker(make_spec(key), RunSettings(
            source=pressure, store_url=p_url, end_of_stream=True, extra=run_extra(key),
            throttle=ThrottleSettings(sink_rate=1, backlog_limit=240, capacity_rate=10)),
            store=p_store).run()
        lines.append("pressure run (600 payments at 4/s):")
        lines += res.backlog_lines
    finally:
        p_store.dispose()
    return lines
