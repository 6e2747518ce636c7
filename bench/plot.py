#!/usr/bin/env python3
"""SVG charts of benchmark figures, from the benchmark scripts' own output (standard library only).

Input, one chart per file:
- `*.txt`: what a bench script printed, saved as is (`bench/dns.sh | tee docs/bench-data/dns.txt`).
  Understood: the server table of `bench/dns.sh` (CPU per query of each server at each rate) and
  the `pod lookup:` lines of `bench/pods.sh` (p50 and p99 of each name, in ms).
- `*.tsv`: any table. Lines starting with `#` set options (`# title: ...`, `# ylabel: ...`,
  `# kind: bar` (grouped bars, the default) or `# kind: line`, `# note: ...`); the first other
  line is the header (the category column, then one column per series); each further line is a
  category and its values. An empty cell or `-` is a missing value.

Usage:
  bench/plot.py FILE [-o OUT.svg]     one chart (stdout without -o)
  bench/plot.py FILE --tsv            the table parsed from FILE, as TSV
  bench/plot.py --all DATA_DIR OUT_DIR     DATA_DIR/<name>.{txt,tsv} -> OUT_DIR/bench-<name>.svg
  bench/plot.py --check DATA_DIR OUT_DIR   exit 1, naming them, when those SVGs are stale

The output depends on nothing but the input (no dates, no randomness), so the SVGs checked in
can be compared with what this script makes of the data checked in beside them.
"""

import argparse
import decimal
import math
import os
import re
import sys


class Table:
    """A chart's data: categories along x, one value per series per category."""

    def __init__(self, title, ylabel, categories, series, kind="bar", note=""):
        self.title = title
        self.ylabel = ylabel
        self.categories = categories
        # [(name, [value or None per category])]
        self.series = series
        self.kind = kind
        self.note = note

    def to_tsv(self):
        lines = [f"# title: {self.title}", f"# ylabel: {self.ylabel}", f"# kind: {self.kind}"]
        if self.note:
            lines.append(f"# note: {self.note}")
        lines.append("\t".join(["category"] + [name for name, _ in self.series]))
        for i, category in enumerate(self.categories):
            cells = [category]
            for _, values in self.series:
                cells.append("-" if values[i] is None else fmt(values[i]))
            lines.append("\t".join(cells))
        return "\n".join(lines) + "\n"


class InputError(Exception):
    pass


def number(cell):
    cell = cell.strip()
    if cell in ("", "-"):
        return None
    try:
        return float(cell.replace(",", ""))
    except ValueError as e:
        raise InputError(f"not a number: {cell!r}") from e


def parse_tsv(text, name):
    options = {}
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("#"):
            key, sep, value = line[1:].partition(":")
            if sep:
                options[key.strip()] = value.strip()
            continue
        rows.append(line.split("\t"))
    if len(rows) < 2:
        raise InputError(f"{name}: a header and at least one row are needed")
    header = rows[0]
    if len(header) < 2:
        raise InputError(f"{name}: the header needs a category column and one series")
    categories = []
    columns = [[] for _ in header[1:]]
    for row in rows[1:]:
        if len(row) != len(header):
            raise InputError(f"{name}: row {row[0]!r} has {len(row)} cells, the header {len(header)}")
        categories.append(row[0])
        for i, cell in enumerate(row[1:]):
            columns[i].append(number(cell))
    kind = options.get("kind", "bar")
    if kind not in ("bar", "line"):
        raise InputError(f"{name}: kind {kind!r} is neither bar nor line")
    return Table(
        options.get("title", name),
        options.get("ylabel", ""),
        categories,
        list(zip(header[1:], columns)),
        kind,
        options.get("note", ""),
    )


DNS_ROW = re.compile(
    r"^(?P<name>\S(?:.*?\S)?)\s{2,}(?P<max>\d+)\s+(?P<cpu1>[\d.]+|-)\s+(?P<lost1>\d+|-)"
    r"\s+(?P<cpu2>[\d.]+|-)\s+(?P<lost2>\d+|-)"
)


def parse_dns(text, name):
    """The server table of bench/dns.sh: CPU µs per query of each server at both rates."""
    lines = text.splitlines()
    for start, line in enumerate(lines):
        if line.startswith("server") and "CPU µs/query @" in line:
            break
    else:
        raise InputError(f"{name}: no server table of bench/dns.sh")
    rates = re.findall(r"CPU µs/query @(\d+)", lines[start])
    if len(rates) != 2:
        raise InputError(f"{name}: expected two rates in {lines[start]!r}")
    categories, first, second = [], [], []
    for line in lines[start + 1 :]:
        m = DNS_ROW.match(line)
        if not m:
            break
        categories.append(m["name"])
        first.append(number(m["cpu1"]))
        second.append(number(m["cpu2"]))
    if not categories:
        raise InputError(f"{name}: the server table of bench/dns.sh has no rows")
    return Table(
        "DNS serving: server CPU per answered query (bench/dns.sh)",
        "CPU µs per query (lower is better)",
        categories,
        [(f"at {int(rates[0]):,} q/s", first), (f"at {int(rates[1]):,} q/s", second)],
        "bar",
        "no bar: the server could not keep up at that rate",
    )


POD_LOOKUP = re.compile(r"^pod lookup: (?P<name>\S+) .*?\bp50_us=(?P<p50>\d+) p99_us=(?P<p99>\d+)")


def parse_pods(text, name):
    """The `pod lookup:` lines of bench/pods.sh: p50 and p99 of each name, in ms."""
    categories, p50, p99 = [], [], []
    for line in text.splitlines():
        m = POD_LOOKUP.match(line)
        if m:
            categories.append(m["name"])
            p50.append(int(m["p50"]) / 1000)
            p99.append(int(m["p99"]) / 1000)
    if not categories:
        raise InputError(f"{name}: no `pod lookup:` lines of bench/pods.sh")
    return Table(
        "Lookup from a pod through CoreDNS (bench/pods.sh)",
        "getaddrinfo() A + AAAA, ms",
        categories,
        [("p50", p50), ("p99", p99)],
        "bar",
    )


def read(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    name = os.path.basename(path)
    if path.endswith(".tsv"):
        return parse_tsv(text, name)
    if "pod lookup:" in text:
        return parse_pods(text, name)
    if "CPU µs/query @" in text:
        return parse_dns(text, name)
    raise InputError(f"{name}: neither a .tsv nor the output of bench/dns.sh or bench/pods.sh")


# --- SVG -------------------------------------------------------------------------------------

COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f"]
WIDTH, HEIGHT = 760, 420
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 50, 95


def fmt(value):
    """At most two decimals, halves rounded up (0.245 -> 0.25), no trailing zeros."""
    if value == int(value):
        return str(int(value))
    rounded = decimal.Decimal(repr(value)).quantize(decimal.Decimal("0.01"), decimal.ROUND_HALF_UP)
    return f"{rounded}".rstrip("0").rstrip(".")


def esc(text):
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def nice_step(top):
    """A round tick step giving about five ticks up to `top`."""
    raw = top / 5
    magnitude = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 2.5, 5, 10):
        if raw <= factor * magnitude:
            return factor * magnitude
    return 10 * magnitude


def render(table):
    values = [v for _, vs in table.series for v in vs if v is not None]
    if not values:
        raise InputError(f"{table.title}: no values")
    top = max(values)
    step = nice_step(top if top > 0 else 1)
    ymax = step * math.ceil(top / step) if top > 0 else step
    if ymax == top:
        ymax += step
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM
    base = TOP + plot_h

    def y(v):
        return base - v / ymax * plot_h

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{WIDTH / 2:.0f}" y="22" text-anchor="middle" font-size="15" '
        f'font-weight="bold">{esc(table.title)}</text>',
    ]
    ticks = int(round(ymax / step))
    for i in range(ticks + 1):
        v = i * step
        yy = y(v)
        out.append(
            f'<line x1="{LEFT}" y1="{yy:.1f}" x2="{WIDTH - RIGHT}" y2="{yy:.1f}" '
            f'stroke="{"#999" if i == 0 else "#e3e3e3"}"/>'
        )
        out.append(f'<text x="{LEFT - 6}" y="{yy + 4:.1f}" text-anchor="end">{fmt(v)}</text>')
    out.append(
        f'<text transform="translate(16 {TOP + plot_h / 2:.0f}) rotate(-90)" '
        f'text-anchor="middle">{esc(table.ylabel)}</text>'
    )
    n = len(table.categories)
    slot = plot_w / n
    for i, category in enumerate(table.categories):
        cx = LEFT + slot * (i + 0.5)
        out.append(f'<text x="{cx:.1f}" y="{base + 18:.1f}" text-anchor="middle">{esc(category)}</text>')
    if table.kind == "bar":
        k = len(table.series)
        bar = min(60.0, slot * 0.8 / k)
        for s, (_, vs) in enumerate(table.series):
            color = COLORS[s % len(COLORS)]
            for i, v in enumerate(vs):
                if v is None:
                    continue
                x = LEFT + slot * (i + 0.5) - bar * k / 2 + bar * s
                out.append(
                    f'<rect x="{x:.1f}" y="{y(v):.1f}" width="{bar - 2:.1f}" '
                    f'height="{base - y(v):.1f}" fill="{color}"/>'
                )
                out.append(
                    f'<text x="{x + (bar - 2) / 2:.1f}" y="{y(v) - 4:.1f}" text-anchor="middle" '
                    f'font-size="11">{fmt(v)}</text>'
                )
    else:
        for s, (_, vs) in enumerate(table.series):
            color = COLORS[s % len(COLORS)]
            points = [
                (LEFT + slot * (i + 0.5), y(v)) for i, v in enumerate(vs) if v is not None
            ]
            path = " ".join(f"{x:.1f},{yy:.1f}" for x, yy in points)
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
            for (x, yy), v in zip(points, [v for v in vs if v is not None]):
                out.append(f'<circle cx="{x:.1f}" cy="{yy:.1f}" r="3" fill="{color}"/>')
                out.append(
                    f'<text x="{x:.1f}" y="{yy - 7:.1f}" text-anchor="middle" font-size="11">{fmt(v)}</text>'
                )
    # legend, one row under the category labels
    lx = LEFT
    ly = base + 44
    for s, (name, _) in enumerate(table.series):
        color = COLORS[s % len(COLORS)]
        out.append(f'<rect x="{lx}" y="{ly - 10}" width="12" height="12" fill="{color}"/>')
        out.append(f'<text x="{lx + 17}" y="{ly}">{esc(name)}</text>')
        lx += 30 + 7 * len(name)
    if table.note:
        out.append(f'<text x="{LEFT}" y="{ly + 24}" font-size="11" fill="#555">{esc(table.note)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def pairs(data_dir, out_dir):
    for entry in sorted(os.listdir(data_dir)):
        stem, ext = os.path.splitext(entry)
        if ext in (".txt", ".tsv"):
            yield os.path.join(data_dir, entry), os.path.join(out_dir, f"bench-{stem}.svg")


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file", nargs="?", help="benchmark output (.txt) or table (.tsv)")
    parser.add_argument("-o", "--output", help="write the SVG here instead of stdout")
    parser.add_argument("--tsv", action="store_true", help="print the parsed table as TSV")
    parser.add_argument("--all", nargs=2, metavar=("DATA_DIR", "OUT_DIR"))
    parser.add_argument("--check", nargs=2, metavar=("DATA_DIR", "OUT_DIR"))
    args = parser.parse_args(argv)
    try:
        if args.all or args.check:
            data_dir, out_dir = args.all or args.check
            stale = []
            for source, target in pairs(data_dir, out_dir):
                svg = render(read(source))
                if args.all:
                    with open(target, "w", encoding="utf-8") as f:
                        f.write(svg)
                    print(f"{source} -> {target}")
                else:
                    try:
                        with open(target, encoding="utf-8") as f:
                            current = f.read()
                    except FileNotFoundError:
                        current = None
                    if current != svg:
                        stale.append(f"{target} (from {source})")
            if stale:
                print("stale or missing; run bench/plot.py --all " + " ".join(args.check) + ":", file=sys.stderr)
                for line in stale:
                    print(f"  {line}", file=sys.stderr)
                return 1
            return 0
        if not args.file:
            parser.error("name a FILE, or --all / --check")
        table = read(args.file)
        text = table.to_tsv() if args.tsv else render(table)
        if args.output:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(text)
        else:
            sys.stdout.write(text)
        return 0
    except (InputError, OSError) as e:
        print(f"plot.py: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
