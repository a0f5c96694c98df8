// dpcurator web console: a synthetic release's preview. Its records (fetched as JSON with the
// token; downloading is free post-processing) as a table of the first rows and one bar chart per
// column: categories by the schema's keys, numbers in ten bins between the schema's bounds.
"use strict";

const PREVIEW_ROWS = 10;
const PREVIEW_BINS = 10;

function previewButton(release) {
  const button = el("button", "Preview", "preview");
  button.type = "button";
  button.addEventListener("click", () => {
    showPreview(release);
    $("s-preview").scrollIntoView({ block: "nearest" });
  });
  return button;
}

// One column's counts in the records: [{label, value}], in the schema's order.
function oneWay(records, name, column) {
  const values = records.map((r) => r[name]).filter((v) => v !== null && v !== undefined);
  if (column && column.lower !== undefined && column.lower !== null && !column.keys) {
    const { lower, upper } = column;
    const width = (upper - lower) / PREVIEW_BINS;
    const counts = new Array(PREVIEW_BINS).fill(0);
    for (const v of values) counts[Math.min(PREVIEW_BINS - 1, Math.max(0, Math.floor((v - lower) / width)))] += 1;
    return counts.map((value, i) => ({ label: `[${fmt(lower + i * width)}, ${fmt(lower + (i + 1) * width)})`, value }));
  }
  const keys = column && column.keys ? column.keys.map(String) : [];
  const counts = new Map(keys.map((k) => [k, 0]));
  for (const v of values) counts.set(String(v), (counts.get(String(v)) || 0) + 1);
  return [...counts].map(([label, value]) => ({ label, value }));
}

async function showPreview(release) {
  const panel = $("s-preview");
  panel.replaceChildren(el("p", `Loading ${release.id}…`, "release-note"));
  const headers = state.token ? { Authorization: `Bearer ${state.token}` } : {};
  const response = await fetch(`/v1/synthetic/${encodeURIComponent(release.id)}/data?format=json`, { headers });
  if (!response.ok) {
    panel.replaceChildren(el("p", `Preview failed: ${(await response.json()).detail}`, "error"));
    return;
  }
  const records = await response.json();
  const names = records.length > 0 ? Object.keys(records[0]) : [];
  const table = el("table", null, "preview-table");
  table.append(el("thead"), el("tbody"));
  const head = el("tr");
  for (const name of names) head.append(el("th", name));
  table.tHead.append(head);
  for (const record of records.slice(0, PREVIEW_ROWS)) {
    const tr = el("tr");
    for (const name of names) tr.append(el("td", typeof record[name] === "number" ? fmt(record[name]) : record[name]));
    table.tBodies[0].append(tr);
  }
  const box = el("section", null, "preview");
  const charts = el("div", null, "preview-charts");
  box.append(el("h3", `Preview of ${release.id}`),
    el("p", `The first ${Math.min(PREVIEW_ROWS, records.length)} of ${records.length} synthetic records:`, "release-note"),
    scrolled(table), el("p", "Each column's counts in the synthetic records (no intervals: these count the "
      + "synthetic sample; the release's expected error is in its estimate).", "release-note"), charts);
  panel.replaceChildren(box);
  const schema = currentDataset().schema.columns || {};
  const figures = names.map((name) => {
    const chart = el("div", null, "chart preview-chart");
    const figure = el("div", null, "preview-figure");
    figure.append(el("h4", name), chart);
    charts.append(figure);
    return () => drawRows(chart, oneWay(records, name, schema[name]), name, "synthetic records", null);
  });
  for (const draw of figures) draw();  // once every figure has its place in the grid
}
