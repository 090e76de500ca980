"""Exit codes: every code the commands use is in the one table of docs/failures.md, each code
once, and a representative failure of each kind ends with its documented code."""

from __future__ import annotations

import ast
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import orjson
import pytest

from tests.conftest import need_service

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENV = {**os.environ, "RISKSTREAM_REPAIR_KEY": "exit-test-key"}


def used_exit_codes() -> dict[int, list[str]]:
    """Every literal exit code in the commands' code: `exit_code = N`, `..._EXIT = N`,
    `fail(..., N)`, `SystemExit(N)`, `sys.exit(N)`."""
    out: dict[int, list[str]] = {}
    for pkg in ("streaming", "orchestration", "riskstream_tools"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                value = None
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and \
                        any(isinstance(t, ast.Name) and (t.id == "exit_code" or
                                                         re.search(r"_EXIT(_CODE)?$", t.id))
                            for t in node.targets):
                    value = node.value.value
                elif isinstance(node, ast.Call):
                    name = node.func.attr if isinstance(node.func, ast.Attribute) else \
                        getattr(node.func, "id", None)
                    arg = None
                    if name in ("SystemExit", "exit") and node.args:
                        arg = node.args[0]
                    elif name == "fail" and len(node.args) > 1:
                        arg = node.args[1]
                    if isinstance(arg, ast.Constant):
                        value = arg.value
                if isinstance(value, int) and not isinstance(value, bool):
                    out.setdefault(value, []).append(path.relative_to(ROOT).as_posix())
    return out


def documented_exit_codes() -> list[int]:
    text = (ROOT / "docs" / "failures.md").read_text()
    return [int(m) for m in re.findall(r"^\| (\d+) \|", text, flags=re.M)]


def test_every_exit_code_is_documented_once():
    documented = documented_exit_codes()
    assert len(documented) == len(set(documented)), documented
    used = used_exit_codes()
    assert set(used) - set(documented) == set(), {c: used[c] for c in set(used) - set(documented)}
    # Each of the documented failure kinds is really used (0 is every command's success).
    assert set(documented) - {0} <= set(used) | {2}  # 2 is also click's usage exit


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streaming.cli.main", *args],
                          capture_output=True, text=True, timeout=timeout, env=ENV)


def ok(res: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert res.returncode == 0, res.stdout + res.stderr
    return res


@pytest.fixture(scope="module")
def join_log(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("join") / "rec"
    ok(cli("join", "generate", "--seed", "3", "--out", str(out)))
    return str(out)


def one_line(res) -> str:
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert lines and "Traceback" not in res.stderr, res.stderr
    return lines[-1]


def test_representatives_0_1_2_5_7_137(join_log, tmp_path):
    store = f"sqlite:///{tmp_path}/ops.sqlite"
    assert cli("metrics", "--store", store).returncode == 7  # no store yet, none created
    assert not (tmp_path / "ops.sqlite").exists()
    assert cli("join", "run", "--no-such-flag").returncode == 2
    res = cli("join", "run", "--source", str(tmp_path / "absent"), "--store", store)
    assert res.returncode == 5, res.stderr
    res = cli("join", "run", "--source", join_log, "--store", store, "--quiet",
              "--crash-at", "after-sink-write:1", "--batch-size", "50")
    assert res.returncode == 137, res.stderr
    ok(cli("join", "run", "--source", join_log, "--store", store, "--quiet", "--end-of-stream"))
    res = cli("ledger", "repair", "--store", store)  # the ledger never ran here
    assert res.returncode == 1 and "nothing to repair" in one_line(res)


def test_representatives_3_and_4(join_log, tmp_path):
    from sqlalchemy import select, update

    from streaming.store import schema as S
    from streaming.store.ops import Store
    src = tmp_path / "rec"
    shutil.copytree(join_log, src)
    store = f"sqlite:///{tmp_path}/ops.sqlite"
    ok(cli("join", "run", "--source", str(src), "--store", store, "--quiet"))
    # 4: a consumed line rewritten.
    part = src / "payments" / "p0.jsonl"
    lines = part.read_bytes().splitlines()
    rec = orjson.loads(lines[0])
    rec["amount_cents"] += 1
    part.write_bytes(b"".join(ln + b"\n" for ln in [orjson.dumps(rec)] + lines[1:]))
    res = cli("join", "run", "--source", str(src), "--store", store, "--quiet")
    assert res.returncode == 4, res.stderr
    one_line(res)
    # 3: a checkpoint this code did not write.
    st = Store(store)
    try:
        c = S.checkpoints.c
        with st.engine.begin() as conn:
            last = conn.execute(select(c.id).order_by(c.id.desc()).limit(1)).scalar()
            conn.execute(update(S.checkpoints).where(c.id == last).values(serializer="x/0"))
    finally:
        st.dispose()
    assert cli("join", "run", "--source", str(src), "--store", store,
               "--quiet").returncode == 3


def test_representative_6_repair_while_the_live_run_is_unchecked(tmp_path):
    rec = tmp_path / "receipts"
    env_model = ["--model-dir", str(tmp_path / "models")]
    ok(cli("receipts", "generate", "--seed", "3", "--out", str(rec)))
    store = f"sqlite:///{tmp_path}/ops.sqlite"
    res = cli("receipts", "run", "--source", str(rec), "--store", store, "--quiet",
              *env_model, "--batch-size", "50", "--checkpoint-every", "100000",
              "--crash-at", "after-sink-write:2")
    assert res.returncode == 137, res.stderr
    res = cli("receipts", "reconcile", "--store", store, *env_model)
    assert res.returncode == 6, res.stdout + res.stderr
    one_line(res)


def test_representative_8_broker_outage(tmp_path):
    if not (shutil.which("nats-server") or os.path.exists("/usr/sbin/nats-server")):
        need_service("NATS", "127.0.0.1", 4222)  # fails in CI, skips elsewhere
        pytest.skip("nats-server binary not installed")
    from tests.followutil import publish, split_recording, start_follow, wait_consumed
    from tests.test_follow_outages import PrivateNats
    server = PrivateNats(str(tmp_path / "js"))
    server.start()
    try:
        url = f"nats://127.0.0.1:{server.port}?stream=rs_exit8"
        rec = tmp_path / "rec"
        ok(cli("join", "generate", "--seed", "3", "--out", str(rec)))
        first, _ = split_recording(str(rec), str(tmp_path / "a"), str(tmp_path / "b"), 0.5)
        publish(str(tmp_path / "a"), url)
        store = f"sqlite:///{tmp_path}/ops.sqlite"
        proc = start_follow("join", url, store, "--outage-limit", "1", "--batch-size", "50")
        try:
            wait_consumed(store, "join", first, [proc])
            server.stop()
            t0 = time.monotonic()
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 8, out + err
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and "unreachable for" in lines[0], err
        # The line names the tail's last failure: the connection closed or refused.
        assert f"NATS at 127.0.0.1:{server.port}: " in lines[0] or \
            f"NATS at 127.0.0.1:{server.port} closed the connection" in lines[0], err
        assert time.monotonic() - t0 < 30
    finally:
        server.stop()
