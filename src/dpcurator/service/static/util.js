// dpcurator web console, shared helpers: the API call, DOM building, number and time formatting.
// Plain JS, no build step, no third-party code; every text reaches the page through textContent.
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  token: sessionStorage.getItem("dpc-token"),
  me: null,
  datasets: [],
  names: {}, // principal id -> name (owners: every analyst and themselves)
  builtFor: null, // the dataset whose columns fill the menu builder
};

class ApiError extends Error {
  constructor(problem, status) {
    super(problem.detail || problem.title || "Request failed");
    this.problem = problem;
    this.status = status;
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
  if (!response.ok) throw new ApiError(data, response.status);
  return data;
}

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function option(value, label) {
  const node = el("option", label ?? value);
  node.value = value;
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

function fillHead(tableId, names) {
  const tr = el("tr");
  for (const name of names) tr.append(el("th", name));
  $(tableId).querySelector("thead").replaceChildren(tr);
}

const fmt = (x) => (typeof x === "number" ? Number(x.toPrecision(6)).toString() : String(x));
// Four significant digits (the stated rule for a number without an interval); "—" for none.
const fmt4 = (x) => (typeof x === "number" && Number.isFinite(x) ? Number(x.toPrecision(4)).toString() : "—");

// A released number's precision, stated once on the page: the value and its interval ends are
// rounded to two significant digits of the interval's half-width; without an interval, to
// four significant digits. (The CSV download keeps every digit.)
const PRECISION_NOTE = "Rounded to two significant digits of each interval's half-width "
  + "(four significant digits without an interval); the CSV keeps every digit.";

function hasCi(estimate) {
  return estimate.ci_low !== undefined && estimate.ci_low !== null
    && estimate.ci_high !== undefined && estimate.ci_high !== null;
}

const trimmed = (x, decimals) => Number(x.toFixed(Math.min(20, decimals))).toString();

// {value, low, high} as text, rounded as PRECISION_NOTE says.
function shown(estimate) {
  const { value } = estimate;
  if (value === null || value === undefined) return { value: "—", low: "", high: "" };
  if (typeof value !== "number" || !Number.isFinite(value)) return { value: String(value), low: "", high: "" };
  const half = hasCi(estimate) ? (estimate.ci_high - estimate.ci_low) / 2 : 0;
  if (!(half > 0)) {
    const text = Number(value.toPrecision(4)).toString();
    return hasCi(estimate) ? { value: text, low: text, high: text } : { value: text, low: "", high: "" };
  }
  const exponent = Math.floor(Math.log10(half)) - 1;  // the step is 10^exponent
  const round = exponent >= 0
    ? (x) => String(Math.round(x / 10 ** exponent) * 10 ** exponent)
    : (x) => trimmed(x, -exponent);
  return { value: round(value), low: round(estimate.ci_low), high: round(estimate.ci_high) };
}

// "value [low, high]" or "value (no CI)".
const withCi = (estimate) => (hasCi(estimate)
  ? `${shown(estimate).value} [${shown(estimate).low}, ${shown(estimate).high}]` : `${shown(estimate).value} (no CI)`);

// "n/d" (the server's exact rationals) as a number.
function fractionValue(text) {
  const [numerator, denominator = "1"] = text.split("/");
  return Number(numerator) / Number(denominator);
}

// "95%" for alpha = 0.05: the level of a (1 - alpha) confidence interval.
const ciLevel = (alpha) => `${fmt(100 * (1 - alpha))}%`;

// The API writes UTC timestamps with their offset; older servers wrote naive UTC.
function when(timestamp) {
  const zoned = /(Z|[+-]\d\d:?\d\d)$/.test(timestamp) ? timestamp : `${timestamp}Z`;
  return new Date(zoned).toLocaleString();
}

// A message under the query box. A refusal (4xx) is free: say so once, whatever the detail says.
function setMessage(text, isError) {
  $("message").textContent = text;
  $("message").className = isError ? "error" : "";
}

function describeError(error) {
  if (!(error instanceof ApiError)) return error.message;
  if (error.status >= 500) return `Failed: ${error.message}`;
  const free = /nothing was charged/i.test(error.message) ? "" : " Nothing was charged.";
  return `Refused: ${error.message}${free}`;
}
