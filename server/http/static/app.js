// The planner page: a form over the /v1 JSON calls of this server, its state in the URL.
import { COLORS, fmt, html, seconds, stackedBar } from "./charts.js";
import {
  $, PINS, call, clearErrors, intOrText, layoutText, modelSpec, num, pins, prune, showError, state, strip, training,
} from "./common.js";
import { checkedTypes, drawCurve, drawFront } from "./scheduler.js";

const GiB = 2 ** 30;
const TENANTS = [["weights", "weights"], ["gradients", "gradients"], ["optimizer", "optimizer state"],
  ["activations", "activations"], ["reserve", "reserve (CUDA, NCCL, fragmentation)"]];
const PARTS = [["compute_s", "compute"], ["recompute_s", "recompute"], ["tp_comm_s", "TP comm"],
  ["cp_comm_s", "CP comm"], ["ep_comm_s", "EP all-to-all"], ["pp_comm_s", "PP sends"],
  ["dp_comm_s", "DP/FSDP comm"], ["bubble_s", "pipeline bubble"], ["optimizer_s", "optimizer step"]];
const AXES = [["tp", "tp"], ["pp", "pp"], ["virtual_stages", "virtual stages"], ["dp", "dp"],
  ["cp", "cp"], ["ep", "ep"], ["etp", "expert tp"], ["micro_batch_size", "micro-batch"],
  ["num_microbatches", "micro-batches"], ["zero_stage", "ZeRO"], ["recompute", "recompute"],
  ["sequence_parallel", "seq. parallel"]];

// --- the form and the URL -------------------------------------------------------------------

function fillSelect(select, values, labels = values) {
  select.replaceChildren();
  values.forEach((v, i) => html("option", { value: v }, select, labels[i]));
}

function readForm() {
  const f = {
    model: $("model").value, gpu: $("gpu").value, gpus: $("gpus").value, gpn: $("gpn").value,
    seq: $("seq").value, gbt: $("gbt").value, fw: $("framework").value, prec: $("precision").value,
    topk: $("topk").value, fewer: $("fewer").checked ? "1" : "",
  };
  for (const p of PINS) f[p] = $("pin-" + p).value;
  return f;
}

function writeForm(f) {
  const set = (id, v) => { if (v !== undefined && v !== null) $(id).value = v; };
  if (f.model && [...$("model").options].some((o) => o.value === f.model)) $("model").value = f.model;
  set("gpu", f.gpu); set("gpus", f.gpus); set("gpn", f.gpn); set("seq", f.seq); set("gbt", f.gbt);
  set("framework", f.fw); set("precision", f.prec); set("topk", f.topk);
  $("fewer").checked = f.fewer === "1";
  for (const p of PINS) set("pin-" + p, f[p] ?? "");
  if (PINS.some((p) => f[p])) $("pins-box").open = true;
}

function toHash(view) {
  const f = readForm();
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(f)) if (v !== "" && v !== undefined) q.set(k, v);
  if (f.model === "hf" && state.hfSpec) q.set("spec", JSON.stringify(state.hfSpec));
  q.set("v", view || currentView());
  const types = checkedTypes();
  if (types.length) q.set("cmp", types.join(","));
  if ($("curve-max").value !== "256") q.set("max", $("curve-max").value);
  if ($("front-budget").value) q.set("budget", $("front-budget").value);
  const prices = [...document.querySelectorAll("#front-prices input")].filter((i) => i.value).map((i) => `${i.dataset.gpu}:${i.value}`);
  if (prices.length) q.set("prices", prices.join(","));
  return "#" + q.toString();
}

function saveHash(view) {
  history.replaceState(null, "", toHash(view));
}

function fromHash() {
  const q = new URLSearchParams(location.hash.slice(1));
  const f = Object.fromEntries(q.entries());
  if (f.spec) {
    try { state.hfSpec = JSON.parse(f.spec); } catch { state.hfSpec = null; }
  }
  return f;
}


function planRequest() {
  const search = pins();
  if ($("fewer").checked) search.allow_fewer_gpus = true;
  return prune({
    model: modelSpec(),
    cluster: { gpu: $("gpu").value, num_gpus: intOrText($("gpus").value), gpus_per_node: intOrText($("gpn").value) },
    training: { ...training(), global_batch_tokens: intOrText($("gbt").value) },
    search,
    options: { top_k: intOrText($("topk").value) },
  });
}

// --- the plan -------------------------------------------------------------------------------
function renderLayout(c) {
  const box = $("layout");
  box.replaceChildren();
  for (const [key, label] of AXES) {
    let v = c[key];
    if (key === "etp" && (v === c.tp || !c.ep || c.ep <= 1)) continue;
    if (key === "recompute") v = strip(v, "RECOMPUTE_");
    if (key === "sequence_parallel") v = v ? "on" : "off";
    const chip = html("div", { class: "chip", "data-axis": key }, box);
    html("span", { class: "k" }, chip, label);
    html("span", { class: "v" }, chip, String(v));
  }
}

function renderMemory(m) {
  const hbm = num(m.hbm), total = num(m.total), reserve = num(m.reserve);
  const parts = TENANTS.map(([key, label], i) => ({ key, label, value: num(m[key]), color: COLORS[i === 4 ? 4 : i] }));
  $("memory-stage").textContent = `${(total / GiB).toFixed(1)} of ${(hbm / GiB).toFixed(1)} GiB HBM, on the ${m.stage || "most loaded"} stage`;
  stackedBar($("memory-chart"), parts, {
    max: Math.max(hbm, total) * 1.02,
    unit: (v) => (v / GiB).toFixed(1) + " GiB",
    marks: [
      { at: hbm - reserve, label: `usable ${((hbm - reserve) / GiB).toFixed(0)} GiB`, cls: "usable" },
      { at: hbm, label: `HBM ${(hbm / GiB).toFixed(0)} GiB`, cls: "hbm" },
    ],
  });
}

function renderTime(p) {
  const b = p.breakdown || {};
  const parts = PARTS.map(([key, label], i) => ({ key, label, value: num(b[key]), color: COLORS[i % COLORS.length] }));
  const sum = parts.reduce((s, q) => s + q.value, 0);
  $("time-total").textContent = `step ${seconds(num(p.step_time_s))}`;
  stackedBar($("time-chart"), parts, { max: Math.max(sum, num(p.step_time_s)), unit: seconds });
}

function renderAlternatives(plan) {
  const body = $("alternatives").querySelector("tbody");
  body.replaceChildren();
  const best = num(plan.performance.tokens_per_s);
  for (const a of plan.alternatives || []) {
    const tr = html("tr", {}, body);
    const tps = num(a.performance.tokens_per_s);
    html("td", {}, tr, layoutText(a.config));
    html("td", {}, tr, fmt(tps));
    const gap = (tps / best - 1) * 100;
    html("td", {}, tr, Math.abs(gap) < 0.005 ? "same" : `${gap > 0 ? "+" : "−"}${Math.abs(gap).toFixed(2)}%`);
    html("td", {}, tr, `${(num(a.memory.total) / GiB).toFixed(1)} GiB`);
    html("td", {}, tr, strip(a.binding_wall, "WALL_"));
  }
  if (!(plan.alternatives || []).length) html("td", { colspan: 5, class: "note" }, html("tr", {}, body), "none asked (Alternatives: 0) or none distinct");
}

function findBand(obj, path = "") {
  // the expected error band of a prediction, wherever an answer carries one
  for (const [k, v] of Object.entries(obj || {})) {
    if (/band/.test(k) && v !== null && v !== "" && v !== 0 && typeof v !== "object") return `${path}${k}: ${typeof v === "number" ? fmt(v) : v}`;
    if (/band/.test(k) && v && typeof v === "object") return `${path}${k}: ${JSON.stringify(v)}`;
    if (v && typeof v === "object" && !Array.isArray(v) && k !== "alternatives") {
      const found = findBand(v, `${path}${k}.`);
      if (found) return found;
    }
  }
  return null;
}

function renderPlan(plan, req, elapsedMs) {
  state.plan = plan;
  state.planReq = req;
  state.drawn = {};
  $("plan-empty").hidden = true;
  $("plan-result").hidden = false;
  const status = strip(plan.status, "PLAN_STATUS_");
  const s = $("summary");
  s.replaceChildren();
  html("span", { class: "status " + status, id: "status" }, s, status);
  const solver = plan.solver || {};
  if (status === "INFEASIBLE") {
    $("feasible").hidden = true;
    $("infeasible").hidden = false;
    const e = plan.explanation || {};
    $("infeasible-reason").textContent = e.reason || "no layout fits";
    const fix = $("infeasible-fix");
    fix.replaceChildren();
    if (num(e.min_gpus) > 0) {
      html("span", {}, fix, `The smallest cluster that fits: ${e.min_gpus} GPUs. `);
      const b = html("button", { type: "button", id: "use-min" }, fix, `Plan on ${e.min_gpus} GPUs`);
      b.addEventListener("click", () => { $("gpus").value = e.min_gpus; submitPlan(); });
    } else {
      fix.textContent = "No GPU count of this type fits this model with these pins.";
    }
  } else {
    $("feasible").hidden = false;
    $("infeasible").hidden = true;
    const p = plan.performance;
    html("span", { class: "big", id: "tokens" }, s, `${fmt(num(p.tokens_per_s))} tokens/s`);
    html("span", {}, s, `MFU ${(num(p.mfu) * 100).toFixed(1)}%`);
    html("span", {}, s, `step ${seconds(num(p.step_time_s))}`);
    html("span", {}, s, `${fmt(num(p.global_batch_tokens))} tokens a step`);
    html("span", {}, s, `${p.num_gpus_used} of ${req.cluster.num_gpus} GPUs`);
    renderLayout(plan.config);
    renderMemory(plan.memory);
    renderTime(p);
    const wall = strip(plan.binding_wall, "WALL_");
    $("wall-name").textContent = wall;
    $("wall-text").textContent = (state.meta.walls || {})[wall] || "";
    const w = $("warnings");
    w.replaceChildren();
    for (const text of plan.warnings || []) html("li", {}, w, text);
    $("batch").textContent = plan.batch && plan.batch.reason ? "Batch: " + plan.batch.reason : "";
    const band = findBand(plan);
    $("band").hidden = !band;
    $("band").textContent = band ? "Expected error band: " + band : "";
    renderAlternatives(plan);
    loadExport();
  }
  $("request-json").textContent = JSON.stringify(req, null, 2);
  $("solver").textContent = `CP-SAT ${solver.status || ""} · gap ${num(solver.gap).toPrecision(2)} · solved in ${seconds(num(solver.wall_time_s))}` +
    (solver.num_variables ? ` · ${solver.num_variables} variables` : "") + ` · answered in ${elapsedMs.toFixed(0)} ms`;
}

async function loadExport() {
  const pre = $("export");
  if (!state.meta.export_kinds.length) {
    pre.textContent = "The export is not available on this server (start it with `meshplan serve`).";
    return;
  }
  const kind = $("export-kind").value;
  const req = state.planReq;
  pre.textContent = "…";
  const r = await call("/page/export", { model: req.model, cluster: req.cluster, training: req.training, config: state.plan.config }, "?kind=" + encodeURIComponent(kind));
  pre.textContent = r.ok ? r.data.text : `${kind} cannot take this plan: ${(r.error.violations[0] || r.error).description || r.error.message}`;
}

async function submitPlan() {
  clearErrors();
  const req = planRequest();
  saveHash("plan");
  showView("plan", false);
  $("plan").disabled = true;
  $("busy").hidden = false;
  const started = performance.now();
  const r = await call("/v1/plan", req, "?timeout=60");  // a page that never waits without end
  $("plan").disabled = false;
  $("busy").hidden = true;
  if (!r.ok) {
    showError(r.error);
    return false;
  }
  renderPlan(r.data, req, performance.now() - started);
  document.body.dataset.planMs = String(performance.now() - started);
  document.body.dataset.solveMs = String(1000 * num(r.data.solver && r.data.solver.wall_time_s));
  return true;
}

// --- views ----------------------------------------------------------------------------------

function currentView() {
  return document.querySelector(".tabs [aria-selected=true]").dataset.view;
}

async function showView(view, draw = true) {
  for (const b of document.querySelectorAll(".tabs button")) b.setAttribute("aria-selected", String(b.dataset.view === view));
  for (const v of ["plan", "curve", "front"]) $("view-" + v).hidden = v !== view;
  saveHash(view);
  if (!draw) return;
  if (view === "curve") await drawCurve();
  if (view === "front") await drawFront();
}

function typeBoxes() {
  const box = $("curve-types"), prices = $("front-prices");
  box.replaceChildren();
  prices.replaceChildren();
  for (const g of state.catalog.gpus) {
    const l = html("label", {}, box);
    const input = html("input", { type: "checkbox", value: g.name }, l);
    input.addEventListener("change", () => saveHash());
    l.append(g.name);
    const p = html("label", {}, prices, g.name + " ");
    html("input", { type: "number", step: "0.01", min: "0", "data-gpu": g.name, placeholder: "–" }, p).addEventListener("change", () => saveHash());
  }
}

function markPlannedType() {
  // the planned GPU type is always on the curve: its box is not a choice
  for (const input of document.querySelectorAll("#curve-types input")) input.disabled = input.value === $("gpu").value;
}

function describeModel() {
  const box = $("model-shape");
  const name = $("model").value;
  $("hf-box").hidden = name !== "hf";
  const m = name === "hf" ? state.hfSpec : state.catalog.models.find((x) => x.name === name);
  if (!m) { box.textContent = name === "hf" ? "Paste a config.json and read it." : ""; return; }
  let text = `${m.num_layers} layers · hidden ${m.hidden_size} · ${m.num_attention_heads}/${m.num_kv_heads} heads · ffn ${m.ffn_hidden_size} · vocab ${m.vocab_size}`;
  if (m.moe && m.moe.num_experts) text += ` · ${m.moe.num_experts} experts, top-${m.moe.top_k}`;
  if (m.published_params_b) text += ` · ${m.published_params_b}B parameters`;
  box.textContent = text;
}

async function readHf() {
  clearErrors();
  const r = await call("/page/hf-config", $("hf").value);
  if (!r.ok) { showError(r.error); return; }
  state.hfSpec = r.data.model;
  describeModel();
  saveHash();
}

async function init() {
  const [meta, catalog] = await Promise.all([call("/page/meta"), call("/v1/catalog")]);
  if (!meta.ok) { showError(meta.error); return; }
  state.meta = meta.data;
  $("token-box").hidden = !state.meta.tokens;
  $("token").value = sessionStorage.getItem("meshplan-token") || "";
  $("token").addEventListener("change", () => { sessionStorage.setItem("meshplan-token", $("token").value); boot(); });
  fillSelect($("framework"), state.meta.enums.Framework);
  $("framework").value = "MEGATRON";
  fillSelect($("precision"), state.meta.enums.Precision);
  for (const r of state.meta.enums.Recompute) html("option", { value: r }, $("pin-recompute"), r.toLowerCase());
  fillSelect($("export-kind"), state.meta.export_kinds);
  state.catalogError = catalog.ok ? null : catalog.error;
  if (catalog.ok) await boot(catalog.data);
  else showError(catalog.error);
}

async function boot(catalog) {
  if (!catalog) {
    const r = await call("/v1/catalog");
    if (!r.ok) { showError(r.error); return; }
    catalog = r.data;
  }
  clearErrors();
  state.catalog = catalog;
  const models = catalog.models.map((m) => m.name);
  fillSelect($("model"), [...models, "hf"], [...models, "Hugging Face config.json…"]);
  $("model").value = models.includes("llama3-8b") ? "llama3-8b" : models[0];
  fillSelect($("gpu"), catalog.gpus.map((g) => g.name), catalog.gpus.map((g) => `${g.name} (${g.hbm_gib} GiB)`));
  $("gpu").value = catalog.gpus.some((g) => g.name === "h100-sxm-80gb") ? "h100-sxm-80gb" : catalog.gpus[0].name;
  typeBoxes();
  const f = fromHash();
  writeForm(f);
  $("export-kind").value = state.meta.framework_export[$("framework").value] || state.meta.export_kinds[0];
  for (const g of (f.cmp || "").split(",")) {
    const box = document.querySelector(`#curve-types input[value="${CSS.escape(g)}"]`);
    if (box) box.checked = true;
  }
  if (f.max) $("curve-max").value = f.max;
  if (f.budget) $("front-budget").value = f.budget;
  for (const pair of (f.prices || "").split(",")) {
    const [g, v] = pair.split(":");
    const input = document.querySelector(`#front-prices input[data-gpu="${CSS.escape(g || "")}"]`);
    if (input) input.value = v;
  }
  describeModel();
  markPlannedType();
  document.body.dataset.ready = "1";
  if (f.gpus && f.model) {
    const ok = await submitPlan();
    if (ok && f.v && f.v !== "plan") await showView(f.v);
  }
}

$("form").addEventListener("submit", (e) => { e.preventDefault(); submitPlan(); });
$("model").addEventListener("change", () => { describeModel(); saveHash(); });
$("gpu").addEventListener("change", markPlannedType);
$("framework").addEventListener("change", () => { $("export-kind").value = state.meta.framework_export[$("framework").value] || $("export-kind").value; });
$("export-kind").addEventListener("change", loadExport);
$("hf-read").addEventListener("click", readHf);
$("hf-file").addEventListener("change", async (e) => {
  const file = e.target.files[0];
  if (file) { $("hf").value = await file.text(); readHf(); }
});
$("copy").addEventListener("click", async () => {
  const text = $("export").textContent;
  try { await navigator.clipboard.writeText(text); }
  catch {
    const range = document.createRange();
    range.selectNodeContents($("export"));
    getSelection().removeAllRanges();
    getSelection().addRange(range);
    document.execCommand("copy");
  }
  $("copy").textContent = "Copied";
  setTimeout(() => { $("copy").textContent = "Copy"; }, 1500);
});
$("share").addEventListener("click", async () => {
  saveHash();
  try { await navigator.clipboard.writeText(location.href); $("share").textContent = "Link copied"; }
  catch { $("share").textContent = "Link in the address bar"; }
  setTimeout(() => { $("share").textContent = "Copy link"; }, 1800);
});
for (const b of document.querySelectorAll(".tabs button")) b.addEventListener("click", () => showView(b.dataset.view));
$("curve-go").addEventListener("click", () => { state.drawn.curve = null; drawCurve(); saveHash(); });
$("front-go").addEventListener("click", () => { state.drawn.front = null; drawFront(); saveHash(); });
window.addEventListener("hashchange", () => { if (location.hash !== toHash()) boot(state.catalog); });
init();
