// The run page: score over iterations, the lineage tree at a level of detail, the MAP-Elites grid,
// and live updates (polling the changes endpoint). Data comes from the #run-data JSON block and the
// JSON endpoints; text reaches the page only through textContent or, for plotly, esc().
"use strict";

(function () {
  performance.mark("cambrian-start");
  const data = Cambrian.readJson("run-data");
  if (!data) return;
  const run = data.run;
  const report = data.report;
  const esc = Cambrian.esc;

  // [min, max] of the non-null values ([0, 1] with none); a loop, since spreading 100k values overflows the stack.
  function range(values) {
    let low = Infinity, high = -Infinity;
    for (const v of values) if (v !== null && !Number.isNaN(v)) { if (v < low) low = v; if (v > high) high = v; }
    return low === Infinity ? [0, 1] : [low, high];
  }

  // ----- score over iterations -----------------------------------------------------------------

  const points = { id: [], iteration: [], score: [], status: [], operator: [], model: [], reason: [], parent: [] };
  const rowOf = new Map();
  function mergePoints(incoming) {
    for (let i = 0; i < incoming.id.length; i++) {
      const id = incoming.id[i];
      let row = rowOf.get(id);
      if (row === undefined) {
        row = points.id.length;
        rowOf.set(id, row);
        for (const key of Object.keys(points)) points[key].push(null);
      }
      for (const key of Object.keys(points)) points[key][row] = incoming[key][i];
    }
  }
  mergePoints(data.points);
  let totalAgents = data.points.total;

  function colourBy() {
    const checked = document.querySelector('input[name="colour-by"]:checked');
    return checked ? checked.value : "operator";
  }

  function bestLine() {
    const order = points.id.map((_, i) => i).sort((a, b) => points.id[a] - points.id[b]);
    const xs = [], ys = [], text = [];
    let best = -Infinity, lastIteration = 0;
    for (const i of order) {
      lastIteration = Math.max(lastIteration, points.iteration[i]);
      if (points.status[i] === "evaluated" && points.score[i] !== null && points.score[i] > best) {
        best = points.score[i];
        xs.push(points.iteration[i]); ys.push(best); text.push("best so far " + Cambrian.fmt(best) + " (#" + points.id[i] + ")");
      }
    }
    if (xs.length) { xs.push(lastIteration); ys.push(best); text.push("best so far " + Cambrian.fmt(best)); }
    return { type: "scatter", mode: "lines", name: "best so far", x: xs, y: ys, text: text, hoverinfo: "text",
             line: { shape: "hv", color: "#111827", width: 2 } };
  }

  function scoreTraces() {
    const key = colourBy();
    const [low, high] = range(points.score);
    const floor = low - 0.08 * (high > low ? high - low : Math.max(Math.abs(low) * 0.1, 0.1));
    const groups = new Map();
    const bad = { x: [], y: [], text: [], ids: [] };
    const pending = { x: [], y: [], text: [], ids: [] };
    for (let i = 0; i < points.id.length; i++) {
      const label = "#" + points.id[i] + " · " + points.operator[i] + " · " + points.model[i];
      if (points.status[i] === "invalid" || points.status[i] === "failed") {
        bad.x.push(points.iteration[i]); bad.y.push(floor); bad.ids.push(points.id[i]);
        bad.text.push(esc(label) + "<br>" + esc(points.status[i]) + ": " + esc(points.reason[i] || "no reason recorded"));
        continue;
      }
      if (points.score[i] === null) {
        pending.x.push(points.iteration[i]); pending.y.push(floor); pending.ids.push(points.id[i]);
        pending.text.push(esc(label) + "<br>" + esc(points.status[i]));
        continue;
      }
      const group = points[key][i] || "—";
      if (!groups.has(group)) groups.set(group, { x: [], y: [], text: [], ids: [] });
      const g = groups.get(group);
      g.x.push(points.iteration[i]); g.y.push(points.score[i]); g.ids.push(points.id[i]);
      g.text.push(esc(label) + "<br>score " + Cambrian.fmt(points.score[i]) + (points.parent[i] >= 0 ? "<br>parent #" + points.parent[i] : ""));
    }
    const traces = [];
    let colour = 0;
    for (const [name, g] of [...groups.entries()].sort()) {
      traces.push({ type: "scatter", mode: "markers", name: esc(name), x: g.x, y: g.y, text: g.text, customdata: g.ids,
                    hoverinfo: "text", marker: { size: 7, color: Cambrian.palette[colour++ % Cambrian.palette.length], opacity: 0.85 } });
    }
    if (bad.x.length) traces.push({ type: "scatter", mode: "markers", name: "invalid / failed", x: bad.x, y: bad.y, text: bad.text,
                                    customdata: bad.ids, hoverinfo: "text", marker: { symbol: "x", size: 8, color: "#b91c1c" } });
    if (pending.x.length) traces.push({ type: "scatter", mode: "markers", name: "not scored yet", x: pending.x, y: pending.y, text: pending.text,
                                        customdata: pending.ids, hoverinfo: "text", marker: { symbol: "circle-open", size: 8, color: "#6b7280" } });
    traces.push(bestLine());
    return traces;
  }

  const scorePlot = document.getElementById("score-plot");
  function drawScores() {
    const layout = { margin: { l: 55, r: 10, t: 10, b: 45 }, xaxis: { title: { text: "iteration" } },
                     yaxis: { title: { text: "search score" } }, legend: { orientation: "h" }, hovermode: "closest", uirevision: "keep" };
    Plotly.react(scorePlot, scoreTraces(), layout, Cambrian.plotConfig);
    const note = document.getElementById("points-note");
    const sampled = totalAgents > points.id.length;
    if (note) note.textContent = sampled ? "showing " + points.id.length.toLocaleString() + " of " + totalAgents.toLocaleString() + " agents (sampled; every improvement kept)" : "";
    const allButton = document.getElementById("points-all");
    if (allButton) allButton.hidden = !sampled;
  }
  drawScores();
  performance.mark("cambrian-scores");
  document.querySelectorAll('input[name="colour-by"]').forEach((input) => input.addEventListener("change", drawScores));
  scorePlot.on("plotly_click", (event) => {
    const point = event.points && event.points[0];
    if (point && point.customdata !== undefined) openAgent(point.customdata);
  });

  function openAgent(id) {
    if (report) {
      const anchor = document.getElementById("agent-" + id);
      if (anchor) anchor.scrollIntoView();
      return;
    }
    window.location.href = Cambrian.agentUrl(run, id);
  }

  // ----- lineage tree --------------------------------------------------------------------------

  const treePlot = document.getElementById("tree-plot");
  const treeState = { depth: data.tree.depth, expand: new Set(), collapse: new Set(), wide: new Set() };
  let tree = data.tree;

  function treeUrl() {
    const params = new URLSearchParams({ depth: String(treeState.depth) });
    if (treeState.expand.size) params.set("expand", [...treeState.expand].join(","));
    if (treeState.collapse.size) params.set("collapse", [...treeState.collapse].join(","));
    if (treeState.wide.size) params.set("wide", [...treeState.wide].join(","));
    return "/api/runs/" + encodeURIComponent(run) + "/tree?" + params.toString();
  }

  async function reloadTree() {
    if (report) return;
    const response = await fetch(treeUrl(), { cache: "no-store" });
    if (!response.ok) return;
    tree = await response.json();
    drawTree();
  }

  function drawTree() {
    const n = tree.nodes;
    const edges = { x: [], y: [] }, pathEdges = { x: [], y: [] };
    const sets = { agent: { x: [], y: [], text: [], c: [], i: [], line: [] }, clade: { x: [], y: [], text: [], c: [], i: [], s: [] },
                   more: { x: [], y: [], text: [], i: [] } };
    for (let i = 0; i < n.id.length; i++) {
      const p = n.parent[i];
      if (p >= 0) {
        const target = n.best_path[i] && n.best_path[p] ? pathEdges : edges;
        target.x.push(n.x[p], n.x[i], null); target.y.push(n.y[p], n.y[i], null);
      }
      const head = "#" + n.id[i] + " · " + esc(n.operator[i]) + (n.model[i] ? " · " + esc(n.model[i]) : "");
      if (n.kind[i] === "agent") {
        const s = sets.agent;
        s.x.push(n.x[i]); s.y.push(n.y[i]); s.i.push(i); s.c.push(n.score[i] === null ? NaN : n.score[i]);
        s.line.push(n.best_path[i] ? 2.5 : 0.5);
        s.text.push(head + "<br>" + esc(n.status[i]) + " · score " + Cambrian.fmt(n.score[i]) +
                    "<br>clade " + n.clade_size[i] + " agents, best " + Cambrian.fmt(n.clade_best[i]));
      } else if (n.kind[i] === "clade") {
        const s = sets.clade;
        s.x.push(n.x[i]); s.y.push(n.y[i]); s.i.push(i); s.c.push(n.clade_best[i] === null ? NaN : n.clade_best[i]);
        s.s.push(9 + 3 * Math.log10(1 + n.hidden[i]));
        s.text.push(head + " · score " + Cambrian.fmt(n.score[i]) + "<br>collapsed: " + n.hidden[i] + " descendants, best " +
                    Cambrian.fmt(n.hidden_best[i]) + (report ? "" : "<br>click to expand"));
      } else {
        const s = sets.more;
        s.x.push(n.x[i]); s.y.push(n.y[i]); s.i.push(i);
        s.text.push(n.hidden[i] + " more agents under #" + n.id[i] + ", best " + Cambrian.fmt(n.hidden_best[i]) + (report ? "" : "<br>click to show all children"));
      }
    }
    const [cmin, cmax] = range(n.score);
    const colour = (values) => values.map((v) => (Number.isNaN(v) ? "#c7cdd4" : v));
    const markerScale = { colorscale: "Viridis", cmin: cmin, cmax: cmax === cmin ? cmin + 1 : cmax };
    const traces = [
      { type: "scatter", mode: "lines", x: edges.x, y: edges.y, hoverinfo: "skip", line: { color: "#c3c8cf", width: 1 }, showlegend: false },
      { type: "scatter", mode: "lines", x: pathEdges.x, y: pathEdges.y, hoverinfo: "skip", line: { color: "#dc2626", width: 2.5 }, name: "best path" },
      { type: "scatter", mode: "markers", name: "agents", x: sets.agent.x, y: sets.agent.y, text: sets.agent.text, customdata: sets.agent.i,
        hoverinfo: "text", marker: Object.assign({ size: 9, color: colour(sets.agent.c), showscale: true, colorbar: { title: { text: "score" }, thickness: 12 },
                                                   line: { color: "#111827", width: sets.agent.line } }, markerScale) },
      { type: "scatter", mode: "markers", name: "collapsed clades", x: sets.clade.x, y: sets.clade.y, text: sets.clade.text, customdata: sets.clade.i,
        hoverinfo: "text", marker: Object.assign({ symbol: "triangle-down", size: sets.clade.s, color: colour(sets.clade.c), line: { color: "#111827", width: 1 } }, markerScale) },
      { type: "scatter", mode: "markers", name: "more children", x: sets.more.x, y: sets.more.y, text: sets.more.text, customdata: sets.more.i,
        hoverinfo: "text", marker: { symbol: "diamond", size: 10, color: "#9ca3af", line: { color: "#111827", width: 1 } } },
    ];
    const layout = { margin: { l: 40, r: 10, t: 10, b: 20 }, dragmode: "pan", hovermode: "closest", showlegend: true, legend: { orientation: "h" },
                     xaxis: { visible: false, zeroline: false }, yaxis: { autorange: "reversed", title: { text: "depth" }, zeroline: false },
                     uirevision: "tree" };
    Plotly.react(treePlot, traces, layout, Cambrian.plotConfig);
    const note = document.getElementById("tree-note");
    if (note) note.textContent = "showing " + tree.shown.toLocaleString() + " nodes for " + tree.total.toLocaleString() + " agents";
  }
  drawTree();
  performance.mark("cambrian-tree");

  treePlot.on("plotly_click", (event) => {
    const point = event.points && event.points[0];
    if (!point || point.customdata === undefined) return;
    const i = point.customdata, n = tree.nodes, id = n.id[i];
    if (n.kind[i] === "clade") {
      if (report) return openAgent(id);
      treeState.collapse.delete(id); treeState.expand.add(id); reloadTree();
    } else if (n.kind[i] === "more") {
      if (!report) { treeState.wide.add(id); reloadTree(); }
    } else {
      const mode = document.querySelector('input[name="click-mode"]:checked');
      if (!report && mode && mode.value === "fold" && n.parent.some((p) => p === i)) {
        treeState.expand.delete(id); treeState.collapse.add(id); reloadTree();
      } else {
        openAgent(id);
      }
    }
  });
  const depthInput = document.getElementById("tree-depth");
  if (depthInput) depthInput.addEventListener("change", () => {
    const depth = parseInt(depthInput.value, 10);
    if (depth > 0) { treeState.depth = depth; reloadTree(); }
  });
  const resetButton = document.getElementById("tree-reset");
  if (resetButton) resetButton.addEventListener("click", () => {
    treeState.expand.clear(); treeState.collapse.clear(); treeState.wide.clear();
    treeState.depth = data.tree.depth; if (depthInput) depthInput.value = String(treeState.depth);
    Plotly.purge(treePlot); reloadTree();
  });

  // ----- MAP-Elites grid -----------------------------------------------------------------------

  function drawGrid(g) {
    const gridPlot = document.getElementById("grid-plot");
    if (!gridPlot || !g) return;
    const panel = document.getElementById("grid-panel");
    if (panel) panel.hidden = false;
    const axes = document.getElementById("grid-axes");
    if (axes) axes.textContent = g.x_name + " × " + g.y_name;
    const centres = (edges) => edges.slice(0, -1).map((e, k) => (e + edges[k + 1]) / 2);
    const text = g.best.map((row, y) => row.map((best, x) => best === null ? "empty" :
      "elite #" + g.agent[y][x] + " · score " + Cambrian.fmt(best) + "<br>" + g.count[y][x] + " agents in the cell"));
    Plotly.newPlot(gridPlot, [{ type: "heatmap", x: centres(g.x_edges), y: centres(g.y_edges), z: g.best, text: text, hoverinfo: "text",
                                colorscale: "Viridis", colorbar: { title: { text: "best" } } }],
      { margin: { l: 60, r: 10, t: 10, b: 45 }, xaxis: { title: { text: esc(g.x_name) } }, yaxis: { title: { text: esc(g.y_name) } } },
      Cambrian.plotConfig);
    gridPlot.on("plotly_click", (event) => {
      const point = event.points && event.points[0];
      if (!point) return;
      const xi = centres(g.x_edges).indexOf(point.x), yi = centres(g.y_edges).indexOf(point.y);
      if (xi >= 0 && yi >= 0 && g.agent[yi][xi] !== null) openAgent(g.agent[yi][xi]);
    });
  }

  function drawPanels(panels) {
    document.querySelectorAll(".panel-loading").forEach((note) => note.remove());
    drawGrid(panels.grid);
    const analytics = panels.analytics || {};
    if (analytics.error) {
      const box = document.getElementById("budget-plots");
      if (box) { const line = document.createElement("p"); line.className = "error-line"; line.textContent = analytics.error; box.append(line); }
    } else if (window.CambrianAnalytics && Object.keys(analytics).length) {
      window.CambrianAnalytics.draw(analytics, run, openAgent);
    }
  }

  // Interactive: the score plot and the tree are drawn and answer clicks (bench/ui_bench.py waits for this).
  window.cambrianReadyAt = performance.now();
  window.cambrianReady = true;
  document.body.dataset.ready = "1";

  if (report) {
    drawPanels({ grid: data.grid, analytics: data.analytics });
  } else {
    // The grid and the analytics are the slow reads of a big run: fetched once the page is usable.
    const later = window.requestIdleCallback || ((callback) => setTimeout(callback, 50));
    later(async () => {
      const response = await fetch("/api/runs/" + encodeURIComponent(run) + "/panels", { cache: "no-store" });
      if (!response.ok) return;
      drawPanels(await response.json());
      window.cambrianPanelsAt = performance.now();
      document.body.dataset.panels = "1";
    });
    const allButton = document.getElementById("points-all");
    if (allButton) allButton.addEventListener("click", async () => {
      allButton.disabled = true;
      const response = await fetch("/api/runs/" + encodeURIComponent(run) + "/points?max_points=" + Math.max(totalAgents, 1), { cache: "no-store" });
      if (response.ok) { mergePoints(await response.json()); drawScores(); }
      allButton.disabled = false;
    });
  }

  // ----- live ----------------------------------------------------------------------------------

  if (report) return;
  let lastAgent = data.last_agent, lastUpdate = data.last_update, lastTreeLoad = Date.now(), treeStale = false;
  function setFacts(summary) {
    const set = (id, text) => { const el = document.getElementById(id); if (el) el.textContent = text; };
    const state = document.getElementById("run-state");
    if (state) { state.textContent = summary.state; state.className = "pill state-" + summary.state; }
    const counts = Object.entries(summary.counts).filter(([, n]) => n > 0).map(([s, n]) => s + " " + n).join(", ");
    set("fact-agents", Cambrian.count(summary.agents) + " (" + counts + ")");
    set("fact-iterations", summary.iterations_done + (summary.iterations_budget ? " / " + summary.iterations_budget : ""));
    set("fact-fm", Cambrian.count(summary.llm_calls) + " calls, " + Cambrian.count(summary.prompt_tokens + summary.completion_tokens) + " tokens, " + Cambrian.usd(summary.cost_usd));
    set("fact-updated", Cambrian.when(summary.updated));
    const best = document.getElementById("fact-best");
    if (best && summary.best_id) {
      best.textContent = "";
      const link = document.createElement("a");
      link.href = Cambrian.agentUrl(run, summary.best_id);
      link.textContent = "#" + summary.best_id;
      best.append(link, " " + Cambrian.fmt(summary.best_score) + " | holdout " + Cambrian.fmt(summary.best_holdout));
    }
  }
  Cambrian.poll(
    () => "/api/runs/" + encodeURIComponent(run) + "/changes?" + new URLSearchParams({ after_agent: String(lastAgent), after_update: lastUpdate }),
    2000,
    (answer) => {
      const changed = answer.points.id.length > 0;
      const grew = answer.last_agent > lastAgent;
      lastAgent = answer.last_agent; lastUpdate = answer.last_update;
      setFacts(answer.summary);
      totalAgents = Math.max(totalAgents, answer.summary.agents);
      if (changed) { mergePoints(answer.points); drawScores(); }
      if (grew || changed) treeStale = true;
      if (treeStale && Date.now() - lastTreeLoad > 4000) { treeStale = false; lastTreeLoad = Date.now(); reloadTree(); }
    },
  );
})();
