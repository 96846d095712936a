// The scaling curve and the cost front: scheduler queries built from the form and the plan.
import { curveChart, fmt, frontChart, html } from "./charts.js";
import { $, call, intOrText, layoutText, modelSpec, num, pins, prune, showError, state, strip, training } from "./common.js";

// --- the scaling curve and the cost front ---------------------------------------------------

export function checkedTypes() {
  return [...document.querySelectorAll("#curve-types input:checked")].map((i) => i.value);
}

function batchPolicy() {
  const gbt = Number($("gbt").value);
  if (gbt > 0) return { kind: "FIXED_GLOBAL", global_batch_tokens: gbt };
  const p = state.plan && state.plan.performance;
  if (p && num(p.global_batch_tokens) > 0) return { kind: "FIXED_GLOBAL", global_batch_tokens: num(p.global_batch_tokens) };
  return { kind: "FREE" };
}

function schedulerRequest(extra = {}) {
  const types = [$("gpu").value, ...checkedTypes().filter((g) => g !== $("gpu").value)];
  const max = Math.max(1, Number($("curve-max").value) || 256);
  const counts = [];
  for (let n = 1; n <= max; n *= 2) counts.push(n);
  const asked = Number($("gpus").value);
  if (asked > 0 && asked <= max && !counts.includes(asked)) counts.push(asked);
  counts.sort((a, b) => a - b);
  const gpn = intOrText($("gpn").value);
  return prune({
    model: modelSpec(),
    training: training(),
    search: pins({ withDp: false }),
    options: { cell_time_limit_s: 5 },
    clusters: types.map((gpu) => ({ gpu, gpus_per_node: gpu === $("gpu").value ? gpn : undefined, ...(extra[gpu] || {}) })),
    grid: { counts },
    batch: batchPolicy(),
  });
}

function cellTip(name, c) {
  const planned = c.status === "CELL_STATUS_PLANNED";
  if (!planned) return `${name} · ${c.num_gpus} GPUs: ${strip(c.status, "CELL_STATUS_").replace(/_/g, " ").toLowerCase()}\n${c.reason}`;
  return `${name} · ${c.num_gpus} GPUs (${c.num_gpus_used} used)\n${layoutText(c.config)}\n${fmt(c.goodput_tokens_per_s)} tokens/s · MFU ${(c.mfu * 100).toFixed(1)}% · wall ${strip(c.binding_wall, "WALL_")}`;
}

export async function drawCurve() {
  const req = schedulerRequest();
  const key = JSON.stringify(req);
  if (state.drawn.curve === key) return;
  $("curve-note").textContent = "planning every cell…";
  const r = await call("/v1/scaling-curve", req, "?timeout=120");
  if (!r.ok) {
    showError(r.error, $("curve-note"));
    $("curve-note").classList.add("error");
    return;
  }
  $("curve-note").classList.remove("error");
  state.drawn.curve = key;
  const data = r.data;
  const series = data.clusters.map((k) => {
    const cells = data.cells.filter((c) => c.cluster === k.cluster).sort((a, b) => a.num_gpus - b.num_gpus);
    return {
      name: k.cluster,
      knee: k.knee_gpus || 0,
      cells: cells.map((c) => ({ x: c.num_gpus, y: c.goodput_tokens_per_s, low: c.band_low_tokens_per_s, high: c.band_high_tokens_per_s, planned: c.status === "CELL_STATUS_PLANNED", tip: cellTip(k.cluster, c) })),
      envelope: cells.filter((c) => c.envelope_goodput_tokens_per_s > 0).map((c) => ({ x: c.num_gpus, y: c.envelope_goodput_tokens_per_s })),
    };
  });
  const policy = req.batch.kind === "FREE" ? "the planner's batch in each cell" : `${fmt(req.batch.global_batch_tokens)} tokens a step in every cell`;
  $("curve-note").textContent = `Throughput against GPUs, ${policy}; the knee is where the envelope gains under ${(data.knee_gain * 100).toFixed(0)}% per doubling. ${data.band_source || ""}`;
  curveChart($("curve-chart"), series, { yLabel: "tokens/s" });
  const body = $("curve-table").querySelector("tbody");
  body.replaceChildren();
  for (const k of data.clusters) {
    const tr = html("tr", { "data-cluster": k.cluster }, body);
    html("td", {}, tr, k.cluster);
    html("td", {}, tr, k.min_feasible_gpus ? String(k.min_feasible_gpus) : "none");
    html("td", {}, tr, String(k.scale_unit_gpus || "–"));
    html("td", { class: "knee-cell" }, tr, k.knee_gpus ? String(k.knee_gpus) : "none");
    html("td", {}, tr, k.largest_useful_gpus ? `${k.largest_useful_gpus}: ${k.largest_useful_reason}` : "–");
    html("td", {}, tr, fmt(k.peak_goodput_tokens_per_s));
  }
}

function prices() {
  const out = {};
  for (const input of document.querySelectorAll("#front-prices input")) {
    if (input.value) out[input.dataset.gpu] = { price_per_gpu_hour: intOrText(input.value) };
  }
  return out;
}

export async function drawFront() {
  const extra = prices();
  const req = schedulerRequest(extra);
  let budget = Number($("front-budget").value);
  if (!(budget > 0)) budget = 20 * num(state.plan && state.plan.num_parameters && state.plan.num_parameters.active) || 1e12;
  req.token_budget = Math.round(budget);
  const key = JSON.stringify(req);
  if (state.drawn.front === key) return;
  $("front-note").textContent = "planning every cell…";
  const r = await call("/v1/training-front", req, "?timeout=120");
  if (!r.ok) {
    showError(r.error, $("front-note"));
    $("front-note").classList.add("error");
    return;
  }
  $("front-note").classList.remove("error");
  state.drawn.front = key;
  const data = r.data;
  const yKey = data.priced ? "cost" : "gpu_hours";
  const types = req.clusters.map((c) => c.gpu);
  const points = data.points.map((p) => ({ ...p, tip: `${p.cluster} · ${p.num_gpus} GPUs\n${layoutText(p.config)}\n${p.days.toPrecision(3)} days · ${fmt(p.gpu_hours)} GPU-hours${data.priced ? ` · cost ${fmt(p.cost)}` : ""}` }));
  $("front-note").textContent = `${fmt(num(data.token_budget))} tokens: days against ${data.priced ? "cost" : "GPU-hours (give every type a price for the cost front)"}.`;
  frontChart($("front-chart"), points, { yKey, yLabel: data.priced ? "cost" : "GPU-hours", types });
  const body = $("front-table").querySelector("tbody");
  body.replaceChildren();
  const onFront = data.priced ? "on_front_cost" : "on_front_gpu_hours";
  for (const p of points.filter((q) => q[onFront])) {
    const tr = html("tr", {}, body);
    for (const v of [p.cluster, p.num_gpus_used, layoutText(p.config), p.days.toPrecision(3), fmt(p.gpu_hours), data.priced ? fmt(p.cost) : "–", "yes"]) html("td", {}, tr, String(v));
  }
}
