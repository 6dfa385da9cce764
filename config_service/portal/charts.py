"""Server-side SVG charts for the portal (no JavaScript): bars over time with axes, labels and a
title, and quota bars against their limits. Pure functions from series to SVG text; every text
that reaches the SVG is escaped here."""
import math
from collections.abc import Callable, Sequence
from html import escape

FONT = "font-family:system-ui,sans-serif"
BAR = "#4a78b5"
OVER = "#b3261e"
GRID = "#dde2e8"
INK = "#1d2430"


def number(value: float) -> str:
    """1234 -> 1.2k, 5600000 -> 5.6M: short enough for an axis."""
    for size, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.1f}".rstrip("0").rstrip(".") + suffix
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.2f}"


def size(value: float) -> str:
    """Bytes in binary units: 1536 -> 1.5 KiB."""
    for power, unit in ((4, "TiB"), (3, "GiB"), (2, "MiB"), (1, "KiB")):
        if abs(value) >= 1024 ** power:
            return f"{value / 1024 ** power:.1f}".rstrip("0").rstrip(".") + " " + unit
    return f"{value:.0f} B"


def nice_ticks(top: float, count: int = 4) -> list[float]:
    """0 and `count` round steps (1, 2, 2.5 or 5 times a power of ten) reaching `top`."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    return [i * step for i in range(math.ceil(top / step - 1e-9) + 1)]


def _text(x, y, content, anchor="middle", size_px=11, weight="normal", fill=INK, extra="") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size_px}" '
            f'font-weight="{weight}" fill="{fill}" style="{FONT}"{extra}>{escape(content)}</text>')


def bar_chart(*, title: str, labels: Sequence[str], values: Sequence[float | None],
              fmt: Callable[[float], str] = number, unit: str = "", label_every: int = 1,
              width: int = 760, height: int = 260, chart_id: str = "chart") -> str:
    """Vertical bars, one per label; a value of None is a gap (nothing measured), not a zero."""
    left, right, top, bottom = 64, 12, 34, 44
    plot_w, plot_h = width - left - right, height - top - bottom
    measured = [v for v in values if v is not None]
    ticks = nice_ticks(max(measured, default=0))
    scale = plot_h / ticks[-1]
    title_id = escape(f"{chart_id}-title", quote=True)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
           f'width="100%" role="img" aria-labelledby="{title_id}" class="chart" '
           f'data-chart="{escape(chart_id, quote=True)}">',
           f'<title id="{title_id}">{escape(title)}</title>',
           f'<rect width="{width}" height="{height}" fill="#fff"/>',
           _text(left, 20, title, anchor="start", size_px=14, weight="600")]
    for tick in ticks:
        y = top + plot_h - tick * scale
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" '
                   f'stroke="{GRID}"/>')
        out.append(_text(left - 6, y + 4, fmt(tick), anchor="end"))
    if unit:
        out.append(_text(14, top + plot_h / 2, unit, extra=(
            f' transform="rotate(-90 14 {top + plot_h / 2:.1f})"')))
    slot = plot_w / max(len(values), 1)
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        x = left + i * slot
        if value is not None:
            h = value * scale
            out.append(
                f'<rect x="{x + slot * 0.12:.1f}" y="{top + plot_h - h:.1f}" '
                f'width="{slot * 0.76:.1f}" height="{h:.1f}" fill="{BAR}" '
                f'data-label="{escape(label, quote=True)}" data-value="{value}">'
                f'<title>{escape(label)}: {escape(fmt(value))}</title></rect>')
        if i % label_every == 0:
            out.append(_text(x + slot / 2, top + plot_h + 16, label, size_px=10))
    out.append(f'<line x1="{left}" x2="{width - right}" y1="{top + plot_h}" '
               f'y2="{top + plot_h}" stroke="{INK}"/>')
    out.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + plot_h}" stroke="{INK}"/>')
    if not measured:
        out.append(_text(left + plot_w / 2, top + plot_h / 2, "Nothing measured yet",
                         size_px=13, fill="#555"))
    out.append("</svg>")
    return "".join(out)


def limit_bars(*, title: str, rows: Sequence[tuple[str, float, float | None, Callable]],
               width: int = 760, chart_id: str = "limits") -> str:
    """One horizontal bar per limit: (name, used, limit or None, formatter). The bar is the
    share of the limit used (red past 100%); without a limit, only the figure is written."""
    left, right, top, row_h = 170, 150, 34, 30
    height = top + row_h * max(len(rows), 1) + 24
    plot_w = width - left - right
    title_id = escape(f"{chart_id}-title", quote=True)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
           f'width="100%" role="img" aria-labelledby="{title_id}" class="chart" '
           f'data-chart="{escape(chart_id, quote=True)}">',
           f'<title id="{title_id}">{escape(title)}</title>',
           f'<rect width="{width}" height="{height}" fill="#fff"/>',
           _text(12, 20, title, anchor="start", size_px=14, weight="600")]
    for i, (name, used, limit, fmt) in enumerate(rows):
        y = top + i * row_h
        out.append(_text(left - 8, y + 17, name, anchor="end", size_px=12))
        out.append(f'<rect x="{left}" y="{y + 5}" width="{plot_w}" height="16" fill="#eef1f5"/>')
        if limit:
            share = used / limit
            w = min(share, 1.0) * plot_w
            out.append(f'<rect x="{left}" y="{y + 5}" width="{w:.1f}" height="16" '
                       f'fill="{OVER if share > 1 else BAR}" data-label="{escape(name, True)}" '
                       f'data-value="{used}" data-limit="{limit}"><title>{escape(name)}: '
                       f'{escape(fmt(used))} of {escape(fmt(limit))}</title></rect>')
            caption = f"{fmt(used)} of {fmt(limit)} ({share:.0%})"
        else:
            caption = f"{fmt(used)} (no limit)"
        out.append(_text(left + plot_w + 8, y + 17, caption, anchor="start", size_px=12))
    if not rows:
        out.append(_text(width / 2, top + 16, "No quota evaluation yet", size_px=13, fill="#555"))
    out.append("</svg>")
    return "".join(out)
