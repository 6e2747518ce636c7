#!/usr/bin/env python3
"""Sends malformed DNS messages to a server while probing it with valid queries.

usage: fuzz_dns.py PORT PID NAMES [PACKETS] [RATE]

  PORT     the server's UDP/TCP port on 127.0.0.1
  PID      the server's process id (its RSS is read from /proc)
  NAMES    names in its records file (bench/gen_dns_data.py's naming), for the probes
  PACKETS  malformed UDP datagrams to send (default 1,000,000)
  RATE     datagrams per second (default 40,000: below what one core answers, so that a lost
           probe means a fault, not an overflowing socket buffer)

Kinds of garbage: random bytes, mutated and truncated valid queries, huge header counts,
malformed EDNS options (short cookies, options past the RDATA, two OPTs), bad labels and names
over 255 bytes, compression loops and forward pointers, responses, other opcodes with huge
counts, oversized datagrams; over TCP: garbage frames, huge length prefixes, half-sent frames.

Throughout and after, a UDP probe every 10 ms and a TCP probe every 100 ms ask for a known name
and check the address. Prints its figures; exits 1 if the process died, a probe failed, or RSS
grew more than 20% over its steady state (measured after valid traffic, before the garbage).
"""
import os
import random
import socket
import struct
import sys
import threading
import time

port, pid, names = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
packets = int(sys.argv[4]) if len(sys.argv) > 4 else 1_000_000
rate = int(sys.argv[5]) if len(sys.argv) > 5 else 40_000
addr = ("127.0.0.1", port)
rng = random.Random(7)


def name_of(i):
    return f"gateway.cluster-{i}.team-{i % 97}.clusters.xcc.test"


def ip_of(i):
    return bytes([10, (i >> 16) & 255, (i >> 8) & 255, i & 255])


def encode_name(name):
    out = b""
    for label in name.rstrip(".").split("."):
        out += bytes([len(label)]) + label.encode()
    return out + b"\x00"


def query(name, qtype=1, qid=None, opt=None, flags=0x0100):
    qid = rng.randrange(65536) if qid is None else qid
    arcount = 0 if opt is None else 1
    msg = struct.pack(">HHHHHH", qid, flags, 1, 0, 0, arcount)
    msg += encode_name(name) + struct.pack(">HH", qtype, 1)
    if opt is not None:
        msg += b"\x00" + struct.pack(">HHIH", 41, 1232, 0, len(opt)) + opt
    return msg


def option(code, data, declared=None):
    return struct.pack(">HH", code, len(data) if declared is None else declared) + data


def rss_kb():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def alive():
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


# --- garbage ---------------------------------------------------------------------------------

def valid_any():
    i = rng.randrange(names)
    opt = None if rng.random() < 0.5 else b""
    return query(name_of(i), rng.choice([1, 28, 5, 255, 6]), opt=opt)


def g_random():
    return bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 600)))


def g_mutated():
    m = bytearray(valid_any())
    for _ in range(rng.randrange(1, 8)):
        m[rng.randrange(len(m))] = rng.getrandbits(8)
    return bytes(m)


def g_truncated():
    m = valid_any()
    return m[: rng.randrange(len(m))]


def g_counts():
    m = bytearray(valid_any())
    for at in rng.sample([4, 6, 8, 10], rng.randrange(1, 5)):
        m[at:at + 2] = struct.pack(">H", rng.choice([0, 2, 255, 65535, rng.randrange(65536)]))
    if rng.random() < 0.5:
        m += bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 64)))
    return bytes(m)


def g_edns():
    i = rng.randrange(names)
    kind = rng.randrange(5)
    if kind == 0:  # cookie one byte short of a client cookie
        opt = option(10, b"\xab" * 7)
    elif kind == 1:  # option longer than the RDATA left
        opt = option(10, b"\xab" * 8, declared=9)
    elif kind == 2:  # stray bytes after the options
        opt = option(10, b"\xab" * 8) + b"\x00\x01"
    elif kind == 3:  # cookie of an illegal length between 8 and 16
        opt = option(10, b"\xab" * rng.randrange(9, 16))
    else:  # random options
        opt = b"".join(option(rng.randrange(65536), bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 12))),
                              declared=rng.randrange(0, 16)) for _ in range(rng.randrange(1, 4)))
    m = query(name_of(i), opt=opt)
    if rng.random() < 0.2:  # a second OPT
        m = bytearray(m)
        m[10:12] = struct.pack(">H", 2)
        m = bytes(m) + b"\x00" + struct.pack(">HHIH", 41, 512, 0, 0)
    return m


def g_labels():
    kind = rng.randrange(4)
    head = struct.pack(">HHHHHH", rng.randrange(65536), 0x0100, 1, 0, 0, 0)
    if kind == 0:  # a label length of 64..255, which only pointers and reserved types may use
        body = bytes([rng.randrange(64, 256)]) + b"a" * 63 + b"\x00"
    elif kind == 1:  # reserved label types 0x40 / 0x80
        body = bytes([rng.choice([0x40, 0x80, 0x41, 0xBF])]) + b"abc\x00"
    elif kind == 2:  # a name over 255 bytes
        body = (b"\x3f" + b"a" * 63) * rng.randrange(4, 8) + b"\x00"
    else:  # a name that never ends
        body = b"\x05hello" * rng.randrange(1, 40)
        return head + body
    return head + body + b"\x00\x01\x00\x01"


def g_pointers():
    head = struct.pack(">HHHHHH", rng.randrange(65536), 0x0100, 1, 0, 0, rng.randrange(2))
    kind = rng.randrange(4)
    if kind == 0:  # a pointer to itself
        body = b"\xc0\x0c"
    elif kind == 1:  # a forward pointer
        body = b"\xc0" + bytes([rng.randrange(13, 255)])
    elif kind == 2:  # two labels pointing at each other
        body = b"\x01a\xc0\x0e\x01b\xc0\x0c"
    else:  # a long chain of pointers, each to the one before
        body = b"\x01a\x00" + b"".join(struct.pack(">H", 0xC000 | (12 + 3 + 2 * k)) for k in range(40))
    return head + body + b"\x00\x01\x00\x01"


def g_response():
    m = bytearray(valid_any())
    m[2] |= 0x80
    return bytes(m)


def g_opcode():
    m = bytearray(valid_any())
    m[2] = (m[2] & 0x87) | (rng.choice([1, 2, 4, 5, 15]) << 3)
    m[6:8] = struct.pack(">H", rng.choice([0, 1, 65535]))
    return bytes(m)


def g_big():
    m = valid_any()
    return m + bytes(rng.getrandbits(8) for _ in range(rng.randrange(4100 - len(m), 9000)))


KINDS = [g_random, g_mutated, g_truncated, g_counts, g_edns, g_labels, g_pointers, g_response,
         g_opcode, g_big]

# A pool of distinct garbage, sent round-robin with fresh ids: generating every datagram in
# Python would cap the rate far below what the server handles.
POOL = [KINDS[k % len(KINDS)]() for k in range(30_000)]

# --- probes ----------------------------------------------------------------------------------

stats = {"udp_probes": 0, "udp_failures": 0, "tcp_probes": 0, "tcp_failures": 0, "max_rss_kb": 0}
failures = []
stop = threading.Event()


def check_answer(reply, i, qid):
    if len(reply) < 12 or struct.unpack(">H", reply[:2])[0] != qid:
        return "wrong id or short reply"
    flags, qd, an = struct.unpack(">HHH", reply[2:8])
    if flags & 0x000F != 0 or an < 1:
        return f"rcode {flags & 0xF}, {an} answers"
    if ip_of(i) not in reply[12:]:
        return "address missing"
    return None


def udp_probe(sock):
    i = rng.randrange(names)
    qid = rng.randrange(65536)
    sock.sendto(query(name_of(i), qid=qid), addr)
    try:
        reply, _ = sock.recvfrom(4096)
    except socket.timeout:
        return "timeout"
    return check_answer(reply, i, qid)


def tcp_probe():
    i = rng.randrange(names)
    qid = rng.randrange(65536)
    m = query(name_of(i), qid=qid)
    try:
        with socket.create_connection(addr, timeout=1.0) as s:
            s.sendall(struct.pack(">H", len(m)) + m)
            data = b""
            while len(data) < 2 or len(data) < 2 + struct.unpack(">H", data[:2])[0]:
                chunk = s.recv(4096)
                if not chunk:
                    return "closed"
                data += chunk
    except OSError as e:
        return f"tcp error {e}"
    return check_answer(data[2:], i, qid)


def prober():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(1.0)
    n = 0
    while not stop.is_set():
        err = udp_probe(sock)
        stats["udp_probes"] += 1
        if err:
            stats["udp_failures"] += 1
            failures.append(f"udp: {err}")
        if n % 10 == 0:
            err = tcp_probe()
            stats["tcp_probes"] += 1
            if err:
                stats["tcp_failures"] += 1
                failures.append(f"tcp: {err}")
        if alive():
            stats["max_rss_kb"] = max(stats["max_rss_kb"], rss_kb())
        n += 1
        time.sleep(0.01)


# --- TCP garbage -----------------------------------------------------------------------------

def tcp_garbage(rounds):
    """Garbage frames, oversized length prefixes and half-sent frames, a connection each."""
    kinds = 0
    for r in range(rounds):
        try:
            s = socket.create_connection(addr, timeout=1.0)
        except OSError:
            continue
        try:
            k = r % 3
            if k == 0:
                m = POOL[rng.randrange(len(POOL))][:4000]
                s.sendall(struct.pack(">H", len(m)) + m)
            elif k == 1:
                s.sendall(struct.pack(">H", rng.randrange(4097, 65536)) + b"\x00" * 100)
            else:
                m = valid_any()
                s.sendall(struct.pack(">H", len(m)) + m[: rng.randrange(len(m))])
            kinds += 1
        except OSError:
            pass
        finally:
            s.close()
    return kinds


# --- run -------------------------------------------------------------------------------------

def warm_up():
    """Valid traffic over UDP and TCP, so the baseline RSS is the serving steady state."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(1.0)
    for _ in range(20_000):
        i = rng.randrange(names)
        sock.sendto(query(name_of(i)), addr)
        try:
            sock.recvfrom(4096)
        except socket.timeout:
            pass
    for _ in range(200):
        tcp_probe()


if not alive():
    sys.exit(f"no process {pid}")
warm_up()
time.sleep(0.5)
baseline = rss_kb()
print(f"steady-state RSS after 20,000 valid UDP and 200 TCP queries: {baseline} kB", flush=True)

probe_thread = threading.Thread(target=prober, daemon=True)
probe_thread.start()

flood = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flood.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
flood.setblocking(False)
started = time.monotonic()
sent = 0
burst = 200
pool = len(POOL)
while sent < packets:
    for k in range(burst):
        m = POOL[(sent + k) % pool]
        try:
            flood.sendto(m, addr)
        except (BlockingIOError, OSError):
            pass
    sent += burst
    # Pace to the target rate; the server's replies are never read and simply dropped.
    ahead = sent / rate - (time.monotonic() - started)
    if ahead > 0:
        time.sleep(ahead)
    if sent % 100_000 == 0:
        print(f"  {sent:>9,} sent, RSS {rss_kb() if alive() else 'DEAD'} kB", flush=True)
        if not alive():
            break
flood_seconds = time.monotonic() - started
tcp_rounds = tcp_garbage(3000)
time.sleep(4)  # half-sent TCP frames time out, the last probes run
stop.set()
probe_thread.join()

ok = alive()
final = rss_kb() if ok else 0
growth = (final - baseline) / baseline * 100 if ok else float("inf")
peak_growth = (stats["max_rss_kb"] - baseline) / baseline * 100
print(f"malformed UDP datagrams sent: {sent:,} in {flood_seconds:.1f} s ({sent / flood_seconds:,.0f}/s), "
      f"{len(KINDS)} kinds; TCP garbage connections: {tcp_rounds:,}")
print(f"process alive: {ok}")
print(f"RSS: steady {baseline} kB, peak {stats['max_rss_kb']} kB ({peak_growth:+.1f}%), "
      f"after {final} kB ({growth:+.1f}%)")
print(f"probes: UDP {stats['udp_probes']} ({stats['udp_failures']} failed), "
      f"TCP {stats['tcp_probes']} ({stats['tcp_failures']} failed)")
for f in failures[:10]:
    print(f"  probe failure: {f}")

fail = False
if not ok:
    print("FAIL the server died"); fail = True
if growth > 20 or peak_growth > 20:
    print("FAIL RSS grew more than 20% over its steady state"); fail = True
if stats["udp_failures"] or stats["tcp_failures"] or stats["udp_probes"] == 0:
    print("FAIL a valid probe was not answered correctly"); fail = True
if not fail:
    print("PASS alive, RSS within 20%, every probe answered")
sys.exit(1 if fail else 0)
