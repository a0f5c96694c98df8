// dpcurator web console: the owner's view. Analysts (create, with a token shown once), each
// analyst's budget on the dataset (set or edit: PUT /v1/analysts/{id}/grants/{dataset}), the
// dataset's global cap and replay switch (PATCH /v1/datasets/{id}) and the audit log.
"use strict";

// An audit detail in words: exact rationals ("1/100000") as rounded numbers, objects as lists.
function detailText(value) {
  if (typeof value === "string" && /^-?\d+\/\d+$/.test(value)) return fmt(fractionValue(value));
  if (typeof value === "number") return fmt(value);
  if (typeof value !== "object" || value === null) return String(value);
  return `(${Object.entries(value).map(([k, v]) => `${k} ${detailText(v)}`).join(", ")})`;
}

const describeDetail = (detail) => Object.entries(detail || {}).map(([k, v]) => `${k}: ${detailText(v)}`).join("; ");

function setOwnerMessage(id, text, isError) {
  $(id).textContent = text;
  $(id).className = isError ? "error" : "";
}

// The cap form starts from the dataset's current cap (ε, δ caps only; a ρ cap is shown, not edited here).
function showCap(dataset) {
  $("cap-now").textContent = describeBudget(dataset.cap, "Global cap");
  $("cap-replay").checked = Boolean(dataset.replay_enabled);
  const total = dataset.cap ? dataset.cap.total : null;
  const editable = total && total.epsilon !== undefined && total.epsilon !== null;
  for (const id of ["cap-epsilon", "cap-delta"]) $(id).disabled = !editable;
  if (editable) {
    $("cap-epsilon").value = fmt(total.epsilon);
    $("cap-delta").value = fmt(total.delta);
  }
}

function editButton(grant) {
  const button = el("button", "Edit", "edit-grant");
  button.type = "button";
  button.addEventListener("click", () => {
    $("grant-analyst").value = grant.analyst_id;
    $("grant-epsilon").value = fmt(grant.budget.total.epsilon ?? 0);
    $("grant-delta").value = fmt(grant.budget.total.delta ?? 0);
    $("grant-epsilon").focus();
  });
  return button;
}

async function loadOwner() {
  const dataset = currentDataset();
  const [analysts, audit] = await Promise.all([api("GET", "/v1/analysts"), api("GET", "/v1/audit?limit=50")]);
  for (const a of analysts) state.names[a.id] = a.name;
  fillRows("analysts", analysts.map((a) => [a.id, a.name, when(a.created_at)]));
  refill($("grant-analyst"), analysts.map((a) => option(a.id, a.name)));
  const grants = (await Promise.all(analysts.map((a) => api("GET", `/v1/analysts/${a.id}/grants`))))
    .flat().filter((g) => g.dataset_id === dataset.id);
  fillRows("grants", grants.map((g) => [state.names[g.analyst_id], describeCost(g.budget.total),
    describeCost(g.budget.spent), describeCost(g.budget.remaining), editButton(g)]));
  fillRows("audit", audit.map((e) => [when(e.at), e.principal_id ? state.names[e.principal_id] || e.principal_id : "",
    e.action, e.dataset_id || "", describeDetail(e.detail)]));
  showCap(dataset);
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
  const name = state.names[$("grant-analyst").value];
  try {
    await api("PUT", `/v1/analysts/${$("grant-analyst").value}/grants/${encodeURIComponent(currentDataset().id)}`,
      { epsilon: Number($("grant-epsilon").value), delta: Number($("grant-delta").value) });
    setOwnerMessage("grant-message", `${name}'s budget on this dataset is now ε ${fmt(Number($("grant-epsilon").value))}, `
      + `δ ${fmt(Number($("grant-delta").value))}.`, false);
    await loadOwner();
  } catch (error) {
    setOwnerMessage("grant-message", `Budget not changed: ${error.message}`, true);
  }
}

async function setCap(event) {
  event.preventDefault();
  const body = { replay_enabled: $("cap-replay").checked };
  if (!$("cap-epsilon").disabled) {
    body.cap_epsilon = Number($("cap-epsilon").value);
    body.cap_delta = Number($("cap-delta").value);
  }
  try {
    const updated = await api("PATCH", `/v1/datasets/${encodeURIComponent(currentDataset().id)}`, body);
    Object.assign(currentDataset(), updated);
    setOwnerMessage("cap-message", `Saved: ${describeBudget(updated.cap, "global cap")}; replay ${updated.replay_enabled ? "on" : "off"}.`, false);
    await showDataset();
  } catch (error) {
    setOwnerMessage("cap-message", `Cap not changed: ${error.message}`, true);
  }
}

function wireOwner() {
  $("new-analyst").addEventListener("submit", createAnalyst);
  $("grant").addEventListener("submit", setGrant);
  $("cap").addEventListener("submit", setCap);
}
