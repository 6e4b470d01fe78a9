"""The HTML report's stylesheet, inlined into the page (no external CSS, no web fonts).

Arm colours come in as the custom property `--arm` on each card, swatch and bar; `.worse` and
`.better` mark a change against the primary that its interval supports.
"""

STYLESHEET = """
:root {
  --ink: #1f2937; --muted: #6b7280; --line: #e5e7eb; --bg: #f4f5f7; --card: #ffffff;
  --accent: #2563eb; --worse: #b91c1c; --better: #047857;
  color-scheme: light;
}
* { box-sizing: border-box; }
body {
  margin: 0; background: var(--bg); color: var(--ink);
  font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial,
    sans-serif;
  font-variant-numeric: tabular-nums;
}
header.page, section, nav.toc, footer.page { max-width: 1240px; margin: 0 auto; }
header.page { padding: 32px 24px 8px; }
h1 { font-size: 26px; margin: 0 0 4px; letter-spacing: -0.01em; }
h1 span { color: var(--muted); font-weight: 400; }
.lede { margin: 0 0 16px; color: var(--muted); }
dl.facts {
  display: flex; flex-wrap: wrap; gap: 8px 28px; margin: 0; padding: 14px 18px;
  background: var(--card); border: 1px solid var(--line); border-radius: 10px;
}
dl.facts div { min-width: 0; }
dt { font-size: 11px; text-transform: uppercase; letter-spacing: .06em; color: var(--muted); }
dd { margin: 0; font-weight: 600; overflow-wrap: anywhere; }
.warning {
  background: #fef3c7; border: 1px solid #f59e0b; padding: 8px 12px; border-radius: 8px;
}
nav.toc { padding: 0 24px; }
nav.toc ul { list-style: none; display: flex; flex-wrap: wrap; gap: 8px; padding: 0; }
nav.toc a {
  display: inline-block; padding: 3px 10px; border-radius: 999px; background: var(--card);
  border: 1px solid var(--line); color: var(--accent); text-decoration: none;
}
section {
  background: var(--card); border: 1px solid var(--line); border-radius: 12px;
  margin: 20px auto; padding: 20px 24px 24px; box-shadow: 0 1px 2px rgba(0,0,0,.04);
}
section.empty h2 { margin-top: 0; }
h2 { font-size: 20px; margin: 0 0 16px; overflow-wrap: anywhere; }
h2 .kicker {
  font-size: 11px; text-transform: uppercase; letter-spacing: .08em; color: var(--muted);
  display: block; font-weight: 600;
}
h3 { font-size: 15px; margin: 24px 0 8px; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(230px, 1fr)); gap: 12px; }
.card {
  border: 1px solid var(--line); border-top: 4px solid var(--arm); border-radius: 10px;
  padding: 10px 14px 12px;
}
.card h3 { margin: 0 0 8px; font-size: 14px; overflow-wrap: anywhere; }
.metric { display: grid; grid-template-columns: 1fr auto; column-gap: 8px; padding: 2px 0; }
.metric .name { color: var(--muted); }
.metric .value { font-weight: 600; text-align: right; }
.metric .change { grid-column: 1 / -1; text-align: right; font-size: 12px; color: var(--muted); }
.change.worse, td.worse { color: var(--worse); font-weight: 600; }
.change.better { color: var(--better); font-weight: 600; }
.swatch {
  display: inline-block; width: 10px; height: 10px; border-radius: 3px; margin-right: 7px;
  background: var(--arm); vertical-align: baseline;
}
.table-wrap { overflow-x: auto; margin-top: 16px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { padding: 6px 8px; text-align: right; white-space: nowrap; vertical-align: top; }
th.label, td.label { text-align: left; }
thead th {
  color: var(--muted); font-weight: 600; font-size: 12px; border-bottom: 1px solid var(--line);
}
thead tr:first-child th[colspan] { text-align: center; border-bottom: 2px solid var(--line); }
tbody tr:nth-child(odd) { background: #f9fafb; }
tbody th { font-weight: 600; }
.ci { display: block; font-size: 11px; color: var(--muted); }
.failures, .note { color: var(--muted); margin: 10px 0 0; }
.charts {
  display: grid; grid-template-columns: repeat(auto-fit, minmax(440px, 1fr)); gap: 16px;
  margin-top: 18px; align-items: start;
}
figure.chart-card {
  margin: 0; border: 1px solid var(--line); border-radius: 10px; padding: 12px 14px;
}
figcaption strong { display: block; font-size: 14px; }
figcaption span { display: block; color: var(--muted); font-size: 12px; margin-bottom: 6px; }
svg.chart {
  display: block; height: auto; max-width: 100%;
  /* on the svg, not its text: text inherits it, and .bar-value, .flag... can set the weight */
  font: 11px system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif;
}
svg .plot-bg { fill: #fbfbfc; }
svg .grid { stroke: #eceef1; stroke-width: 1; }
svg .axis { stroke: #9ca3af; stroke-width: 1; }
svg .guide { stroke: #9ca3af; stroke-width: 1; stroke-dasharray: 4 4; }
svg .guide-label { fill: var(--muted); font-weight: 600; }
svg .tick { fill: var(--muted); }
svg .axis-label { fill: #4b5563; font-weight: 600; }
svg .ecdf { fill: none; stroke-width: 2.2; stroke-linejoin: round; }
svg .marker { stroke: #fff; stroke-width: 1.5; }
svg .track { fill: #f3f4f6; }
svg .bar-label { fill: var(--ink); }
svg .bar-value { fill: var(--ink); font-weight: 600; }
svg .empty-note { fill: var(--muted); font-style: italic; }
svg .whisker { stroke: #111827; stroke-width: 1.3; opacity: .7; }
svg .group-label { fill: var(--ink); font-weight: 700; }
svg .flag { fill: var(--worse); font-weight: 700; }
svg .phase { fill: #dbeafe; stroke: #fff; stroke-width: 1; }
svg .phase-paused { fill: #fef3c7; }
svg .phase-promoted { fill: #d1fae5; }
svg .phase-rolled_back, svg .phase-aborted { fill: #fee2e2; }
svg .phase-label { fill: var(--ink); font-weight: 600; }
svg .transition { stroke: #374151; stroke-width: 1.5; }
svg .transition.rollback { stroke: var(--worse); stroke-width: 2.5; }
svg .track-line { stroke: #e5e7eb; stroke-width: 1; }
svg .verdict { stroke: #fff; stroke-width: 1; fill: #9ca3af; }
svg .verdict.pass { fill: var(--better); }
svg .verdict.fail { fill: var(--worse); }
figure.rollout-chart { margin-top: 10px; }
tr.rollback td { color: var(--worse); font-weight: 600; }
.rollback-evidence { border-left: 3px solid var(--worse); padding: 2px 12px; margin: 10px 0; }
h4 { font-size: 14px; margin: 18px 0 4px; overflow-wrap: anywhere; }
h4 code { font-size: 13px; background: #f3f4f6; padding: 1px 5px; border-radius: 4px; }
.change-note { color: var(--muted); margin: 0; font-size: 13px; }
.change-note.changed {
  display: inline-block; padding: 1px 8px; border-radius: 6px; background: #fef3c7;
  color: #92400e; font-weight: 600;
}
.version { border-top: 1px dashed var(--line); margin-top: 14px; }
.version:first-of-type { border-top: 0; margin-top: 0; }
figure.checks-chart { max-width: 640px; margin-top: 14px; }
tr.below td, tr.below th { background: #fef2f2; }
ul.legend { list-style: none; padding: 0; margin: 6px 0 0; font-size: 12px; }
ul.legend li { margin: 2px 0; }
.muted { color: var(--muted); }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
footer.page { padding: 8px 24px 40px; color: var(--muted); font-size: 12px; }
@media print {
  body { background: #fff; }
  section { box-shadow: none; break-inside: avoid; }
  .charts { grid-template-columns: 1fr 1fr; }
}
"""
