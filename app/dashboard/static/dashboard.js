// specproxy's dashboard: polls /stats and shows it. No build step, no CDN: Chart.js is
// vendored next to this file. An API key, when the proxy asks for one, lives in `key`
// (this page's memory) only: never in storage, cookies or the URL.
"use strict";

const EVERY_S = Number(new URLSearchParams(location.search).get("every")) || 5;
const HISTORY = 120; // points kept per time series
const OUTCOMES = [
  "accepted_without_verification", "verified_draft_used", "spilled_over", "degraded",
  "local_down_cloud_used", "passed_through", "client_error", "client_disconnected", "error",
  "cached",
];
const COLORS = ["#1a7f4b", "#4e9a6f", "#d97706", "#7c3aed", "#2563eb", "#64748b",
  "#a3a3a3", "#94a3b8", "#b42318", "#0891b2"];

let key = null;
let previous = null; // the last /stats, for per-update deltas
let polls = 0;
const charts = {};

const get = (obj, path) => path.split(".").reduce((o, k) => (o == null ? o : o[k]), obj);

const FORMATS = {
  usd: (v) => (Math.abs(v) >= 1 ? "$" + v.toFixed(2) : "$" + Number(v.toPrecision(3))),
  pct: (v) => v.toFixed(1) + "%",
  share: (v) => (100 * v).toFixed(1) + "%",
  int: (v) => String(v),
};

function show(stats) {
  for (const el of document.querySelectorAll("[data-stat]")) {
    const value = get(stats, el.dataset.stat);
    el.dataset.value = value == null ? "" : String(value);
    el.textContent = value == null ? "–" : FORMATS[el.dataset.format](value);
  }
  const audits = stats.quality.audits;
  document.getElementById("audit-note").textContent = !audits
    ? "no audits: they need learning on"
    : audits.ci95
      ? `${audits.n} audits, 95% interval [${FORMATS.share(audits.ci95[0])}, ${FORMATS.share(audits.ci95[1])}]`
      : "no audit yet";
}

function lineChart(id, datasets, yOptions = {}) {
  return new Chart(document.getElementById(id), {
    type: "line",
    data: { labels: [], datasets: datasets.map((label, i) => ({
      label, data: [], borderColor: COLORS[i], backgroundColor: COLORS[i], pointRadius: 2,
    })) },
    options: { animation: false, maintainAspectRatio: false, scales: { y: { beginAtZero: true, ...yOptions } } },
  });
}

function barChart(id, label, stacked = false) {
  return new Chart(document.getElementById(id), {
    type: "bar",
    data: { labels: [], datasets: [{ label, data: [], backgroundColor: COLORS[0] }] },
    options: { animation: false, maintainAspectRatio: false,
      scales: { x: { stacked }, y: { stacked, beginAtZero: true } } },
  });
}

function makeCharts() {
  charts.outcomes = new Chart(document.getElementById("chart-outcomes"), {
    type: "bar",
    data: { labels: [], datasets: OUTCOMES.map((label, i) => ({ label, data: [], backgroundColor: COLORS[i] })) },
    options: { animation: false, maintainAspectRatio: false,
      plugins: { legend: { labels: { boxWidth: 10, font: { size: 10 } } } },
      scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true } } },
  });
  charts.spill = lineChart("chart-spill", ["spill-over rate (30 s)"], { max: 1 });
  charts.spend = lineChart("chart-spend", ["spend", "all-cloud baseline"],
    { ticks: { callback: (v) => FORMATS.usd(v) } });
  charts.positions = barChart("chart-positions", "accepted / drafted at position");
  charts.latency = lineChart("chart-latency",
    ["total p50", "total p95", "first token p50 (streams)", "draft p50", "verify p50"]);
  charts.contexts = barChart("chart-contexts", "requests");
}

function push(chart, label, values) {
  chart.data.labels.push(label);
  values.forEach((v, i) => chart.data.datasets[i].data.push(v));
  if (chart.data.labels.length > HISTORY) {
    chart.data.labels.shift();
    chart.data.datasets.forEach((d) => d.data.shift());
  }
  chart.update();
}

function replace(chart, labels, values) {
  chart.data.labels = labels;
  chart.data.datasets[0].data = values;
  chart.update();
}

function draw(stats) {
  const t = new Date().toLocaleTimeString();
  const outcomes = stats.requests.by_outcome;
  const before = previous ? previous.requests.by_outcome : {};
  push(charts.outcomes, t, OUTCOMES.map((o) => (outcomes[o] || 0) - (before[o] || 0)));
  push(charts.spill, t, [stats.windows["30s"].spill_over_rate ?? 0]);
  push(charts.spend, t, [stats.cost.spend_usd.total, stats.cost.baseline_usd]);
  const ms = stats.latency_ms;
  push(charts.latency, t, [ms.total.p50, ms.total.p95, ms.first_token.p50, ms.draft.p50, ms.verify.p50]);
  const rates = stats.speculation.per_position_acceptance_rate;
  replace(charts.positions, rates.map((_, i) => String(i)), rates);
  const contexts = Object.entries(stats.by_context_type);
  replace(charts.contexts, contexts.map(([name]) => name), contexts.map(([, c]) => c.requests));
}

function row(tbody, cells) {
  const tr = tbody.insertRow();
  for (const cell of cells) {
    const td = tr.insertCell();
    td.textContent = cell.text ?? cell;
    if (cell.className) td.className = cell.className;
  }
}

function tables(stats) {
  const purposes = document.querySelector("#purposes tbody");
  purposes.replaceChildren();
  for (const [purpose, usd] of Object.entries(stats.cost.spend_usd.by_purpose)) {
    row(purposes, [purpose, FORMATS.usd(usd)]);
  }
  const upstreams = document.querySelector("#upstreams tbody");
  upstreams.replaceChildren();
  for (const [name, up] of Object.entries(stats.features.upstreams)) {
    const budget = up.rate_limit.remaining_tokens_minute == null ? "–"
      : `${up.rate_limit.remaining_tokens_minute} tok/min, ${up.rate_limit.remaining_requests_day} req/day`;
    const state = up.circuit.state;
    row(upstreams, [name, { text: state, className: state === "closed" ? "" : "open" },
      budget, String(up.queued), up.last_error || "–"]);
  }
  const depth = document.querySelector("#depth tbody");
  depth.replaceChildren();
  for (const [knob, entry] of Object.entries(stats.adaptive_depth)) {
    if (!entry || typeof entry !== "object") continue;
    if (!entry.k) { row(depth, [knob, "all", entry.k_fixed ?? (entry.enabled ? "on" : "off"), "–"]); continue; }
    for (const [context, k] of Object.entries(entry.k)) {
      const a = entry.acceptance[context];
      row(depth, [knob, context, String(k), a == null ? "–" : FORMATS.share(a)]);
    }
  }
  const alerts = document.getElementById("alerts");
  alerts.replaceChildren();
  for (const a of stats.alerts) {
    const li = document.createElement("li");
    li.className = "alert";
    li.textContent = `${a.alert}: ${a.value} (threshold ${a.threshold})`;
    alerts.append(li);
  }
  if (!stats.alerts.length) alerts.append(Object.assign(document.createElement("li"), { textContent: "none" }));
}

// Usage by key: every key (and team) /stats → keys knows, or the one the select picks;
// a team picked also shows its total. The choice survives the polls.
function keysTable(stats) {
  const keys = stats.keys || { by_key: {}, by_team: {} };
  const select = document.getElementById("key-filter");
  const options = [["", "all keys"],
    ...Object.keys(keys.by_team).map((team) => [`team:${team}`, `team ${team}`]),
    ...Object.keys(keys.by_key).map((name) => [`key:${name}`, name])];
  const listed = [...select.options].map((o) => o.value).join("\n");
  if (listed !== options.map(([value]) => value).join("\n")) {
    const chosen = select.value;
    select.replaceChildren(...options.map(([value, text]) => new Option(text, value)));
    select.value = options.some(([value]) => value === chosen) ? chosen : "";
  }
  const chosen = select.value;
  const tbody = document.querySelector("#keys tbody");
  tbody.replaceChildren();
  const cells = (name, team, k) => [name, team ?? "–", String(k.requests),
    FORMATS.usd(k.spend_usd.total), FORMATS.usd(k.spend_usd.cloud), FORMATS.usd(k.savings_usd),
    String(k.tokens.prompt.local + k.tokens.prompt.cloud + k.tokens.completion.local + k.tokens.completion.cloud),
    String(k.cache.hits)];
  for (const [name, k] of Object.entries(keys.by_key)) {
    if (chosen.startsWith("key:") && chosen !== `key:${name}`) continue;
    if (chosen.startsWith("team:") && chosen !== `team:${k.team}`) continue;
    row(tbody, cells(name, k.team, k));
  }
  if (chosen.startsWith("team:")) {
    const team = chosen.slice("team:".length);
    row(tbody, cells("team total", team, keys.by_team[team]));
    tbody.lastElementChild.className = "team-total";
  }
}

function status(text, error = false) {
  const el = document.getElementById("status");
  el.textContent = text;
  el.classList.toggle("error", error);
}

async function poll() {
  const sent = key; // a key typed while this request is out is not the one refused
  const headers = sent ? { Authorization: `Bearer ${sent}` } : {};
  let response;
  try {
    response = await fetch("/stats", { headers, cache: "no-store" });
  } catch (err) {
    status(`cannot reach the proxy: ${err.message}`, true);
    return;
  }
  if (response.status === 401 || response.status === 403) {
    if (key !== sent) return;
    document.getElementById("key-form").hidden = false;
    const refused = response.status === 403 ? "that key may not read /stats (it needs the telemetry key)" : "that key was refused";
    status(sent ? refused : "this proxy asks for an API key", true);
    key = null;
    return;
  }
  if (!response.ok) {
    status(`/stats answered ${response.status}`, true);
    return;
  }
  const stats = await response.json();
  document.getElementById("key-form").hidden = true;
  show(stats);
  draw(stats);
  tables(stats);
  keysTable(stats);
  previous = stats;
  polls += 1;
  document.body.dataset.polls = String(polls);
  status(`${stats.features.strategy} · up ${Math.round(stats.uptime_s)} s · updated ${new Date().toLocaleTimeString()} · every ${EVERY_S} s`);
}

document.getElementById("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = document.getElementById("key");
  key = input.value;
  input.value = "";
  poll();
});

document.getElementById("key-filter").addEventListener("change", () => {
  if (previous) keysTable(previous);
});

makeCharts();
poll();
setInterval(poll, EVERY_S * 1000);
