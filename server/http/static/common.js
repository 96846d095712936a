// What the page's modules share: the page's state, the calls to the server, the form's values
// as request parts, errors shown next to the field they name, a layout in one line.
import { html } from "./charts.js";

export const $ = (id) => document.getElementById(id);
export const PINS = ["tp", "pp", "dp", "cp", "ep", "virtual_stages", "micro_batch_size",
  "num_microbatches", "zero_stage", "recompute", "sequence_parallel"];

export const state = { meta: null, catalog: null, hfSpec: null, plan: null, planReq: null, drawn: {} };

// --- calls ----------------------------------------------------------------------------------

export async function call(path, body, query = "") {
  const headers = { "Content-Type": "application/json" };
  const token = $("token").value.trim();
  if (token) headers.Authorization = "Bearer " + token;
  let response;
  try {
    response = await fetch(path + query, {
      method: body === undefined ? "GET" : "POST",
      headers,
      body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
    });
  } catch (err) {
    return { ok: false, error: { status: "UNAVAILABLE", message: "the server did not answer: " + err.message } };
  }
  const data = await response.json().catch(() => ({}));
  if (response.ok) return { ok: true, data };
  const error = data.error || { status: String(response.status), message: response.statusText };
  const violations = (error.details || []).flatMap((d) => d.field_violations || []);
  return { ok: false, error: { ...error, violations } };
}

export const strip = (value, prefix) => (typeof value === "string" ? value.replace(prefix, "") : value);
export const num = (value) => Number(value || 0);

export function modelSpec() {
  if ($("model").value === "hf") return state.hfSpec || {};
  return { preset: $("model").value };
}

export function intOrText(value) {
  // a number as a number; anything else as typed, for the server to name the field
  if (value === "" || value === undefined) return undefined;
  const n = Number(value);
  return Number.isFinite(n) ? n : value;
}

export function prune(obj) {
  for (const k of Object.keys(obj)) {
    if (obj[k] === undefined) delete obj[k];
    else if (obj[k] && typeof obj[k] === "object" && !Array.isArray(obj[k])) {
      prune(obj[k]);
      if (!Object.keys(obj[k]).length) delete obj[k];
    }
  }
  return obj;
}

export function training() {
  return {
    seq_len: intOrText($("seq").value),
    framework: $("framework").value || undefined,
    precision: $("precision").value || undefined,
  };
}

export function pins({ withDp = true } = {}) {
  const s = {};
  for (const p of PINS) {
    const v = $("pin-" + p).value;
    if (v === "" || (!withDp && p === "dp")) continue;
    s[p] = p === "recompute" ? v : p === "sequence_parallel" ? v === "true" : intOrText(v);
  }
  return s;
}

// --- errors ---------------------------------------------------------------------------------

export function clearErrors() {
  $("form-error").hidden = true;
  document.querySelectorAll(".invalid").forEach((n) => n.classList.remove("invalid"));
  document.querySelectorAll(".field-error").forEach((n) => n.remove());
}

export function fieldInput(field) {
  let node = document.querySelector(`[data-field="${field}"]`);
  if (!node && field.startsWith("model.")) node = $("model").value === "hf" ? $("hf") : $("model");
  return node;
}

export function showError(error, where = $("form-error")) {
  const lines = error.violations && error.violations.length
    ? error.violations.map((v) => `${v.field}: ${v.description}`)
    : [`${error.status}: ${error.message}`];
  where.textContent = lines.join("\n");
  where.hidden = false;
  for (const v of error.violations || []) {
    const input = fieldInput(v.field);
    if (!input) continue;
    input.classList.add("invalid");
    const note = html("span", { class: "field-error", "data-error-for": v.field }, null, `${v.field}: ${v.description}`);
    input.insertAdjacentElement("afterend", note);
  }
}

// --- the plan -------------------------------------------------------------------------------

export function layoutText(c) {
  if (!c) return "";
  const parts = [`tp${c.tp}`, `pp${c.pp}`];
  if (c.virtual_stages > 1) parts.push(`v${c.virtual_stages}`);
  parts.push(`dp${c.dp}`);
  if (c.cp > 1) parts.push(`cp${c.cp}`);
  if (c.ep > 1) parts.push(`ep${c.ep}`);
  parts.push(`mbs${c.micro_batch_size}`, `M${c.num_microbatches}`, `ZeRO-${c.zero_stage}`);
  const r = strip(c.recompute, "RECOMPUTE_");
  if (r && r !== "NONE") parts.push(`recompute ${r}`);
  if (c.sequence_parallel) parts.push("SP");
  return parts.join(" ");
}

