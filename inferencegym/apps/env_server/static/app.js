// InferenceGym web page: talks to the server's real HTTP API (/tasks, /reset, /step, /suggest, /grader).
// Query string (for demos and the headless test): ?task=ID&seed=N&policy=NAME&steps=K runs K
// baseline steps after loading; body[data-state] becomes "done" when they are finished.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { session: null, tasks: [], schema: null, history: [], done: false, busy: false, slo: null };

function log(msg) {
  const el = $("log");
  el.textContent = msg + "\n" + el.textContent.slice(0, 6000);
}

function setStatus(msg, isError) {
  const el = $("status");
  el.textContent = msg;
  el.className = "status" + (isError ? " error" : "");
}

async function api(method, path, body) {
  const opts = { method, headers: {} };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const resp = await fetch(path, opts);
  let data = null;
  try { data = await resp.json(); } catch (e) { data = null; }
  if (!resp.ok) {
    const d = data && data.detail;
    const msg = d && d.error ? d.error : JSON.stringify(d || data);
    throw new Error(`${method} ${path} -> HTTP ${resp.status}: ${msg}`);
  }
  return data;
}

function buildForm(schema) {
  const form = $("action-form");
  form.innerHTML = "";
  const props = schema.properties || {};
  for (const [name, p] of Object.entries(props)) {
    const label = document.createElement("label");
    label.textContent = name + " ";
    label.title = p.description || "";
    let input;
    if (p.enum) {
      input = document.createElement("select");
      for (const v of p.enum) {
        const o = document.createElement("option");
        o.value = v; o.textContent = v;
        input.appendChild(o);
      }
      input.value = p.default;
    } else if (p.type === "boolean") {
      input = document.createElement("input");
      input.type = "checkbox";
      input.checked = !!p.default;
    } else {
      input = document.createElement("input");
      input.type = "number";
      if (p.minimum !== undefined) input.min = p.minimum;
      if (p.maximum !== undefined) input.max = p.maximum;
      input.step = p.type === "integer" ? "1" : "0.05";
      input.value = p.default;
    }
    input.id = "act-" + name;
    input.dataset.field = name;
    input.dataset.kind = p.enum ? "enum" : p.type;
    label.appendChild(input);
    form.appendChild(label);
  }
}

function formAction() {
  const action = {};
  for (const el of $("action-form").querySelectorAll("[data-field]")) {
    const k = el.dataset.kind;
    action[el.dataset.field] = k === "boolean" ? el.checked
      : k === "integer" ? parseInt(el.value, 10)
      : k === "number" ? parseFloat(el.value) : el.value;
  }
  return action;
}

function fillForm(action) {
  for (const [k, v] of Object.entries(action || {})) {
    const el = $("act-" + k);
    if (!el) continue;
    if (el.type === "checkbox") el.checked = !!v; else el.value = v;
  }
}

function fmt(v) {
  if (v === null || v === undefined) return "-";
  if (typeof v !== "number") return String(v);
  if (Math.abs(v) >= 1000) return v.toFixed(0);
  if (Math.abs(v) >= 1) return v.toFixed(3);
  return v.toPrecision(3);
}

function renderTables(obs) {
  const rt = $("reward").querySelector("tbody");
  rt.innerHTML = "";
  const comps = obs.reward_components || {};
  const maxAbs = Math.max(0.001, ...Object.values(comps).map((x) => Math.abs(x)));
  for (const [k, v] of Object.entries(comps)) {
    const tr = document.createElement("tr");
    const w = Math.round(80 * Math.abs(v) / maxAbs);
    tr.innerHTML = `<td>${k}</td><td class="num">${fmt(v)}</td>` +
      `<td><span class="bar${v < 0 ? " neg" : ""}" style="width:${w}px"></span></td>`;
    rt.appendChild(tr);
  }
  const ot = $("obs").querySelector("tbody");
  ot.innerHTML = "";
  for (const [k, v] of Object.entries(obs.raw || {})) {
    const tr = document.createElement("tr");
    tr.innerHTML = `<td>${k}</td><td class="num">${fmt(v)}</td>`;
    ot.appendChild(tr);
  }
}

function drawChart() {
  const c = $("chart");
  const ctx = c.getContext("2d");
  const W = c.width, H = c.height, L = 48, B = 24, T = 10, R = 10;
  ctx.clearRect(0, 0, W, H);
  const h = state.history;
  const series = [
    ["ttft_p50_s", "#3b6fd8"], ["ttft_p99_s", "#d8553b"], ["tbt_p99_s", "#2e9e5b"],
  ];
  const points = Object.fromEntries(series.map(([k]) => [k, seriesPoints(h, k)]));  // null = gap
  let ymax = state.slo ? state.slo * 1.5 : 0.1;
  for (const [k] of series) for (const v of points[k]) if (v !== null && v > ymax) ymax = v;
  const n = Math.max(h.length, 10);
  const x = (i) => L + (W - L - R) * (i / Math.max(1, n - 1));
  const y = (v) => H - B - (H - B - T) * (v / ymax);
  ctx.strokeStyle = "#ccc"; ctx.lineWidth = 1; ctx.font = "11px sans-serif"; ctx.fillStyle = "#555";
  ctx.beginPath(); ctx.moveTo(L, T); ctx.lineTo(L, H - B); ctx.lineTo(W - R, H - B); ctx.stroke();
  for (let i = 0; i <= 4; i++) {
    const v = ymax * i / 4;
    ctx.fillText(v.toFixed(2) + "s", 2, y(v) + 4);
  }
  ctx.fillText("window", W - 60, H - 6);
  if (state.slo) {
    ctx.strokeStyle = "#999"; ctx.setLineDash([5, 4]);
    ctx.beginPath(); ctx.moveTo(L, y(state.slo)); ctx.lineTo(W - R, y(state.slo)); ctx.stroke();
    ctx.setLineDash([]);
  }
  for (const [k, color] of series) {
    ctx.strokeStyle = color; ctx.fillStyle = color; ctx.lineWidth = 2; ctx.beginPath();
    const pts = points[k];
    pts.forEach((v, i) => {
      if (v === null) return;  // no sample in this window: a gap, not a point at 0
      const joined = i > 0 && pts[i - 1] !== null;
      if (joined) ctx.lineTo(x(i), y(v)); else ctx.moveTo(x(i), y(v));
      if (!joined && (i + 1 >= pts.length || pts[i + 1] === null)) ctx.fillRect(x(i) - 2, y(v) - 2, 4, 4);
    });
    ctx.stroke();
  }
}

function onResult(data) {
  state.session = data.session_id;
  const obs = data.observation;
  state.done = !!data.done;
  if (obs.step > 0) state.history.push(obs.raw || {});
  renderTables(obs);
  drawChart();
  let msg = `task ${obs.task_id} | session ${state.session.slice(0, 8)} | step ${obs.step}` +
    (data.reward !== null && data.reward !== undefined ? ` | reward ${fmt(data.reward)}` : "");
  if (state.done) msg += ` | episode over, grade ${fmt(obs.grade)}`;
  setStatus(msg);
  for (const id of ["btn-step", "btn-suggest", "btn-run"]) $(id).disabled = state.done;
}

async function doReset() {
  const task = $("task").value;
  const seed = parseInt($("seed").value, 10);
  const body = { task_id: task, seed: isNaN(seed) ? undefined : seed };
  if (state.session) body.session_id = state.session;
  let data;
  try {
    data = await api("POST", "/reset", body);
  } catch (e) {
    if (!state.session) throw e;
    delete body.session_id;  // session expired: start a new one
    data = await api("POST", "/reset", body);
  }
  state.history = [];
  const t = state.tasks.find((x) => x.task_id === task);
  state.slo = t && t.tenants.length ? Math.min(...t.tenants.map((x) => x.ttft_slo_s)) : null;
  $("task-desc").textContent = t ? t.description : "";
  onResult(data);
  log(`reset task=${task} seed=${body.seed}`);
}

async function doStep(action) {
  const data = await api("POST", "/step", { session_id: state.session, action });
  onResult(data);
  log(`step ${data.observation.step}: ${JSON.stringify(action)} -> reward ${fmt(data.reward)}`);
  return data;
}

async function baselineStep() {
  const policy = $("policy").value;
  const s = await api("POST", "/suggest", { session_id: state.session, policy });
  fillForm(s.action);
  return doStep(s.action);
}

async function runSteps(k) {
  for (let i = 0; i < k && !state.done; i++) await baselineStep();
}

function guard(fn) {
  return async () => {
    if (state.busy) return;
    state.busy = true;
    try { await fn(); } catch (e) { setStatus(String(e.message || e), true); log("error: " + e.message); }
    finally { state.busy = false; }
  };
}

async function init() {
  const info = await api("GET", "/tasks");
  state.tasks = info.tasks;
  state.schema = info.action_schema;
  for (const t of info.tasks) {
    const o = document.createElement("option");
    o.value = t.task_id; o.textContent = `${t.task_id} (${t.difficulty})`;
    $("task").appendChild(o);
  }
  for (const p of info.policies || ["heuristic"]) {
    const o = document.createElement("option");
    o.value = p; o.textContent = p;
    $("policy").appendChild(o);
  }
  $("policy").value = (info.policies || []).includes("heuristic") ? "heuristic" : $("policy").value;
  buildForm(info.action_schema);
  $("btn-reset").onclick = guard(doReset);
  $("btn-step").onclick = guard(() => doStep(formAction()));
  $("btn-suggest").onclick = guard(baselineStep);
  $("btn-run").onclick = guard(() => runSteps(parseInt($("nsteps").value, 10) || 1));
  setStatus("pick a task and press Reset");

  const q = new URLSearchParams(window.location.search);
  if (q.has("task")) $("task").value = q.get("task");
  if (q.has("seed")) $("seed").value = q.get("seed");
  if (q.has("policy")) $("policy").value = q.get("policy");
  if (q.has("steps")) {
    await doReset();
    await runSteps(parseInt(q.get("steps"), 10) || 1);
  }
  document.body.dataset.state = "done";
}

init().catch((e) => {
  setStatus(String(e.message || e), true);
  document.body.dataset.state = "error";
});
