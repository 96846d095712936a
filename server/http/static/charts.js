// SVG charts of the planner page: a stacked bar, a scaling curve and a front. No dependencies.
const NS = "http://www.w3.org/2000/svg";
export const COLORS = ["var(--c0)", "var(--c1)", "var(--c2)", "var(--c3)", "var(--c4)",
  "var(--c5)", "var(--c6)", "var(--c7)", "var(--c8)"];

export function el(tag, attrs = {}, parent = null, text = null) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== null) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}

export function html(tag, attrs = {}, parent = null, text = null) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== null) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}

export function fmt(x, digits = 3) {
  if (!isFinite(x)) return String(x);
  const a = Math.abs(x);
  if (a >= 1e12) return (x / 1e12).toPrecision(digits) + "T";
  if (a >= 1e9) return (x / 1e9).toPrecision(digits) + "G";
  if (a >= 1e6) return (x / 1e6).toPrecision(digits) + "M";
  if (a >= 1e4) return (x / 1e3).toPrecision(digits) + "k";
  if (a >= 100) return x.toFixed(0);
  return x.toPrecision(digits);
}

export function seconds(s) {
  if (s >= 100) return s.toFixed(0) + " s";
  if (s >= 1) return s.toPrecision(3) + " s";
  if (s >= 1e-3) return (s * 1e3).toPrecision(3) + " ms";
  return (s * 1e6).toPrecision(3) + " µs";
}

const tip = () => document.getElementById("tip");

export function hover(node, text) {
  node.setAttribute("tabindex", "0");
  node.setAttribute("aria-label", text.replace(/\n/g, "; "));
  const show = (x, y) => {
    const t = tip();
    t.textContent = text;
    t.style.whiteSpace = "pre-line";
    t.hidden = false;
    const w = t.offsetWidth, h = t.offsetHeight;
    t.style.left = Math.min(x + 14, window.innerWidth - w - 8) + "px";
    t.style.top = Math.max(8, y - h - 10) + "px";
    node.classList.add("on");
  };
  const hide = () => { tip().hidden = true; node.classList.remove("on"); };
  node.addEventListener("mouseenter", (e) => show(e.clientX, e.clientY));
  node.addEventListener("mousemove", (e) => show(e.clientX, e.clientY));
  node.addEventListener("mouseleave", hide);
  node.addEventListener("focus", () => {
    const r = node.getBoundingClientRect();
    show(r.right, r.top);
  });
  node.addEventListener("blur", hide);
}

// A horizontal stacked bar of `parts` ({label, value, color, text}) on a scale to `max`, with
// vertical `marks` ({at, label, cls}); a legend under it.
export function stackedBar(box, parts, { max, marks = [], unit = (v) => fmt(v) }) {
  box.replaceChildren();
  const W = Math.max(320, box.clientWidth || 640), H = 74, top = 18, barH = 26;
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, role: "img" }, box);
  const x = (v) => (v / max) * W;
  let at = 0;
  for (const p of parts) {
    if (p.value <= 0) continue;
    const r = el("rect", { x: x(at), y: top, width: Math.max(x(p.value), 0.5), height: barH, fill: p.color, class: "seg" }, svg);
    r.dataset.part = p.key || p.label;
    hover(r, `${p.label}: ${unit(p.value)} (${(100 * p.value / parts.reduce((s, q) => s + q.value, 0)).toFixed(1)}%)`);
    at += p.value;
  }
  marks.forEach((m, i) => {
    const mx = Math.min(x(m.at), W - 1);
    const below = i % 2 === 0 && marks.length > 1;  // two marks close together: one under the bar
    el("line", { x1: mx, x2: mx, y1: top - 6, y2: top + barH + 6, class: m.cls }, svg);
    el("text", { x: mx, y: below ? top + barH + 18 : top - 8, "text-anchor": mx > W - 90 ? "end" : "middle", class: "strong" }, svg, m.label);
  });
  el("text", { x: 0, y: top + barH + 18 }, svg, "0");
  const legend = html("div", { class: "legend" }, box);
  for (const p of parts) {
    if (p.value <= 0) continue;
    const s = html("span", {}, legend, `${p.label} ${unit(p.value)}`);
    s.style.setProperty("--sw", p.color);
  }
}

function logTicks(lo, hi) {
  let out = [];
  for (let v = 1; v <= hi * 1.001; v *= 2) if (v >= lo / 1.001) out.push(v);
  while (out.length > 10) out = out.filter((_, i) => i % 2 === 0);
  return out;
}

function niceMax(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// Throughput against GPUs per type: the raw cells as dots (hover: the layout), the envelope as
// a line, the uncertainty band as a shaded area, each type's knee as a dashed line.
export function curveChart(box, series, { yLabel = "tokens/s" } = {}) {
  box.replaceChildren();
  const W = Math.max(420, box.clientWidth - 16 || 720), H = Math.min(380, Math.max(260, W * 0.45)), L = 64, R = 16, T = 16, B = 42;
  const xs = series.flatMap((s) => s.cells.map((c) => c.x));
  const ys = series.flatMap((s) => s.cells.map((c) => Math.max(c.y, c.high || 0)));
  if (!xs.length) return;
  const lo = Math.min(...xs), hi = Math.max(...xs);
  const ymax = niceMax(Math.max(...ys, 1) * 1.05);
  const lx = (v) => Math.log2(v);
  const x = (v) => L + (hi === lo ? 0.5 : (lx(v) - lx(lo)) / (lx(hi) - lx(lo))) * (W - L - R);
  const y = (v) => T + (1 - v / ymax) * (H - T - B);
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "scaling curve" }, box);
  const grid = el("g", { class: "grid" }, svg);
  for (let i = 0; i <= 5; i++) {
    const v = (ymax * i) / 5;
    el("line", { x1: L, x2: W - R, y1: y(v), y2: y(v) }, grid);
    el("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end" }, svg, fmt(v));
  }
  for (const v of logTicks(lo, hi)) {
    el("line", { x1: x(v), x2: x(v), y1: T, y2: H - B }, grid);
    el("text", { x: x(v), y: H - B + 16, "text-anchor": "middle" }, svg, String(v));
  }
  el("text", { x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle" }, svg, "GPUs (log scale)");
  el("text", { x: 12, y: T + (H - T - B) / 2, transform: `rotate(-90 12 ${T + (H - T - B) / 2})`, "text-anchor": "middle" }, svg, yLabel);
  series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length];
    const planned = s.cells.filter((c) => c.planned);
    const banded = planned.filter((c) => c.high > c.low);
    if (banded.length > 1) {
      const up = banded.map((c) => `${x(c.x)},${y(c.high)}`);
      const down = banded.slice().reverse().map((c) => `${x(c.x)},${y(c.low)}`);
      el("polygon", { points: up.concat(down).join(" "), fill: color, opacity: 0.15 }, svg);
    }
    if (s.envelope.length) {
      const d = s.envelope.map((p, j) => `${j ? "L" : "M"}${x(p.x)},${y(p.y)}`).join("");
      el("path", { d, fill: "none", stroke: color, "stroke-width": 2.5, class: "envelope" }, svg);
    }
    if (s.knee) {
      el("line", { x1: x(s.knee), x2: x(s.knee), y1: T, y2: H - B, class: "knee" }, svg);
      const k = el("text", { x: x(s.knee) + 4, y: T + 12 + 14 * i, class: "strong" }, svg, `knee ${s.name}: ${s.knee}`);
      k.dataset.knee = String(s.knee);
    }
    const nudge = (i - (series.length - 1) / 2) * 7;  // types side by side at one count
    for (const c of s.cells) {
      const cx = x(c.x) + nudge;
      const node = c.planned
        ? el("circle", { cx, cy: y(c.y), r: 5, fill: color, class: "dot" }, svg)
        : el("path", { d: `M${cx - 4},${H - B - 8}l8,8m0,-8l-8,8`, stroke: color, "stroke-width": 2, class: "dot" }, svg);
      node.dataset.gpus = String(c.x);
      node.dataset.cluster = s.name;
      hover(node, c.tip);
    }
  });
  const legend = html("div", { class: "legend" }, box);
  series.forEach((s, i) => {
    html("span", {}, legend, `${s.name}: dots are cells, the line the envelope (best up to that count)`).style.setProperty("--sw", COLORS[i % COLORS.length]);
  });
}

// Days against GPU-hours (or cost) per point; the points on the front joined per type.
export function frontChart(box, points, { yKey, yLabel, types }) {
  box.replaceChildren();
  if (!points.length) return;
  const W = Math.max(420, box.clientWidth - 16 || 720), H = Math.min(380, Math.max(260, W * 0.45)), L = 70, R = 16, T = 16, B = 42;
  const xsv = points.map((p) => p.days), ysv = points.map((p) => p[yKey]);
  const xlo = Math.min(...xsv) / 1.15, xhi = Math.max(...xsv) * 1.15;
  const ymax = niceMax(Math.max(...ysv) * 1.08);
  const ylo = Math.min(...ysv) > 0.5 * ymax ? Math.floor((Math.min(...ysv) * 0.9) / (ymax / 20)) * (ymax / 20) : 0;
  const x = (v) => L + (Math.log(v) - Math.log(xlo)) / (Math.log(xhi) - Math.log(xlo)) * (W - L - R);
  const y = (v) => T + (1 - (v - ylo) / (ymax - ylo)) * (H - T - B);
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "cost front" }, box);
  const grid = el("g", { class: "grid" }, svg);
  for (let i = 0; i <= 5; i++) {
    const v = ylo + ((ymax - ylo) * i) / 5;
    el("line", { x1: L, x2: W - R, y1: y(v), y2: y(v) }, grid);
    el("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end" }, svg, fmt(v));
  }
  const span = Math.log10(xhi / xlo);
  const step = span > 2 ? 10 : span > 0.8 ? 2 : 1.25;
  for (let v = Math.pow(10, Math.floor(Math.log10(xlo))); v <= xhi; v *= step) {
    if (v < xlo) continue;
    el("line", { x1: x(v), x2: x(v), y1: T, y2: H - B }, grid);
    el("text", { x: x(v), y: H - B + 16, "text-anchor": "middle" }, svg, fmt(v, 2));
  }
  el("text", { x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle" }, svg, "days to train the budget (log scale)");
  el("text", { x: 12, y: T + (H - T - B) / 2, transform: `rotate(-90 12 ${T + (H - T - B) / 2})`, "text-anchor": "middle" }, svg, yLabel);
  const onFront = yKey === "cost" ? "on_front_cost" : "on_front_gpu_hours";
  const front = points.filter((p) => p[onFront]).sort((a, b) => a.days - b.days);
  if (front.length > 1) {
    const d = front.map((p, j) => `${j ? "L" : "M"}${x(p.days)},${y(p[yKey])}`).join("");
    el("path", { d, fill: "none", stroke: "var(--ink)", "stroke-width": 1.5, "stroke-dasharray": "6 3" }, svg);
  }
  for (const p of points) {
    const i = types.indexOf(p.cluster);
    const node = el("circle", { cx: x(p.days), cy: y(p[yKey]), r: p[onFront] ? 6 : 4, fill: COLORS[i % COLORS.length], opacity: p[onFront] ? 1 : 0.45, class: "dot" }, svg);
    node.dataset.gpus = String(p.num_gpus);
    hover(node, p.tip);
  }
  const legend = html("div", { class: "legend" }, box);
  types.forEach((t, i) => html("span", {}, legend, t).style.setProperty("--sw", COLORS[i % COLORS.length]));
  html("span", {}, legend, "dashed: the front (nothing both faster and cheaper)").style.setProperty("--sw", "transparent");
}
