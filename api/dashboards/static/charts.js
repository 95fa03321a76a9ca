// Draws the dashboard charts with plotly.js from the JSON block #chart-data (built by
// api/dashboards/charts.py). Each element with data-chart="NAME" gets DRAW[NAME](data[NAME]).
// Every string that reaches plotly goes through esc(): plotly renders a subset of HTML in
// labels and hover text, and labels can hold user-supplied text.
"use strict";

(function () {
  const COLORS = { primary: "#2563eb", good: "#16a34a", bad: "#dc2626", muted: "#94a3b8" };
  const FONT = { family: "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size: 12, color: "#1e293b" };

  function esc(text) {
    return String(text)
      .replace(/&/g, "&amp;")
      .replace(/</g, "&lt;")
      .replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;");
  }

  function axis(title, extra) {
    return Object.assign(
      { title: { text: esc(title) }, gridcolor: "#e2e8f0", zerolinecolor: "#cbd5e1", automargin: true },
      extra || {}
    );
  }

  function layout(xTitle, yTitle, extra) {
    return Object.assign(
      {
        font: FONT,
        margin: { l: 60, r: 20, t: 10, b: 50 },
        paper_bgcolor: "rgba(0,0,0,0)",
        plot_bgcolor: "#ffffff",
        xaxis: axis(xTitle),
        yaxis: axis(yTitle),
        legend: { orientation: "h", y: -0.25 },
        hoverlabel: { font: { family: FONT.family } },
      },
      extra || {}
    );
  }

  const CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };

  function empty(el, text) {
    el.classList.add("chart-empty");
    el.textContent = text;
  }

  const DRAW = {
    history(el, d) {
      if (!d.numbers.length) return empty(el, "No measured trial yet.");
      const colors = d.feasible.map((ok) => (ok ? COLORS.primary : COLORS.bad));
      const traces = [
        {
          type: "scatter", mode: "markers", name: "score of the trial",
          x: d.numbers, y: d.scores,
          marker: { size: 9, color: colors, line: { width: 1, color: "#fff" } },
          hovertemplate: "trial #%{x}<br>score %{y:.3f}<extra></extra>",
        },
        {
          type: "scatter", mode: "lines", name: "best so far (SLO met)",
          x: d.numbers, y: d.best, line: { shape: "hv", color: COLORS.good, width: 2 },
          hovertemplate: "best after #%{x}: %{y:.3f}<extra></extra>",
        },
      ];
      const shapes = [{
        type: "line", xref: "paper", x0: 0, x1: 1, y0: 1, y1: 1,
        line: { dash: "dot", color: COLORS.muted, width: 1 },
      }];
      Plotly.newPlot(el, traces, layout(d.x_title, d.y_title, { shapes: shapes, xaxis: axis(d.x_title, { dtick: 1 }) }), CONFIG);
    },

    pareto(el, d) {
      if (!d.numbers.length) return empty(el, "No measured trial yet.");
      const text = d.numbers.map((n, i) => "#" + n + " " + esc(d.labels[i]));
      const traces = [
        {
          type: "scatter", mode: "markers", name: "measured trials",
          x: d.throughput, y: d.p99, text: text,
          marker: {
            size: 12, color: d.memory, colorscale: "Viridis", showscale: true,
            colorbar: { title: { text: esc(d.color_title), side: "right" }, thickness: 12 },
            line: { width: 1, color: "#fff" },
          },
          hovertemplate: "%{text}<br>%{x:.1f} tok/s<br>P99 %{y:.1f} ms<br>%{marker.color:.2f} GiB<extra></extra>",
        },
        {
          type: "scatter", mode: "lines+markers", name: "Pareto front",
          x: d.front_throughput, y: d.front_p99,
          line: { color: COLORS.good, width: 2, dash: "dash" },
          marker: { symbol: "circle-open", size: 20, color: COLORS.good, line: { width: 2 } },
          hoverinfo: "skip",
        },
      ];
      Plotly.newPlot(el, traces, layout(d.x_title, d.y_title), CONFIG);
    },

    importance(el, d) {
      if (!d.params.length) return empty(el, "Not enough measured trials to rank the parameters.");
      const traces = [{
        type: "bar", orientation: "h", name: "importance",
        x: d.values, y: d.params.map(esc), marker: { color: COLORS.primary },
        hovertemplate: "%{y}: %{x:.2f}<extra></extra>",
      }];
      // A bar per parameter at a readable thickness, however few parameters there are.
      const height = 110 + 44 * d.params.length;
      el.style.height = height + "px";
      Plotly.newPlot(el, traces, layout(d.x_title, "", {
        height: height, bargap: 0.35,
        xaxis: axis(d.x_title, { range: [0, 1] }),
        margin: { l: 170, r: 20, t: 10, b: 50 },
      }), CONFIG);
    },

    ttft(el, d) { DRAW.box(el, d); },
    e2e(el, d) { DRAW.box(el, d); },

    box(el, d) {
      if (!d.categories.length) return empty(el, "No measured trial yet.");
      const palette = [COLORS.primary, "#f59e0b"];
      const traces = d.series.map((s, i) => ({
        type: "box", name: s.name, x: s.x, y: s.y,
        boxpoints: "all", jitter: 0.4, pointpos: 0,
        marker: { color: palette[i % palette.length], size: 5 },
        hovertemplate: "trial %{x}<br>" + s.name + " %{y:.1f} ms<extra></extra>",
      }));
      Plotly.newPlot(el, traces, layout("trial", d.y_title, {
        boxmode: "group",
        xaxis: axis("trial", { type: "category", categoryorder: "array", categoryarray: d.categories }),
      }), CONFIG);
    },

    ratio(el, d) {
      if (!d.labels.length) return empty(el, "No metric has a ratio to show.");
      const tone = d.tones.map((t) => (t === "good" ? COLORS.good : t === "bad" ? COLORS.bad : COLORS.primary));
      const traces = [{
        type: "scatter", mode: "markers", name: "B / A",
        x: d.ratio, y: d.labels.map(esc),
        error_x: {
          type: "data", symmetric: false,
          array: d.plus.map((v) => (v === null ? 0 : v)),
          arrayminus: d.minus.map((v) => (v === null ? 0 : v)),
          color: "#475569", thickness: 1.5, width: 6,
        },
        marker: { size: 11, color: tone },
        hovertemplate: "%{y}: %{x:.3f}<extra></extra>",
      }];
      const shapes = [{
        type: "line", yref: "paper", y0: 0, y1: 1, x0: 1, x1: 1,
        line: { dash: "dot", color: COLORS.muted, width: 1.5 },
      }];
      const height = Math.max(260, 44 * d.labels.length + 90);
      el.style.height = height + "px";
      Plotly.newPlot(el, traces, layout(d.x_title, "", {
        shapes: shapes, height: height,
        margin: { l: 190, r: 20, t: 10, b: 50 },
        yaxis: axis("", { autorange: "reversed" }),
      }), CONFIG);
    },
  };

  function main() {
    const block = document.getElementById("chart-data");
    if (!block) return;
    const data = JSON.parse(block.textContent);
    for (const el of document.querySelectorAll("[data-chart]")) {
      const name = el.dataset.chart;
      if (DRAW[name] && data[name]) DRAW[name](el, data[name]);
    }
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", main);
  else main();
})();
