// dpcurator web console: sign-in, datasets, queries, history and the owner's view.
// The token lives in sessionStorage only; every call sends it as a Bearer token.
"use strict";

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
  state.names = { [state.me.id]: state.me.name };
  $("signin-error").textContent = "";
  $("signin").classList.add("hidden");
  $("app").classList.remove("hidden");
  $("signout").classList.remove("hidden");
  $("whoami").textContent = `${state.me.name} (${state.me.role})`;
  $("owner-card").classList.toggle("hidden", state.me.role !== "owner");
  $("publish-panel").classList.toggle("hidden", state.me.role !== "owner");
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
  refill(select, state.datasets.map((d) => option(d.id, d.name)));
  await showDataset();
}

function describeBudget(view, label) {
  if (!view) return "";
  const accounting = view.accounting === "concentrated" ? " (concentrated accounting)" : "";
  if (view.total.rho !== undefined && view.total.epsilon === undefined) {
    return `${label}: ρ ${fmt(view.remaining.rho)} of ${fmt(view.total.rho)} left${accounting}`;
  }
  return `${label}: ε ${fmt(view.remaining.epsilon)} of ${fmt(view.total.epsilon)} left`
    + (view.total.delta > 0 ? `, δ ${fmt(view.remaining.delta)} of ${fmt(view.total.delta)}` : "")
    + accounting;
}

// A cost as the server states it: (ε, δ), or ρ for a zCDP cost.
function describeCost(cost) {
  if (cost.rho !== undefined && cost.epsilon === undefined) return `ρ ${fmt(cost.rho)}`;
  return `ε ${fmt(cost.epsilon)}, δ ${fmt(cost.delta)}`;
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
  fillRows("schema", Object.entries(dataset.schema.columns || {}).map(([name, c]) => [
    name, c.type,
    c.keys ? c.keys.join(", ") : (c.lower !== undefined ? `[${c.lower}, ${c.upper}]` : ""),
  ]));
  setUpBuilder(dataset);
  if (!$("sql").value) buildSql();
  setUpSynthColumns(dataset);
  if (state.me.role === "owner") await loadOwner();
  await loadHistory();
  await loadSynthetic();
}

// ---- queries ------------------------------------------------------------------------------

function queryBody() {
  const body = { sql: $("sql").value, epsilon: Number($("epsilon").value), delta: Number($("delta").value) };
  if ($("noise").value) body.noise = $("noise").value;
  return body;
}

const datasetPath = () => `/v1/datasets/${encodeURIComponent(currentDataset().id)}`;

// The body of the query as asked: at ε, or, with a target half-width, accuracy first: the
// outputs are named by a free estimate at ε, then each gets the target and the server picks
// the smallest cost meeting them all (its refusal names an output no budget can meet).
async function askedBody() {
  const body = queryBody();
  const target = $("target").value;
  if (target === "") return body;
  const outputs = await api("POST", `${datasetPath()}/queries:estimate`, body);
  const accuracy = {};
  for (const column of Object.keys(outputs.estimate.ci_halfwidths)) accuracy[column] = Number(target);
  delete body.epsilon;
  delete body.noise;  // accuracy targets are met with Laplace noise
  return { ...body, accuracy };
}

// Cost and expected accuracy from public metadata only: nothing runs, nothing is charged.
async function estimate() {
  clearEstimate();
  try {
    const result = await api("POST", `${datasetPath()}/queries:estimate`, await askedBody());
    setMessage(`Estimated cost: ${describeCost(result.cost)}`
      + (result.fits ? " — fits your budget." : " — does NOT fit your budget."), !result.fits);
    if (result.estimate && result.estimate.ci_halfwidths) showEstimate(result.estimate);
  } catch (error) {
    clearResult();
    setMessage(describeError(error), true);
  }
}

// Run: whatever happens, the previous result and estimate leave the page first.
async function run() {
  const dataset = currentDataset();
  $("run").disabled = true;
  clearResult();
  clearEstimate();
  setMessage("Running…", false);
  try {
    const result = await api("POST", `${datasetPath()}/queries`, await askedBody());
    showResults(`Charge #${result.charge_id}${result.replayed ? " (replayed from history, no charge)" : ""}`,
      [{ sql: result.sql, release: result.release }], `${dataset.id}-${result.charge_id}`, result.replayed);
    const left = result.remaining ? `; ${describeCost(result.remaining.remaining)} left` : "";
    setMessage(result.replayed ? `Released from history: no charge${left}.`
      : `Released: cost ${describeCost(result.cost)}${left}`, false);
  } catch (error) {
    setMessage(describeError(error), true);
  } finally {
    $("run").disabled = false;
  }
  await showDataset();
}

// ---- history ------------------------------------------------------------------------------

// A batch's text is the JSON list of its queries' SQL; its result is {release_id, results}.
function batchSql(entry) {
  try {
    const list = JSON.parse(entry.sql);
    if (Array.isArray(list)) return list.map(String);
  } catch {
    // not a JSON list: shown as written
  }
  return [entry.sql];
}

function entryResults(entry) {
  if (!entry.result || entry.kind === "synthetic") return [];  // synthetic: see its own card
  if (entry.kind === "batch") return entry.result.results || [];
  return [{ sql: entry.sql, release: entry.result }];
}

// A synthetic release's ledger text is its request as JSON: shown as a sentence.
function synthText(entry) {
  let request;
  try {
    request = JSON.parse(entry.sql);
  } catch {
    return entry.sql;
  }
  if (request === null || typeof request !== "object") return entry.sql;
  const budget = request.rho !== null && request.rho !== undefined ? `ρ ${fmt(fractionValue(String(request.rho)))}`
    : `ε ${fmt(fractionValue(String(request.epsilon)))}`;
  const tables = (request.marginals || []).map((m) => m.join(" × ")).join("; ");
  return `Synthetic ${String(request.kind).toUpperCase()} of ${(request.columns || []).join(", ")}`
    + (tables ? ` (marginals ${tables})` : "")
    + (request.rows ? `, ${request.rows} rows` : "")
    + `, ${budget}, δ ${fmt(fractionValue(String(request.delta)))}`
    + (request.synthetic ? ` → ${request.synthetic}` : "");
}

function sqlCell(entry) {
  const td = el("td", null, "sql");
  if (entry.kind === "synthetic") {
    td.className = "synthetic-entry";
    td.textContent = synthText(entry);
    return td;
  }
  if (entry.kind !== "batch") {
    td.textContent = entry.sql;
    return td;
  }
  td.append(el("div", `batch${entry.result && entry.result.release_id ? ` ${entry.result.release_id}` : ""}`, "ci"));
  const list = el("ol", null, "batch");
  list.append(...batchSql(entry).map((sql) => el("li", sql)));
  td.append(list);
  return td;
}

function reopen(entry) {
  const who = state.me.role === "owner" ? `, ${state.names[entry.principal_id] || entry.principal_id}` : "";
  clearEstimate();
  showResults(`History #${entry.id} (${when(entry.created_at)}${who})`, entryResults(entry),
    `${entry.dataset_id}-${entry.id}`, entry.kind === "replay");
  setMessage(`Reopened history entry #${entry.id}: no new charge.`, false);
  $("result").scrollIntoView({ block: "nearest" });
}

async function loadHistory() {
  const owner = state.me.role === "owner";
  const entries = await api("GET", `${datasetPath()}/queries?limit=50`);
  fillHead("history", ["#", "when", ...(owner ? ["analyst"] : []), "SQL", "ε", "δ", "status", ""]);
  fillRows("history", entries.map((e) => {
    const status = e.kind === "replay" ? `replayed #${e.replay_of}` : e.status;
    const action = el("td");
    if (entryResults(e).length > 0) {
      const open = el("button", "Open", "open");
      open.type = "button";
      open.addEventListener("click", () => reopen(e));
      action.append(open);
    }
    if (e.kind === "synthetic" && e.result && e.result.synthetic_id) {
      action.append(previewButton({ id: e.result.synthetic_id }));
    }
    return [e.id, when(e.created_at), ...(owner ? [state.names[e.principal_id] || e.principal_id] : []),
      sqlCell(e), fmt(e.cost.epsilon), fmt(e.cost.delta), e.error ? `${status}: ${e.error}` : status, action];
  }));
}

// ---- wiring -------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("signin-form").addEventListener("submit", (event) => {
    event.preventDefault();
    signIn($("token").value.trim());
  });
  $("signout").addEventListener("click", signOut);
  $("dataset").addEventListener("change", () => {
    $("sql").value = "";
    clearResult();
    clearEstimate();
    setMessage("", false);
    showDataset();
  });
  wireBuilder();
  wireSynthetic();
  $("estimate").addEventListener("click", estimate);
  $("run").addEventListener("click", run);
  wireOwner();
  if (state.token) signIn(state.token);
});
