#!/usr/bin/env python3
"""Pictures and panel tables of the Grafana dashboards, drawn from their JSON (no Grafana needed).

    python3 hack/dashboard_picture.py            # writes docs/images/<dashboard>.svg
    python3 hack/dashboard_picture.py --table    # prints README's Markdown table of panels

Each SVG places every panel where its ``gridPos`` puts it (Grafana's 24-column grid, 30 px per row unit)
with its title and type; the curves and numbers inside are SAMPLE DATA made up from the panel title (a
fixed hash, so the files are reproducible), and every picture says so in its caption. Not a screenshot:
it shows the layout a user gets, not any real cluster. ``tests/unit/chart/test_readme_monitoring.py`` fails
when the files or README's table differ from what this script produces.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from html import escape
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DASHBOARDS = ROOT / "charts" / "ctxfit" / "dashboards"
IMAGES = ROOT / "docs" / "images"
COLUMN_PX, ROW_PX, GAP = 40, 30, 4
WIDTH = 24 * COLUMN_PX
CAPTION_PX = 44
COLORS = ("#73bf69", "#f2cc0c", "#5794f2", "#ff780a", "#b877d9")


def _samples(title: str, count: int) -> list[float]:
    """Deterministic made-up values in [0, 1] seeded by the title."""
    seed = hashlib.sha256(title.encode()).digest()
    out, level = [], seed[0] / 255
    for i in range(count):
        level = min(1.0, max(0.0, level + (seed[(i + 1) % len(seed)] - 128) / 900))
        out.append(level)
    return out


def _panel_svg(panel: dict[str, Any]) -> list[str]:
    grid = panel["gridPos"]
    x, y = grid["x"] * COLUMN_PX + GAP / 2, grid["y"] * ROW_PX + GAP / 2 + CAPTION_PX
    w, h = grid["w"] * COLUMN_PX - GAP, grid["h"] * ROW_PX - GAP
    title = escape(str(panel.get("title", "")))
    kind = panel.get("type", "")
    if kind == "row":
        return [f'<text x="{x + 4:.0f}" y="{y + 20:.0f}" class="row">{title}</text>']
    parts = [f'<rect x="{x:.0f}" y="{y:.0f}" width="{w:.0f}" height="{h:.0f}" class="panel"/>',
             f'<text x="{x + 8:.0f}" y="{y + 18:.0f}" class="title">{title}</text>',
             f'<text x="{x + w - 8:.0f}" y="{y + 18:.0f}" class="kind" text-anchor="end">{kind}</text>']
    inner_top, inner_h = y + 28, h - 36
    if kind == "stat":
        value = round(_samples(str(panel.get("title")), 1)[0] * 20)
        parts.append(f'<text x="{x + w / 2:.0f}" y="{inner_top + inner_h / 2 + 14:.0f}" class="stat" '
                     f'text-anchor="middle">{value}</text>')
    elif kind == "table":
        for row in range(min(5, int(inner_h // 22))):
            ty = inner_top + 16 + row * 22
            cls = "thead" if row == 0 else "cell"
            parts.append(f'<line x1="{x + 8:.0f}" y1="{ty + 6:.0f}" x2="{x + w - 8:.0f}" y2="{ty + 6:.0f}" '
                         'class="grid"/>')
            parts.append(f'<text x="{x + 12:.0f}" y="{ty:.0f}" class="{cls}">'
                         f'{"server / columns" if row == 0 else f"sample row {row}"}</text>')
    else:
        series = len(panel.get("targets", [])) or 1
        for index in range(min(series, len(COLORS))):
            values = _samples(f"{panel.get('title')}#{index}", 40)
            step = (w - 16) / (len(values) - 1)
            points = " ".join(f"{x + 8 + i * step:.1f},{inner_top + inner_h - v * inner_h:.1f}"
                              for i, v in enumerate(values))
            parts.append(f'<polyline points="{points}" class="line" stroke="{COLORS[index]}"/>')
    return parts


def render_svg(dashboard: dict[str, Any], source: str) -> str:
    """The dashboard's layout as an SVG document (see the module docstring)."""
    panels = dashboard["panels"]
    height = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels) * ROW_PX + CAPTION_PX + GAP
    caption = f"{escape(dashboard['title'])}: SAMPLE DATA, not a screenshot, not a real cluster"
    origin = f"panel layout from {escape(source)}, drawn by hack/dashboard_picture.py"
    body = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif">',
            "<style>.panel{fill:#181b1f;stroke:#2c3235}.title{fill:#d8d9da;font-size:13px}"
            ".kind{fill:#6e7175;font-size:11px}.row{fill:#d8d9da;font-size:15px;font-weight:bold}"
            ".stat{fill:#73bf69;font-size:34px;font-weight:bold}.line{fill:none;stroke-width:1.6}"
            ".grid{stroke:#2c3235}.thead{fill:#8e9194;font-size:11px}.cell{fill:#ccccdc;font-size:11px}"
            ".caption{fill:#ff780a;font-size:13px}.origin{fill:#8e9194;font-size:12px}</style>",
            f'<rect width="{WIDTH}" height="{height}" fill="#111217"/>',
            f'<text x="8" y="18" class="caption">{caption}</text>',
            f'<text x="8" y="36" class="origin">{origin}</text>']
    for panel in panels:
        body += _panel_svg(panel)
    return "\n".join([*body, "</svg>"]) + "\n"


def panel_table() -> str:
    """README's Markdown table: dashboard, row, panel, type, what it shows (the panel description)."""
    lines = ["| dashboard | section | panel | type | shows |", "|---|---|---|---|---|"]
    for path in sorted(DASHBOARDS.glob("*.json")):
        dashboard = json.loads(path.read_text())
        section = ""
        for panel in dashboard["panels"]:
            if panel.get("type") == "row":
                section = str(panel.get("title", ""))
                continue
            text = str(panel.get("description", "")).replace("|", "\\|")
            lines.append(f"| {dashboard['title']} | {section} | {panel.get('title')} | {panel.get('type')} | {text} |")
    return "\n".join(lines) + "\n"


def pictures() -> dict[Path, str]:
    """``{output path: SVG text}`` for every dashboard."""
    return {IMAGES / f"{path.stem}.svg": render_svg(json.loads(path.read_text()), str(path.relative_to(ROOT)))
            for path in sorted(DASHBOARDS.glob("*.json"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--table", action="store_true", help="print the Markdown table of panels instead")
    args = parser.parse_args(argv)
    if args.table:
        sys.stdout.write(panel_table())
        return 0
    IMAGES.mkdir(parents=True, exist_ok=True)
    for path, text in pictures().items():
        path.write_text(text)
        print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
