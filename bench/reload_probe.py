#!/usr/bin/env python3
"""Reloads of a large records file while a UDP probe asks every millisecond.

usage: reload_probe.py PORT PID ADMIN_PORT RECORDS_FILE NAMES

Steps, each waited for through the agent's /metrics:
  1. a changed file of the same size (one address different): loaded;
  2. the same file with a bad address in its last entry: refused, the table stays;
  3. an empty file: refused, the table stays;
and after each step the agent's RSS. The probe asks for a name the steps never change and
records every answer's latency.

Bars (exit 1 on a miss): no probe lost or wrong, none slower than 50 ms; RSS after the failed
load within 20% of RSS before it; the refused files leave every name served.
"""
import re
import shutil
import socket
import struct
import sys
import multiprocessing
import time
import urllib.request

port, pid, admin, path, names = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                 sys.argv[4], int(sys.argv[5]))
addr = ("127.0.0.1", port)


def name_of(i):
    return f"gateway.cluster-{i}.team-{i % 97}.clusters.xcc.test"


def query(i, qid):
    msg = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name_of(i).split("."):
        msg += bytes([len(label)]) + label.encode()
    return msg + b"\x00\x00\x01\x00\x01"


def rss_mb():
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024


def metric(name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name):
            total += float(line.split()[-1])
    return total


def reloads(result):
    return metric(f'xcc_records_reloads_total{{result="{result}"}}')


def wait_for(what, cond, timeout=30):
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            sys.exit(f"timed out waiting for {what}")
        time.sleep(0.01)
    return time.monotonic() - start


def prober(stop, results):
    """Runs in its own process: the file writes of the main one would otherwise hold the GIL
    and show up as server latency."""
    latencies, failures = [], []
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(1.0)
    qid = 0
    expected = bytes([10, 0, 0, 1])  # name 1, never changed by the steps
    while not stop.is_set():
        qid = (qid + 1) & 0xFFFF
        start = time.monotonic()
        sock.sendto(query(1, qid), addr)
        try:
            while True:
                reply, _ = sock.recvfrom(4096)
                if struct.unpack(">H", reply[:2])[0] == qid:
                    break
        except socket.timeout:
            failures.append("timeout")
            continue
        latencies.append(time.monotonic() - start)
        if reply[3] & 0x0F != 0 or expected not in reply[12:]:
            failures.append("wrong answer")
        time.sleep(0.001)
    results.put((latencies, failures))


with open(path) as f:
    original = f.read()
last = f"  {name_of(names - 1)}:\n    addresses: ["
assert last in original
changed = original.replace("addresses: [10.0.0.2]", "addresses: [10.0.0.200]", 1)
bad = original[: original.rindex(last)] + last + "10.0.0.300]\n"

stop = multiprocessing.Event()
results = multiprocessing.Queue()
probe_process = multiprocessing.Process(target=prober, args=(stop, results))
probe_process.start()
time.sleep(0.5)
print(f"RSS at start ({len(original) / 1e6:.1f} MB file, {names:,} names): {rss_mb():.0f} MB")

ok_before = reloads("ok")
with open(path + ".new", "w") as f:
    f.write(changed)
shutil.move(path + ".new", path)
took = wait_for("the changed file to load", lambda: reloads("ok") > ok_before)
time.sleep(0.3)
rss_loaded = rss_mb()
print(f"changed file loaded {took:.2f} s after it was written; RSS {rss_loaded:.0f} MB")

failed_before = reloads("invalid_records")
with open(path + ".new", "w") as f:
    f.write(bad)
shutil.move(path + ".new", path)
took = wait_for("the bad file to be refused", lambda: reloads("invalid_records") > failed_before)
time.sleep(0.3)
rss_failed = rss_mb()
growth = (rss_failed - rss_loaded) / rss_loaded * 100
print(f"bad file refused {took:.2f} s after it was written; RSS {rss_failed:.0f} MB ({growth:+.1f}%)")

empty_before = reloads("empty_reload")
with open(path + ".new", "w") as f:
    f.write("")
shutil.move(path + ".new", path)
took = wait_for("the empty file to be refused", lambda: reloads("empty_reload") > empty_before)
names_served = metric("xcc_dns_table_names")
time.sleep(0.3)
stop.set()
latencies, failures = results.get()
probe_process.join()

lat_ms = sorted(x * 1000 for x in latencies)
p99 = lat_ms[int(len(lat_ms) * 0.99)] if lat_ms else 0
print(f"empty file refused {took:.2f} s after it was written; names served: {names_served:,.0f}")
print(f"probes: {len(lat_ms)} answered, {len(failures)} lost or wrong; latency p50 "
      f"{lat_ms[len(lat_ms) // 2]:.2f} ms, p99 {p99:.2f} ms, max {lat_ms[-1]:.2f} ms")

fail = False
if failures:
    print(f"FAIL {len(failures)} probes lost or wrong"); fail = True
if not lat_ms or lat_ms[-1] > 50:
    print("FAIL a probe took more than 50 ms"); fail = True
if growth > 20:
    print("FAIL RSS after the failed load grew more than 20%"); fail = True
if names_served != names:
    print("FAIL the refused files changed the table"); fail = True
if not fail:
    print("PASS answers never waited on a reload; a failed load gave its memory back; refused files kept the table")
sys.exit(1 if fail else 0)
