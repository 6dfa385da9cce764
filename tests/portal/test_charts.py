"""The portal's SVG charts (config_service/portal/charts.py): pure functions, checked by
parsing the SVG they write."""
import xml.etree.ElementTree as ET

import pytest

from config_service.portal.charts import bar_chart, limit_bars, nice_ticks, number, size

SVG = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def bars(root) -> list[tuple[str, float]]:
    return [(r.get("data-label"), float(r.get("data-value")))
            for r in root.iter(f"{SVG}rect") if r.get("data-value") is not None]


def texts(root) -> list[str]:
    return [t.text for t in root.iter(f"{SVG}text")]


def test_a_bar_chart_draws_one_bar_per_measured_value_and_leaves_gaps_empty():
    root = parse(bar_chart(title="Messages per day", labels=["01", "02", "03", "04"],
                           values=[10, None, 0, 25], unit="messages"))
    assert bars(root) == [("01", 10), ("03", 0), ("04", 25)]
    heights = {r.get("data-label"): float(r.get("height")) for r in root.iter(f"{SVG}rect")
               if r.get("data-value") is not None}
    assert heights["04"] == pytest.approx(2.5 * heights["01"], abs=0.2) and heights["03"] == 0
    assert "Messages per day" in texts(root)
    assert root.find(f"{SVG}title").text == "Messages per day"
    assert {"0", "10", "20", "30"} <= set(texts(root))  # the y axis reaches past the top bar
    assert "messages" in texts(root)


def test_a_bar_chart_labels_every_nth_bar_and_says_when_nothing_was_measured():
    root = parse(bar_chart(title="t", labels=[f"{h:02d}" for h in range(24)],
                           values=[None] * 24, label_every=6))
    assert bars(root) == []
    assert [t for t in texts(root) if t in {f"{h:02d}" for h in range(24)}] == [
        "00", "06", "12", "18"]
    assert "Nothing measured yet" in texts(root)


def test_every_text_is_escaped():
    hostile = '<script>alert("x")</script>'
    svg = bar_chart(title=hostile, labels=[hostile], values=[1], chart_id='"><script>')
    assert "<script>" not in svg
    root = parse(svg)
    assert hostile in texts(root)
    svg = limit_bars(title=hostile, rows=[(hostile, 1, 2, number)])
    assert "<script>" not in svg and hostile in texts(parse(svg))


def test_limit_bars_show_the_share_and_turn_red_past_the_limit():
    root = parse(limit_bars(title="Quotas", rows=[
        ("Messages per day", 500, 1000, number), ("Peak connections", 16, 12, number),
        ("Bytes per day", 2048, None, size)]))
    fills = {r.get("data-label"): (float(r.get("width")), r.get("fill"))
             for r in root.iter(f"{SVG}rect") if r.get("data-value") is not None}
    assert set(fills) == {"Messages per day", "Peak connections"}  # no limit: no bar
    assert fills["Messages per day"][1] != fills["Peak connections"][1]
    assert fills["Peak connections"][0] == 2 * fills["Messages per day"][0]  # capped at 100%
    assert {"500 of 1k (50%)", "16 of 12 (133%)", "2 KiB (no limit)"} <= set(texts(root))


def test_axis_figures_are_short_and_round():
    assert nice_ticks(25) == [0, 10, 20, 30]
    assert nice_ticks(9000) == [0, 2500, 5000, 7500, 10000]
    assert nice_ticks(0) == [0, 1]
    assert [number(v) for v in (0, 950, 1200, 5_600_000, 2.5)] == ["0", "950", "1.2k", "5.6M",
                                                                   "2.50"]
    assert [size(v) for v in (10, 1536, 3 * 1024 ** 3)] == ["10 B", "1.5 KiB", "3 GiB"]
