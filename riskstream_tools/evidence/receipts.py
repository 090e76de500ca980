"""The receipts incident packet on disk: `incident.json`, `incident.txt` and the incident
pictures, read from a store the receipts seed scenario ran into."""

from __future__ import annotations

import os

import orjson

from streaming.store.ops import Store

from ..incidents.receipts import incident_packet, render_text
from .receipts_plots import write_incident_pictures


def write_incident_packet(store_url: str, out: str) -> dict:
    """Write the packet into `out`; returns it with `pictures` (file names) added."""
    os.makedirs(out, exist_ok=True)
    store = Store(store_url)
    try:
        packet = incident_packet(store)
        with open(os.path.join(out, "incident.json"), "wb") as fh:
            fh.write(orjson.dumps(packet, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))
        with open(os.path.join(out, "incident.txt"), "w") as fh:
            fh.write(render_text(packet))
        write_incident_pictures(store, out)
    finally:
        store.dispose()
    with open(os.path.join(out, "pictures.json"), "rb") as fh:
        packet["pictures"] = sorted(p["file"] for p in orjson.loads(fh.read()).values())
    return packet
