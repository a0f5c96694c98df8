// dpcurator web console: synthetic releases. Owners define one (kind, columns, marginals, a
// budget as ε/δ or as ρ with δ, rows, public), see its cost and the expected error of each measured marginal for free, then publish
// it (charged once to the dataset's cap) and watch its progress. Everyone who sees the dataset
// lists its releases and downloads them (free: post-processing).
"use strict";

const SYNTH_FORMATS = ["csv", "parquet", "json"];

function synthPath() {
  return `/v1/datasets/${encodeURIComponent(currentDataset().id)}/synthetic`;
}

// The column checkboxes of the publish panel: every column with public keys or bounds, ticked.
function setUpSynthColumns(dataset) {
  if (state.synthFor === dataset.id) return;
  state.synthFor = dataset.id;
  const columns = Object.entries(dataset.schema.columns || {});
  const hasDomain = (c) => c.keys || c.type === "bool" || (c.lower !== undefined && c.lower !== null);
  const usable = columns.filter(([, c]) => hasDomain(c)).map(([name]) => name);
  const dropped = columns.filter(([, c]) => !hasDomain(c)).map(([name]) => name);
  $("s-dropped").textContent = dropped.length === 0 ? ""
    : `Not offered: ${dropped.join(", ")} (no public keys or bounds in the metadata, so a synthetic `
      + "release cannot include it; declare its keys, or lower and upper bounds, to offer it).";
  $("s-columns").replaceChildren(el("span", "columns"), ...usable.map((name) => {
    const label = el("label", null, "check");
    const box = el("input");
    box.type = "checkbox";
    box.value = name;
    box.name = "s-column";
    box.checked = true;
    box.addEventListener("change", forgetSynthEstimate);
    label.append(box, ` ${name}`);
    return label;
  }));
  forgetSynthEstimate();
}

// "sex,region; age" -> [["sex", "region"], ["age"]] (empty sets dropped; the server checks names).
function parseMarginals(text) {
  return text.split(";")
    .map((set) => set.split(",").map((name) => name.trim()).filter((name) => name !== ""))
    .filter((set) => set.length > 0);
}

// The request as the HTTP API takes it: ε or ρ (never both), δ, and marginals only when given.
function synthBody() {
  const body = { kind: $("s-kind").value, delta: Number($("s-delta").value) };
  if ($("s-budget").value === "rho") body.rho = Number($("s-rho").value);
  else body.epsilon = Number($("s-epsilon").value);
  body.columns = [...document.querySelectorAll("input[name=s-column]:checked")].map((b) => b.value);
  const marginals = parseMarginals($("s-marginals").value);
  if (marginals.length > 0) body.marginals = marginals;
  if ($("s-rows").value !== "") body.rows = Number($("s-rows").value);
  return body;
}

function setSynthMessage(text, isError) {
  $("s-message").textContent = text;
  $("s-message").className = isError ? "error" : "";
}

// Any change to the request voids the estimate: Publish needs a fresh one for what is asked.
function forgetSynthEstimate() {
  state.synthEstimated = null;
  $("s-publish").disabled = true;
  $("s-estimate-panel").replaceChildren();
}

// Free: the charge and, per measured marginal, the noise and the 95% CI half-width of one cell.
async function estimateSynthetic() {
  forgetSynthEstimate();
  const body = synthBody();
  try {
    const found = await api("POST", `${synthPath()}:estimate`, body);
    const fits = found.fits_cap ? "fits the dataset's cap" : "does NOT fit the dataset's cap";
    const rho = found.event.rho !== undefined ? ` (ρ ${fmt(fractionValue(found.event.rho))})` : "";
    setSynthMessage(`Estimated cost: ${describeCost(found.cost)}${rho} — ${fits}. Nothing was charged.`, !found.fits_cap);
    const errors = found.expected_errors;
    if (errors.length > 0) {
      const names = Object.keys(errors[0]);
      const table = el("table", null, "synth-errors");
      const head = el("tr");
      for (const name of names) head.append(el("th", name));
      table.append(el("thead"), el("tbody"));
      table.tHead.append(head);
      for (const row of errors) {
        const tr = el("tr");
        for (const name of names) tr.append(el("td", fmt(row[name]), typeof row[name] === "number" ? "num" : null));
        table.tBodies[0].append(tr);
      }
      const scroll = el("div", null, "scroll");
      scroll.append(el("p", "Expected error of one noisy cell (ci_halfwidth: 95% CI half-width, in records):", "release-note"), table);
      $("s-estimate-panel").replaceChildren(scroll);
    }
    if (found.fits_cap) {
      state.synthEstimated = JSON.stringify(body);
      $("s-publish").disabled = false;
    }
  } catch (error) {
    setSynthMessage(describeError(error), true);
  }
}

// Charge the cap once, then poll the job until it is done; its download links appear then.
async function publishSynthetic() {
  const body = synthBody();
  if (state.synthEstimated !== JSON.stringify(body)) {
    forgetSynthEstimate();
    setSynthMessage("Estimate this release first (free).", true);
    return;
  }
  $("s-publish").disabled = true;
  try {
    let job = await api("POST", synthPath(), { ...body, public: $("s-public").checked });
    setSynthMessage(`Published ${job.id}: charged ${describeCost(job.cost)}. Computing…`, false);
    await loadSynthetic();
    while (job.status === "running") {
      $("s-progress").value = job.progress.done || 0;
      $("s-progress-text").textContent = `${Math.round(100 * (job.progress.done || 0))}% ${job.progress.message || ""}`;
      await new Promise((resolve) => setTimeout(resolve, 500));
      job = await api("GET", `/v1/synthetic/${encodeURIComponent(job.id)}`);
    }
    $("s-progress").value = job.status === "done" ? 1 : $("s-progress").value;
    $("s-progress-text").textContent = job.status;
    if (job.status === "done") {
      const links = el("span", `${job.id} is ready (${job.rows} rows): `);
      links.append(...downloadButtons(job));
      $("s-message").replaceChildren(links);
      $("s-message").className = "";
    } else {
      setSynthMessage(`${job.id} ${job.status}; its charge (${describeCost(job.cost)}) stands.`, true);
    }
  } catch (error) {
    setSynthMessage(describeError(error), true);
  } finally {
    forgetSynthEstimate();
  }
  await showDataset();  // the cap and the list of releases
}

// The release's table in a format, fetched with the token and saved as a file.
async function downloadSynthetic(release, format) {
  const headers = state.token ? { Authorization: `Bearer ${state.token}` } : {};
  const response = await fetch(`/v1/synthetic/${encodeURIComponent(release.id)}/data?format=${format}`, { headers });
  if (!response.ok) {
    setSynthMessage(`Download failed: ${(await response.json()).detail}`, true);
    return;
  }
  const url = URL.createObjectURL(await response.blob());
  const link = el("a");
  link.href = url;
  link.download = `${release.id}.${format}`;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

function downloadButtons(release) {
  return SYNTH_FORMATS.map((format) => {
    const button = el("button", format.toUpperCase(), `download-${format}`);
    button.type = "button";
    button.addEventListener("click", () => downloadSynthetic(release, format));
    return button;
  });
}

// Every synthetic release of the dataset, newest first, with its cost and download buttons.
async function loadSynthetic() {
  const releases = await api("GET", synthPath());
  fillRows("synthetic", releases.map((r) => {
    const links = el("td", null, "downloads");
    if (r.status === "done") links.append(...downloadButtons(r), previewButton(r));
    const progress = r.status === "running" ? `running ${Math.round(100 * (r.progress.done || 0))}%` : r.status;
    return [r.id, r.kind, progress, r.rows ?? "", describeCost(r.cost), r.public ? "yes" : "no", when(r.created_at), links];
  }));
  $("synthetic-empty").classList.toggle("hidden", releases.length > 0);
}

// MWEM is pure ε-DP (δ = 0, no ρ); MST, AIM and the Fourier tables are ρ-zCDP charged as (ε, δ)
// with δ > 0. MST chooses its own marginals; the contingency tables' are the tables, AIM's and
// MWEM's the workload.
function onSynthKindChange() {
  const kind = $("s-kind").value;
  const tables = kind === "marginals" || kind === "fourier";
  const rhoOption = $("s-budget").querySelector("option[value=rho]");
  rhoOption.disabled = kind === "mwem";
  if (kind === "mwem") {
    $("s-budget").value = "epsilon";
    $("s-delta").value = "0";
  } else if (kind !== "marginals" && Number($("s-delta").value) === 0) $("s-delta").value = "1e-9";
  $("s-rows").disabled = tables;
  if (tables) $("s-rows").value = "";
  $("s-marginals").disabled = kind === "mst";
  if (kind === "mst") $("s-marginals").value = "";
  $("s-marginals").placeholder = tables ? "every 1- and 2-way table"
    : kind === "mst" ? "MST chooses its own" : "workload: every 2-way table";
  onSynthBudgetChange();
}

// ρ is zCDP and the ledger charges (ε, δ): a ρ budget needs δ > 0.
function onSynthBudgetChange() {
  const rho = $("s-budget").value === "rho";
  $("s-epsilon").disabled = rho;
  $("s-rho").disabled = !rho;
  if (rho && Number($("s-delta").value) === 0) $("s-delta").value = "1e-9";
  forgetSynthEstimate();
}

function wireSynthetic() {
  $("s-kind").addEventListener("change", onSynthKindChange);
  $("s-budget").addEventListener("change", onSynthBudgetChange);
  $("s-estimate").addEventListener("click", estimateSynthetic);
  $("s-publish").addEventListener("click", publishSynthetic);
  for (const id of ["s-epsilon", "s-rho", "s-delta", "s-rows", "s-marginals"]) $(id).addEventListener("input", forgetSynthEstimate);
}
