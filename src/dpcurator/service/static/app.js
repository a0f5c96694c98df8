// dpcurator web console: plain JS, no build step, no third-party code.
// The token lives in sessionStorage only; every call sends it as a Bearer token.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { token: sessionStorage.getItem("dpc-token"), me: null, datasets: [] };

class ApiError extends Error {
  constructor(problem) {
    super(problem.detail || problem.title || "Request failed");
    this.problem = problem;
  }
}

async function api(method, path, body) {
  const headers = { Authorization: `Bearer ${state.token}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 204) return null;
  const data = await response.json();
  if (!response.ok) throw new ApiError(data);
  return data;
}

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function fillRows(tableId, rows) {
  const body = $(tableId).querySelector("tbody");
  body.replaceChildren(...rows.map((cells) => {
    const tr = el("tr");
    for (const cell of cells) tr.append(cell instanceof Node ? cell : el("td", cell));
    return tr;
  }));
}

const fmt = (x) => (typeof x === "number" ? Number(x.toPrecision(6)).toString() : String(x));

function setMessage(text, isError) {
  $("message").textContent = text;
  $("message").className = isError ? "error" : "";
}

function currentDataset() {
  return state.datasets.find((d) => d.id === $("dataset").value);
}

// ---- sign-in ------------------------------------------------------------------------------

async function signIn(token) {
  state.token = token;
  try {
    state.me = await api("GET", "/v1/me");
  } catch (error) {
    state.token = null;
    sessionStorage.removeItem("dpc-token");
    $("signin-error").textContent = error.message;
    return;
  }
  sessionStorage.setItem("dpc-token", token);
  $("signin-error").textContent = "";
  $("signin").classList.add("hidden");
  $("app").classList.remove("hidden");
  $("signout").classList.remove("hidden");
  $("whoami").textContent = `${state.me.name} (${state.me.role})`;
  $("owner-card").classList.toggle("hidden", state.me.role !== "owner");
  await loadDatasets();
}

function signOut() {
  sessionStorage.removeItem("dpc-token");
  window.location.reload();
}

// ---- datasets, schema, budget -------------------------------------------------------------

async function loadDatasets() {
  state.datasets = await api("GET", "/v1/datasets");
  const select = $("dataset");
  const previous = select.value;
  select.replaceChildren(...state.datasets.map((d) => {
    const option = el("option", d.name);
    option.value = d.id;
    return option;
  }));
  if (previous && state.datasets.some((d) => d.id === previous)) select.value = previous;
  await showDataset();
}

function describeBudget(view, label) {
  if (!view) return "";
  return `${label}: ε ${fmt(view.remaining.epsilon)} of ${fmt(view.total.epsilon)} left`
    + (view.total.delta > 0 ? `, δ ${fmt(view.remaining.delta)} of ${fmt(view.total.delta)}` : "");
}

async function showDataset() {
  const dataset = currentDataset();
  if (!dataset) {
    $("budget").textContent = "No dataset is available to you.";
    return;
  }
  const fresh = await api("GET", `/v1/datasets/${encodeURIComponent(dataset.id)}`);
  Object.assign(dataset, fresh);
  $("budget").textContent = describeBudget(dataset.budget, "Your budget")
    || describeBudget(dataset.cap, "Global cap");
  const columns = Object.entries(dataset.schema.columns || {});
  fillRows("schema", columns.map(([name, c]) => [
    name, c.type,
    c.keys ? c.keys.join(", ") : (c.lower !== undefined ? `[${c.lower}, ${c.upper}]` : ""),
  ]));
  const numeric = columns.filter(([, c]) => c.lower !== undefined).map(([n]) => n);
  const grouping = columns.filter(([, c]) => c.keys || c.type === "bool").map(([n]) => n);
  $("b-col").replaceChildren(el("option", "*"), ...numeric.map((n) => el("option", n)));
  $("b-group").replaceChildren(el("option", "(none)"), ...grouping.map((n) => el("option", n)));
  if (!$("sql").value) buildSql();
  await Promise.all([loadHistory(), state.me.role === "owner" ? loadOwner() : null]);
}

function buildSql() {
  const dataset = currentDataset();
  if (!dataset) return;
  const table = dataset.schema.table;
  const agg = $("b-agg").value;
  let col = $("b-col").value;
  if (agg !== "COUNT" && col === "*") col = $("b-col").options[1] ? $("b-col").options[1].value : "*";
  const group = $("b-group").value;
  const value = `${agg}(${col}) AS ${agg.toLowerCase()}_${col === "*" ? "rows" : col}`;
  $("sql").value = group === "(none)"
    ? `SELECT ${value} FROM ${table}`
    : `SELECT ${group}, ${value} FROM ${table} GROUP BY ${group}`;
}

// ---- queries ------------------------------------------------------------------------------

function queryBody() {
  return { sql: $("sql").value, epsilon: Number($("epsilon").value), delta: Number($("delta").value) };
}

async function estimate() {
  const dataset = currentDataset();
  try {
    const result = await api("POST", `/v1/datasets/${encodeURIComponent(dataset.id)}/queries:estimate`, queryBody());
    setMessage(`Estimated cost: ε ${fmt(result.cost.epsilon)}, δ ${fmt(result.cost.delta)}`
      + (result.fits ? " — fits your budget." : " — does NOT fit your budget."), !result.fits);
  } catch (error) {
    setMessage(error.message, true);
  }
}

async function run() {
  const dataset = currentDataset();
  $("run").disabled = true;
  try {
    const result = await api("POST", `/v1/datasets/${encodeURIComponent(dataset.id)}/queries`, queryBody());
    showRelease(result.release);
    setMessage(`Released${result.replayed ? " from history (no charge)" : ""}: cost ε ${fmt(result.cost.epsilon)}`
      + (result.remaining ? `; ε ${fmt(result.remaining.remaining.epsilon)} left` : ""), false);
  } catch (error) {
    const problem = error.problem || {};
    setMessage(problem.type && problem.type.endsWith("budget-exceeded")
      ? `Refused, nothing charged: ${error.message}` : error.message, true);
  } finally {
    $("run").disabled = false;
  }
  await showDataset();
}

// A cell is a plain value (group key) or {value, ci_low, ci_high}.
function cellValue(cell) {
  return cell !== null && typeof cell === "object" && "value" in cell ? cell : null;
}

// Release.to_dict(): rows of {group: {column: key}, values: {column: {value, ci_low, ci_high}}}.
function releaseColumns(release) {
  return [...(release.group_columns || []), ...(release.value_columns || [])];
}

function releaseRows(release) {
  return (release.rows || []).map((row) => [
    ...(release.group_columns || []).map((c) => row.group[c]),
    ...(release.value_columns || []).map((c) => row.values[c]),
  ]);
}

function showRelease(release) {
  const columns = releaseColumns(release);
  const rows = releaseRows(release);
  const head = $("result-table").querySelector("thead");
  head.replaceChildren(el("tr"));
  for (const c of columns) head.firstChild.append(el("th", c));
  fillRows("result-table", rows.map((row) => row.map((cell) => {
    const noisy = cellValue(cell);
    if (!noisy) return el("td", cell);
    const td = el("td", fmt(noisy.value), "num");
    if (noisy.ci_low !== undefined && noisy.ci_low !== null) {
      td.append(el("div", `[${fmt(noisy.ci_low)}, ${fmt(noisy.ci_high)}]`, "ci"));
    }
    return td;
  })));
  drawChart(columns, rows);
}

function drawChart(columns, rows) {
  const chart = $("chart");
  chart.replaceChildren();
  if (rows.length < 2 || columns.length < 2) return;
  const keyIndex = rows[0].findIndex((cell) => !cellValue(cell));
  const valueIndex = rows[0].findIndex((cell) => cellValue(cell));
  if (keyIndex < 0 || valueIndex < 0) return;
  const bars = rows.map((row) => ({ label: String(row[keyIndex]), ...cellValue(row[valueIndex]) }));
  const top = Math.max(...bars.map((b) => Math.max(b.value, b.ci_high ?? b.value)), 0) || 1;
  const bottom = Math.min(...bars.map((b) => Math.min(b.value, b.ci_low ?? b.value)), 0);
  const width = 560, height = 240, pad = 30, slot = (width - pad) / bars.length;
  const y = (v) => pad / 2 + (height - pad) * (top - v) / (top - bottom);
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `bar chart of ${columns[valueIndex]} by ${columns[keyIndex]}`);
  const add = (tag, attrs, text) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    svg.append(node);
  };
  bars.forEach((b, i) => {
    const x = pad + i * slot + slot * 0.15, w = slot * 0.7;
    add("rect", { class: "bar", x, width: w, y: Math.min(y(b.value), y(0)), height: Math.abs(y(0) - y(b.value)) });
    if (b.ci_low !== undefined && b.ci_low !== null) {
      add("line", { class: "whisker", x1: x + w / 2, x2: x + w / 2, y1: y(b.ci_low), y2: y(b.ci_high) });
    }
    add("text", { x: x + w / 2, y: height - 2, "text-anchor": "middle" }, b.label);
  });
  add("text", { x: 2, y: 12 }, fmt(top));
  chart.append(svg);
}

async function loadHistory() {
  const dataset = currentDataset();
  const entries = await api("GET", `/v1/datasets/${encodeURIComponent(dataset.id)}/queries?limit=50`);
  fillRows("history", entries.map((e) => [
    e.id, new Date(`${e.created_at}Z`).toLocaleString(), e.sql, fmt(e.cost.epsilon), fmt(e.cost.delta),
    e.kind === "replay" ? "replayed" : e.status,
  ]));
}

// ---- owner view ---------------------------------------------------------------------------

async function loadOwner() {
  const dataset = currentDataset();
  const [analysts, audit] = await Promise.all([api("GET", "/v1/analysts"), api("GET", "/v1/audit?limit=50")]);
  fillRows("analysts", analysts.map((a) => [a.id, a.name, new Date(`${a.created_at}Z`).toLocaleString()]));
  $("grant-analyst").replaceChildren(...analysts.map((a) => {
    const option = el("option", a.name);
    option.value = a.id;
    return option;
  }));
  const grants = (await Promise.all(analysts.map((a) => api("GET", `/v1/analysts/${a.id}/grants`))))
    .flat().filter((g) => g.dataset_id === dataset.id);
  const names = Object.fromEntries(analysts.map((a) => [a.id, a.name]));
  fillRows("grants", grants.map((g) => [names[g.analyst_id], fmt(g.budget.total.epsilon),
    fmt(g.budget.spent.epsilon), fmt(g.budget.remaining.epsilon)]));
  fillRows("audit", audit.map((e) => [new Date(`${e.at}Z`).toLocaleString(), e.principal_id || "",
    e.action, e.dataset_id || "", JSON.stringify(e.detail)]));
}

async function createAnalyst(event) {
  event.preventDefault();
  try {
    const issued = await api("POST", "/v1/analysts", { name: $("analyst-name").value });
    $("new-token").textContent = `Token for ${issued.principal.name} (shown once): ${issued.token}`;
    $("analyst-name").value = "";
    await loadOwner();
  } catch (error) {
    $("new-token").textContent = error.message;
  }
}

async function setGrant(event) {
  event.preventDefault();
  const dataset = currentDataset();
  try {
    await api("PUT", `/v1/analysts/${$("grant-analyst").value}/grants/${encodeURIComponent(dataset.id)}`,
      { epsilon: Number($("grant-epsilon").value), delta: Number($("grant-delta").value) });
    await loadOwner();
  } catch (error) {
    $("new-token").textContent = error.message;
  }
}

// ---- wiring -------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("signin-form").addEventListener("submit", (event) => {
    event.preventDefault();
    signIn($("token").value.trim());
  });
  $("signout").addEventListener("click", signOut);
  $("dataset").addEventListener("change", () => { $("sql").value = ""; showDataset(); });
  $("b-apply").addEventListener("click", buildSql);
  $("estimate").addEventListener("click", estimate);
  $("run").addEventListener("click", run);
  $("new-analyst").addEventListener("submit", createAnalyst);
  $("grant").addEventListener("submit", setGrant);
  if (state.token) signIn(state.token);
});
