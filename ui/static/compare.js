// Compare runs: best search score so far against proposals, FM tokens or USD, one line per run.
"use strict";

(function () {
  const data = Cambrian.readJson("compare-data");
  const plot = document.getElementById("compare-plot");
  if (!data || !plot) return;
  const titles = { proposals: "proposals made", tokens: "FM tokens spent", usd: "USD spent" };
  function draw() {
    const checked = document.querySelector('input[name="budget-axis"]:checked');
    const axis = checked ? checked.value : "proposals";
    const traces = Object.entries(data.curves).map(([name, c], k) => ({
      type: "scatter", mode: "lines+markers", name: Cambrian.esc(name), x: c[axis], y: c.best,
      text: c.id.map((id, i) => Cambrian.esc(name) + "<br>best " + Cambrian.fmt(c.best[i]) + " (#" + id + ")"), hoverinfo: "text+x",
      line: { shape: "hv", color: Cambrian.palette[k % Cambrian.palette.length] },
    }));
    Plotly.react(plot, traces, { margin: { l: 55, r: 10, t: 10, b: 45 }, xaxis: { title: { text: titles[axis] } },
                                 yaxis: { title: { text: "best search score so far" } }, legend: { orientation: "h" } }, Cambrian.plotConfig);
  }
  draw();
  document.querySelectorAll('input[name="budget-axis"]').forEach((input) => input.addEventListener("change", draw));
  if (window.CambrianAnalytics && data.analytics) window.CambrianAnalytics.drawCompare(data.analytics);
})();
