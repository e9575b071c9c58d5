"""The report as one HTML page: sections of figures, charts and tables, with its CSS inlined.

The page is one file with nothing to fetch: the charts are inline SVG, the style is a
`<style>` element, fonts are the reader's own system fonts, and there is no script. Jinja2
escapes every value it prints (ids, messages and corpus text come from users' data); only
the SVGs, which vl-convert made from our own specs, are inserted as markup.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jinja2
from markupsafe import Markup


@dataclass(slots=True)
class Table:
    """A table of preformatted cells; `numeric` columns are right-aligned."""

    columns: list[str]
    rows: list[list[str]]
    numeric: frozenset[str] = frozenset()
    caption: str | None = None
    collapsed: bool = False  # behind a <details> element (long tables)
    wide: frozenset[str] = frozenset()  # columns of long text, given room to wrap


@dataclass(slots=True)
class Chart:
    name: str  # a stable name for tests and readers: "outcomes", "sentiment-options", ...
    svg: str


@dataclass(slots=True)
class Section:
    id: str
    title: str
    intro: str = ""
    figures: list[tuple[str, str]] = field(default_factory=list)  # (label, value)
    charts: list[Chart] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    kind: str | None = None  # a badge beside the title (a question's kind)
    children: list[Section] = field(default_factory=list)


@dataclass(slots=True)
class Page:
    title: str
    subtitle: str
    figures: list[tuple[str, str]]
    sections: list[Section]


STYLE = """
:root { --ink: #1f2328; --muted: #59636e; --line: #d8dee4; --card: #fff; --bg: #f6f8fa;
  --accent: #3a6ea5; --bad: #c8553d; --good: #2f7d4f; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--ink); font-size: 14px; line-height: 1.5;
  font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
header { background: #24292f; color: #fff; padding: 22px 32px 18px; }
header h1 { margin: 0 0 4px; font-size: 22px; font-weight: 600; }
header p { margin: 0; color: #c9d1d9; font-size: 13px; word-break: break-all; }
nav { padding: 8px 32px; background: #fff; border-bottom: 1px solid var(--line);
  position: sticky; top: 0; z-index: 1; }
nav a { color: var(--accent); text-decoration: none; margin-right: 18px; font-size: 13px; }
main { max-width: 1100px; margin: 0 auto; padding: 20px 24px 48px; }
.figures { display: flex; flex-wrap: wrap; gap: 10px; margin: 0 0 12px; }
.figure { background: var(--card); border: 1px solid var(--line); border-radius: 6px;
  padding: 8px 14px; min-width: 120px; }
.figure .label { color: var(--muted); font-size: 12px; }
.figure .value { font-size: 18px; font-weight: 600; font-variant-numeric: tabular-nums; }
section { background: var(--card); border: 1px solid var(--line); border-radius: 8px;
  padding: 16px 22px 18px; margin: 18px 0; }
section section { border: none; border-top: 1px solid var(--line); border-radius: 0;
  padding: 14px 0 0; margin: 14px 0 0; }
h2 { font-size: 18px; margin: 0 0 6px; }
h3 { font-size: 15px; margin: 0 0 6px; }
.badge { display: inline-block; font-size: 11px; font-weight: 600; color: var(--accent);
  border: 1px solid var(--accent); border-radius: 10px; padding: 0 7px; margin-left: 6px;
  vertical-align: middle; }
.intro { color: var(--muted); margin: 0 0 10px; }
.note { background: #fff8e5; border-left: 3px solid #d4a72c; padding: 6px 10px;
  margin: 8px 0; font-size: 13px; }
.charts { display: flex; flex-wrap: wrap; gap: 14px 22px; align-items: flex-start; }
figure.chart { margin: 0; max-width: 100%; overflow-x: auto; }
figure.chart svg { display: block; max-width: 100%; height: auto; }
table { border-collapse: collapse; margin: 10px 0 4px; font-size: 13px; width: 100%; }
caption { text-align: left; color: var(--muted); padding-bottom: 4px; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 8px; text-align: left;
  vertical-align: top; }
th { background: var(--bg); font-weight: 600; }
.scroll { overflow-x: auto; }
td.text { min-width: 22em; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
details summary { cursor: pointer; color: var(--accent); margin-top: 8px; }
footer { color: var(--muted); font-size: 12px; text-align: center; padding: 0 0 24px; }
"""

TEMPLATE = """{%- macro figures(items) -%}
{% if items %}<div class="figures">{% for label, value in items %}
<div class="figure"><div class="label">{{ label }}</div><div class="value">{{ value }}</div></div>
{%- endfor %}</div>{% endif %}
{%- endmacro %}
{%- macro table(t) -%}
{% if t.collapsed %}<details><summary>{{ t.caption }}</summary>{% endif %}
<div class="scroll"><table>
{%- if t.caption and not t.collapsed %}<caption>{{ t.caption }}</caption>{% endif %}
<thead><tr>{% for c in t.columns %}<th{% if c in t.numeric %} class="num"{% endif %}>{{ c }}</th>
{%- endfor %}</tr></thead>
<tbody>{% for row in t.rows %}<tr>{% for c in t.columns %}
<td{% if c in t.numeric %} class="num"{% elif c in t.wide %} class="text"{% endif %}>
{{- row[loop.index0] }}</td>{% endfor %}</tr>
{% endfor %}</tbody></table></div>{% if t.collapsed %}</details>{% endif %}
{%- endmacro %}
{%- macro section(s, level) -%}
<section id="{{ s.id }}">
<h{{ level }}>{{ s.title }}
{%- if s.kind %}<span class="badge">{{ s.kind }}</span>{% endif %}</h{{ level }}>
{% if s.intro %}<p class="intro">{{ s.intro }}</p>{% endif %}
{% for n in s.notes %}<p class="note">{{ n }}</p>{% endfor %}
{{ figures(s.figures) }}
{% if s.charts %}<div class="charts">{% for c in s.charts %}
<figure class="chart" data-chart="{{ c.name }}">{{ svg(c.svg) }}</figure>{% endfor %}</div>
{% endif %}
{% for t in s.tables %}{{ table(t) }}{% endfor %}
{% for child in s.children %}{{ section(child, level + 1) }}{% endfor %}
</section>
{%- endmacro %}
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ page.title }}</title>
<style>{{ style }}</style>
</head>
<body>
<header><h1>{{ page.title }}</h1><p>{{ page.subtitle }}</p></header>
<nav>{% for s in page.sections %}<a href="#{{ s.id }}">{{ s.title }}</a>{% endfor %}</nav>
<main>
{{ figures(page.figures) }}
{% for s in page.sections %}{{ section(s, 2) }}{% endfor %}
</main>
<footer>Written by evalpipe report. Everything on this page is in this one file.</footer>
</body>
</html>
"""

_ENV = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True)
_TEMPLATE = _ENV.from_string(TEMPLATE)


def render(page: Page) -> str:
    """The whole page as one HTML string."""
    return _TEMPLATE.render(page=page, style=Markup(STYLE), svg=Markup).lstrip()
