"""Pictures for the receipt scorer's incident packet (matplotlib's Agg canvas, as the join's).

incident_timeline.png  per store: each receipt's occurrence and upload times; the disconnect the
                       packet infers is shaded on the store's row, and the lower panel shows the
                       inference itself (upload lag against the shard's normal lag + threshold).
backlog.png            over the worker clock: the input watermark with every first upload placed
                       at (upload, occurrence), the event-time lag (clock - watermark) and the
                       receipts waiting for the watermark, with the reconnect surge marked.

Everything is read from the store: the archive (first uploads), the replay queue (the
reconciliation records) and the metrics trace (one snapshot per committed batch, so the batch
size sets the resolution of backlog.png)."""

from __future__ import annotations

import os
from datetime import UTC

from streaming.operators.receipts import PIPELINE, TOLERANCE_US
from streaming.pipelines.receipts_release import receipts_seen
from streaming.store.ops import Store, loads
from streaming.timeutil import NEG_INF, POS_INF, US_PER_MIN, parse_utc_us, us_to_iso

from ..incidents.receipts import HELD_LAG_US, _median, disconnects
from .join_plots import _figure, _save, naive_utc

HELD_COLOR = "#c0392b"
OK_COLOR = "#7f8c8d"
WM_COLOR = "#2471a3"


def _axis(ax, which: str = "x") -> None:
    from matplotlib.dates import DateFormatter, MinuteLocator
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_locator(MinuteLocator(byminute=[0, 15, 30, 45], tz=UTC))
    axis.set_major_formatter(DateFormatter("%H:%M", tz=UTC))


def first_uploads(store: Store) -> tuple[list[dict], dict]:
    """Each valid receipt's first upload (store, shard, occurrence, upload, beyond the allowed
    delay or not) and the `seen` map the packet's disconnect inference reads."""
    seen, late = receipts_seen(store)
    rows = []
    for rid, r in seen.items():
        rows.append({"receipt_id": rid, "store_id": loads(r["payload"])["store_id"],
                     "partition": r["partition"], "occurred_us": r["event_us"],
                     "uploaded_us": r["arrival_us"], "reconciliation": rid in late})
    return rows, seen


def watermark_trace(store: Store) -> list[dict]:
    """Metrics snapshots with a finite watermark (before every shard has data it is -inf; the
    end-of-stream snapshot moves it to +inf)."""
    out = []
    for m in store.metrics_trace(PIPELINE):
        wm = m["input_wm"].get(PIPELINE)
        if wm is None or wm <= NEG_INF or wm >= POS_INF:
            continue
        out.append({"clock_us": m["clock_us"], "watermark_us": wm,
                    "lag_s": m["event_time_lag_s"].get(PIPELINE),
                    "pending": m["state"].get("pending"),
                    "state_records": m["state"].get("state_records"),
                    "partition_wm_us": [parse_utc_us(v) if v else None
                                        for v in m["partition_wm"].get(PIPELINE, [])]})
    return out


def incident_timeline(path: str, uploads: list[dict], found: list[dict]) -> dict:
    fig, (ax, ax_lag) = _figure(2, "Receipt stores: occurrence vs upload, and the inferred "
                                   "disconnects")
    fig.set_size_inches(11, 12)
    stores = sorted({u["store_id"] for u in uploads})
    row = {s: i for i, s in enumerate(stores)}
    held_ids = set()
    normal = {p: _median([u["uploaded_us"] - u["occurred_us"] for u in uploads
                          if u["partition"] == p])
              for p in {u["partition"] for u in uploads}}
    for u in uploads:
        if u["uploaded_us"] - u["occurred_us"] - normal[u["partition"]] > HELD_LAG_US:
            held_ids.add(u["receipt_id"])
    for k, d in enumerate(found):
        y = row[d["store_id"]]
        start, end = parse_utc_us(d["offline_from"]), parse_utc_us(d["reconnected_at"])
        ax.fill_between([naive_utc(start), naive_utc(end)], y - 0.45, y + 0.45, color=HELD_COLOR,
                        alpha=0.15, label="inferred disconnect (offline by .. reconnected)"
                        if k == 0 else None)
        if d["last_online_receipt"]:
            ax.fill_between([naive_utc(parse_utc_us(d["last_online_receipt"])), naive_utc(start)],
                            y - 0.45, y + 0.45, color=HELD_COLOR, alpha=0.05, hatch="//",
                            label="still online .. offline by (uncertain)" if k == 0 else None)
    for held in (False, True):
        pts = [u for u in uploads if (u["receipt_id"] in held_ids) == held]
        color = HELD_COLOR if held else OK_COLOR
        label = "held back (lag > shard normal + 3 min)" if held else "receipt"
        for u in pts:
            ax.plot([naive_utc(u["occurred_us"]), naive_utc(u["uploaded_us"])],
                    [row[u["store_id"]]] * 2, color=color, lw=0.6 if not held else 0.9,
                    alpha=0.5 if not held else 0.8)
        ax.plot([naive_utc(u["occurred_us"]) for u in pts], [row[u["store_id"]] for u in pts],
                ls="none", marker="o", ms=2.5 if not held else 4, color=color,
                label=f"{label}: occurred")
        ax.plot([naive_utc(u["uploaded_us"]) for u in pts], [row[u["store_id"]] for u in pts],
                ls="none", marker="|", ms=7, color=color, label=f"{label}: uploaded")
    ax.set_yticks(range(len(stores)))
    ax.set_yticklabels([f"{s} (p{next(u['partition'] for u in uploads if u['store_id'] == s)})"
                        for s in stores], fontsize=7)
    ax.set_ylim(-0.8, len(stores) - 0.2)
    ax.invert_yaxis()
    ax.grid(alpha=0.3, axis="x")
    # Above the rows: every part of the plot area holds receipts.
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), fontsize=8, ncol=3,
              title="each receipt: dot at occurrence, tick at first upload, joined by a line",
              title_fontsize=9, frameon=False)
    # Lower panel: the inference, for the shards of the disconnected stores.
    shards = sorted({d["partition"] for d in found}) or sorted(normal)[:1]
    for u in uploads:
        if u["partition"] not in shards:
            continue
        mine = any(u["store_id"] == d["store_id"] for d in found)
        ax_lag.plot(naive_utc(u["occurred_us"]),
                    (u["uploaded_us"] - u["occurred_us"]) / US_PER_MIN, ls="none", marker="o",
                    ms=4 if mine else 2.5,
                    color=HELD_COLOR if u["receipt_id"] in held_ids else
                    ("#34495e" if mine else OK_COLOR), alpha=0.9 if mine else 0.5)
    for p in shards:
        ax_lag.axhline((normal[p] + HELD_LAG_US) / US_PER_MIN, color="#555", ls="--", lw=1,
                       label=f"p{p}: normal lag {normal[p] / 1e6:.0f}s + 3 min = held threshold")
    for d in found:
        ax_lag.axvspan(naive_utc(parse_utc_us(d["offline_from"])),
                       naive_utc(parse_utc_us(d["reconnected_at"])), color=HELD_COLOR, alpha=0.12,
                       label=f"{d['store_id']} offline {d['offline_from'][11:19]}.."
                             f"{d['reconnected_at'][11:19]} ({d['held_receipts']} held)")
    ax_lag.plot([], [], ls="none", marker="o", color="#34495e",
                label="disconnected store's receipts (red: held)")
    ax_lag.plot([], [], ls="none", marker="o", color=OK_COLOR, ms=2.5,
                label="other stores of the shard")
    ax_lag.set_ylabel("upload lag (minutes)")
    ax_lag.set_ylim(bottom=0)
    ax_lag.grid(alpha=0.3)
    ax_lag.legend(loc="upper left", fontsize=8)
    ax_lag.set_title(f"inference on shard{'s' if len(shards) > 1 else ''} "
                     f"{', '.join(f'p{p}' for p in shards)}: upload lag by occurrence time",
                     fontsize=10)
    _axis(ax_lag)
    day = us_to_iso(min(u["occurred_us"] for u in uploads))[:10] if uploads else ""
    ax.set_xlabel(f"time (UTC, {day})")
    ax.tick_params(labelbottom=True)
    ax_lag.set_xlabel(f"occurrence time (UTC, {day})")
    summary = _save(fig, path)
    return {**summary, "stores": len(stores), "receipts": len(uploads),
            "held_receipts": len(held_ids), "disconnects": found}


def _watermark_panel(ax, xs, trace, ok, late) -> None:
    ax.plot([naive_utc(u["uploaded_us"]) for u in ok], [naive_utc(u["occurred_us"]) for u in ok],
            ls="none", marker=".", ms=3, color=OK_COLOR, alpha=0.6,
            label="receipt at (upload, occurrence)")
    ax.plot([naive_utc(u["uploaded_us"]) for u in late],
            [naive_utc(u["occurred_us"]) for u in late], ls="none", marker="x", ms=6,
            color=HELD_COLOR, label="beyond the allowed delay: reconciliation record")
    ax.plot(xs, [naive_utc(p["watermark_us"]) for p in trace], drawstyle="steps-post",
            color=WM_COLOR, lw=2, label="input watermark (min over shards)")
    ax.plot(xs, [naive_utc(p["watermark_us"] - TOLERANCE_US) for p in trace],
            drawstyle="steps-post", color=WM_COLOR, lw=1, ls="--",
            label="watermark - 5 min: allowed delay")
    if xs:
        ax.plot([xs[0], xs[-1]], [xs[0], xs[-1]], color="#999", lw=0.8, ls=":",
                label="worker clock (y = x)")
    ax.set_ylabel("event time (UTC)")
    _axis(ax, "y")


def backlog(path: str, uploads: list[dict], trace: list[dict], found: list[dict]) -> dict:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(11, 15), dpi=100)
    FigureCanvasAgg(fig)
    ax_w, ax_l, ax_p, ax_z = fig.subplots(4, 1)
    for ax in (ax_l, ax_p):
        ax.sharex(ax_w)
    fig.suptitle("Receipt scorer over the worker clock: watermark, event-time lag and waiting "
                 "receipts", fontsize=13)
    xs = [naive_utc(p["clock_us"]) for p in trace]
    ok = [u for u in uploads if not u["reconciliation"]]
    late = [u for u in uploads if u["reconciliation"]]
    _watermark_panel(ax_w, xs, trace, ok, late)
    if found:
        # The surge up close: 10 minutes either side of the first reconnect.
        a = parse_utc_us(found[0]["uploads_arrived"][0])
        lo, hi = a - 10 * US_PER_MIN, a + 10 * US_PER_MIN
        near = [i for i, p in enumerate(trace) if lo <= p["clock_us"] <= hi]
        k0, k1 = max(0, (near or [0])[0] - 1), min(len(trace), (near or [0])[-1] + 2)
        _watermark_panel(ax_z, xs[k0:k1], trace[k0:k1],
                         [u for u in ok if lo <= u["uploaded_us"] <= hi],
                         [u for u in late if lo <= u["uploaded_us"] <= hi])
        ax_z.set_xlim(naive_utc(lo), naive_utc(hi))
        ax_z.set_title(f"the surge up close: {us_to_iso(lo)[11:16]}..{us_to_iso(hi)[11:16]}",
                       fontsize=10)
        from matplotlib.dates import DateFormatter, MinuteLocator
        ax_z.xaxis.set_major_locator(MinuteLocator(byminute=range(0, 60, 2), tz=UTC))
        ax_z.xaxis.set_major_formatter(DateFormatter("%H:%M", tz=UTC))
        ax_z.yaxis.set_major_locator(MinuteLocator(byminute=range(0, 60, 10), tz=UTC))
        ax_z.set_xlabel("worker clock (UTC): upload time of the record being read")
    else:
        ax_z.set_visible(False)
    ax_l.plot(xs, [p["lag_s"] / 60 if p["lag_s"] is not None else None for p in trace],
              drawstyle="steps-post", color="#8e44ad", lw=1.6, marker=".", ms=3,
              label="event-time lag: worker clock - watermark")
    ax_l.set_ylabel("minutes")
    ax_p.plot(xs, [p["pending"] for p in trace], drawstyle="steps-post", color="#d35400",
              lw=1.6, marker=".", ms=3, label="receipts waiting for the watermark (unscored)")
    ax_p.plot(xs, [p["state_records"] for p in trace], drawstyle="steps-post", color="#16a085",
              lw=1.0, label="receipts held in state (window + tolerance)")
    ax_p.set_ylabel("receipts")
    for k, d in enumerate(found):
        a, b = (parse_utc_us(t) for t in d["uploads_arrived"])
        for ax in (ax_w, ax_l, ax_p, ax_z):
            ax.axvspan(naive_utc(a), naive_utc(max(b, a + 60_000_000)), color=HELD_COLOR,
                       alpha=0.25, label=(f"surge: {d['store_id']} reconnects, "
                                          f"{d['held_receipts']} held receipts uploaded "
                                          f"{d['uploads_arrived'][0][11:19]}.."
                                          f"{d['uploads_arrived'][1][11:19]}")
                       if k == 0 else None)
    for ax in (ax_w, ax_l, ax_p, ax_z):
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    ax_l.set_ylim(bottom=0)
    ax_p.set_ylim(bottom=0)
    peak = max(trace, key=lambda p: p["lag_s"] or 0) if trace else None
    ax_l.set_title(f"largest lag {peak['lag_s'] / 60:.1f} min at "
                   f"{us_to_iso(peak['clock_us'])[11:19]}; {len(trace)} committed batches "
                   f"(one snapshot each)" if peak else
                   "no metrics snapshot with a finite watermark", fontsize=10)
    _axis(ax_p)
    day = us_to_iso(trace[0]["clock_us"])[:10] if trace else ""
    ax_p.set_xlabel(f"worker clock (UTC, {day}): upload time of the record being read")
    summary = _save(fig, path)
    return {**summary, "points": len(trace),
            "max_lag_s": peak["lag_s"] if peak else None,
            "max_lag_at": us_to_iso(peak["clock_us"]) if peak else None,
            "max_pending": max((p["pending"] for p in trace), default=None),
            "reconciliation_records": len(late),
            "surges": [{"store_id": d["store_id"], "uploads_arrived": d["uploads_arrived"],
                        "held_receipts": d["held_receipts"]} for d in found]}


def draw_incident_pictures(store: Store, out: str) -> dict:
    """Write OUT/incident_timeline.png and OUT/backlog.png; return what they show."""
    os.makedirs(out, exist_ok=True)
    uploads, seen = first_uploads(store)
    found = disconnects(seen)
    trace = watermark_trace(store)
    return {"incident_timeline": incident_timeline(os.path.join(out, "incident_timeline.png"),
                                                   uploads, found),
            "backlog": backlog(os.path.join(out, "backlog.png"), uploads, trace, found)}


def write_incident_pictures(store: Store, out: str) -> list[str]:
    """Draw both pictures and OUT/pictures.json; return one line per file written."""
    import orjson
    shown = draw_incident_pictures(store, out)
    with open(os.path.join(out, "pictures.json"), "wb") as fh:
        fh.write(orjson.dumps(shown, option=orjson.OPT_INDENT_2))
    return [f"wrote {os.path.join(out, p['file'])} ({p['bytes']:,} bytes)"
            for p in shown.values()] + [f"wrote {os.path.join(out, 'pictures.json')}"]
