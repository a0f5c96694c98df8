// dpcurator web console: releases as tables, charts and CSV, and the estimate before a run.
// A release is Release.to_dict(): {group_columns, value_columns, rows: [{group: {column: key},
// values: {column: {value, ci_low, ci_high}}}], cost, mechanisms, alpha}; its CIs are (1 - alpha).
"use strict";

function clearResult() {
  $("result").replaceChildren();
}

function clearEstimate() {
  $("estimate-panel").replaceChildren();
}

// Show released results ([{sql, release}]: one for a query, several for a published batch).
// Charts are drawn once on the page, at the width they get there. A replay was charged nothing
// now: its note says what the first release cost.
function showResults(caption, results, stem, replayed = false) {
  const blocks = results.map((r, i) =>
    releaseBlock(r.sql, r.release, results.length > 1 ? `${stem}-${i + 1}` : stem, replayed));
  $("result").replaceChildren(el("p", caption, "result-caption"), ...blocks.map((b) => b.block));
  for (const b of blocks) b.draw();
}

function costNote(release, replayed) {
  const cost = `ε ${fmt(release.cost.epsilon)}, δ ${fmt(release.cost.delta)}`;
  return replayed ? `replayed from history, no charge now (first released for ${cost})` : `cost ${cost}`;
}

// The view a statistician reads: a fit's coefficient table, a histogram's bins as rows, a
// two-way table as a crosstab, one row of statistics as a column; otherwise one row per group.
function releaseView(release, level) {
  if (release.test) return testView(release);
  if (isFit(release)) return fitView(release, level);
  if (isHistogram(release)) return histogramView(release, level);
  if (release.group_columns.length === 2 && release.rows.length > 0) return crosstabView(release, level);
  if (release.group_columns.length === 0 && release.rows.length === 1) return statisticsView(release, level);
  return groupsView(release, level);
}

function releaseBlock(sql, release, stem, replayed) {
  const block = el("section", null, "release");
  const level = ciLevel(release.alpha);
  if (sql) block.append(el("pre", sql, "release-sql"));
  block.append(el("p", `Noisy values with ${level} confidence intervals; ${costNote(release, replayed)}.`,
    "release-note"), el("p", PRECISION_NOTE, "precision-note"));
  for (const warning of release.warnings || []) block.append(el("p", `Warning: ${warning}`, "release-warning"));
  const csv = el("button", "Download CSV", "download-csv");
  csv.type = "button";
  csv.addEventListener("click", () => download(`${stem}.csv`, releaseCsv(release)));
  const view = releaseView(release, level);
  block.append(csv, view.node);
  return { block, draw: view.draw };
}

// One row per group, a column per statistic, and a bar chart of one statistic by group.
function groupsView(release, level) {
  const node = el("div");
  node.append(releaseTable(release, level));
  const chart = el("div", null, "chart");
  const columns = release.group_columns.length > 0 && release.rows.length > 0 ? release.value_columns : [];
  const draw = (column) => drawBars(chart, release.rows.map((row) => ({
    label: release.group_columns.map((c) => String(row.group[c])).join(" / "), ...row.values[column],
  })), release.group_columns.join(" / "), column, level);
  if (columns.length > 1) node.append(picker("value to chart", columns, draw));
  node.append(chart);
  return { node, draw: () => (columns.length > 0 ? draw(columns[0]) : undefined) };
}

// A labelled <select> calling `change` with the chosen value.
function picker(label, values, change, cls = "chart-column") {
  const pick = el("select", null, cls);
  pick.setAttribute("aria-label", label);
  pick.append(...values.map((v) => option(v)));
  pick.addEventListener("change", () => change(pick.value));
  const wrap = el("label", `${label.split(" ").pop()} `);
  wrap.append(pick);
  return wrap;
}

// A table cell with a rounded value and its interval under it.
function valueCell(estimate) {
  const td = el("td", shown(estimate).value, "num");
  td.append(el("div", hasCi(estimate) ? `[${shown(estimate).low}, ${shown(estimate).high}]` : "no CI", "ci"));
  return td;
}

function releaseTable(release, level) {
  const table = el("table", null, "release-table");
  const head = el("tr");
  for (const c of release.group_columns) head.append(el("th", c));
  for (const c of release.value_columns) {
    const th = el("th", c);
    th.append(el("div", `value [${level} CI]`, "ci"));
    head.append(th);
  }
  table.append(el("thead"), el("tbody"));
  table.tHead.append(head);
  for (const row of release.rows) {
    const tr = el("tr");
    for (const c of release.group_columns) tr.append(el("td", row.group[c]));
    for (const c of release.value_columns) tr.append(valueCell(row.values[c]));
    table.tBodies[0].append(tr);
  }
  return scrolled(table);
}

function scrolled(node) {
  const scroll = el("div", null, "scroll");
  scroll.append(node);
  return scroll;
}

// ---- CSV ----------------------------------------------------------------------------------

function csvField(value) {
  if (value === null || value === undefined) return "";
  const text = String(value);
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

// One line per group: the keys, then value, ci_low, ci_high per statistic, then the CI level.
function releaseCsv(release) {
  const header = [...release.group_columns];
  for (const c of release.value_columns) header.push(c, `${c}_ci_low`, `${c}_ci_high`);
  header.push("ci_level");
  const lines = [header];
  for (const row of release.rows) {
    const line = release.group_columns.map((c) => row.group[c]);
    for (const c of release.value_columns) {
      const e = row.values[c];
      line.push(e.value, e.ci_low, e.ci_high);
    }
    line.push(Number((1 - release.alpha).toPrecision(12)));
    lines.push(line);
  }
  return lines.map((line) => line.map(csvField).join(",")).join("\r\n") + "\r\n";
}

function download(filename, text) {
  const url = URL.createObjectURL(new Blob([text], { type: "text/csv;charset=utf-8" }));
  const link = el("a");
  link.href = url;
  link.download = filename;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

// ---- estimate -----------------------------------------------------------------------------

// The free estimate: per output column, the expected half-width of its (1 - alpha) interval.
function showEstimate(details) {
  const level = ciLevel(details.alpha);
  const table = el("table", null, "estimate-table");
  table.append(el("thead"), el("tbody"));
  const head = el("tr");
  head.append(el("th", "column"), el("th", `expected ${level} CI half-width`));
  table.tHead.append(head);
  for (const [column, half] of Object.entries(details.ci_halfwidths)) {
    const ranks = details.mechanisms.find((m) => m.column === column && m.rank_error !== null);
    const text = half !== null ? `± ${fmt(half)}`
      : ranks ? `depends on the data (rank error ± ${fmt(ranks.rank_error)} rows)`
        : "depends on the data (shrinks as the group grows)";
    const tr = el("tr");
    tr.append(el("td", column), el("td", text, half !== null ? "num" : ""));
    table.tBodies[0].append(tr);
  }
  $("estimate-panel").replaceChildren(el("h3", "Before you run"), scrolled(table));
}
