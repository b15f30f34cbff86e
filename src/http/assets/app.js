// sprout's dashboard: reads /api every second and draws what it finds.
// No framework and no external resource: the binary serves all of it.
"use strict";

const $ = (sel) => document.querySelector(sel);
const view = { page: "overview", tube: null, job: null, state: "ready", after: null, next: null, hex: false };
let previous = null; // the last /api/tubes answer, with its time, for rates
let timerTubes = new Set(); // the Redis bridge's, as /api/server names them: shown apart

async function api(path, options = {}) {
  const init = { headers: {}, ...options };
  if (init.body !== undefined) {
    init.method = init.method || "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(init.body);
  }
  const response = await fetch(path, init);
  if (response.status === 401) {
    location.href = "/login";
    throw new Error("signed out");
  }
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

function showError(e) {
  const p = $("#error");
  p.textContent = e ? String(e.message || e) : "";
  p.hidden = !e;
}

function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 0.001) return (seconds * 1e6).toFixed(0) + " µs";
  if (seconds < 1) return (seconds * 1000).toFixed(seconds < 0.01 ? 1 : 0) + " ms";
  if (seconds < 120) return seconds.toFixed(1) + " s";
  if (seconds < 7200) return (seconds / 60).toFixed(1) + " min";
  if (seconds < 172800) return (seconds / 3600).toFixed(1) + " h";
  return (seconds / 86400).toFixed(1) + " d";
}

function number(n) {
  return n === undefined ? "–" : Number(n).toLocaleString("en-US");
}

// A count with its unit: "1 job", "1,200 jobs".
function plural(n, unit) {
  return n === undefined ? "–" : `${number(n)} ${unit}${n === 1 ? "" : "s"}`;
}

// Whole seconds, as delay and ttr are given: "60 s".
function wholeSeconds(n) {
  return n === undefined ? "–" : `${number(n)} s`;
}

// The round step (1, 2 or 5 × 10^n) at least `raw`.
function niceStep(raw) {
  if (!(raw > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].find((m) => m * power >= raw * (1 - 1e-9)) * power;
  return Number(step.toPrecision(1));
}

// About `count` round ticks from 0 covering `max`: { step, values }.
function ticks(max, count = 4) {
  const step = niceStep(max / count);
  const n = Math.max(1, Math.ceil(max / step - 1e-9));
  return { step, values: Array.from({ length: n + 1 }, (_, i) => Number((i * step).toPrecision(12))) };
}

// A tick's label: as many decimals as its step needs, then the unit.
function tickLabel(value, step, unit) {
  const decimals = Math.max(0, Math.ceil(-Math.log10(step) - 1e-9));
  const shown = value.toLocaleString("en-US", { minimumFractionDigits: decimals, maximumFractionDigits: decimals });
  return `${shown} ${unit}`;
}

// The unit a time axis reads best in, for values up to `maxSeconds`.
function timeAxis(maxSeconds) {
  if (maxSeconds < 1) return { unit: "ms", scale: 1000 };
  if (maxSeconds < 120) return { unit: "s", scale: 1 };
  return { unit: "min", scale: 1 / 60 };
}

// The server's figures without the bridge's share (its timer tubes and
// connections, as /api/server's `timers` counts them).
function userTotals(stats, timers) {
  const user = { ...stats };
  for (const [key, value] of Object.entries(timers || {})) {
    if (typeof value === "number" && typeof stats[key] === "number") user[key] = Math.max(0, stats[key] - value);
  }
  return user;
}

// The bridge card: the embedded bridge's own figures when it reports them,
// else what its timer tubes show (a `sprout bridge` process elsewhere).
function bridgeCards(bridge, timers) {
  const tubes = (timers && timers.tubes) || [];
  if (!bridge && !tubes.length) return [];
  const pending = timers ? timers.current_jobs_delayed + timers.current_jobs_ready + timers.current_jobs_reserved : undefined;
  const ms = (v) => (v === null || v === undefined ? "–" : duration(v / 1000));
  const recent = bridge && bridge.window_s ? ` (last ${Math.round(bridge.window_s / 60)} min)` : "";
  return [
    ...(bridge && bridge.keys !== undefined ? [["keys tracked", number(bridge.keys ?? undefined), "bridge-keys"]] : []),
    ["timers pending", plural(bridge ? bridge.timers_pending : pending, "job"), "bridge-timers"],
    ...(bridge && "deliveries" in bridge ? [
      [`deliveries${recent}`, plural(bridge.deliveries, "job"), "bridge-deliveries"],
      [`lateness p50${recent}`, ms(bridge.lateness_p50_ms), "bridge-p50"],
      [`lateness p99${recent}`, ms(bridge.lateness_p99_ms), "bridge-p99"],
    ] : []),
    ["timer tubes", tubes.join(", ") || "–", "bridge-tubes"],
  ];
}

// The job page's rows: [label, value, id]. Time left only where a clock
// runs: a delayed job's until it is ready, a reserved one's until its TTR ends.
function jobRows(job) {
  const left = { delayed: "ready in", reserved: "TTR ends in" }[job.state];
  return [
    ["state", job.state, "state"],
    ["pri", job.pri, "pri"],
    ["age", duration(job.age), "age"],
    ["delay", wholeSeconds(job.delay), "delay"],
    ["ttr", wholeSeconds(job.ttr), "ttr"],
    ...(left ? [[left, duration(job.time_left), "time_left"]] : []),
    ["size", plural(job.size, "byte"), "size"],
    ["reserves", job.reserves, "reserves"],
    ["timeouts", job.timeouts, "timeouts"],
    ["releases", job.releases, "releases"],
    ["buries", job.buries, "buries"],
    ["kicks", job.kicks, "kicks"],
  ];
}

function cards(el, items) {
  el.innerHTML = items.map(([label, value, id]) =>
    `<div class="card"${id ? ` id="${id}"` : ""}><b>${esc(value)}</b><span>${esc(label)}</span></div>`).join("");
}

async function confirmed(text) {
  const dialog = $("#confirm");
  $("#confirm-text").textContent = text;
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
  });
}

// Routing: #/ (overview), #/tube/NAME, #/job/ID.
function route() {
  const [, kind, arg] = location.hash.split("/");
  const page = kind === "tube" ? "tube" : kind === "job" ? "job" : "overview";
  const changed = page !== view.page || decodeURIComponent(arg || "") !== (view.tube || view.job || "");
  view.page = page;
  view.tube = page === "tube" ? decodeURIComponent(arg) : null;
  view.job = page === "job" ? arg : null;
  if (changed) { view.after = null; view.next = null; if (page === "tube") view.state = "ready"; }
  $("#overview").hidden = page !== "overview";
  $("#tube-page").hidden = page !== "tube";
  $("#job-page").hidden = page !== "job";
  refresh();
}

async function refresh() {
  try {
    const server = await api("/api/server");
    drawServer(server.stats, server);
    if (view.page === "overview") await refreshOverview();
    if (view.page === "tube") await refreshTube();
    if (view.page === "job") await refreshJob();
    showError(null);
  } catch (e) {
    showError(e);
  }
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function drawServer(all, server) {
  const s = userTotals(all, server.timers);
  timerTubes = new Set(server.timers ? server.timers.tubes : []);
  const bridged = server.timers && server.timers.current_connections ? ` (and the bridge's ${server.timers.current_connections})` : "";
  $("#server-line").textContent =
    `v${s.version} · up ${duration(s.uptime)} · ${plural(s.current_connections, "connection")}${bridged} · ${plural(s.current_workers, "worker")} · ${plural(s.current_producers, "producer")} · pid ${s.pid}`;
  const status = $("#status");
  status.textContent = s.draining ? "draining" : "serving";
  status.className = "pill" + (s.draining ? " warn" : "");
  if (view.page !== "overview") return;
  cards($("#cards"), [
    ["ready", plural(s.current_jobs_ready, "job"), "total-ready"],
    ["urgent", plural(s.current_jobs_urgent, "job"), "total-urgent"],
    ["reserved", plural(s.current_jobs_reserved, "job"), "total-reserved"],
    ["delayed", plural(s.current_jobs_delayed, "job"), "total-delayed"],
    ["buried", plural(s.current_jobs_buried, "job"), "total-buried"],
    ["tubes", number(s.current_tubes), "total-tubes"],
    ["jobs put", plural(s.total_jobs, "job"), "total-put"],
    ["TTR timeouts", number(s.job_timeouts)],
    ...(server.store_disk_bytes !== null ? [["store on disk", bytes(server.store_disk_bytes)]] : []),
  ]);
  const bridge = bridgeCards(server.bridge, server.timers);
  $("#bridge").hidden = !bridge.length;
  cards($("#bridge-cards"), bridge);
}

async function refreshOverview() {
  const [tubes, history] = await Promise.all([api("/api/tubes"), api("/api/history")]);
  const now = performance.now() / 1000;
  const before = previous && new Map(previous.tubes.map((t) => [t.name, t]));
  const span = previous ? now - previous.at : 0;
  const rate = (t, key) => {
    const old = before && before.get(t.name);
    if (!old || span <= 0) return "–";
    return Math.max(0, (t[key] - old[key]) / span).toFixed(1);
  };
  const row = (t) => `
    <tr data-tube="${esc(t.name)}">
      <td><a href="#/tube/${encodeURIComponent(t.name)}">${esc(t.name)}</a>${t.paused ? ' <span class="pill warn">paused</span>' : ""}</td>
      <td class="ready">${number(t.current_jobs_ready)}</td>
      <td class="urgent">${number(t.current_jobs_urgent)}</td>
      <td class="reserved">${number(t.current_jobs_reserved)}</td>
      <td class="delayed">${number(t.current_jobs_delayed)}</td>
      <td class="buried">${number(t.current_jobs_buried)}</td>
      <td>${number(t.current_waiting)}</td>
      <td>${number(t.current_watching)}</td>
      <td class="put-rate">${rate(t, "total_jobs")}</td>
      <td>${rate(t, "cmd_delete")}</td>
      <td>${duration(t.oldest_ready_age)}</td>
      <td>${duration(t.reserve_wait_p50)}</td>
      <td><a href="#/tube/${encodeURIComponent(t.name)}">jobs →</a></td>
    </tr>`;
  const timer = (t) => timerTubes.has(t.name);
  $("#tubes tbody").innerHTML = tubes.tubes.filter((t) => !timer(t)).map(row).join("");
  const timerRows = tubes.tubes.filter(timer);
  $("#timer-tubes tbody").innerHTML = timerRows.map(row).join("");
  $("#timer-tubes-part").hidden = !timerRows.length;
  previous = { at: now, tubes: tubes.tubes };
  drawCharts(history.samples);
}

function rates(samples, key) {
  const out = [];
  for (let i = 1; i < samples.length; i++) {
    const dt = samples[i].t - samples[i - 1].t;
    out.push(dt > 0 ? Math.max(0, (samples[i][key] - samples[i - 1][key]) / dt) : 0);
  }
  return out;
}

function drawCharts(samples) {
  chart($("#chart-rate"), { unit: "jobs/s", scale: 1 }, [
    [rates(samples, "puts"), "#2b6cb0"],
    [rates(samples, "reserves"), "#c05621"],
    [rates(samples, "deletes"), "#2f855a"],
  ]);
  const waits = samples.flatMap((s) => [s.wait_p50, s.wait_p99]).filter((v) => v !== null && v !== undefined);
  chart($("#chart-wait"), timeAxis(Math.max(0, ...waits)), [
    [samples.map((s) => s.wait_p50), "#2b6cb0"],
    [samples.map((s) => s.wait_p99), "#c05621"],
  ]);
}

// A line chart of series (arrays of numbers or nulls) sharing one y axis,
// in `axis.unit` (values times `axis.scale`), ticked on round numbers.
function chart(canvas, axis, series) {
  const g = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height, left = 72, bottom = 16;
  g.clearRect(0, 0, w, h);
  const values = series.flatMap(([points]) => points.filter((v) => v !== null && v !== undefined)).map((v) => v * axis.scale);
  const scale = ticks(Math.max(...values, 0) || 1);
  const max = scale.values[scale.values.length - 1];
  canvas.dataset.ticks = scale.values.map((v) => tickLabel(v, scale.step, axis.unit)).join("|");
  g.strokeStyle = "#e3e6eb"; g.fillStyle = "#6b7280"; g.font = "11px sans-serif";
  for (const value of scale.values) {
    const y = (h - bottom) * (1 - value / max);
    g.beginPath(); g.moveTo(left, y); g.lineTo(w, y); g.stroke();
    g.fillText(tickLabel(value, scale.step, axis.unit), 2, Math.max(10, y));
  }
  // At least a minute wide, at most the ten minutes the server keeps.
  const slots = Math.max(60, ...series.map(([points]) => points.length));
  g.fillText(slots >= 120 ? `−${Math.round(slots / 60)} min` : `−${slots} s`, left, h - 2);
  g.fillText("now", w - 24, h - 2);
  for (const [points, color] of series) {
    g.strokeStyle = color; g.fillStyle = color; g.lineWidth = 1.5; g.beginPath();
    let pen = false;
    points.forEach((v, i) => {
      const x = left + (w - left) * (slots - points.length + i) / slots;
      if (v === null || v === undefined) { pen = false; return; }
      const y = (h - bottom) * (1 - v * axis.scale / max);
      if (pen) g.lineTo(x, y); else g.moveTo(x, y);
      g.fillRect(x - 1, y - 1, 2, 2);
      pen = true;
    });
    g.stroke();
  }
}

async function refreshTube() {
  const name = view.tube;
  const path = encodeURIComponent(name);
  let tube;
  try {
    tube = await api(`/api/tubes/${path}`);
  } catch (e) {
    $("#tube-name").textContent = name + " (gone)";
    $("#jobs tbody").innerHTML = "";
    throw e;
  }
  $("#tube-name").textContent = name;
  $("#tube-paused").hidden = !tube.paused;
  cards($("#tube-cards"), [
    ["ready", plural(tube.current_jobs_ready, "job"), "tube-ready"],
    ["reserved", plural(tube.current_jobs_reserved, "job"), "tube-reserved"],
    ["delayed", plural(tube.current_jobs_delayed, "job"), "tube-delayed"],
    ["buried", plural(tube.current_jobs_buried, "job"), "tube-buried"],
    ["waiting", plural(tube.current_waiting, "worker")],
    ["oldest ready", duration(tube.oldest_ready_age)],
    ["pause left", tube.paused ? duration(tube.pause_time_left) : "–"],
  ]);
  document.querySelectorAll(".state-name").forEach((el) => { el.textContent = view.state; });
  document.querySelectorAll("#state-tabs button").forEach((b) => b.classList.toggle("on", b.dataset.state === view.state));
  const query = new URLSearchParams({ state: view.state, limit: "50" });
  if (view.after) query.set("after", view.after);
  const page = await api(`/api/tubes/${path}/jobs?${query}`);
  view.next = page.next;
  const kickable = view.state === "buried" || view.state === "delayed";
  $("#jobs tbody").innerHTML = page.jobs.map((j) => `
    <tr data-job="${j.id}">
      <td><a href="#/job/${j.id}">${j.id}</a></td>
      <td>${j.pri}</td><td>${duration(j.age)}</td><td>${wholeSeconds(j.delay)}</td>
      <td>${j.state === "delayed" || j.state === "reserved" ? duration(j.time_left) : "–"}</td>
      <td>${number(j.size)} B</td>
      <td class="body">${esc(j.preview)}</td>
      <td>${kickable ? `<button class="kick" data-id="${j.id}">kick</button>` : ""}
          ${j.state !== "reserved" ? `<button class="delete danger" data-id="${j.id}">delete</button>` : ""}</td>
    </tr>`).join("") || `<tr><td colspan="8" class="muted">no ${esc(view.state)} jobs${view.after ? " after this point" : ""}</td></tr>`;
  $("#next-page").disabled = !page.next;
  $("#first-page").disabled = !view.after;
  $("#page-note").textContent = `${page.jobs.length} shown, ${view.state} order${view.after ? ", a later page" : ""}`;
}

async function refreshJob() {
  const job = await api(`/api/jobs/${view.job}`);
  $("#job-id").textContent = job.id;
  const link = $("#job-tube-link");
  link.textContent = job.tube;
  link.href = `#/tube/${encodeURIComponent(job.tube)}`;
  $("#job-stats tbody").innerHTML = jobRows(job).map(([label, value, id]) =>
    `<tr><th>${esc(label)}</th><td id="job-${id}">${esc(value)}</td></tr>`).join("");
  $("#body-text").classList.toggle("on", !view.hex);
  $("#body-hex").classList.toggle("on", view.hex);
  if (job.body_truncated) {
    $("#job-body").textContent = `(${job.size} bytes: download from /api/jobs/${job.id}/body)`;
  } else if (view.hex || job.body_text === null) {
    const bytes = Uint8Array.from(atob(job.body_base64), (c) => c.charCodeAt(0));
    const lines = [];
    for (let i = 0; i < bytes.length; i += 16) {
      const row = Array.from(bytes.slice(i, i + 16));
      const hex = row.map((b) => b.toString(16).padStart(2, "0")).join(" ");
      const text = row.map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
      lines.push(i.toString(16).padStart(8, "0") + "  " + hex.padEnd(48) + "  " + text);
    }
    $("#job-body").textContent = lines.join("\n");
  } else {
    $("#job-body").textContent = job.body_text;
  }
  $("#kick-job").disabled = !(job.state === "buried" || job.state === "delayed");
  $("#delete-job").disabled = job.state === "reserved";
}

// Actions.
async function act(work) {
  try {
    await work();
    showError(null);
  } catch (e) {
    showError(e);
  }
  await refresh();
}

function tubePath(suffix) {
  return `/api/tubes/${encodeURIComponent(view.tube)}/${suffix}`;
}

document.addEventListener("click", (event) => {
  const target = event.target;
  if (!(target instanceof HTMLButtonElement)) return;
  if (target.matches("#state-tabs button")) {
    view.state = target.dataset.state; view.after = null; refresh();
  } else if (target.matches("button.kick")) {
    act(() => api(`/api/jobs/${target.dataset.id}/kick`, { body: {} }));
  } else if (target.matches("#jobs button.delete")) {
    act(async () => { if (await confirmed(`Delete job ${target.dataset.id}?`)) await api(`/api/jobs/${target.dataset.id}`, { method: "DELETE" }); });
  }
});

$("#next-page").onclick = () => { if (view.next) { view.after = view.next; refresh(); } };
$("#first-page").onclick = () => { view.after = null; refresh(); };
$("#kick-tube").onclick = () => act(() => api(tubePath("kick"), { body: { bound: Number($("#kick-bound").value) } }));
$("#pause-tube").onclick = () => act(() => api(tubePath("pause"), { body: { delay: Number($("#pause-delay").value) } }));
$("#resume-tube").onclick = () => act(() => api(tubePath("resume"), { body: {} }));
$("#flush-state").onclick = () => act(async () => {
  if (await confirmed(`Delete every ${view.state} job of ${view.tube}? This cannot be undone.`)) {
    const done = await api(tubePath("flush"), { body: { state: view.state } });
    showError(null);
    $("#page-note").textContent = `deleted ${done.deleted}`;
  }
});
$("#move-state").onclick = () => act(async () => {
  const to = $("#move-to").value.trim();
  if (!to) throw new Error("name the tube to move to");
  if (await confirmed(`Move every ${view.state} job of ${view.tube} to ${to}?`)) {
    await api(tubePath("move"), { body: { state: view.state, to } });
  }
});
$("#put-job").onclick = () => act(() => api(tubePath("jobs"), { body: {
  body: $("#put-body").value, pri: Number($("#put-pri").value), delay: Number($("#put-delay").value), ttr: Number($("#put-ttr").value),
} }));
$("#kick-job").onclick = () => act(() => api(`/api/jobs/${view.job}/kick`, { body: {} }));
$("#delete-job").onclick = () => act(async () => {
  if (await confirmed(`Delete job ${view.job}?`)) {
    await api(`/api/jobs/${view.job}`, { method: "DELETE" });
    location.hash = "#/";
  }
});
$("#body-text").onclick = () => { view.hex = false; refresh(); };
$("#body-hex").onclick = () => { view.hex = true; refresh(); };

$("#timer-tubes thead").innerHTML = $("#tubes thead").innerHTML;
window.addEventListener("hashchange", route);
route();
setInterval(refresh, 1000);
