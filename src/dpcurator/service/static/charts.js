// dpcurator web console, charts: SVG bar charts with confidence-interval whiskers, drawn from
// released values only (post-processing). Vertical bars for groups, horizontal rows for bins.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const TICK_FORMAT = new Intl.NumberFormat("en", { notation: "compact", maximumFractionDigits: 2 });

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

// An <svg> of the given size and a function adding children to it.
function svgCanvas(width, height, label) {
  const svg = document.createElementNS(SVG_NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", label);
  const add = (tag, attrs, text) => {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    svg.append(node);
    return node;
  };
  return { svg, add };
}

const fitText = (text, chars) => (text.length > chars ? `${text.slice(0, chars - 1)}…` : text);

function barTitle(bar, b, level) {
  const ci = hasCi(b) ? ` [${shown(b).low}, ${shown(b).high}] (${level} CI)` : "";
  bar.append(Object.assign(document.createElementNS(SVG_NS, "title"),
    { textContent: `${b.label}: ${shown(b).value}${ci}` }));
}

// The value scale of a chart: round ticks covering 0 and every value and interval end.
function valueTicks(bars) {
  const ends = bars.flatMap((b) => [b.value, hasCi(b) ? b.ci_low : b.value, hasCi(b) ? b.ci_high : b.value]);
  return niceTicks(Math.min(0, ...ends), Math.max(0, ...ends), 5);
}

// Vertical bars ({label, value, ci_low, ci_high} each) with whiskers, one per group.
function drawBars(container, bars, xTitle, yTitle, level) {
  const ticks = valueTicks(bars);
  const bottom = ticks[0], top = ticks[ticks.length - 1];
  const width = Math.min(900, Math.max(300, container.clientWidth || 600));
  const height = 280, left = 62, right = 8, above = 12, below = 50;
  const slot = (width - left - right) / bars.length;
  const y = (v) => above + (height - above - below) * (top - v) / (top - bottom);
  const { svg, add } = svgCanvas(width, height, `bar chart of ${yTitle} by ${xTitle} with ${level} confidence intervals`);
  for (const t of ticks) {
    add("line", { class: "grid", x1: left, x2: width - right, y1: y(t), y2: y(t) });
    add("text", { class: "tick", x: left - 6, y: y(t) + 4, "text-anchor": "end" }, TICK_FORMAT.format(t));
  }
  add("line", { class: "axis", x1: left, x2: left, y1: y(top), y2: y(bottom) });
  const maxChars = Math.max(3, Math.floor(slot / 7));
  bars.forEach((b, i) => {
    const x = left + i * slot + slot * 0.15, w = slot * 0.7, mid = x + w / 2;
    barTitle(add("rect", { class: "bar", x, width: w, y: Math.min(y(b.value), y(0)), height: Math.abs(y(0) - y(b.value)) }), b, level);
    if (hasCi(b)) {
      add("line", { class: "whisker", x1: mid, x2: mid, y1: y(b.ci_low), y2: y(b.ci_high) });
      for (const end of [b.ci_low, b.ci_high]) {
        add("line", { class: "cap", x1: mid - w / 4, x2: mid + w / 4, y1: y(end), y2: y(end) });
      }
    }
    add("text", { class: "label", x: mid, y: y(bottom) + 16, "text-anchor": "middle" }, fitText(b.label, maxChars));
  });
  add("line", { class: "axis", x1: left, x2: width - right, y1: y(0), y2: y(0) });
  add("text", { class: "axis-title", x: left + (width - left - right) / 2, y: height - 8, "text-anchor": "middle" },
    fitText(xTitle, Math.floor((width - left) / 8)));
  add("text", { class: "axis-title", x: 0, y: 0, "text-anchor": "middle",
    transform: `translate(14 ${(above + height - below) / 2}) rotate(-90)` }, fitText(yTitle, Math.floor((height - below) / 8)));
  container.replaceChildren(svg, el("p", `Bars: noisy ${yTitle} by ${xTitle}; whiskers: ${level} confidence intervals.`,
    "chart-note"));
}

// Horizontal bars, one row per label (a histogram's bins, a column's categories), labels in full.
function drawRows(container, bars, labelTitle, valueTitle, level) {
  const ticks = valueTicks(bars);
  const low = ticks[0], high = ticks[ticks.length - 1];
  const width = Math.min(900, Math.max(300, container.clientWidth || 600));
  const longest = Math.max(...bars.map((b) => b.label.length), 4);
  const left = Math.min(width * 0.4, 12 + 7 * longest), right = 12, row = 22, above = 22, below = 40;
  const height = above + row * bars.length + below;
  const x = (v) => left + (width - left - right) * (v - low) / (high - low);
  const { svg, add } = svgCanvas(width, height, `bar chart of ${valueTitle} by ${labelTitle}`
    + (level ? ` with ${level} confidence intervals` : ""));
  const base = above + row * bars.length;
  for (const t of ticks) {
    add("line", { class: "grid", x1: x(t), x2: x(t), y1: above, y2: base });
    add("text", { class: "tick", x: x(t), y: base + 14, "text-anchor": "middle" }, TICK_FORMAT.format(t));
  }
  bars.forEach((b, i) => {
    const top = above + i * row + 4, h = row - 8, mid = top + h / 2;
    barTitle(add("rect", { class: "bar", y: top, height: h, x: Math.min(x(b.value), x(0)), width: Math.abs(x(b.value) - x(0)) }), b, level);
    if (hasCi(b)) {
      add("line", { class: "whisker", y1: mid, y2: mid, x1: x(b.ci_low), x2: x(b.ci_high) });
      for (const end of [b.ci_low, b.ci_high]) add("line", { class: "cap", y1: top + 2, y2: top + h - 2, x1: x(end), x2: x(end) });
    }
    add("text", { class: "label", x: left - 6, y: mid + 4, "text-anchor": "end" }, fitText(b.label, Math.floor(left / 7)));
  });
  add("line", { class: "axis", x1: x(0), x2: x(0), y1: above, y2: base });
  add("text", { class: "axis-title", x: 4, y: 14 }, fitText(labelTitle, Math.floor(width / 8)));
  add("text", { class: "axis-title", x: left + (width - left - right) / 2, y: height - 6, "text-anchor": "middle" },
    fitText(valueTitle, Math.floor((width - left) / 8)));
  container.replaceChildren(svg, el("p", `Bars: ${valueTitle} by ${labelTitle}`
    + (level ? `; whiskers: ${level} confidence intervals.` : "."), "chart-note"));
}
