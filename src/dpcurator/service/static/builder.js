// dpcurator web console: the menu builder. It writes SQL from menus (every aggregate the SQL
// front end supports, group-by columns, one filter) and keeps its choices until the dataset changes.
"use strict";

const NEEDS_BOUNDS = new Set(["SUM", "AVG", "VARIANCE", "STDDEV", "MEDIAN", "QUANTILE", "MIN", "MAX", "HISTOGRAM"]);

const ident = (name) => (/^[A-Za-z_][A-Za-z0-9_]*$/.test(name) ? name : `"${name.replaceAll('"', '""')}"`);

function builderColumns() {
  return Object.entries(currentDataset().schema.columns || {});
}

// Keep a select's choice when its options are rebuilt (if the choice still exists).
function refill(select, options) {
  const previous = select.value;
  select.replaceChildren(...options);
  if ([...select.options].some((o) => o.value === previous)) select.value = previous;
}

// Fill the menus from the dataset's public schema; only when the dataset changes, so the
// choices survive runs and refreshes.
function setUpBuilder(dataset) {
  if (state.builtFor === dataset.id) return;
  state.builtFor = dataset.id;
  const columns = builderColumns();
  const grouping = columns.filter(([, c]) => c.keys || c.type === "bool").map(([n]) => n);
  $("b-groups").replaceChildren(el("span", "group by"), ...grouping.map((name) => {
    const label = el("label", null, "check");
    const box = el("input");
    box.type = "checkbox";
    box.value = name;
    box.name = "b-group";
    label.append(box, ` ${name}`);
    return label;
  }));
  $("b-fcol").replaceChildren(option("", "(no filter)"), ...columns.map(([n]) => option(n)));
  $("b-fval").value = "";
  $("b-col").replaceChildren();
  onAggregateChange();
}

function onAggregateChange() {
  const agg = $("b-agg").value;
  const columns = builderColumns();
  const numeric = columns.filter(([, c]) => c.lower !== undefined && c.lower !== null).map(([n]) => n);
  refill($("b-col"), NEEDS_BOUNDS.has(agg)
    ? numeric.map((n) => option(n))
    : [option("*", "* (rows)"), ...columns.map(([n]) => option(n))]);
  $("b-quantile").classList.toggle("hidden", agg !== "QUANTILE");
  $("b-histogram").classList.toggle("hidden", agg !== "HISTOGRAM");
  onColumnChange();
}

// A histogram's range starts as the column's declared bounds.
function onColumnChange() {
  const column = (currentDataset().schema.columns || {})[$("b-col").value];
  if ($("b-agg").value === "HISTOGRAM" && column) {
    $("b-lower").value = column.lower;
    $("b-upper").value = column.upper;
  }
}

function onFilterColumnChange() {
  const column = (currentDataset().schema.columns || {})[$("b-fcol").value];
  const keys = column ? (column.keys || (column.type === "bool" ? [true, false] : [])) : [];
  $("b-fkeys").replaceChildren(...keys.map((k) => option(String(k))));
}

function finite(id, what) {
  const text = $(id).value.trim();
  const value = Number(text);
  if (text === "" || !Number.isFinite(value)) throw new Error(`${what} must be a number; got '${text}'.`);
  return value;
}

function literal(column, text) {
  if (column.type === "int" || column.type === "float") return String(finite("b-fval", "The filter value"));
  if (column.type === "bool") {
    if (!/^(true|false)$/i.test(text)) throw new Error(`The filter value must be true or false; got '${text}'.`);
    return text.toUpperCase();
  }
  return `'${text.replaceAll("'", "''")}'`;
}

function aggregateSql() {
  const agg = $("b-agg").value;
  const col = $("b-col").value;
  if (!col) throw new Error(`${agg} needs a column with declared bounds; this dataset has none.`);
  if (col === "*") return `COUNT(*) AS count_rows`;
  const c = ident(col);
  if (agg === "QUANTILE") {
    const p = finite("b-p", "p");
    if (!(p > 0 && p < 1)) throw new Error(`p must be strictly between 0 and 1; got ${p}.`);
    const percent = String(Math.round(p * 1000) / 10).replace(".", "_");
    return `QUANTILE(${c}, ${p}) AS q${percent}_${col.replace(/\W/g, "_")}`;
  }
  if (agg === "HISTOGRAM") {
    const lower = finite("b-lower", "The histogram's lower edge");
    const upper = finite("b-upper", "The histogram's upper edge");
    const bins = finite("b-bins", "The number of bins");
    if (!(upper > lower)) throw new Error(`The upper edge must exceed the lower edge; got ${lower} to ${upper}.`);
    if (!Number.isInteger(bins) || bins < 1) throw new Error(`The number of bins must be a positive integer; got ${bins}.`);
    return `HISTOGRAM(${c}, ${lower}, ${upper}, ${bins}) AS hist_${col.replace(/\W/g, "_")}`;
  }
  return `${agg}(${c}) AS ${agg.toLowerCase()}_${col.replace(/\W/g, "_")}`;
}

function builtSql() {
  const table = ident(currentDataset().schema.table);
  const groups = [...document.querySelectorAll("#b-groups input:checked")].map((box) => ident(box.value));
  let where = "";
  const fcol = $("b-fcol").value;
  if (fcol) {
    const column = currentDataset().schema.columns[fcol];
    where = ` WHERE ${ident(fcol)} ${$("b-fop").value} ${literal(column, $("b-fval").value.trim())}`;
  }
  const select = [...groups, aggregateSql()].join(", ");
  const groupBy = groups.length ? ` GROUP BY ${groups.join(", ")}` : "";
  return `SELECT ${select} FROM ${table}${where}${groupBy}`;
}

function buildSql() {
  try {
    $("sql").value = builtSql();
  } catch (error) {
    setMessage(error.message, true);
  }
}

function wireBuilder() {
  $("b-agg").addEventListener("change", onAggregateChange);
  $("b-col").addEventListener("change", onColumnChange);
  $("b-fcol").addEventListener("change", onFilterColumnChange);
  $("b-apply").addEventListener("click", buildSql);
}
