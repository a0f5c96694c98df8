// dpcurator web console: releases laid out as statisticians read them. A fit is a coefficient
// table (intervals, the public box's clamp flag); a histogram is one row per bin with a bar chart;
// a two-way table is a crosstab with row or column shares; one row of statistics (quantiles with
// their rank error) is a column. Everything here is post-processing of released numbers.
"use strict";

const isFit = (release) => (release.columns || []).some((c) => c.kind === "coefficient");
const isHistogram = (release) => release.mechanisms.length > 0
  && release.mechanisms.every((m) => m.statistic === "histogram");

function headRow(table, names) {
  const tr = el("tr");
  for (const name of names) tr.append(name instanceof Node ? name : el("th", name));
  table.append(el("thead"), el("tbody"));
  table.tHead.append(tr);
  return table.tBodies[0];
}

const th = (text, sub) => {
  const node = el("th", text);
  if (sub) node.append(el("div", sub, "ci"));
  return node;
};

// ---- fits -----------------------------------------------------------------------------------

function fitView(release, level) {
  const node = el("div", null, "fit-view");
  const boxed = release.rows.some((row) => row.at_box_bound !== undefined);
  const covers = release.covers || (release.columns[0] || {}).covers || "noise";
  const method = release.method || (release.mechanisms[0] || {}).mechanism || "";
  node.append(el("p", `${method}. The ${level} intervals cover the ${covers.replace("+", " and the ")}.`, "release-note"));
  if (release.rows.length === 0) {
    node.append(el("p", "No reply (NR): the mechanism declined to answer (a private decision); its cost stands.", "release-warning"));
    return { node, draw: () => undefined };
  }
  const table = el("table", null, "release-table fit-table");
  const body = headRow(table, ["term", "coefficient", th(`${level} CI`, "low"), th(`${level} CI`, "high"),
    ...(boxed ? [th("at box bound", "the public box clamped it")] : [])]);
  for (const row of release.rows) {
    const estimate = row.values.coefficient;
    const text = shown(estimate);
    const tr = el("tr");
    tr.append(el("td", row.group.term), el("td", text.value, "num"),
      el("td", hasCi(estimate) ? text.low : "no CI", "num"), el("td", hasCi(estimate) ? text.high : "", "num"));
    if (boxed) tr.append(el("td", row.at_box_bound ? "yes: the box's edge, not the data" : "no", row.at_box_bound ? "at-bound" : ""));
    body.append(tr);
  }
  node.append(scrolled(table));
  return { node, draw: () => undefined };
}

// ---- hypothesis tests ---------------------------------------------------------------------

// The test's report (name, H0, method, statistic, p-value, estimate), then its released figures
// as rows: no chart, since the figures (counts, sums, a p-value) share no scale.
function testView(release) {
  const test = release.test;
  const node = el("div", null, "test-view");
  const p = test.p_value;
  const report = el("table", null, "release-table test-report");
  const body = headRow(report, ["test", "H0", "statistic", "p-value", "estimate"]);
  const tr = el("tr");
  tr.append(el("td", test.name), el("td", test.null), el("td", fmt4(test.statistic), "num"),
    el("td", p < 1e-4 ? "< 0.0001" : fmt4(p), "num p-value"), el("td", fmt4(test.estimate), "num"));
  body.append(tr);
  node.append(scrolled(report));
  node.append(el("p", `${test.method}. The p-value is valid under the privacy noise (it accounts for `
    + "the noise added to the released figures below).", "release-note"));
  const figures = el("table", null, "release-table test-figures");
  const rows = headRow(figures, ["released figure", "value"]);
  for (const row of release.rows) {
    for (const column of release.value_columns) {
      const line = el("tr");
      line.append(el("td", String(row.group[release.group_columns[0]] ?? column)), el("td", fmt4(row.values[column].value), "num"));
      rows.append(line);
    }
  }
  node.append(scrolled(figures));
  return { node, draw: () => undefined };
}

// ---- histograms ---------------------------------------------------------------------------

// Rows: the bins; columns: the groups (one "count" column without GROUP BY); a bar chart of one.
function histogramView(release, level) {
  const name = release.mechanisms[0].column;
  const bins = release.value_columns.map((c) => ({ column: c, label: c.startsWith(name) ? c.slice(name.length).trim() : c }));
  const series = release.rows.map((row) => ({
    label: release.group_columns.length ? release.group_columns.map((c) => String(row.group[c])).join(" / ") : "count",
    row,
  }));
  const table = el("table", null, "release-table histogram-table");
  const body = headRow(table, [`${name} (bins)`, ...series.map((s) => th(s.label, `value [${level} CI]`))]);
  for (const bin of bins) {
    const tr = el("tr");
    tr.append(el("td", bin.label));
    for (const s of series) tr.append(valueCell(s.row.values[bin.column]));
    body.append(tr);
  }
  const node = el("div");
  node.append(scrolled(table));
  const chart = el("div", null, "chart");
  const draw = (label) => {
    const { row } = series.find((s) => s.label === label);
    drawRows(chart, bins.map((bin) => ({ label: bin.label, ...row.values[bin.column] })), `${name} (bins)`,
      release.group_columns.length ? `count (${label})` : "count", level);
  };
  if (series.length > 1) node.append(picker("group to chart", series.map((s) => s.label), draw));
  node.append(chart);
  return { node, draw: () => (series.length > 0 ? draw(series[0].label) : undefined) };
}

// ---- one row of statistics ----------------------------------------------------------------

function statisticsView(release, level) {
  const [row] = release.rows;
  const ranks = release.mechanisms.filter((m) => m.rank_error !== null && m.rank_error !== undefined);
  const table = el("table", null, "release-table statistics-table");
  const body = headRow(table, ["statistic", th("value", `[${level} CI]`),
    ...(ranks.length ? [th("rank error", "± rows")] : [])]);
  for (const column of release.value_columns) {
    const tr = el("tr");
    tr.append(el("td", column), valueCell(row.values[column]));
    if (ranks.length) {
      const rank = ranks.find((m) => m.column === column);
      tr.append(el("td", rank ? `± ${Number(rank.rank_error.toPrecision(2))}` : "", "num"));
    }
    body.append(tr);
  }
  const node = el("div");
  node.append(scrolled(table));
  if (ranks.length) {
    node.append(el("p", "A quantile's interval is the range of values whose rank lies within the noisy rank's "
      + "interval; the rank error is how many rows the noise may move the chosen rank.", "release-note"));
  }
  return { node, draw: () => undefined };
}

// ---- crosstabs ----------------------------------------------------------------------------

const distinct = (values) => [...new Map(values.map((v) => [String(v), v])).values()];
const percent = (x) => (Number.isFinite(x) ? `${(100 * x).toFixed(1)}%` : "—");

// The share of cell j among `cells` (noisy counts, negatives as 0) and, when every count has an
// interval, the share's range when all of those intervals hold (true counts are >= 0).
function share(cells, j) {
  const point = (c) => Math.max(0, c.value);
  const total = cells.reduce((sum, c) => sum + point(c), 0);
  const value = point(cells[j]) / total;
  if (!cells.every(hasCi)) return { value };
  const lo = (c) => Math.max(0, c.ci_low), hi = (c) => Math.max(0, c.ci_high);
  const othersHi = cells.reduce((s, c, i) => s + (i === j ? 0 : hi(c)), 0);
  const othersLo = cells.reduce((s, c, i) => s + (i === j ? 0 : lo(c)), 0);
  return { value, low: lo(cells[j]) / (lo(cells[j]) + othersHi), high: hi(cells[j]) / (hi(cells[j]) + othersLo) };
}

function crosstabView(release, level) {
  const [rowColumn, colColumn] = release.group_columns;
  const rowKeys = distinct(release.rows.map((r) => r.group[rowColumn]));
  const colKeys = distinct(release.rows.map((r) => r.group[colColumn]));
  const cell = new Map(release.rows.map((r) => [`${r.group[rowColumn]}\u0000${r.group[colColumn]}`, r]));
  const node = el("div", null, "crosstab-view");
  const holder = el("div");
  const chart = el("div", null, "chart");
  let column = release.value_columns[0], mode = "cells";
  const render = () => holder.replaceChildren(...crosstab(release, level, { rowColumn, colColumn, rowKeys, colKeys, cell }, column, mode));
  // Every cell as a row of its own, labelled in full: the row key, then the column key.
  const draw = () => drawRows(chart, release.rows.map((r) => ({
    label: `${r.group[rowColumn]} / ${r.group[colColumn]}`, ...r.values[column],
  })), `${rowColumn} / ${colColumn}`, column, level);
  const controls = el("div", null, "row");
  if (release.value_columns.length > 1) {
    controls.append(picker("value to show", release.value_columns, (v) => { column = v; render(); draw(); }));
  }
  const counts = release.mechanisms.filter((m) => m.statistic === "count").map((m) => m.column);
  if (counts.length) {
    controls.append(picker("show", ["cells", "row shares", "column shares"], (v) => { mode = v; render(); }, "crosstab-mode"));
  }
  node.append(controls, holder, chart);
  render();
  return { node, draw };
}

// The sum of the noisy cells (negatives as 0) in these rows and columns.
const sumOf = (rows, cols, estimate) => rows.reduce((sum, r) => sum
  + cols.reduce((part, c) => part + Math.max(0, (estimate(r, c) || { value: 0 }).value), 0), 0);

function crosstab(release, level, grid, column, mode) {
  const { rowColumn, colColumn, rowKeys, colKeys, cell } = grid;
  const counted = release.mechanisms.some((m) => m.column === column && m.statistic === "count");
  const asked = counted ? mode : "cells";
  const estimate = (r, c) => (cell.get(`${r}\u0000${c}`) || { values: {} }).values[column];
  const table = el("table", null, "release-table crosstab");
  const corner = th(`${rowColumn} \\ ${colColumn}`, asked === "cells" ? `${column} [${level} CI]` : `${column}: ${asked}`);
  const body = headRow(table, [corner, ...colKeys.map((k) => th(String(k))), ...(counted ? [th("total", "sum of cells")] : [])]);
  for (const r of rowKeys) {
    const tr = el("tr");
    tr.append(el("th", String(r)));
    for (const c of colKeys) {
      const e = estimate(r, c);
      if (!e) tr.append(el("td", "—", "num"));
      else if (asked === "cells") tr.append(valueCell(e));
      else {
        const line = asked === "row shares" ? colKeys.map((k) => estimate(r, k)) : rowKeys.map((k) => estimate(k, c));
        const s = share(line.filter(Boolean), line.filter(Boolean).indexOf(e));
        const td = el("td", percent(s.value), "num share");
        td.append(el("div", s.low !== undefined ? `[${percent(s.low)}, ${percent(s.high)}]` : "no CI", "ci"));
        tr.append(td);
      }
    }
    if (counted) tr.append(el("td", fmt(sumOf(rowKeys.filter((k) => k === r), colKeys, estimate)), "num total"));
    body.append(tr);
  }
  if (counted) {
    const tr = el("tr", null, "total-row");
    tr.append(el("th", "total"), ...colKeys.map((c) => el("td", fmt(sumOf(rowKeys, [c], estimate)), "num total")),
      el("td", fmt(sumOf(rowKeys, colKeys, estimate)), "num total"));
    body.append(tr);
  }
  const notes = [];
  if (counted) notes.push("Totals add the noisy cells (negatives as 0); they have no interval of their own.");
  if (asked !== "cells") {
    const k = asked === "row shares" ? colKeys.length : rowKeys.length;
    const joint = 1 - k * release.alpha;
    notes.push(`Shares are of the noisy counts, in percent to one decimal. A share's interval is its range when every `
      + `count interval in its ${asked === "row shares" ? "row" : "column"} holds: at least `
      + `${joint > 0 ? ciLevel(k * release.alpha) : "0%"} jointly (Bonferroni over ${k} cells).`);
  }
  return [scrolled(table), ...notes.map((n) => el("p", n, "release-note"))];
}
