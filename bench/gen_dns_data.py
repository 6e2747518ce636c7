#!/usr/bin/env python3
"""Writes the same N host names for both servers, and one query file for dnsperf.

usage: gen_dns_data.py OUT_DIR NAMES [QUERIES]

OUT_DIR/records.yaml   xcc-agent records file
OUT_DIR/db.xcc.test    RFC 1035 zone file for CoreDNS's `file` plugin
OUT_DIR/queries.txt    dnsperf input: 90% A hits, 5% AAAA on A-only names (NODATA), 5% NXDOMAIN
"""
import os
import random
import sys

out, n = sys.argv[1], int(sys.argv[2])
queries = int(sys.argv[3]) if len(sys.argv) > 3 else 200_000
rng = random.Random(42)
os.makedirs(out, exist_ok=True)


def name(i):
    # XCC-shaped names: gateway.<cluster>.<namespace>.clusters.xcc.test
    return f"gateway.cluster-{i}.team-{i % 97}.clusters.xcc.test"


def addr(i):
    return f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"


with open(os.path.join(out, "records.yaml"), "w") as f:
    f.write("records:\n")
    for i in range(n):
        f.write(f"  {name(i)}:\n    addresses: [{addr(i)}]\n")

with open(os.path.join(out, "db.xcc.test"), "w") as f:
    f.write("$ORIGIN xcc.test.\n$TTL 30\n")
    f.write("@ IN SOA ns.xcc.test. hostmaster.xcc.test. 1 3600 600 86400 30\n")
    f.write("@ IN NS ns.xcc.test.\n")
    for i in range(n):
        f.write(f"{name(i)}. IN A {addr(i)}\n")

with open(os.path.join(out, "queries.txt"), "w") as f:
    for _ in range(queries):
        r = rng.random()
        i = rng.randrange(n)
        if r < 0.90:
            f.write(f"{name(i)} A\n")
        elif r < 0.95:
            f.write(f"{name(i)} AAAA\n")
        else:
            f.write(f"missing-{i}.clusters.xcc.test A\n")
