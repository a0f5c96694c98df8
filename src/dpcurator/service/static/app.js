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
      [{ sql: result.sql, release: result.release }], `${dataset.id}-${result.charge_id}`);
    setMessage(`Released${result.replayed ? " from history (no charge)" : ""}: cost ${describeCost(result.cost)}`
      + (result.remaining ? `; ${describeCost(result.remaining.remaining)} left` : ""), false);
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

function sqlCell(entry) {
  const td = el("td", null, "sql");
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
    `${entry.dataset_id}-${entry.id}`);
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
    return [e.id, when(e.created_at), ...(owner ? [state.names[e.principal_id] || e.principal_id] : []),
      sqlCell(e), fmt(e.cost.epsilon), fmt(e.cost.delta), e.error ? `${status}: ${e.error}` : status, action];
  }));
}

// ---- owner view ---------------------------------------------------------------------------

const describeDetail = (detail) => Object.entries(detail || {})
  .map(([k, v]) => `${k}: ${typeof v === "object" && v !== null ? JSON.stringify(v) : v}`).join("; ");

async function loadOwner() {
  const dataset = currentDataset();
  const [analysts, audit] = await Promise.all([api("GET", "/v1/analysts"), api("GET", "/v1/audit?limit=50")]);
  for (const a of analysts) state.names[a.id] = a.name;
  fillRows("analysts", analysts.map((a) => [a.id, a.name, when(a.created_at)]));
  refill($("grant-analyst"), analysts.map((a) => option(a.id, a.name)));
  const grants = (await Promise.all(analysts.map((a) => api("GET", `/v1/analysts/${a.id}/grants`))))
    .flat().filter((g) => g.dataset_id === dataset.id);
  fillRows("grants", grants.map((g) => [state.names[g.analyst_id], fmt(g.budget.total.epsilon),
    fmt(g.budget.spent.epsilon), fmt(g.budget.remaining.epsilon)]));
  fillRows("audit", audit.map((e) => [when(e.at), e.principal_id ? state.names[e.principal_id] || e.principal_id : "",
    e.action, e.dataset_id || "", describeDetail(e.detail)]));
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
  try {
    await api("PUT", `/v1/analysts/${$("grant-analyst").value}/grants/${encodeURIComponent(currentDataset().id)}`,
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
  $("new-analyst").addEventListener("submit", createAnalyst);
  $("grant").addEventListener("submit", setGrant);
  if (state.token) signIn(state.token);
});
