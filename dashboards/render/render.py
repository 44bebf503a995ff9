#!/usr/bin/env python3
"""Render dashboards/fusebox.json to one PNG from real fusebox metrics.

Runs the `dashboard-workload` example on 127.0.0.1, has a real Prometheus scrape it (and,
when `redis-server` is on PATH, gives the workload a Redis that is stopped for a while and
started again), then evaluates every panel's own PromQL from the dashboard through
Prometheus's /api/v1/query_range and draws the panels in the dashboard's grid (gridPos),
with their titles and units. Every line is a query result; a panel whose queries all return
nothing says "No data". See dashboards/render/README.md.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402

plt.rcParams["axes.prop_cycle"] = plt.cycler(color=plt.get_cmap("tab20").colors)

ROOT = Path(__file__).resolve().parents[2]
BG, PANEL, TEXT, GRID = "#111217", "#181b1f", "#ccccdc", "#2c3235"
STATE_COLORS = {
    "closed": "#73bf69", "open": "#f2495c", "half_open": "#fade2a",
    "forced_open": "#c4162a", "disabled": "#8e8e8e", "metrics_only": "#5794f2",
}
Series = tuple[str, str, list[float], list[float]]  # refId, legend, unix times, values


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


def wait_ready(url: str, seconds: float = 30) -> None:
    until = time.time() + seconds
    while time.time() < until:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    sys.exit(f"{url} did not answer within {seconds} s")


def start_prometheus(data: Path, target: str | None, scrape: float) -> tuple[subprocess.Popen[bytes], str]:
    """Prometheus on a free port of 127.0.0.1, its data in `data`, scraping `target` if any."""
    port = free_port()
    config = data / "prometheus.yml"
    jobs = (f"scrape_configs:\n  - job_name: fusebox\n    static_configs:\n"
            f"      - targets: ['{target}']\n") if target else ""
    every = f"{round(scrape * 1000)}ms"
    config.write_text(f"global:\n  scrape_interval: {every}\n  scrape_timeout: {every}\n{jobs}")
    log = open(data / "prometheus.log", "ab")
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={data / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url + "/-/ready")
    return proc, url


def start_redis(port: int, data: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(data)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def build_workload() -> str:
    out = subprocess.run(
        ["cargo", "build", "-p", "fusebox-examples", "--example", "dashboard-workload",
         "--message-format=json-render-diagnostics"],
        cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True).stdout
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg["target"]["name"] == "dashboard-workload":
            return str(msg["executable"])
    sys.exit("cargo built no dashboard-workload executable")


def run_workload(args: argparse.Namespace, data: Path) -> tuple[float, float]:
    """Runs the workload under scraping; returns the window it covers (unix seconds)."""
    exe = build_workload()
    port = free_port()
    cmd = [exe, "--listen", f"127.0.0.1:{port}", "--seconds", str(args.seconds)]
    redis = prom = work = None
    try:
        if shutil.which("redis-server") and not args.no_redis:
            redis_port = free_port()
            redis = start_redis(redis_port, data)
            cmd += ["--redis", f"redis://127.0.0.1:{redis_port}/0"]
        # Prometheus starts first, so the workload's first seconds are scraped.
        prom, url = start_prometheus(data, f"127.0.0.1:{port}", args.scrape)
        # Prometheus hands new targets to its scrapers after up to 5 s: wait for it.
        until = time.time() + 30
        while not get_json(url + "/api/v1/targets")["data"]["activeTargets"]:
            if time.time() > until:
                sys.exit("Prometheus took no scrape target within 30 s")
            time.sleep(0.3)
        start = time.time()
        work = subprocess.Popen(cmd)
        stop_at, restart_at = start + 0.75 * args.seconds, start + 0.85 * args.seconds
        while work.poll() is None:
            if redis is not None and redis.poll() is None and stop_at <= time.time() < restart_at:
                print("stopping redis-server", flush=True)
                redis.terminate()
                redis.wait()
            elif redis is not None and redis.poll() is not None and time.time() >= restart_at:
                print("starting redis-server again", flush=True)
                redis = start_redis(redis_port, data)
            time.sleep(0.2)
        if work.returncode != 0:
            sys.exit(f"the workload failed ({work.returncode})")
        end = time.time()
    finally:
        for p in (work, redis, prom):
            if p is not None and p.poll() is None:
                p.terminate()
                p.wait()
    return start, end


def query(url: str, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
    qs = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    answer = get_json(f"{url}/api/v1/query_range?{qs}")
    if answer.get("status") != "success":
        sys.exit(f"{expr}: {answer}")
    return answer["data"]["result"]


def legend(fmt: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip()


def fetch_panels(url: str, dashboard: dict[str, Any], start: float, end: float,
                 step: float, rate: str) -> list[tuple[dict[str, Any], list[Series]]]:
    panels = []
    for panel in dashboard["panels"]:
        series: list[Series] = []
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$dependency", ".*").replace("$__rate_interval", rate)
            result = query(url, expr, start, end, step)
            print(f"{panel['title']}: {len(result)} series from {expr}")
            for r in result:
                ts = [float(t) for t, _ in r["values"]]
                vs = [float(v) for _, v in r["values"]]
                series.append((target.get("refId", ""), legend(target.get("legendFormat", ""),
                                                                r["metric"]), ts, vs))
        panels.append((panel, series))
    return panels


def unit_formatter(unit: str | None) -> FuncFormatter:
    def fmt(v: float, _pos: int) -> str:
        if unit == "percentunit":
            return f"{v * 100:.0f}%"
        if unit == "reqps":
            return f"{v:g} req/s"
        if unit == "s":
            return f"{v * 1000:.0f} ms" if abs(v) < 1 else f"{v:g} s"
        return f"{v:g}"
    return FuncFormatter(fmt)


def to_dates(ts: list[float]) -> list[datetime]:
    return [datetime.fromtimestamp(t, timezone.utc) for t in ts]


def draw_state_timeline(ax: plt.Axes, series: list[Series], step: float) -> None:
    rows: dict[str, int] = {}
    seen: set[str] = set()
    for _, name, ts, _ in series:
        dep, _, state = name.rpartition(" ")
        row = rows.setdefault(dep, len(rows))
        seen.add(state)
        bars = [(mdates.date2num(d), step / 86400) for d in to_dates(ts)]
        ax.broken_barh(bars, (row - 0.4, 0.8), color=STATE_COLORS.get(state, "#b877d9"),
                       linewidth=0)
    ax.set_yticks(list(rows.values()), list(rows.keys()))
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.invert_yaxis()
    handles = [plt.Rectangle((0, 0), 1, 1, color=STATE_COLORS.get(s, "#b877d9")) for s in sorted(seen)]
    legend_below(ax, handles, sorted(seen), 6)


def legend_below(ax: plt.Axes, handles: list[Any], labels: list[str], ncol: int) -> None:
    """The legend under the time axis's labels (0.3 in below the plot)."""
    below = 0.3 / ax.get_position().height / ax.figure.get_figheight()
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(0.0, -below), ncol=ncol,
              fontsize=6.5, frameon=False, labelcolor=TEXT, handlelength=1.5,
              columnspacing=1.0, borderaxespad=0.0)


def overrides(panel: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The fieldConfig overrides matched by refId (byFrameRefID): refId -> {property: value}."""
    out: dict[str, dict[str, Any]] = {}
    for o in panel.get("fieldConfig", {}).get("overrides", []):
        if o["matcher"]["id"] == "byFrameRefID":
            props = out.setdefault(o["matcher"]["options"], {})
            props.update({p["id"]: p["value"] for p in o["properties"]})
    return out


def draw_timeseries(ax: plt.Axes, panel: dict[str, Any], series: list[Series], ncol: int) -> None:
    """Lines on the panel's unit; a refId overridden to the right axis gets its own axis, one
    overridden to a dashed line style is dashed (as is a threshold), and an axis with
    `decimals` 0 has whole-number ticks."""
    by_ref = overrides(panel)
    defaults = panel.get("fieldConfig", {}).get("defaults", {})
    right, right_max = None, None
    handles = []
    for ref, name, ts, vs in series:
        props = by_ref.get(ref, {})
        on = ax
        if props.get("custom.axisPlacement") == "right":
            if right is None:
                right = ax.twinx()
                right.tick_params(colors=TEXT, labelsize=7)
                right_max = props.get("max")
                right.yaxis.set_major_formatter(unit_formatter(props.get("unit")))
                if props.get("decimals") == 0:
                    right.yaxis.set_major_locator(MaxNLocator(integer=True))
                right._get_lines = ax._get_lines  # one colour cycle for both axes
            on = right
        dashed = "threshold" in name or props.get("custom.lineStyle", {}).get("fill") == "dash"
        handles += on.plot(to_dates(ts), vs, linewidth=1.1, linestyle="--" if dashed else "-",
                           label=name)
    # Limits set once the lines are drawn: set before, they would stop the autoscaling.
    ax.set_ylim(bottom=0)
    if right is not None:
        right.set_ylim(0, right_max)
    ax.yaxis.set_major_formatter(unit_formatter(defaults.get("unit")))
    if defaults.get("decimals") == 0:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    legend_below(ax, handles, [h.get_label() for h in handles], ncol)


def render(panels: list[tuple[dict[str, Any], list[Series]]], title: str, start: float,
           end: float, step: float, out: Path) -> None:
    unit_in, width_in = 0.34, 16.0  # a grid row's height and the figure's width, inches
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p, _ in panels)
    height_in = rows * unit_in + 0.3
    fig = plt.figure(figsize=(width_in, height_in), facecolor=BG)
    fig.text(0.005, 1 - 0.05 / height_in, title, color=TEXT, fontsize=11, va="top")
    for panel, series in panels:
        g = panel["gridPos"]
        ncol = 6 if g["w"] == 24 else 4
        legend_rows = -(-len(series) // ncol) if panel["type"] != "state-timeline" else 1
        # The panel's cell, in inches from the top left, less its title, axis labels, legend.
        left = g["x"] / 24 * width_in + 0.75
        width = g["w"] / 24 * width_in - 0.95
        if any(o.get("custom.axisPlacement") == "right" for o in overrides(panel).values()):
            width -= 0.4  # the right axis's labels
        top = 0.3 + g["y"] * unit_in + 0.3
        height = g["h"] * unit_in - 0.3 - 0.35 - 0.13 * legend_rows
        ax = fig.add_axes((left / width_in, 1 - (top + height) / height_in,
                           width / width_in, height / height_in), facecolor=PANEL)
        ax.set_title(panel["title"], color=TEXT, fontsize=9.5, loc="left")
        ax.tick_params(colors=TEXT, labelsize=7)
        for spine in ax.spines.values():
            spine.set_color(GRID)
        ax.grid(color=GRID, linewidth=0.5)
        ax.set_axisbelow(True)
        ax.set_xlim(to_dates([start, end]))
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
        if not series:
            ax.text(0.5, 0.5, "No data", color=TEXT, ha="center", va="center",
                    transform=ax.transAxes, fontsize=12)
            ax.set_yticks([])
        elif panel["type"] == "state-timeline":
            draw_state_timeline(ax, series, step)
        else:
            draw_timeseries(ax, panel, series, ncol)
    fig.savefig(out, dpi=80, facecolor=BG)
    print(f"wrote {out} ({out.stat().st_size // 1024} KiB)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=int, default=180, help="workload length (default 180)")
    p.add_argument("--scrape", type=float, default=1.0, help="scrape interval, s (default 1)")
    p.add_argument("--step", type=float, default=2.0, help="query_range step, s (default 2)")
    p.add_argument("--rate-interval", default="10s", help="what $__rate_interval becomes (default 10s)")
    p.add_argument("--no-redis", action="store_true", help="run without a Redis store")
    p.add_argument("--data", type=Path, help="keep Prometheus's data here (default: a temporary directory)")
    p.add_argument("--render-only", nargs=2, type=float, metavar=("START", "END"),
                   help="run no workload: render START..END (unix seconds) from the data in --data")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard.png", help="the PNG to write")
    args = p.parse_args()
    if shutil.which("prometheus") is None:
        sys.exit("prometheus is not on PATH (Debian: apt-get install prometheus)")
    if args.render_only and args.data is None:
        sys.exit("--render-only needs --data")
    dashboard = json.loads((ROOT / "dashboards" / "fusebox.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data or Path(tmp)
        data.mkdir(parents=True, exist_ok=True)
        if args.render_only:
            start, end = args.render_only
        else:
            start, end = run_workload(args, data)
            print(f"window {start:.0f}..{end:.0f}")
            if args.data:
                print(f"render it again with: dashboards/render/render.py --data {data} "
                      f"--render-only {start:.0f} {end:.0f}")
        prom, url = start_prometheus(data, None, args.scrape)
        try:
            panels = fetch_panels(url, dashboard, start, end, args.step, args.rate_interval)
        finally:
            prom.terminate()
            prom.wait()
    empty = [p["title"] for p, s in panels if not s]
    when = datetime.fromtimestamp(start, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    title = (f"{dashboard['title']} — dashboards/fusebox.json on the dashboard-workload example, "
             f"{end - start:.0f} s from {when}, scraped every {args.scrape:g} s, "
             f"$__rate_interval = {args.rate_interval}")
    render(panels, title, start, end, args.step, args.out)
    if empty:
        print("panels with no data: " + ", ".join(empty))


if __name__ == "__main__":
    main()
