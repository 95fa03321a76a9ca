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

  // vLLM's defaults (a black diamond) and the recommendation (a gold star) among a chart's
  // points: d.baseline / d.recommended are indices into x and y, or null. ``custom`` (optional,
  // per point) is what %{customdata} in ``what`` reads.
  function marks(d, x, y, text, what, custom) {
    const out = [];
    // The diamond is drawn larger, so that a recommendation of the defaults shows both.
    const mark = (i, name, symbol, color, size) => {
      if (i === null || i === undefined) return;
      out.push({
        type: "scatter", mode: "markers", name: name,
        x: [x[i]], y: [y[i]], text: [text[i]], customdata: [(custom || [])[i] || ""],
        marker: { symbol: symbol, size: size, color: color, line: { width: 1.5, color: "#1e293b" } },
        hovertemplate: esc(name) + ": %{text}<br>" + what + "<br>P99 %{y:.1f} ms<extra></extra>",
      });
    };
    mark(d.baseline, "vLLM's defaults", "diamond", "#111827", 24);
    mark(d.recommended, "recommended", "star", "#f59e0b", 15);
    return out;
  }

  const DRAW = {
    history(el, d) {
      if (!d.numbers.length) return empty(el, "No measured trial yet.");
      const colors = d.feasible.map((ok) => (ok ? COLORS.primary : COLORS.bad));
      // Scores (1 = the defaults, dotted), or without the defaults measured a metric's raw values.
      const what = d.metric ? esc(d.metric) : "score";
      const value = d.metric ? "%{y:.4g}" : "%{y:.3f}";
      const traces = [
        {
          type: "scatter", mode: "markers", name: d.metric ? what : "score of the trial",
          x: d.numbers, y: d.scores,
          marker: { size: 9, color: colors, line: { width: 1, color: "#fff" } },
          hovertemplate: "trial #%{x}<br>" + what + " " + value + "<extra></extra>",
        },
        {
          type: "scatter", mode: "lines", name: "best so far (SLO met)",
          x: d.numbers, y: d.best, line: { shape: "hv", color: COLORS.good, width: 2 },
          hovertemplate: "best after #%{x}: " + value + "<extra></extra>",
        },
      ];
      const shapes = d.metric ? [] : [{
        type: "line", xref: "paper", x0: 0, x1: 1, y0: 1, y1: 1,
        line: { dash: "dot", color: COLORS.muted, width: 1 },
      }];
      Plotly.newPlot(el, traces, layout(d.x_title, d.y_title, { shapes: shapes, xaxis: axis(d.x_title, { dtick: 1 }) }), CONFIG);
    },

    pareto(el, d) {
      if (!d.numbers.length) return empty(el, "No measured trial yet.");
      const text = d.numbers.map((n, i) => "#" + n + " " + esc(d.labels[i]));
      // A colour scale needs two memory values: one alone drew a bar around it (-0.4 to 0.4).
      const spread = new Set(d.memory.filter((v) => v !== null)).size > 1;
      const traces = [
        {
          type: "scatter", mode: "markers", name: "measured trials",
          x: d.throughput, y: d.p99, text: text, customdata: d.memory,
          marker: {
            size: 12, color: spread ? d.memory : COLORS.primary, colorscale: "Viridis",
            showscale: spread,
            colorbar: { title: { text: esc(d.color_title), side: "right" }, thickness: 12 },
            line: { width: 1, color: "#fff" },
          },
          hovertemplate: "%{text}<br>%{x:.1f} tok/s<br>P99 %{y:.1f} ms<br>%{customdata:.2f} GiB<extra></extra>",
        },
        {
          type: "scatter", mode: "lines+markers", name: "Pareto front",
          x: d.front_throughput, y: d.front_p99,
          line: { color: COLORS.good, width: 2, dash: "dash" },
          marker: { symbol: "circle-open", size: 20, color: COLORS.good, line: { width: 2 } },
          hoverinfo: "skip",
        },
      ].concat(marks(d, d.throughput, d.p99, text, "%{x:.1f} tok/s"));
      Plotly.newPlot(el, traces, layout(d.x_title, d.y_title), CONFIG);
    },

    pareto_cost(el, d) {
      if (!d.numbers.length) return empty(el, d.empty);  // plain text: textContent escapes
      const text = d.numbers.map((n, i) => "#" + n + " " + esc(d.labels[i]));
      // "≤" where a cost is only an upper bound (an open-loop load the server kept up with).
      const atMost = (d.at_most || []).map((b) => (b ? "≤ " : ""));
      const traces = [
        {
          type: "scatter", mode: "markers", name: "measured trials",
          x: d.usd, y: d.p99, text: text, customdata: atMost,
          marker: { size: 12, color: COLORS.primary, line: { width: 1, color: "#fff" } },
          hovertemplate: "%{text}<br>%{customdata}$%{x:.3f} per 1M output tokens<br>P99 %{y:.1f} ms<extra></extra>",
        },
        {
          type: "scatter", mode: "lines+markers", name: "Pareto front",
          x: d.front_usd, y: d.front_p99,
          line: { color: COLORS.good, width: 2, dash: "dash" },
          marker: { symbol: "circle-open", size: 20, color: COLORS.good, line: { width: 2 } },
          hoverinfo: "skip",
        },
      ].concat(marks(d, d.usd, d.p99, text, "%{customdata}$%{x:.3f} per 1M", atMost));
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
      // Ratios spanning more than x4 (a TTFT x28 beside a throughput x0.55) on a log axis,
      // where x2 and x0.5 stand as far from 1 and a narrow interval stays visible.
      const ends = d.ratio.flatMap((r, i) => (r === null ? [] : [
        r - (d.minus[i] || 0), r + (d.plus[i] || 0),
      ])).filter((v) => v > 0);
      const wide = ends.length && Math.max(...ends) / Math.min(...ends) > 4;
      Plotly.newPlot(el, traces, layout(d.x_title, "", {
        shapes: shapes, height: height,
        margin: { l: 190, r: 20, t: 10, b: 50 },
        yaxis: axis("", { autorange: "reversed" }),
        ...(wide ? { xaxis: axis(d.x_title + " (log scale)", { type: "log" }) } : {}),
      }), CONFIG);
    },
  };

  // Load curves: one colour per trial, the baseline (vLLM's defaults) black and dashed.
  const PALETTE = ["#2563eb", "#f59e0b", "#16a34a", "#dc2626", "#9333ea", "#0891b2", "#db2777", "#65a30d", "#ea580c", "#4f46e5"];
  const BASELINE = "#0f172a";

  function trialStyle(t, i) {
    const color = t.baseline ? BASELINE : PALETTE[i % PALETTE.length];
    return { color: color, line: { color: color, width: t.baseline ? 3 : 2, dash: t.baseline ? "dash" : "solid" } };
  }

  // Flagged points (client-bound or disturbed windows) get an X instead of the trial's marker.
  function curveMarker(t, color) {
    return {
      color: color, line: { width: 1, color: "#fff" },
      symbol: t.caveats.map((c) => (c ? "x" : t.baseline ? "square" : "circle")),
      size: t.caveats.map((c) => (c ? 13 : 8)),
    };
  }

  function curveHover(t, i, lines) {
    let text = esc(t.name) + "<br>" + esc(t.labels[i]) + " · " + t.windows[i] + " windows";
    for (const line of lines) text += "<br>" + line;
    if (t.capacity === i) {
      text += "<br><b>capacity</b> (highest throughput meeting the SLO)";
      if (t.capacity_at_least) text += "<br><b>at least</b>: the server kept up with this open-loop load (a lower bound)";
    }
    if (t.caveats[i]) {
      text += "<br><b>" + esc(t.caveats[i]) + "</b>";
      for (const note of t.notes[i]) text += "<br>· " + esc(note);
    }
    return text;
  }

  function num(v, digits) {
    return v === null ? "—" : v.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });
  }

  // The rings around each trial's capacity point, in the trials' order.
  function capacityTrace(trials, xKey, yKey, axes, showlegend) {
    const x = [], y = [];
    for (const t of trials) {
      if (t.capacity === null) continue;
      x.push(t[xKey][t.capacity]);
      y.push(t[yKey][t.capacity]);
    }
    return Object.assign({
      type: "scatter", mode: "markers", name: "capacity (SLO met)", meta: "capacity",
      x: x, y: y, showlegend: showlegend, hoverinfo: "skip", cliponaxis: false,
      marker: { symbol: "circle-open", size: 20, color: BASELINE, line: { width: 2 } },
    }, axes || {});
  }

  // A legend entry that explains the X marker (no data of its own).
  function flaggedLegend(trials) {
    if (!trials.some((t) => t.caveats.some((c) => c))) return [];
    return [{
      type: "scatter", mode: "markers", name: "client-bound / disturbed", meta: "legend",
      x: [null], y: [null], hoverinfo: "skip",
      marker: { symbol: "x", size: 11, color: COLORS.muted },
    }];
  }

  // A legend name: the config label broken at its commas into lines of about 40 characters
  // (plotly does not wrap legend text; a long label would push the plot aside).
  function legendName(name) {
    const lines = [];
    let line = "";
    for (const part of String(name).split(",")) {
      const piece = line ? line + "," + part : part;
      if (line && piece.length > 40) {
        lines.push(line + ",");
        line = part;
      } else {
        line = piece;
      }
    }
    lines.push(line);
    return lines.map(esc).join("<br>");
  }

  // Wide: the legend at the right of the plot (plotly scrolls it when there are many trials);
  // narrow: under the plot, below the x axis title, the chart growing with the trial count.
  function curveLayout(el, n, height, extra) {
    let legend = { orientation: "v", x: 1.02, xanchor: "left", y: 1, yanchor: "top", font: { size: 11.5 } };
    if (el.clientWidth < 760) {
      height += 24 * (n + 2);
      legend = { orientation: "h", x: 0, xanchor: "left", y: -(80 / (height - 100)), yanchor: "top", font: { size: 11.5 } };
    }
    el.style.height = height + "px";
    return Object.assign({ height: height, margin: { l: 64, r: 20, t: 10, b: 20 }, legend: legend }, extra);
  }

  // The load axis: ticks at the measured loads; a geometric ladder (1, 2, 4, ... 256) on a
  // log axis.
  function loadAxis(trials) {
    const loads = [...new Set(trials.flatMap((t) => t.load).filter((v) => v > 0))].sort((a, b) => a - b);
    const span = loads.length ? loads[loads.length - 1] / loads[0] : 1;
    const ticks = loads.length <= 12 ? { tickvals: loads, ticktext: loads.map((v) => String(v)) } : {};
    return Object.assign(span > 4 ? { type: "log" } : { rangemode: "tozero" }, ticks);
  }

  DRAW.curve_throughput = function (el, d) {
    if (!d.trials.length) return empty(el, "No measured trial yet.");
    const traces = d.trials.map((t, k) => {
      const style = trialStyle(t, k);
      return {
        type: "scatter", mode: "lines+markers", name: legendName(t.name), meta: "trial",
        x: t.per_stream, y: t.per_gpu, line: style.line, marker: curveMarker(t, style.color), cliponaxis: false,
        text: t.labels.map((_, i) => curveHover(t, i, [
          num(t.per_gpu[i], 0) + " " + esc(d.unit) + " · " + num(t.per_stream[i], 1) + " tok/s per stream",
        ])),
        hovertemplate: "%{text}<extra></extra>",
      };
    });
    traces.push(capacityTrace(d.trials, "per_stream", "per_gpu", null, true), ...flaggedLegend(d.trials));
    Plotly.newPlot(el, traces, layout(d.x_title, d.y_title, curveLayout(el, d.trials.length, 420, {
      xaxis: axis(d.x_title, { rangemode: "tozero" }),
      yaxis: axis(d.y_title, { rangemode: "tozero" }),
    })), CONFIG);
  };

  DRAW.curve_latency = function (el, d) {
    if (!d.trials.length) return empty(el, "No measured trial yet.");
    const traces = [];
    const halves = [["ttft_p99", "y", "x", "P99 TTFT"], ["e2e_p99", "y2", "x2", "P99 E2E"]];
    for (const [key, yaxis, xaxis, what] of halves) {
      d.trials.forEach((t, k) => {
        const style = trialStyle(t, k);
        traces.push({
          type: "scatter", mode: "lines+markers", name: legendName(t.name), meta: "trial",
          legendgroup: "trial-" + t.number, showlegend: yaxis === "y",
          x: t.load, y: t[key], xaxis: xaxis, yaxis: yaxis,
          line: style.line, marker: curveMarker(t, style.color), cliponaxis: false,
          text: t.labels.map((_, i) => curveHover(t, i, [
            "P99 TTFT " + num(t.ttft_p99[i], 1) + " ms · P99 E2E " + num(t.e2e_p99[i], 1) + " ms",
          ])),
          hovertemplate: "%{text}<extra></extra>",
        });
      });
      traces.push(capacityTrace(d.trials, "load", key, { xaxis: xaxis, yaxis: yaxis }, yaxis === "y"));
    }
    traces.push(...flaggedLegend(d.trials));
    // The SLO bounds: a dotted line across each half, labelled at its right end.
    const shapes = [], annotations = [];
    for (const [name, yref] of [["ttft_p99_ms", "y"], ["e2e_p99_ms", "y2"]]) {
      const bound = d.slo[name];
      if (bound === undefined) continue;
      shapes.push({ type: "line", xref: "paper", x0: 0, x1: 1, yref: yref, y0: bound, y1: bound, line: { dash: "dot", color: COLORS.bad, width: 1.5 } });
      annotations.push({
        xref: "paper", x: 1, xanchor: "right", yref: yref, y: bound, yanchor: "bottom",
        text: "SLO " + num(bound, 0) + " ms", showarrow: false, font: { size: 11, color: COLORS.bad },
        bgcolor: "rgba(255,255,255,0.85)",
      });
    }
    const x = loadAxis(d.trials);
    Plotly.newPlot(el, traces, layout(d.x_title, "", curveLayout(el, d.trials.length, 520, {
      shapes: shapes, annotations: annotations,
      xaxis: axis("", Object.assign({ anchor: "y", showticklabels: false }, x)),
      xaxis2: axis(d.x_title, Object.assign({ anchor: "y2", matches: "x" }, x)),
      yaxis: axis(d.ttft_title, { domain: [0.54, 1], rangemode: "tozero" }),
      yaxis2: axis(d.e2e_title, { domain: [0, 0.46], rangemode: "tozero" }),
    })), CONFIG);
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
