// The runs page, live: every few seconds the runs' state, agents, best score, tokens and cost are read
// again from /api/runs and written into their cells with textContent; a new run gets a row.
"use strict";

(function () {
  const table = document.getElementById("runs-table");
  if (!table) return;
  const body = table.tBodies[0];
  const cell = (row, field) => row.querySelector('[data-field="' + field + '"]');
  function rowFor(run) {
    for (const row of body.rows) if (row.dataset.run === run.name) return row;
    const row = body.insertRow();
    row.dataset.run = run.name;
    const pick = document.createElement("input");
    pick.type = "checkbox"; pick.name = "pick"; pick.value = run.name;
    row.insertCell().append(pick);
    const link = document.createElement("a");
    link.href = "/runs/" + encodeURIComponent(run.name);
    link.textContent = run.name;
    row.insertCell().append(link);
    const fields = ["state", "benchmark", "strategy", "models", "counts", "iterations", "seed", "best", "tokens", "cost", "updated"];
    for (const field of fields) row.insertCell().dataset.field = field;
    if (!run.error) {
      cell(row, "benchmark").textContent = run.benchmark;
      cell(row, "strategy").textContent = run.strategy;
      cell(row, "models").textContent = run.models.join(", ");
      cell(row, "seed").textContent = Cambrian.fmt(run.seed_score) + " | " + Cambrian.fmt(run.seed_holdout);
    }
    return row;
  }
  function update(run) {
    const row = rowFor(run);
    if (run.error) return;
    const state = cell(row, "state");
    if (state) { state.textContent = run.state; state.className = "pill state-" + run.state; }
    const counts = Object.entries(run.counts).filter(([, n]) => n > 0).map(([s, n]) => s + " " + n).join(", ");
    const set = (field, text) => { const c = cell(row, field); if (c) c.textContent = text; };
    set("counts", Cambrian.count(run.agents) + " (" + counts + ")");
    set("iterations", run.iterations_done + (run.iterations_budget ? " / " + run.iterations_budget : ""));
    set("best", (run.best_id ? "#" + run.best_id + " " : "") + Cambrian.fmt(run.best_score) + " | " + Cambrian.fmt(run.best_holdout));
    set("tokens", Cambrian.count(run.prompt_tokens + run.completion_tokens));
    set("cost", Cambrian.usd(run.cost_usd));
    set("updated", Cambrian.when(run.updated));
  }
  const signature = new Map();
  Cambrian.poll(() => "/api/runs", 3000, (answer) => {
    for (const run of answer.runs) {
      const key = JSON.stringify([run.updated, run.state, run.agents, run.error]);
      if (signature.get(run.name) === key) continue;
      if (signature.has(run.name) || !body.querySelector('tr[data-run="' + CSS.escape(run.name) + '"]')) update(run);
      signature.set(run.name, key);
    }
  });
})();
