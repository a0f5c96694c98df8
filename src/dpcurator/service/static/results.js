// dpcurator web console: releases as tables, charts and CSV, and the estimate before a run.
// A release is Release.to_dict(): {group_columns, value_columns, rows: [{group: {column: key},
// values: {column: {value, ci_low, ci_high}}}], cost, mechanisms, alpha}; its CIs are (1 - alpha).
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const TICK_FORMAT = new Intl.NumberFormat("en", { notation: "compact", maximumFractionDigits: 2 });

function clearResult() {
  $("result").replaceChildren();
}

function clearEstimate() {
  $("estimate-panel").replaceChildren();
}

// Show released results ([{sql, release}]: one for a query, several for a published batch).
// Charts are drawn once on the page, at the width they get there.
function showResults(caption, results, stem) {
  const blocks = results.map((r, i) =>
    releaseBlock(r.sql, r.release, results.length > 1 ? `${stem}-${i + 1}` : stem));
  $("result").replaceChildren(el("p", caption, "result-caption"), ...blocks.map((b) => b.block));
  for (const b of blocks) b.draw();
}

function hasCi(estimate) {
  return estimate.ci_low !== undefined && estimate.ci_low !== null;
}

function releaseBlock(sql, release, stem) {
  const block = el("section", null, "release");
  const level = ciLevel(release.alpha);
  if (sql) block.append(el("pre", sql, "release-sql"));
  block.append(el("p", `Noisy values with ${level} confidence intervals; cost ε `
    + `${fmt(release.cost.epsilon)}, δ ${fmt(release.cost.delta)}.`, "release-note"));
  const csv = el("button", "Download CSV", "download-csv");
  csv.type = "button";
  csv.addEventListener("click", () => download(`${stem}.csv`, releaseCsv(release)));
  block.append(csv, releaseTable(release, level));
  const chart = el("div", null, "chart");
  const columns = chartColumns(release);
  if (columns.length > 1) {
    const pick = el("select", null, "chart-column");
    pick.setAttribute("aria-label", "value to chart");
    pick.append(...columns.map((c) => option(c)));
    pick.addEventListener("change", () => drawChart(chart, release, pick.value));
    const label = el("label", "chart ");
    label.append(pick);
    block.append(label);
  }
  block.append(chart);
  return { block, draw: () => drawChart(chart, release, columns[0]) };
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
    for (const c of release.value_columns) {
      const estimate = row.values[c];
      const td = el("td", fmt(estimate.value), "num");
      td.append(el("div", hasCi(estimate)
        ? `[${fmt(estimate.ci_low)}, ${fmt(estimate.ci_high)}]` : "no CI", "ci"));
      tr.append(td);
    }
    table.tBodies[0].append(tr);
  }
  const scroll = el("div", null, "scroll");
  scroll.append(table);
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

// ---- chart --------------------------------------------------------------------------------

const isHistogram = (release) => release.mechanisms.length > 0
  && release.mechanisms.every((m) => m.statistic === "histogram");

// What a chart can show: grouped values (one bar per group), or an ungrouped histogram's bins.
function chartColumns(release) {
  if (release.group_columns.length > 0 && release.rows.length > 0) return release.value_columns;
  if (isHistogram(release) && release.rows.length === 1) return ["bins"];
  return [];
}

function chartSeries(release, column) {
  if (release.group_columns.length > 0) {
    return {
      bars: release.rows.map((row) => ({
        label: release.group_columns.map((c) => String(row.group[c])).join(" / "),
        ...row.values[column],
      })),
      xTitle: release.group_columns.join(" / "),
      yTitle: column,
    };
  }
  const [row] = release.rows;
  return {
    // A bin's column is the histogram's name and the bin's range: label the bars by the range.
    bars: release.value_columns.map((c) => ({ label: c.replace(release.mechanisms[0].column, "").trim(), ...row.values[c] })),
    xTitle: `${release.mechanisms[0].column} (bins)`,
    yTitle: "count",
  };
}

// About `count` round ticks (steps of 1, 2 or 5 times a power of ten) covering [lo, hi].
function niceTicks(lo, hi, count) {
  const span = hi - lo || Math.abs(hi) || 1;
  const raw = span / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= raw);
  const ticks = [];
  const first = Math.floor(lo / step), last = Math.max(Math.ceil(hi / step), first + 1);
  for (let i = first; i <= last; i += 1) {
    ticks.push(Number((i * step).toPrecision(12)));
  }
  return ticks;
}

function drawChart(container, release, column) {
  container.replaceChildren();
  if (column === undefined) return;
  const { bars, xTitle, yTitle } = chartSeries(release, column);
  const level = ciLevel(release.alpha);
  const ends = bars.flatMap((b) => [b.value, hasCi(b) ? b.ci_low : b.value, hasCi(b) ? b.ci_high : b.value]);
  const ticks = niceTicks(Math.min(0, ...ends), Math.max(0, ...ends), 5);
  const bottom = ticks[0], top = ticks[ticks.length - 1];
  const width = Math.min(900, Math.max(300, container.clientWidth || 600));
  const height = 280, left = 62, right = 8, above = 12, below = 50;
  const slot = (width - left - right) / bars.length;
  const y = (v) => above + (height - above - below) * (top - v) / (top - bottom);
  const svg = document.createElementNS(SVG_NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `bar chart of ${yTitle} by ${xTitle} with ${level} confidence intervals`);
  const add = (tag, attrs, text) => {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    svg.append(node);
    return node;
  };
  for (const t of ticks) {
    add("line", { class: "grid", x1: left, x2: width - right, y1: y(t), y2: y(t) });
    add("text", { class: "tick", x: left - 6, y: y(t) + 4, "text-anchor": "end" }, TICK_FORMAT.format(t));
  }
  add("line", { class: "axis", x1: left, x2: left, y1: y(top), y2: y(bottom) });
  const maxChars = Math.max(3, Math.floor(slot / 7));
  const fit = (text, chars) => (text.length > chars ? `${text.slice(0, chars - 1)}…` : text);
  bars.forEach((b, i) => {
    const x = left + i * slot + slot * 0.15, w = slot * 0.7, mid = x + w / 2;
    const bar = add("rect", { class: "bar", x, width: w, y: Math.min(y(b.value), y(0)), height: Math.abs(y(0) - y(b.value)) });
    const ci = hasCi(b) ? ` [${fmt(b.ci_low)}, ${fmt(b.ci_high)}] (${level} CI)` : "";
    bar.append(Object.assign(document.createElementNS(SVG_NS, "title"), { textContent: `${b.label}: ${fmt(b.value)}${ci}` }));
    if (hasCi(b)) {
      add("line", { class: "whisker", x1: mid, x2: mid, y1: y(b.ci_low), y2: y(b.ci_high) });
      for (const end of [b.ci_low, b.ci_high]) {
        add("line", { class: "cap", x1: mid - w / 4, x2: mid + w / 4, y1: y(end), y2: y(end) });
      }
    }
    add("text", { class: "label", x: mid, y: y(bottom) + 16, "text-anchor": "middle" }, fit(b.label, maxChars));
  });
  add("line", { class: "axis", x1: left, x2: width - right, y1: y(0), y2: y(0) });
  add("text", { class: "axis-title", x: left + (width - left - right) / 2, y: height - 8, "text-anchor": "middle" },
    fit(xTitle, Math.floor((width - left) / 8)));
  add("text", { class: "axis-title", x: 0, y: 0, "text-anchor": "middle",
    transform: `translate(14 ${(above + height - below) / 2}) rotate(-90)` }, fit(yTitle, Math.floor((height - below) / 8)));
  container.append(svg, el("p", `Bars: noisy ${yTitle} by ${xTitle}; whiskers: ${level} confidence intervals.`,
    "chart-note"));
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
  const scroll = el("div", null, "scroll");
  scroll.append(table);
  $("estimate-panel").replaceChildren(el("h3", "Before you run"), scroll);
}
