// Helpers every page's script shares. Untrusted text (agent code, FM text, reasons, run names) is only
// ever put into the page with textContent, or handed to plotly after esc(): never as HTML.
"use strict";

const Cambrian = {
  readJson(id) {
    const block = document.getElementById(id);
    return block ? JSON.parse(block.textContent) : null;
  },
  // Plotly renders an HTML subset in hover text, titles and legend names: escape everything given to it.
  // Quotes as numeric references: plotly decodes those, but shows "&quot;" as it is.
  esc(value) {
    return String(value).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "'": "&#39;" })[c]);
  },
  fmt(value, digits = 4) {
    return value === null || value === undefined || Number.isNaN(value) ? "—" : Number(value).toFixed(digits);
  },
  count(value) {
    return value === null || value === undefined ? "—" : Number(value).toLocaleString("en-US");
  },
  usd(value) {
    if (value === null || value === undefined) return "—";
    return Math.abs(value) < 1 ? "$" + Number(value).toFixed(4) : "$" + Number(value).toFixed(2);
  },
  when(seconds) {
    if (!seconds) return "—";
    return new Date(seconds * 1000).toISOString().slice(0, 16).replace("T", " ") + " UTC";
  },
  agentUrl(run, id) {
    return "/runs/" + encodeURIComponent(run) + "/agents/" + encodeURIComponent(id);
  },
  palette: ["#2563eb", "#ea580c", "#16a34a", "#9333ea", "#0891b2", "#ca8a04", "#db2777", "#4b5563", "#65a30d", "#7c3aed"],
  plotConfig: { responsive: true, displaylogo: false, scrollZoom: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] },
  setLive(state, text) {
    const badge = document.getElementById("live-state");
    if (!badge) return;
    badge.hidden = false;
    badge.className = "live " + state;
    badge.textContent = text;
  },
  // Poll `url()` every `periodMs` while the tab is visible; `onData` gets the parsed JSON.
  poll(url, periodMs, onData) {
    let busy = false;
    const tick = async () => {
      if (busy || document.hidden) return;
      busy = true;
      try {
        const response = await fetch(url(), { cache: "no-store" });
        if (!response.ok) throw new Error("HTTP " + response.status);
        onData(await response.json());
        Cambrian.setLive("on", "live");
      } catch (error) {
        Cambrian.setLive("off", "live: " + error.message);
      } finally {
        busy = false;
      }
    };
    setInterval(tick, periodMs);
  },
};
