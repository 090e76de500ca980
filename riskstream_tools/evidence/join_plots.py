"""Pictures for the join's evidence packet, drawn with matplotlib's Agg canvas (no display, no
global backend switch). Both axes of a watermark picture are UTC times: source time (the
worker's clock, the arrival time of the record being read) across, event time up."""

from __future__ import annotations

import os
from datetime import UTC

from streaming.timeutil import parse_utc_us, us_to_dt


def naive_utc(us: int):
    """Naive UTC datetimes: matplotlib reads them as UTC, and numpy keeps no zone anyway."""
    return us_to_dt(us).replace(tzinfo=None)


RUN_STYLE = {"default": {"label": "default (no idleness)", "color": "#c0392b", "ls": "-"},
             "idle_after": {"label": "idle_after = 60 min", "color": "#2471a3", "ls": "--"}}
PARTITION_COLORS = ["#7f8c8d", "#8e44ad", "#d35400"]


def _figure(rows: int, title: str):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(11, max(4.8, 3.4 * rows + 0.6)), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]
    fig.suptitle(title, fontsize=13)
    return fig, axes


def _time_axis(ax, which: str = "x") -> None:
    from matplotlib.dates import DateFormatter, MinuteLocator
    fmt = DateFormatter("%H:%M", tz=UTC)
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_formatter(fmt)
    axis.set_major_locator(MinuteLocator(byminute=[0, 30], tz=UTC))


def _live(series: list[dict]) -> list[dict]:
    # The end-of-stream snapshot moves every watermark to +inf: not a point in time.
    return [p for p in series if not p["end_of_stream"]]


def _xs(points: list[dict]) -> list:
    return [naive_utc(p["clock_us"]) for p in points]


def _ys(points: list[dict], field: str) -> list:
    return [naive_utc(p[field]) if p[field] is not None else None for p in points]


def _mark_burst(ax, burst_iso: str, label: bool) -> None:
    ax.axvline(naive_utc(parse_utc_us(burst_iso)), color="#555", lw=0.8, ls=":",
               label="idle partition's backlog arrives" if label else None)


def _save(fig, path: str) -> dict:
    fig.tight_layout()
    fig.savefig(path)
    return {"file": os.path.basename(path), "bytes": os.path.getsize(path)}


def watermarks(path: str, idle: dict) -> dict:
    fig, (ax_p, ax_r) = _figure(2, "Input watermarks over source time: default vs idle_after")
    for run, series in idle["series"].items():
        pts = _live(series)
        st = RUN_STYLE[run]
        for ax, field in ((ax_p, "payment_wm_us"), (ax_r, "risk_wm_us")):
            ax.plot(_xs(pts), _ys(pts, field), drawstyle="steps-post", color=st["color"],
                    ls=st["ls"], lw=1.8, label=st["label"])
    pts = _live(idle["series"]["default"])
    for ax, name in ((ax_p, "payment_wm"), (ax_r, "risk_wm")):
        ax.plot(_xs(pts), _xs(pts), color="#999", lw=0.8, ls=":", label="source clock (y = x)")
        _mark_burst(ax, idle["burst_at"], ax is ax_r)
        ax.set_ylabel(f"{name} (event time, UTC)")
        _time_axis(ax, "y")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=9)
    ax_p.set_title("payments: both runs advance alike", fontsize=10)
    ax_r.set_title(f"risk_signals: {idle['partition']} is quiet from {idle['quiet_from'][11:16]} "
                   f"and holds the default back", fontsize=10)
    _time_axis(ax_r)
    ax_r.set_xlabel("source time: worker clock (UTC, " + idle["burst_at"][:10] + ")")
    return _save(fig, path)


def state(path: str, idle: dict, hot: str) -> dict:
    fig, (ax_n, ax_b) = _figure(2, "Join state over source time: default vs idle_after")
    for run, series in idle["series"].items():
        pts = _live(series)
        st = RUN_STYLE[run]
        xs = _xs(pts)
        ax_n.plot(xs, [p["state_records"] for p in pts], color=st["color"], ls=st["ls"], lw=1.8,
                  label=f"all keys, {st['label']}")
        ax_n.plot(xs, [p["hot_key_records"] for p in pts], color=st["color"], ls=st["ls"],
                  lw=1.0, alpha=0.6, marker=".", ms=3, label=f"hot key {hot}, {st['label']}")
        ax_b.plot(xs, [p["state_bytes"] / 1024 for p in pts], color=st["color"], ls=st["ls"],
                  lw=1.8, label=f"all keys, {st['label']}")
        ax_b.plot(xs, [p["hot_key_bytes"] / 1024 for p in pts], color=st["color"], ls=st["ls"],
                  lw=1.0, alpha=0.6, marker=".", ms=3, label=f"hot key {hot}, {st['label']}")
    for ax in (ax_n, ax_b):
        _mark_burst(ax, idle["burst_at"], ax is ax_n)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
        ax.set_ylim(bottom=0)
    ax_n.set_ylabel("records held in state")
    ax_b.set_ylabel("state size (KiB)")
    _time_axis(ax_b)
    ax_b.set_xlabel("source time: worker clock (UTC, " + idle["burst_at"][:10] + ")")
    return _save(fig, path)


def idle_partition(path: str, idle: dict) -> dict:
    fig, (ax,) = _figure(1, "risk_signals: per-partition watermarks and the input watermark")
    d = _live(idle["series"]["default"])
    i = _live(idle["series"]["idle_after"])
    xs = _xs(d)
    n = max((len(p["risk_partition_wm_us"]) for p in d), default=0)
    for part in range(n):
        ys = [naive_utc(p["risk_partition_wm_us"][part])
              if part < len(p["risk_partition_wm_us"]) and p["risk_partition_wm_us"][part]
              else None for p in d]
        # Drawn over the input watermarks: a partition that sets the minimum stays visible.
        ax.plot(xs, ys, drawstyle="steps-post", color=PARTITION_COLORS[part % 3], lw=1.2,
                alpha=0.9, zorder=3, label=f"partition {part} watermark (max event - 3 min)")
    for run, pts in (("default", d), ("idle_after", i)):
        st = RUN_STYLE[run]
        ax.plot(_xs(pts), _ys(pts, "risk_wm_us"), drawstyle="steps-post", color=st["color"],
                ls=st["ls"], lw=2.4, label=f"risk_wm, {st['label']}")
    # Shade where the opt-in run had the quiet partition marked idle.
    target = int(idle["partition"].rsplit(":", 1)[1])
    spans, start = [], None
    for p in i:
        on = target in p["idle_risk_partitions"]
        if on and start is None:
            start = p["clock_us"]
        if not on and start is not None:
            spans.append((start, p["clock_us"]))
            start = None
    if start is not None:
        spans.append((start, i[-1]["clock_us"]))
    for k, (a, b) in enumerate(spans):
        ax.axvspan(naive_utc(a), naive_utc(b), color="#2471a3", alpha=0.08,
                   label=f"partition {target} idle (idle_after run)" if k == 0 else None)
    _mark_burst(ax, idle["burst_at"], True)
    ax.set_ylabel("watermark (event time, UTC)")
    ax.set_xlabel("source time: worker clock (UTC, " + idle["burst_at"][:10] + ")")
    ax.set_title(f"{idle['partition']} ({idle['merchant']}) goes quiet after "
                 f"{idle['quiet_from'][11:16]}; its backlog arrives at {idle['burst_at'][11:16]}",
                 fontsize=10)
    _time_axis(ax)
    _time_axis(ax, "y")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    return _save(fig, path)


def draw_all(out: str, evidence: dict, hot: str) -> dict:
    idle = evidence["idle_partition"]
    return {"watermarks": watermarks(os.path.join(out, "watermarks.png"), idle),
            "state": state(os.path.join(out, "state.png"), idle, hot),
            "idle_partition": idle_partition(os.path.join(out, "idle_partition.png"), idle)}
