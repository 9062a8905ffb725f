// ArtFleet console: plain JS, no build step, no network beyond this origin.
// The token lives in sessionStorage and travels only in the Authorization header (never
// in a URL); the live stream is read with fetch() streaming, not EventSource.
"use strict";

const TOKEN_KEY = "artfleet.token";
const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
let activeStream = null; // AbortController of the job page's stream

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "onclick") el.addEventListener("click", v);
    else if (v !== null && v !== undefined) el.setAttribute(k, v);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function token() { return sessionStorage.getItem(TOKEN_KEY); }

async function api(path, options = {}) {
  const headers = Object.assign({ Authorization: `Bearer ${token()}` }, options.headers || {});
  const response = await fetch(path, Object.assign({}, options, { headers }));
  if (response.status === 401) { logout("Your token was refused."); throw new Error("unauthorized"); }
  return response;
}

async function json(path, options) {
  const response = await api(path, options);
  const body = response.status === 204 ? null : await response.json();
  if (!response.ok) throw new Error(body && body.error ? body.error : `HTTP ${response.status}`);
  return body;
}

function fmt(value, digits = 3) {
  return value === null || value === undefined ? "–" : Number(value).toFixed(digits);
}

// A step that trained no sequence (equal rewards in every group) has no loss: not 0.
function lossOf(step) { return step && step.trained_sequences ? fmt(step.loss, 4) : "–"; }

// What the reward's scorers failed on in a step; "" when nothing did.
// A job taken up again after it failed or was cancelled: how often, and what the last
// resume found (the failure's reason stays in the record).
function resumedNote(resumes) {
  const last = resumes[resumes.length - 1];
  const why = last.error ? `: ${last.error}` : "";
  return `${resumes.length}× · last after step ${last.completed_steps}, was ${last.state}${why}`;
}

function scorerNote(step) {
  if (!step.scorer_errors) return "";
  const groups = step.scorer_errors === 1 ? "group" : "groups";
  const lost = step.scoring_failed ? ", every group lost" : "";
  return `${step.scorer_errors} ${groups}${lost}: ${step.scorer_error}`;
}

// A step's failed episodes by exception type ("6/8 (6 AssertionError)"); "" when none.
function failedNote(step) {
  if (!step.episodes_failed) return "";
  const kinds = Object.entries(step.episode_failures || {})
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
    .map(([kind, n]) => `${n} ${kind}`).join(", ");
  return `${step.episodes_failed}/${step.episodes}${kinds ? ` (${kinds})` : ""}`;
}

function show(...nodes) {
  const view = document.getElementById("view");
  view.replaceChildren(...nodes);
}

function failure(error) { show(h("p", { class: "error", role: "alert" }, String(error.message || error))); }

// ------------------------------------------------------------------ login
function logout(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  if (activeStream) activeStream.abort();
  document.getElementById("nav").hidden = true;
  document.getElementById("view").replaceChildren();
  document.getElementById("login").hidden = false;
  document.getElementById("login-error").textContent = message || "";
}

async function login(event) {
  event.preventDefault();
  const value = document.getElementById("token").value.trim();
  const response = await fetch("/jobs?limit=1", { headers: { Authorization: `Bearer ${value}` } });
  if (!response.ok) {
    document.getElementById("login-error").textContent =
      response.status === 401 ? "Wrong token." : `The API answered ${response.status}.`;
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, value);
  document.getElementById("token").value = "";
  enter();
}

function enter() {
  document.getElementById("login").hidden = true;
  document.getElementById("nav").hidden = false;
  if (!location.hash || location.hash === "#/") location.hash = "#/jobs";
  else route();
}

// ------------------------------------------------------------------ jobs
// A succeeded job that trained nothing (no reward signal) is not shown as a plain success.
function stateBadge(job, id) {
  const hollow = job.state === "succeeded" && job.trained_nothing;
  const attrs = { class: `state ${job.state}${hollow ? " trained-nothing" : ""}` };
  if (id) attrs.id = id;
  if (hollow) attrs.title = "no step trained a sequence: every group's rewards were equal";
  return h("span", attrs, hollow ? "succeeded · trained nothing" : job.state);
}

async function jobsPage() {
  const { jobs } = await json("/jobs?limit=200");
  const rows = jobs.map((job) =>
    h("tr", { class: "clickable", "data-job": job.id, onclick: () => { location.hash = `#/job/${job.id}`; } },
      h("td", {}, job.id),
      h("td", { title: `base model ${job.spec.base_model || "–"}` }, `${job.project}/${job.model_name}`),
      h("td", {}, stateBadge(job)),
      h("td", {}, job.experiment),
      h("td", {}, `${job.completed_steps} / ${job.total_steps}`),
      h("td", {}, fmt(job.latest_reward)),
      h("td", {}, job.created_at ? job.created_at.replace("T", " ").slice(0, 19) : "")));
  show(h("h1", {}, "Jobs"),
    h("table", { id: "jobs" },
      h("thead", {}, h("tr", {}, ["Job", "Model", "State", "Experiment", "Step", "Reward", "Created"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 7 }, "No jobs yet.")))));
}

function chart(id, title, points) {
  const svgNS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(svgNS, "svg");
  svg.setAttribute("viewBox", "0 0 400 160");
  svg.setAttribute("data-testid", id);
  svg.setAttribute("data-points", String(points.length));
  const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
  const [x0, x1] = [Math.min(...xs, 0), Math.max(...xs, 1)];
  let [y0, y1] = [Math.min(...ys, 0), Math.max(...ys, 0)];
  if (y0 === y1) { y1 = y0 + 1; }
  const px = (x) => 36 + ((x - x0) / (x1 - x0 || 1)) * 352;
  const py = (y) => 146 - ((y - y0) / (y1 - y0)) * 136;
  const line = (attrs) => { const el = document.createElementNS(svgNS, attrs.tag); for (const [k, v] of Object.entries(attrs)) if (k !== "tag") el.setAttribute(k, v); svg.append(el); return el; };
  line({ tag: "line", x1: 36, y1: 146, x2: 392, y2: 146, stroke: "#c5cbd6" });
  line({ tag: "line", x1: 36, y1: 10, x2: 36, y2: 146, stroke: "#c5cbd6" });
  for (const [y, label] of [[y0, fmt(y0, 2)], [y1, fmt(y1, 2)]]) {
    const text = line({ tag: "text", x: 2, y: py(y) + 4, "font-size": 10, fill: "#667085" });
    text.textContent = label;
  }
  if (points.length) {
    line({ tag: "polyline", fill: "none", stroke: "#2f6fde", "stroke-width": 2, points: points.map(([x, y]) => `${px(x)},${py(y)}`).join(" ") });
    for (const [x, y] of points) line({ tag: "circle", cx: px(x), cy: py(y), r: 3, fill: "#2f6fde", "data-step": x });
  }
  return h("div", { class: "chart" }, h("h3", {}, title), svg);
}

// Only the checkpoints the trainer has on disk (retention deletes some): job.checkpoints.
function checkpointRows(job, steps) {
  if (!job.checkpoints) return [h("tr", {}, h("td", { colspan: 5 }, "The trainer did not list this job's checkpoints."))];
  if (!job.checkpoints.length) return [h("tr", {}, h("td", { colspan: 5 }, "No checkpoint on disk."))];
  return job.checkpoints.map((c) => {
    const trained = c.training_step === null ? null : steps.get(c.training_step);
    // Saved before training step 1: the initial adapter (step 0) or an SFT phase's.
    const before = c.step === 0 ? "initial" : "SFT";
    return h("tr", { "data-step": c.step, "data-training-step": c.training_step },
      h("td", {}, c.step), h("td", {}, c.policy + (c.best ? " (best)" : "")),
      h("td", {}, c.training_step === null ? before : trained ? fmt(trained.reward_mean) : "–"),
      h("td", {}, lossOf(trained)), h("td", {}, trained ? fmt(trained.step_seconds, 1) : "–"));
  });
}

function stepRows(sorted) {
  return sorted.map((s) => h("tr", { "data-step": s.step, class: s.scoring_failed ? "error" : null },
    h("td", {}, s.step), h("td", {}, fmt(s.reward_mean)), h("td", {}, s.trained_sequences),
    h("td", {}, lossOf(s)), h("td", {}, fmt(s.step_seconds, 1)), h("td", {}, scorerNote(s) || "–"),
    h("td", { class: s.failure_warning ? "error" : null }, failedNote(s) || "–"),
    h("td", { class: s.mismatch && s.mismatch.warning ? "error" : null }, mismatchNote(s) || "–")));
}

// The sampler's logprobs against the trainer's (StepOut.mismatch), in short.
function mismatchNote(s) {
  const m = s.mismatch;
  if (!m) return "";
  const lag = s.staleness_max ? `, lag ${fmt(s.staleness_mean, 2)}` : "";
  return `k3 ${m.k3.toPrecision(2)} · ${(100 * m.outside_0_5_2).toFixed(1)}% ∉ [0.5, 2] (${m.engine}${lag})`;
}

function renderJob(job, steps) {
  const sorted = [...steps.values()].sort((a, b) => a.step - b.step);
  const series = (key) => sorted.map((s) => [s.step, s[key]]);
  const failing = [...sorted].reverse().find((s) => s.scorer_errors);
  // The latest step that lost more than the trainer's share of its episodes.
  const losing = [...sorted].reverse().find((s) => s.failure_warning);
  // The latest step whose sampler/trainer mismatch was past a bound.
  const drifting = [...sorted].reverse().find((s) => s.mismatch && s.mismatch.warning);
  const resumed = (job.resumes || []).length > 0;
  show(h("h1", {}, `Job ${job.id}`),
    h("div", { class: "kv" },
      h("span", {}, "Experiment"), h("span", {}, job.experiment),
      h("span", {}, "State"), stateBadge(job, "job-state"),
      h("span", {}, "Step"), h("span", { id: "job-step" }, `${sorted.length ? sorted[sorted.length - 1].step : 0} / ${job.total_steps}`),
      h("span", {}, "Base model"), h("span", {}, job.spec.base_model || "–"),
      h("span", {}, "Serving"), h("span", {}, job.policy || "–"),
      job.error ? h("span", {}, "Error") : null, job.error ? h("span", { class: "error" }, job.error) : null,
      resumed ? h("span", {}, "Resumed") : null,
      resumed ? h("span", { id: "job-resumed" }, resumedNote(job.resumes)) : null,
      failing ? h("span", {}, "Scorer errors") : null,
      failing ? h("span", { id: "scorer-errors", class: "error" }, `step ${failing.step}: ${scorerNote(failing)}`) : null,
      losing ? h("span", {}, "Failed episodes") : null,
      losing ? h("span", { id: "episode-failures", class: "error" }, `step ${losing.step}: ${losing.failure_warning}`) : null,
      drifting ? h("span", {}, "Mismatch") : null,
      drifting ? h("span", { id: "mismatch-warning", class: "error" }, `step ${drifting.step}: ${drifting.mismatch.warning}`) : null),
    h("div", { class: "charts" },
      chart("chart-reward", "Reward (mean)", series("reward_mean")),
      chart("chart-loss", "Loss", series("loss")),
      chart("chart-step-time", "Step time (s)", series("step_seconds")),
      chart("chart-turns", "Turns per episode (mean)", series("turns_mean")),
      chart("chart-eval", "Held-out eval: pass@k", (job.evals || []).map((e) => [e.step, e.pass_at_k])),
      chart("chart-mismatch", "Sampler/trainer mismatch: k3", sorted.filter((s) => s.mismatch).map((s) => [s.step, s.mismatch.k3]))),
    h("h2", {}, "Steps"),
    h("table", { id: "steps" },
      h("thead", {}, h("tr", {}, ["Step", "Reward", "Trained seqs", "Loss", "Step time", "Scorer errors", "Failed episodes", "Mismatch"].map((t) => h("th", {}, t)))),
      h("tbody", {}, stepRows(sorted))),
    h("h2", {}, "Checkpoints"),
    h("table", { id: "checkpoints" },
      h("thead", {}, h("tr", {}, ["Step", "Policy", "Reward", "Loss", "Step time"].map((t) => h("th", {}, t)))),
      h("tbody", {}, checkpointRows(job, steps))),
    h("p", {}, h("a", { href: "#/trajectories" }, "Browse sampled trajectories →")));
}

// Reads the SSE body with fetch streaming; reconnects with Last-Event-ID until the job ends.
async function follow(jobId, onEvent, controller) {
  let lastId = null;
  while (!controller.signal.aborted) {
    const headers = lastId === null ? {} : { "Last-Event-ID": String(lastId) };
    let ended = false;
    try {
      const response = await api(`/jobs/${encodeURIComponent(jobId)}/stream`, { headers, signal: controller.signal });
      if (!response.ok) return;
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut); buffer = buffer.slice(cut + 2);
          const fields = {};
          for (const line of block.split("\n")) {
            const i = line.indexOf(":");
            if (i > 0) fields[line.slice(0, i)] = line.slice(i + 1).trimStart();
          }
          if (fields.id !== undefined) lastId = Number(fields.id);
          if (fields.data !== undefined) {
            const event = JSON.parse(fields.data);
            onEvent(event);
            if (event.kind === "state" && TERMINAL.has(event.state)) ended = true;
          }
        }
      }
    } catch (error) {
      if (controller.signal.aborted) return;
    }
    if (ended) return;
    await new Promise((resolve) => setTimeout(resolve, 1000)); // the stream dropped: resume
  }
}

async function jobPage(jobId) {
  const job = await json(`/jobs/${encodeURIComponent(jobId)}`);
  const steps = new Map(job.steps.map((s) => [s.step, s]));
  renderJob(job, steps);
  if (TERMINAL.has(job.state)) return;
  const controller = new AbortController();
  activeStream = controller;
  follow(jobId, async (event) => {
    if (event.kind === "step_done" && event.summary) {
      steps.set(event.summary.step, event.summary);
      // The new checkpoint is served now: take the policy name from the job.
      const fresh = await json(`/jobs/${encodeURIComponent(jobId)}`).catch(() => null);
      if (fresh) Object.assign(job, { policy: fresh.policy, checkpoints: fresh.checkpoints });
    }
    if (event.kind === "eval" && event.eval) job.evals = [...(job.evals || []), event.eval];
    if (event.kind === "state") job.state = event.state;
    if (activeStream === controller) renderJob(job, steps);
  }, controller).then(async () => {
    if (activeStream !== controller) return;
    Object.assign(job, await json(`/jobs/${encodeURIComponent(jobId)}`)); // the final policy
    renderJob(job, steps);
  });
}

// ------------------------------------------------------------------ trajectories
function input(id, label, attrs) { return h("label", {}, `${label} `, h("input", Object.assign({ id }, attrs))); }

async function trajectoriesPage() {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const query = new URLSearchParams();
  for (const key of ["experiment", "step", "scenario", "min_reward", "max_reward"]) {
    if (params.get(key)) query.set(key, params.get(key));
  }
  const { trajectories, experiments } = await json(`/trajectories?${query}`);
  const select = h("select", { id: "f-experiment" }, h("option", { value: "" }, "all experiments"),
    experiments.map((e) => h("option", Object.assign({ value: e }, params.get("experiment") === e ? { selected: "" } : {}), e)));
  const apply = () => {
    const next = new URLSearchParams();
    const values = { experiment: select.value, step: document.getElementById("f-step").value,
      scenario: document.getElementById("f-scenario").value, min_reward: document.getElementById("f-min").value,
      max_reward: document.getElementById("f-max").value };
    for (const [k, v] of Object.entries(values)) if (v) next.set(k, v);
    location.hash = `#/trajectories?${next}`;
  };
  const rows = trajectories.map((t) => h("tr", { class: "clickable", "data-path": t.path,
    onclick: () => { location.hash = `#/trajectory/${t.experiment}/${t.step}/${t.path.split("/").pop()}`; } },
    h("td", {}, t.experiment), h("td", {}, t.step), h("td", {}, t.scenario_id), h("td", {}, fmt(t.reward)),
    h("td", {}, t.policy_version ?? "–"), h("td", {}, t.path.split("/").pop())));
  show(h("h1", {}, "Trajectories"),
    h("div", { class: "filters" }, select,
      input("f-step", "step", { type: "number", min: 0, value: params.get("step") || "" }),
      input("f-scenario", "scenario", { value: params.get("scenario") || "" }),
      input("f-min", "reward ≥", { type: "number", step: "any", value: params.get("min_reward") || "" }),
      input("f-max", "reward ≤", { type: "number", step: "any", value: params.get("max_reward") || "" }),
      h("button", { id: "f-apply", type: "button", onclick: apply }, "Filter")),
    h("table", { id: "trajectories" },
      h("thead", {}, h("tr", {}, ["Experiment", "Step", "Scenario", "Reward", "Policy version", "File"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 6 }, "No sampled trajectories.")))));
}

function messageView(message) {
  const role = message.role || "?";
  const content = typeof message.content === "string" ? message.content : JSON.stringify(message.content ?? "");
  const calls = (message.tool_calls || []).map((call) => h("div", { class: "toolcall", "data-testid": "tool-call" },
    `${call.function?.name ?? "?"}(${call.function?.arguments ?? ""})`));
  const label = role === "tool" ? `observation${message.tool_call_id ? ` (${message.tool_call_id})` : ""}` : role;
  return h("div", { class: `msg ${role}` }, h("span", { class: "role" }, label), content, calls);
}

async function trajectoryPage(path) {
  const t = await json(`/trajectories/${path.split("/").map(encodeURIComponent).join("/")}`);
  const meta = Object.entries(t.metadata || {});
  const metrics = Object.entries(t.metrics || {});
  show(h("h1", {}, path),
    h("div", { class: "kv", id: "trajectory-meta" },
      h("span", {}, "Reward"), h("span", {}, fmt(t.reward)),
      meta.flatMap(([k, v]) => [h("span", {}, k), h("span", {}, String(v))])),
    h("h2", {}, "Reward components and metrics"),
    h("div", { class: "kv", id: "trajectory-metrics" }, metrics.flatMap(([k, v]) => [h("span", {}, k), h("span", {}, String(v))])),
    t.tools ? h("p", {}, `Tools: ${t.tools.map((tool) => tool.function?.name ?? tool.name ?? "?").join(", ")}`) : null,
    h("h2", {}, "Messages"),
    h("div", { id: "messages" }, t.messages.map(messageView)));
}

// ------------------------------------------------------------------ models
async function modelsPage() {
  const { models } = await json("/models");
  const status = h("p", { id: "models-status", role: "status" });
  const rows = models.map((m) => h("tr", {},
    h("td", {}, m.project), h("td", {}, m.model_name), h("td", {}, m.base_model),
    h("td", {}, h("span", { class: `state ${m.state}` }, m.state)), h("td", {}, m.completed_steps),
    h("td", {}, m.policy || "–"),
    h("td", {}, h("button", { class: "danger", type: "button", onclick: async () => {
      if (!confirm(`Delete ${m.project}/${m.model_name}?`)) return;
      try {
        await json(`/models/${encodeURIComponent(m.project)}/${encodeURIComponent(m.model_name)}`, { method: "DELETE" });
        route();
      } catch (error) { status.textContent = `Not deleted: ${error.message}`; }
    } }, "Delete"))));
  show(h("h1", {}, "Models"), status,
    h("table", { id: "models" },
      h("thead", {}, h("tr", {}, ["Project", "Model", "Base model", "State", "Steps", "Serving", ""].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 7 }, "No models yet.")))),
    await tinkerRuns());
}

// Training runs of the Tinker-compatible API (clients' own training loops).
async function tinkerRuns() {
  const { training_runs: runs } = await json("/api/v1/training_runs?limit=100");
  const saved = (c) => (c ? `${c.checkpoint_id} (${c.tinker_path})` : "–");
  const rows = runs.map((r) => h("tr", {},
    h("td", {}, r.training_run_id), h("td", {}, r.base_model), h("td", {}, r.lora_rank ?? "–"),
    h("td", {}, saved(r.last_checkpoint)), h("td", {}, saved(r.last_sampler_checkpoint)),
    h("td", {}, new Date(r.last_request_time).toLocaleString())));
  return h("section", {},
    h("h2", {}, "Tinker API training runs"),
    h("table", { id: "tinker-runs" },
      h("thead", {}, h("tr", {}, ["Run", "Base model", "LoRA rank", "Last saved state", "Last sampler weights", "Last request"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 6 }, "No Tinker API runs yet.")))));
}

// ------------------------------------------------------------------ routing
async function route() {
  if (!token()) { logout(); return; }
  if (activeStream) { activeStream.abort(); activeStream = null; }
  const hash = location.hash.replace(/^#\//, "");
  const [page, ...rest] = hash.split("?")[0].split("/");
  try {
    if (page === "job") await jobPage(decodeURIComponent(rest[0]));
    else if (page === "trajectories") await trajectoriesPage();
    else if (page === "trajectory") await trajectoryPage(rest.map(decodeURIComponent).join("/"));
    else if (page === "models") await modelsPage();
    else await jobsPage();
  } catch (error) { if (token()) failure(error); }
}

window.addEventListener("hashchange", route);
document.getElementById("login-form").addEventListener("submit", login);
document.getElementById("logout").addEventListener("click", () => logout());
if (token()) enter(); else logout();
