"""Pictures for the ledger's evidence packet (matplotlib's Agg canvas, as the join's packet).

backlog_drain.png  the pressure run over worker-clock time (UTC): backlog records and backlog
                   age per committed batch, the throttled and capacity phases, the limit, the
                   moment the limit was reached and the moment the backlog drained.
revisions.png      the revision history of the scenario's named account-hours: total and risk
                   count per revision, each bar labelled with its status."""

from __future__ import annotations

import os
from datetime import UTC

from streaming.timeutil import parse_utc_us

from .join_plots import _figure, _save, naive_utc

PHASE_COLORS = {"throttled": "#c0392b", "capacity": "#27ae60"}
STATUS_COLORS = {"provisional": "#95a5a6", "revised": "#2471a3", "final": "#8e44ad",
                 "corrected": "#d35400"}


def _seconds_axis(ax) -> None:
    # The pressure run spans minutes: seconds matter on this axis.

    from matplotlib.dates import AutoDateLocator, DateFormatter
    ax.xaxis.set_major_locator(AutoDateLocator(tz=UTC, minticks=6, maxticks=12))
    ax.xaxis.set_major_formatter(DateFormatter("%H:%M:%S", tz=UTC))


def _phases(ax, report: dict, start, end, label: bool) -> None:
    limit_at = report.get("limit_reached_at")
    drained_at = report.get("drained_at")
    cut = naive_utc(parse_utc_us(limit_at)) if limit_at else end
    ax.axvspan(start, cut, color=PHASE_COLORS["throttled"], alpha=0.07,
               label=f"throttled: sink {report['sink_rate']:g} rec/s" if label else None)
    if limit_at:
        stop = naive_utc(parse_utc_us(drained_at)) if drained_at else end
        cap = report.get("sink_capacity")
        ax.axvspan(cut, stop, color=PHASE_COLORS["capacity"], alpha=0.09,
                   label=(f"capacity: sink {cap:g} rec/s" if cap is not None
                          else "capacity: unlimited") if label else None)
        ax.axvline(cut, color=PHASE_COLORS["throttled"], lw=1.0, ls="--",
                   label=f"limit reached {limit_at[11:23]}" if label else None)
    if drained_at:
        ax.axvline(naive_utc(parse_utc_us(drained_at)), color=PHASE_COLORS["capacity"], lw=1.2,
                   ls="-.", label=f"drained {drained_at[11:19]}" if label else None)


def backlog_drain(path: str, backlog: dict) -> dict:
    report, trace = backlog["report"], backlog["trace"]
    fig, (ax_n, ax_a) = _figure(2, "Ledger pressure run: backlog fill and drain over worker "
                                   "clock")
    xs = [naive_utc(p["clock_us"]) for p in trace]
    start = naive_utc(parse_utc_us(trace[0]["clock"])) if trace else None
    end = xs[-1] if xs else None
    for ax in (ax_n, ax_a):
        if trace:
            _phases(ax, report, start, end, ax is ax_n)
    ax_n.plot(xs, [p["backlog_records"] for p in trace], drawstyle="steps-post", color="#2c3e50",
              lw=1.6, marker=".", ms=3, label="backlog records (after each committed batch)")
    limit = report.get("backlog_limit")
    if limit is not None:
        ax_n.axhline(limit, color="#7f8c8d", lw=1.0, ls=":", label=f"backlog limit {limit}")
    if report.get("peak_at"):
        ax_n.plot([naive_utc(parse_utc_us(report["peak_at"]))], [report["peak_backlog"]],
                  marker="v", color=PHASE_COLORS["throttled"], ms=8, ls="none",
                  label=f"peak {report['peak_backlog']} (per record, throttle report)")
    ax_n.set_ylabel("records read, not committed")
    ax_a.plot(xs, [p["backlog_age_s"] for p in trace], drawstyle="steps-post", color="#2c3e50",
              lw=1.6, marker=".", ms=3, label="backlog age: clock - oldest uncommitted arrival")
    lag = [p["payments_lag_s"] for p in trace]
    ax_a.plot(xs, lag, color="#8e44ad", lw=1.0, ls="--",
              label="event-time lag: clock - payments_wm")
    ax_a.set_ylabel("seconds")
    for ax in (ax_n, ax_a):
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
    growth = report.get("growth_rate")
    drain = report.get("net_drain_rate")
    ax_n.set_title(f"fill: growth {growth:.2f} rec/s; drain: {report.get('backlog_limit')} rec "
                   f"in {report.get('time_to_drain_s'):g}s = net {drain:.2f} rec/s"
                   if growth is not None and drain is not None else
                   "the backlog never reached the limit", fontsize=10)
    ax_a.set_title(f"largest backlog age {backlog['trace_max_age_s']:g}s; one point per "
                   f"committed batch ({len(trace)})" if trace else
                   "no throttled metrics snapshot in the store", fontsize=10)
    _seconds_axis(ax_a)
    day = trace[0]["clock"][:10] if trace else ""
    ax_a.set_xlabel(f"worker clock (UTC, {day}): arrival time of the record being read")
    return _save(fig, path)


def revisions(path: str, rows: list[dict], named: list[str]) -> dict:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    n = max(1, len(named))
    fig = Figure(figsize=(11, max(4.8, 3.4 * n + 0.6)), dpi=100)
    FigureCanvasAgg(fig)
    # Not shared: each account-hour has its own number of revisions.
    axes = fig.subplots(n, 1, squeeze=False)[:, 0]
    fig.suptitle("Revision history of the scenario's named account-hours", fontsize=13)
    for ax, window in zip(axes, named, strict=True):
        account, hour = window.split("|", 1)
        hist = [r for r in rows if r["account_id"] == account and r["event_hour"] == hour]
        revs = [r["revision"] for r in hist]
        totals = [r["total_cents"] / 100 for r in hist]
        bars = ax.bar(revs, totals, width=0.6,
                      color=[STATUS_COLORS.get(r["status"], "#7f8c8d") for r in hist])
        for bar, r in zip(bars, hist, strict=True):
            ax.annotate(f"{r['status']}\n${r['total_cents'] / 100:,.2f}, "
                        f"{r['payment_count']} pay",
                        (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=8, xytext=(0, 2),
                        textcoords="offset points")
        ax.set_ylabel("total (dollars)")
        ax.set_ylim(0, max(totals, default=1) * 1.7)
        ax.set_xticks(revs)
        ax.set_xticklabels([f"rev {v}" for v in revs])
        risk = ax.twinx()
        risk.plot(revs, [r["risk_count"] for r in hist], color="#c0392b", marker="o", lw=1.5,
                  label="high-risk payments")
        risk.set_ylabel("high-risk payments", color="#c0392b")
        risk.set_ylim(0, max([r["risk_count"] for r in hist] + [1]) + 1)
        risk.yaxis.get_major_locator().set_params(integer=True)
        handles = [bars[0]] if hist else []
        ax.legend(handles + risk.get_legend_handles_labels()[0],
                  ["total (bar, colour = status)"] * len(handles)
                  + risk.get_legend_handles_labels()[1], loc="upper left", fontsize=8)
        ax.set_title(f"{account} {hour[11:16]} UTC ({hour[:10]}): {len(hist)} revisions",
                     fontsize=10)
        ax.grid(alpha=0.3, axis="y")
        ax.set_xlabel("revision (the fact key's last part)")
    return _save(fig, path)


def draw_all(out: str, evidence: dict) -> dict:
    return {"backlog_drain": backlog_drain(os.path.join(out, "backlog_drain.png"),
                                           evidence["backlog"]),
            "revisions": revisions(os.path.join(out, "revisions.png"), evidence["revisions"],
                                   evidence["named_windows"])}
