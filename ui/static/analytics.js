// The analytics panels (ui/_analytics.py's data): where the budget went, the search-space map, and the
// extra comparison of runs. Every string handed to plotly goes through Cambrian.esc.
"use strict";

window.CambrianAnalytics = (function () {
  const esc = Cambrian.esc;
  const margin = { l: 55, r: 10, t: 30, b: 45 };

  function plotDiv(parent, tall) {
    const div = document.createElement("div");
    div.className = "plot" + (tall ? " tall" : "");
    parent.append(div);
    return div;
  }

  function drawBudget(budget, run, openAgent) {
    const box = document.getElementById("budget-plots");
    if (!box || !budget) return;
    const totals = budget.totals || {};
    const summary = document.createElement("p");
    summary.className = "muted";
    summary.textContent = Cambrian.count(totals.calls) + " FM calls, " + Cambrian.count((totals.prompt_tokens || 0) + (totals.completion_tokens || 0)) +
      " tokens, " + Cambrian.usd(totals.cost_usd) + " over " + Cambrian.fmt(budget.span_minutes, 1) + " minutes";
    box.append(summary);
    const groups = [["by_model", "model"], ["by_operator", "operator"], ["by_purpose", "purpose"]];
    const bars = [];
    groups.forEach(([key, label], k) => {
      const rows = budget[key] || [];
      bars.push({ type: "bar", name: label, x: rows.map((r) => esc(label + ": " + r.name)), y: rows.map((r) => r.prompt_tokens + r.completion_tokens),
                  text: rows.map((r) => esc(r.name) + "<br>" + r.calls + " calls · " + Cambrian.usd(r.cost_usd)), hoverinfo: "text+y",
                  marker: { color: Cambrian.palette[k] } });
    });
    Plotly.newPlot(plotDiv(box), bars, { margin: margin, title: { text: "FM tokens by model, operator and purpose" }, yaxis: { title: { text: "tokens" } },
                                         barmode: "group", showlegend: true, legend: { orientation: "h" } }, Cambrian.plotConfig);
    const over = budget.over_time || {};
    const lines = [];
    Object.entries(over.by_operator || {}).forEach(([name, series], k) => lines.push({
      type: "scatter", mode: "lines", name: esc(name), x: over.minutes, y: series.tokens, line: { color: Cambrian.palette[k % 10] },
      text: series.cost_usd.map((c) => esc(name) + " · " + Cambrian.usd(c)), hoverinfo: "text+x+y" }));
    Plotly.newPlot(plotDiv(box), lines, { margin: margin, title: { text: "cumulative FM tokens by operator" }, xaxis: { title: { text: "minutes" } },
                                          yaxis: { title: { text: "tokens" } }, legend: { orientation: "h" } }, Cambrian.plotConfig);
    const t = budget.timeline;
    if (t && t.minutes && t.minutes.length > 1) {
      const centres = t.minutes.slice(0, -1).map((m, k) => (m + t.minutes[k + 1]) / 2);
      const traces = [
        { type: "bar", name: "evaluations / minute", x: centres, y: t.evaluations_per_minute, marker: { color: "#cbd5e1" }, yaxis: "y2" },
        { type: "scatter", mode: "lines", name: "sandbox slots busy", x: centres, y: t.sandbox_busy, line: { color: "#16a34a" } },
        { type: "scatter", mode: "lines", name: "FM calls in flight", x: centres, y: t.fm_busy, line: { color: "#2563eb" } },
      ];
      const util = (u) => (u === null || u === undefined ? "—" : Math.round(100 * u) + "%");
      const title = "sandbox " + util(t.sandbox_utilisation) + " of " + (t.sandbox_slots ?? "?") + " slots busy · FM " + util(t.fm_utilisation) + " of " + (t.fm_slots ?? "?");
      Plotly.newPlot(plotDiv(box), traces, { margin: margin, title: { text: esc(title) }, xaxis: { title: { text: "minutes" } },
                                             yaxis: { title: { text: "busy (mean)" } }, yaxis2: { overlaying: "y", side: "right", showgrid: false },
                                             legend: { orientation: "h" } }, Cambrian.plotConfig);
    }
  }

  function drawSpace(space, openAgent) {
    const div = document.getElementById("space-plot");
    if (!div || !space || !space.points) return;
    const p = space.points;
    const text = p.id.map((id, i) => "#" + id + " · " + esc(p.operator[i]) + " · " + esc(p.status[i]) + "<br>score " + Cambrian.fmt(p.score[i]));
    const axes = space.axes || ["x", "y"];
    const title = esc((space.method || "") + (space.sampled ? " · sampled " + space.n_points + " of " + space.n_agents : ""));
    Plotly.newPlot(div, [{ type: "scatter", mode: "markers", x: p.x, y: p.y, text: text, customdata: p.id, hoverinfo: "text",
                           marker: { size: 7, color: p.score.map((s) => (s === null ? NaN : s)), colorscale: "Viridis", showscale: true,
                                     colorbar: { title: { text: "score" }, thickness: 12 } } }],
      { margin: margin, title: { text: title, font: { size: 12 } }, xaxis: { title: { text: esc(axes[0]) } }, yaxis: { title: { text: esc(axes[1]) } } },
      Cambrian.plotConfig);
    div.on("plotly_click", (event) => { const pt = event.points && event.points[0]; if (pt) openAgent(pt.customdata); });
  }

  function drawCompare(data) {
    const box = document.getElementById("compare-analytics");
    if (!box || !data || !data.runs) return;
    const div = plotDiv(box);
    const traces = data.runs.map((r, k) => {
      const steps = r.steps || {};
      return { type: "scatter", mode: "lines+markers", name: esc(r.label), x: steps.cost_usd, y: steps.best,
               line: { shape: "hv", color: Cambrian.palette[k % 10] }, hoverinfo: "x+y+name" };
    });
    Plotly.newPlot(div, traces, { margin: margin, title: { text: "best score so far against USD (FM ledger)" }, xaxis: { title: { text: "USD" } },
                                  yaxis: { title: { text: "best search score" } }, legend: { orientation: "h" } }, Cambrian.plotConfig);
  }

  return {
    draw(analytics, run, openAgent) {
      drawBudget(analytics.budget, run, openAgent);
      drawSpace(analytics.search_space, openAgent);
    },
    drawCompare: drawCompare,
  };
})();
