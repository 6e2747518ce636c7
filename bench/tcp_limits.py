#!/usr/bin/env python3
"""TCP under descriptor pressure: idle and half-sent connections must not lock clients out.

usage: tcp_limits.py PORT PID NAMES [IDLE] [HALF]

Opens IDLE (default 2,000) idle TCP connections and HALF (default 200) connections that send a
length prefix and part of a query, then times fresh queries: 20 over new TCP connections and 20
over UDP, while all those connections are held. Then waits for the server to close the half-sent
ones. Reads the server's CPU time from /proc over the whole run.

Bars (exit 1 on a miss): every fresh query answered correctly within 50 ms; every half-sent
connection closed by the server within 5 s of its last byte.
"""
import os
import resource
import select
import socket
import struct
import sys
import time

port, pid, names = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
idle_n = int(sys.argv[4]) if len(sys.argv) > 4 else 2000
half_n = int(sys.argv[5]) if len(sys.argv) > 5 else 200
addr = ("127.0.0.1", port)

# This client holds more sockets than a default soft limit allows.
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def name_of(i):
    return f"gateway.cluster-{i}.team-{i % 97}.clusters.xcc.test"


def ip_of(i):
    return bytes([10, (i >> 16) & 255, (i >> 8) & 255, i & 255])


def query(i, qid):
    msg = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name_of(i).split("."):
        msg += bytes([len(label)]) + label.encode()
    return msg + b"\x00\x00\x01\x00\x01"


def correct(reply, i, qid):
    return (len(reply) >= 12 and struct.unpack(">H", reply[:2])[0] == qid
            and reply[3] & 0x0F == 0 and ip_of(i) in reply[12:])


def cpu_seconds():
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fresh_tcp(i):
    qid = (i * 7) & 0xFFFF
    m = query(i % names, qid)
    start = time.monotonic()
    try:
        with socket.create_connection(addr, timeout=2) as s:
            s.sendall(struct.pack(">H", len(m)) + m)
            data = b""
            while len(data) < 2 or len(data) < 2 + struct.unpack(">H", data[:2])[0]:
                chunk = s.recv(4096)
                if not chunk:
                    return None, "closed"
                data += chunk
    except OSError as e:
        return None, str(e)
    took = time.monotonic() - start
    return took, None if correct(data[2:], i % names, qid) else "wrong answer"


def fresh_udp(i):
    qid = (i * 13) & 0xFFFF
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(2)
        start = time.monotonic()
        s.sendto(query(i % names, qid), addr)
        try:
            reply, _ = s.recvfrom(4096)
        except socket.timeout:
            return None, "timeout"
    took = time.monotonic() - start
    return took, None if correct(reply, i % names, qid) else "wrong answer"


cpu_start = cpu_seconds()
wall_start = time.monotonic()

idle = []
for _ in range(idle_n):
    try:
        idle.append(socket.create_connection(addr, timeout=2))
    except OSError as e:
        print(f"idle connect failed: {e}")
        break
print(f"idle connections opened: {len(idle)}", flush=True)

half = []
for k in range(half_n):
    m = query(k % names, k)
    try:
        s = socket.create_connection(addr, timeout=2)
        s.sendall(struct.pack(">H", len(m)) + m[:7])
        half.append((s, time.monotonic()))
    except OSError as e:
        print(f"half-sent connect failed: {e}")
        break
print(f"half-sent connections opened: {len(half)}", flush=True)

times, errors = [], []
for i in range(20):
    for probe in (fresh_tcp, fresh_udp):
        took, err = probe(i * 31 + 5)
        if err:
            errors.append(f"{probe.__name__}: {err}")
        else:
            times.append((probe.__name__, took))
tcp_ms = [t * 1000 for n, t in times if n == "fresh_tcp"]
udp_ms = [t * 1000 for n, t in times if n == "fresh_udp"]

# Wait for the server to close the half-sent connections.
open_half = {s.fileno(): (s, t) for s, t in half}
poller = select.poll()
for fd in open_half:
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
closed_after = []
deadline = time.monotonic() + 15
while open_half and time.monotonic() < deadline:
    for fd, _ in poller.poll(50):
        poller.unregister(fd)
        s, sent = open_half.pop(fd)
        try:
            data = s.recv(4096)
        except OSError:
            data = b""
        if data:  # an answer to half a query would be a bug; count it as not closed
            errors.append("half-sent connection got data")
            continue
        closed_after.append(time.monotonic() - sent)
        s.close()

cpu = cpu_seconds() - cpu_start
wall = time.monotonic() - wall_start
idle_closed = 0
poller = select.poll()
for s in idle:
    poller.register(s.fileno(), select.POLLIN | select.POLLHUP)
idle_closed = len(poller.poll(0))
for s in idle:
    s.close()

print(f"fresh TCP queries: {len(tcp_ms)} answered, max {max(tcp_ms, default=0):.1f} ms, "
      f"median {sorted(tcp_ms)[len(tcp_ms) // 2] if tcp_ms else 0:.1f} ms")
print(f"fresh UDP queries: {len(udp_ms)} answered, max {max(udp_ms, default=0):.1f} ms, "
      f"median {sorted(udp_ms)[len(udp_ms) // 2] if udp_ms else 0:.1f} ms")
print(f"half-sent connections closed by the server: {len(closed_after)} of {len(half)}, "
      f"after {min(closed_after, default=0):.2f}-{max(closed_after, default=0):.2f} s")
print(f"idle connections the server had closed to make room: {idle_closed} of {len(idle)}")
print(f"server CPU over the run: {cpu:.2f} s in {wall:.1f} s wall ({cpu / wall * 100:.0f}%)")
for e in errors[:10]:
    print(f"  error: {e}")

fail = False
if errors or len(tcp_ms) < 20 or len(udp_ms) < 20:
    print("FAIL a fresh query was not answered correctly"); fail = True
if max(tcp_ms + udp_ms, default=1e9) > 50:
    print("FAIL a fresh query took more than 50 ms"); fail = True
if len(closed_after) < len(half) or max(closed_after, default=0) > 5:
    print("FAIL a half-sent connection stayed open more than 5 s"); fail = True
if len(idle) < idle_n or len(half) < half_n:
    print("FAIL could not open every connection"); fail = True
if not fail:
    print("PASS fresh queries within 50 ms, half-sent connections closed within 5 s")
sys.exit(1 if fail else 0)
