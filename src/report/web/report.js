// trainscope report page: draws the data model embedded in #ts-data (docs/formats.md
// "Report") with dygraphs and a few plain canvases. Live mode (trainscope serve) fetches
// data.json every 2 s and redraws. No request leaves the page otherwise.
(function () {
  "use strict";
  var COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf",
                "#bcbd22", "#7f7f7f", "#393b79", "#637939", "#8c6d31"];
  var PHASE_COLORS = {data_wait: "#e15759", h2d: "#f28e2b", forward: "#4e79a7",
                      backward: "#76b7b2", comm_wait: "#edc948", optimizer: "#59a14f"};
  var MARK_COLORS = {spike: "#d62728", curve_spike: "#d62728", nonfinite: "#000000",
                     first_nonfinite: "#000000", nan: "#000000", anomaly_checkpoint: "#9467bd",
                     error: "#000000", first_bad: "#ff7f0e", loss_scale: "#8c564b",
                     checkpoint: "#2ca02c"};
  var charts = [];
  // Zoomed x ranges by chart key (lineChart's opts.id and title), kept across live redraws.
  var zooms = {};
  // Steps are integers: tick increments 1, 2, 5 x 10^k.
  var STEP_INCRS = [];
  for (var p10 = 1; p10 <= 1e9; p10 *= 10) STEP_INCRS.push(p10, 2 * p10, 5 * p10);

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function fmt(v) {
    if (v === null || v === undefined) return "-";
    if (typeof v !== "number") return String(v);
    var a = Math.abs(v);
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(3);
    return String(Math.round(v * 10000) / 10000);
  }
  function width() { return Math.max(480, Math.min(1160, document.body.clientWidth - 48)); }
  function section(app, id, title, note) {
    var s = el("section", {id: "sec-" + id, "class": "ts-section"});
    s.appendChild(el("h2", null, title));
    if (note) s.appendChild(el("p", {"class": "note"}, note));
    app.appendChild(s);
    return s;
  }
  function table(parent, head, rows, rowClass) {
    var t = el("table"), tr = el("tr");
    head.forEach(function (h) { tr.appendChild(el("th", null, h)); });
    t.appendChild(tr);
    rows.forEach(function (r, i) {
      var row = el("tr", rowClass ? {"class": rowClass(i) || ""} : null);
      r.forEach(function (c) { row.appendChild(el("td", null, fmt(c))); });
      t.appendChild(row);
    });
    parent.appendChild(t);
    return t;
  }
  function runLabel(data, run, rank) {
    var many = data.runs.length > 1;
    return (many ? run.name + " " : "") + "rank " + rank.rank;
  }

  // The complete checkpoints of a run's checkpoints/ folder as markers.
  function checkpointMarks(run) {
    return (run.checkpoints || []).filter(function (c) { return c.complete; }).map(function (c) {
      return {kind: c.anomaly ? "anomaly_checkpoint" : "checkpoint", step: c.step,
              text: (c.anomaly ? "anomaly checkpoint " : "checkpoint ") + c.path};
    });
  }
  // Markers: events of the metrics files, diagnose's pinned verdicts and the checkpoints, one
  // per kind+step.
  function markersOf(data, kinds) {
    var seen = {}, out = [];
    data.runs.forEach(function (run) {
      (run.events || []).concat(run.pins || [], checkpointMarks(run)).forEach(function (e) {
        if (kinds.indexOf(e.kind) < 0) return;
        var key = e.kind + ":" + e.step;
        if (seen[key]) return;
        seen[key] = true;
        out.push(e);
      });
    });
    // Spikes and non-finite values drawn last, on top of checkpoints at the same step.
    var rank = function (m) {
      return m.kind === "spike" ? 3 : m.kind.indexOf("nonfinite") >= 0 ? 2 : m.kind === "checkpoint" ? 0 : 1;
    };
    return out.sort(function (a, b) { return rank(a) - rank(b); });
  }

  // The series (each {label, x, y, raw?}, x ascending) as one dygraphs table: a row per step
  // any series has, [step, v1, v2, ...] with null where a series has no point at that step.
  // legend[j][r] is what the hover legend shows for series j at row r: its raw value where
  // the drawn one is derived (the stacked phases), else the drawn one.
  // extraSteps: steps that get a row of nulls (the axis reaches them though no series has a point).
  function joinSeries(series, extraSteps) {
    var steps = [], seen = {};
    series.forEach(function (s) {
      s.x.forEach(function (x) { if (!seen[x]) { seen[x] = true; steps.push(x); } });
    });
    (extraSteps || []).forEach(function (x) { if (!seen[x]) { seen[x] = true; steps.push(x); } });
    steps.sort(function (a, b) { return a - b; });
    // A single step: an empty step either side, so the axis has a width and the point is mid-chart.
    if (steps.length === 1) steps = [steps[0] - 1, steps[0], steps[0] + 1];
    var rowOf = {};
    steps.forEach(function (x, r) { rowOf[x] = r; });
    var rows = steps.map(function (x) {
      var row = [x];
      for (var j = 0; j < series.length; j++) row.push(null);
      return row;
    });
    var legend = series.map(function () { return steps.map(function () { return null; }); });
    series.forEach(function (s, j) {
      var shown = s.raw || s.y;
      s.x.forEach(function (x, i) {
        var r = rowOf[x], v = s.y[i];
        rows[r][j + 1] = typeof v === "number" && isFinite(v) ? v : null;
        legend[j][r] = shown[i] === undefined ? null : shown[i];
      });
    });
    return {rows: rows, rowOf: rowOf, legend: legend};
  }
  // Ticks of the step axis: integers, 1, 2 or 5 x 10^k apart, at least 80 px apart.
  function stepTicks(min, max, pixels) {
    var room = Math.max(1, Math.floor(pixels / 80)), incr = STEP_INCRS[STEP_INCRS.length - 1];
    for (var k = 0; k < STEP_INCRS.length; k++) {
      if ((max - min) / STEP_INCRS[k] <= room) { incr = STEP_INCRS[k]; break; }
    }
    var ticks = [];
    for (var v = Math.ceil(min / incr) * incr; v <= max; v += incr) ticks.push({v: v, label: String(v)});
    return ticks;
  }
  // The hover legend (dygraphs' legendFormatter): the step and each series' value there,
  // formatted with fmt(); "-" when the pointer is off the chart or a series has no point.
  function legendOf(labels, colors, joined) {
    return function (d) {
      var frag = document.createDocumentFragment();
      var row = d.x === undefined ? undefined : joined.rowOf[d.x];
      frag.appendChild(el("span", {"class": "ts-legend-x"}, "step " + (row === undefined ? "-" : d.x)));
      labels.forEach(function (label, j) {
        var item = el("span", {"class": "ts-legend-item", "data-series": label});
        var sw = el("i", {"class": "ts-swatch"});
        sw.style.background = colors[j];
        item.appendChild(sw);
        item.appendChild(el("span", {"class": "ts-legend-label"}, label));
        item.appendChild(el("b", {"class": "ts-legend-value"}, fmt(row === undefined ? null : joined.legend[j][row])));
        frag.appendChild(item);
      });
      return frag;
    };
  }

  // A line chart of several series (each {label, x, y}) on one step axis, drawn with
  // dygraphs: drag to zoom, double-click to reset, a legend of the values at the hovered step.
  // opts: id, unit, height, log (log y axis), stacked (series stacked bottom = last, filled),
  // markers (vertical dashed lines plus a DOM element each: class ts-marker, data-kind,
  // data-step).
  function lineChart(parent, title, series, opts) {
    opts = opts || {};
    series = series.filter(function (s) { return s.x && s.x.length; });
    if (!series.length) return null;
    var box = el("div", {"class": "chart", "data-chart": opts.id || title});
    var graph = el("div", {"class": "ts-graph"}), legend = el("div", {"class": "ts-legend"});
    box.appendChild(graph);
    box.appendChild(legend);
    parent.appendChild(box);
    var markers = opts.markers || [];
    // The step that turned non-finite logs no finite value, so the series stop one step short
    // of it: every chart's axis reaches it, so its marker is drawn on each, not only the loss's.
    var nonfiniteSteps = markers.filter(function (m) {
      return m.kind.indexOf("nonfinite") >= 0 || m.kind === "nan";
    }).map(function (m) { return m.step; });
    var joined = joinSeries(series, nonfiniteSteps);
    // dygraphs needs distinct labels (they name its series).
    var used = {}, labels = series.map(function (s) {
      var l = s.label, n = 2;
      while (used[l]) l = s.label + " (" + n++ + ")";
      used[l] = true;
      return l;
    });
    var colors = series.map(function (s, i) { return s.color || COLORS[i % COLORS.length]; });
    var perSeries = {};
    series.forEach(function (s, i) {
      perSeries[labels[i]] = {drawPoints: s.x.length < 200, strokePattern: s.dashed ? [7, 3] : null};
    });
    var key = (opts.id || "") + "|" + title;
    var g = new Dygraph(graph, joined.rows, {
      labels: ["step"].concat(labels), colors: colors, series: perSeries,
      title: title, titleHeight: 24, xlabel: "step", ylabel: opts.unit || "",
      width: width(), height: opts.height || 280, strokeWidth: 1.5, pointSize: 2,
      connectSeparatedPoints: true, stackedGraph: !!opts.stacked, fillAlpha: opts.stacked ? 0.8 : 0.15,
      includeZero: !!opts.stacked, animatedZooms: false, axisLabelFontSize: 12,
      dateWindow: zooms[key] || null,
      legend: "always", labelsDiv: legend, legendFormatter: legendOf(labels, colors, joined),
      axes: {
        x: {ticker: stepTicks, valueFormatter: String, pixelsPerLabel: 80},
        y: {logscale: !!opts.log, axisLabelWidth: 64, valueFormatter: fmt,
            axisLabelFormatter: function (v) { return fmt(v); }}
      },
      zoomCallback: function (lo, hi) {
        if (this.isZoomed("x")) zooms[key] = [lo, hi]; else delete zooms[key];
      },
      plugins: [markerLines(markers)],
      drawCallback: function (gg) { placeMarkers(gg, graph, markers); }
    });
    charts.push(g);
    return g;
  }
  function markerText(m) {
    return m.kind === "spike" || m.kind === "curve_spike" ? "spike " + m.step :
           (m.kind.indexOf("nonfinite") >= 0 || m.kind === "nan") ? "NaN " + m.step :
           m.kind === "checkpoint" || m.kind === "anomaly_checkpoint" ? "ckpt " + m.step : "";
  }
  // The markers' dashed lines, drawn over the series on dygraphs' chart canvas after each
  // draw (a plugin's didDrawChart: the canvas is redrawn on every zoom).
  function markerLines(markers) {
    return {
      toString: function () { return "trainscope markers"; },
      activate: function () {
        return {didDrawChart: function (e) {
          var g = e.dygraph, ctx = e.drawingContext, a = g.getArea();
          markers.forEach(function (m) {
            var x = g.toDomXCoord(m.step);
            if (!(x >= a.x && x <= a.x + a.w)) return;
            ctx.save();
            ctx.strokeStyle = MARK_COLORS[m.kind] || "#d62728";
            ctx.lineWidth = 2;
            ctx.setLineDash([6, 4]);
            ctx.beginPath();
            ctx.moveTo(x, a.y);
            ctx.lineTo(x, a.y + a.h);
            ctx.stroke();
            ctx.restore();
          });
        }};
      }
    };
  }
  // One DOM element per marker in view, at its step's x along the top of the plot area;
  // placed again after every draw (zoom, reset).
  function placeMarkers(g, graph, markers) {
    var old = graph.querySelectorAll(".ts-marker");
    for (var i = 0; i < old.length; i++) old[i].remove();
    var a = g.getArea();
    markers.forEach(function (m) {
      var x = g.toDomXCoord(m.step);
      if (!(x >= a.x && x <= a.x + a.w)) return;
      var d = el("div", {"class": "ts-marker kind-" + m.kind, "data-kind": m.kind,
                         "data-step": m.step, title: m.kind + " at step " + m.step + ": " + m.text},
                 markerText(m));
      d.style.left = x + "px";
      d.style.top = a.y + "px";
      graph.appendChild(d);
    });
  }

  // Bars on a plain canvas: labels, values, a colour per bar.
  function barChart(parent, title, labels, values, colors, unit) {
    var box = el("div", {"class": "chart bars", "data-chart": title});
    box.appendChild(el("div", {"class": "bar-title"}, title));
    var w = Math.min(width(), 80 + labels.length * 95), h = 220, dpr = window.devicePixelRatio || 1;
    var c = el("canvas");
    c.width = w * dpr; c.height = h * dpr; c.style.width = w + "px"; c.style.height = h + "px";
    box.appendChild(c);
    parent.appendChild(box);
    var ctx = c.getContext("2d");
    ctx.scale(dpr, dpr);
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, w, h);
    var max = Math.max.apply(null, values.concat([0])) || 1;
    var left = 76, bottom = h - 40, plotH = bottom - 24, bw = (w - left - 10) / Math.max(labels.length, 1);
    ctx.strokeStyle = "#888"; ctx.beginPath(); ctx.moveTo(left, 24); ctx.lineTo(left, bottom);
    ctx.lineTo(w - 5, bottom); ctx.stroke();
    ctx.fillStyle = "#333"; ctx.font = "11px sans-serif"; ctx.textAlign = "right";
    ctx.fillText(fmt(max) + (unit ? " " + unit : ""), left - 4, bottom - plotH + 4);
    ctx.fillText("0", left - 4, bottom);
    labels.forEach(function (lab, i) {
      var bh = plotH * (values[i] / max), x = left + i * bw + bw * 0.15;
      ctx.fillStyle = colors[i] || COLORS[0];
      ctx.fillRect(x, bottom - bh, bw * 0.7, bh);
      ctx.fillStyle = "#333"; ctx.textAlign = "center";
      ctx.fillText(lab, x + bw * 0.35, bottom + 14);
      ctx.fillText(fmt(values[i]), x + bw * 0.35, bottom - bh - 3);
    });
    return c;
  }

  function allRanks(data, fn) {
    var out = [], idx = 0;
    data.runs.forEach(function (run) {
      (run.ranks || []).forEach(function (rank) { out.push(fn(run, rank, idx++)); });
    });
    return out.filter(function (x) { return x; });
  }
  function seriesOf(data, name, scale) {
    return allRanks(data, function (run, rank, i) {
      var s = rank.series[name];
      if (!s) return null;
      var y = scale ? s.y.map(function (v) { return v === null ? null : v * scale; }) : s.y;
      return {label: runLabel(data, run, rank), x: s.x, y: y, color: COLORS[i % COLORS.length]};
    });
  }

  function renderSummary(app, data) {
    var s = section(app, "summary", data.title);
    var parts = [];
    data.runs.forEach(function (run) {
      var r0 = (run.ranks || [])[0];
      var txt = run.name + ": " + (run.ranks || []).length + " rank(s)";
      if (r0) txt += ", steps " + r0.first_step + "-" + r0.last_step + ", end " + (r0.end_reason || "running or killed");
      if (r0 && r0.means.loss !== undefined) {
        var ls = r0.series.loss, last = ls.y.length - 1;
        while (last > 0 && ls.y[last] === null) last--;  // a non-finite last step: its gap
        txt += ", last loss " + fmt(ls.y[last]) + (last < ls.y.length - 1 ? " (then non-finite)" : "");
      }
      var nf = (run.findings || []).length;
      txt += ", " + nf + " finding(s)";
      parts.push(txt);
    });
    s.appendChild(el("p", {"class": "summary-line"}, parts.join("; ")));
    var miss = data.missing.map(function (m) { return m.run + ": " + m.part + " (" + m.reason + ")"; });
    s.appendChild(el("p", {"class": "note"}, "Sections drawn: " + data.sections.join(", ") +
      ". Malformed metrics lines: " + data.malformed + "."));
    if (data.malformed_lines.length) {
      var ul = el("ul", {"class": "malformed"});
      data.malformed_lines.forEach(function (m) { ul.appendChild(el("li", null, m)); });
      s.appendChild(ul);
    }
    if (miss.length) {
      var d = el("details", {"class": "missing"});
      d.appendChild(el("summary", null, "Missing parts (" + miss.length + ")"));
      var ul2 = el("ul");
      miss.forEach(function (m) { ul2.appendChild(el("li", null, m)); });
      d.appendChild(ul2);
      s.appendChild(d);
    }
  }

  function renderFindings(app, data) {
    var rows = [];
    data.runs.forEach(function (run) {
      (run.findings || []).forEach(function (f) {
        rows.push([f.severity, run.name, f.rank === undefined ? "" : f.rank, f.id, f.title, f.fix]);
      });
    });
    if (!rows.length) return;
    var s = section(app, "findings", "Findings (trainscope diagnose)");
    table(s, ["severity", "run", "rank", "id", "what", "fix"], rows,
          function (i) { return "sev-" + rows[i][0]; });
  }

  var ANOMALY_KINDS = ["spike", "nonfinite", "first_nonfinite", "anomaly_checkpoint", "error",
                       "first_bad", "nan", "curve_spike", "loss_scale", "checkpoint"];
  function renderCurves(app, data) {
    var anomalyKinds = ANOMALY_KINDS;
    var marks = markersOf(data, anomalyKinds);
    var specs = [["loss", "Loss", ""], ["lr", "Learning rate", ""],
                 ["grad_norm", "Gradient norm (before clipping)", ""]];
    var s = null;
    specs.forEach(function (sp) {
      var ser = seriesOf(data, sp[0]), title = sp[1];
      if (sp[0] === "loss") {
        // The validation loss on the training loss's chart, dashed, in its rank's colour:
        // overfitting is the two curves parting.
        var val = seriesOf(data, "val_loss").map(function (v) {
          v.label += " validation";
          v.dashed = true;
          return v;
        });
        if (val.length) title = "Loss (solid: training, dashed: validation)";
        ser = ser.concat(val);
      }
      if (!ser.length) return;
      if (!s) s = section(app, "curves", "Training curves",
                          "Dashed lines: loss spikes, first non-finite value, checkpoints (green) and diagnose's verdicts at their steps (hover for details).");
      lineChart(s, title, ser, {id: sp[0], markers: marks, unit: sp[2]});
    });
  }

  // Every other scalar the user logged (mon.log(accuracy=...), an evaluation's val_* after a
  // step): one chart per name, a line per rank, with the same markers as the curves.
  function renderScalars(app, data) {
    var names = [], seen = {};
    allRanks(data, function (run, rank) {
      Object.keys(rank.scalars || {}).forEach(function (n) {
        if (!rank.series[n] && !seen[n]) { seen[n] = true; names.push(n); }
      });
    });
    if (!names.length) return;
    names.sort();
    var s = section(app, "scalars", "Logged scalars",
                    "Values given to mon.log beside the loss, one chart each: inside a step, or after it (mon.log(step=..., ...)).");
    var marks = markersOf(data, ANOMALY_KINDS);
    names.forEach(function (n) {
      var ser = allRanks(data, function (run, rank, i) {
        var v = (rank.scalars || {})[n];
        if (!v || rank.series[n]) return null;
        return {label: runLabel(data, run, rank), x: v.x, y: v.y, color: COLORS[i % COLORS.length]};
      });
      lineChart(s, n, ser, {id: "scalar:" + n, markers: marks});
    });
  }

  function renderPhases(app, data) {
    var s = null;
    data.runs.forEach(function (run) {
      // A rank whose phases are all zero (a watch loop that never calls mon.phase) has none to draw.
      var rank = (run.ranks || []).filter(function (r) {
        return r.phases && r.phases.x && Object.keys(r.phases).some(function (n) {
          return n !== "x" && (r.phases[n] || []).some(function (v) { return typeof v === "number" && v > 0; });
        });
      })[0];
      if (!rank) return;
      if (!s) s = section(app, "phases", "Step phases (stacked, ms)",
                          "Per step: data wait, host-to-device copy, forward, backward, communication wait, optimizer.");
      var names = ["data_wait", "h2d", "forward", "backward", "comm_wait", "optimizer"];
      // Stacked by dygraphs, the last series at the bottom (data_wait); the legend shows each
      // phase's own milliseconds.
      var ser = names.slice().reverse().map(function (n) {
        var raw = rank.phases[n] || [];
        return {label: n, x: rank.phases.x, y: rank.phases.x.map(function (_, i) { return raw[i] || 0; }),
                raw: raw, color: PHASE_COLORS[n]};
      });
      lineChart(s, run.name + " rank " + rank.rank + ": step time by phase", ser,
                {id: "phases", unit: "ms", stacked: true, markers: markersOf(data, ["spike"])});
    });
  }

  function renderRanks(app, data) {
    var s = null;
    data.runs.forEach(function (run) {
      if ((run.ranks || []).length < 2) return;
      if (!s) s = section(app, "ranks", "Per-rank comparison", "Stragglers in red: mean busy time (step time less the wait for the others in communication) 15% above the ranks' median.");
      var slow = {};
      (run.stragglers || []).forEach(function (t) { slow[t.rank] = true; });
      var labels = run.ranks.map(function (r) { return "rank " + r.rank + (slow[r.rank] ? " (straggler)" : ""); });
      barChart(s, run.name + ": mean busy time per rank (step time less comm wait, ms)", labels,
               run.ranks.map(function (r) { return r.means.busy_ms || r.means.step_ms || 0; }),
               run.ranks.map(function (r) { return slow[r.rank] ? "#d62728" : "#4e79a7"; }), "ms");
    });
    if (!s) return;
    lineChart(s, "Step time per rank (ms)", seriesOf(data, "step_ms"), {id: "step_ms", unit: "ms"});
    lineChart(s, "Loss per rank", seriesOf(data, "loss"), {id: "loss_per_rank"});
  }

  function renderMemory(app, data) {
    var host = seriesOf(data, "host_rss_bytes", 1e-6), dev = seriesOf(data, "device_mem_bytes", 1e-6);
    if (!host.length && !dev.length) return;
    var s = section(app, "memory", "Memory over time (MB, 1 MB = 1e6 bytes)");
    lineChart(s, "Host resident set (MB)", host, {id: "host_rss", unit: "MB"});
    lineChart(s, "Device memory allocated (MB)", dev, {id: "device_mem", unit: "MB"});
  }

  // The flight recorder: one row per rank, one box per collective (time, duration), the
  // collectives the hang analysis names (or any not completed) outlined in red.
  function renderHang(app, data) {
    data.runs.forEach(function (run) {
      if (!run.hang) return;
      var s = section(app, "flight_recorder", run.name + ": flight recorder (collectives per rank)");
      var stuck = {};
      (run.hang.stuck || []).forEach(function (f) { stuck[f.pg + ":" + f.seq] = f; });
      (run.hang.stuck || []).forEach(function (f) { s.appendChild(el("p", {"class": "stuck"}, f.sentence)); });
      var ranks = run.hang.ranks, tmax = 0;
      ranks.forEach(function (r) { r.entries.forEach(function (e) { tmax = Math.max(tmax, e.t_ms + e.dur_ms); }); });
      var w = width(), rowH = 26, h = 40 + ranks.length * rowH, dpr = window.devicePixelRatio || 1;
      var c = el("canvas", {"class": "timeline"});
      c.width = w * dpr; c.height = h * dpr; c.style.width = w + "px"; c.style.height = h + "px";
      var box = el("div", {"class": "chart", "data-chart": "flight_recorder"});
      box.appendChild(c); s.appendChild(box);
      var ctx = c.getContext("2d");
      ctx.scale(dpr, dpr);
      ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, w, h);
      // 30% room on the right: a collective that never completed runs to the edge, labelled.
      var left = 70, pw = w - left - 10, sx = pw / ((tmax || 1) * 1.3);
      ctx.font = "11px sans-serif"; ctx.fillStyle = "#333";
      ctx.fillText("0 ms", left, h - 8); ctx.textAlign = "right"; ctx.fillText(fmt(tmax) + " ms", w - 10, h - 8);
      var ops = {}, nops = 0;
      ranks.forEach(function (r, ri) {
        var y = 10 + ri * rowH;
        ctx.textAlign = "left"; ctx.fillStyle = "#333"; ctx.fillText("rank " + r.rank, 4, y + 15);
        r.entries.forEach(function (e) {
          if (!(e.op in ops)) ops[e.op] = COLORS[nops++ % COLORS.length];
          var x = left + e.t_ms * sx, bw = Math.max(2, e.dur_ms * sx);
          var bad = stuck[e.pg + ":" + e.seq] || e.state !== "completed";
          if (e.state !== "completed") bw = Math.max(bw, left + pw - x);
          ctx.fillStyle = bad ? "#f4a6a6" : ops[e.op];
          ctx.fillRect(x, y, bw, rowH - 6);
          if (bad) {
            ctx.strokeStyle = "#d62728"; ctx.lineWidth = 2; ctx.strokeRect(x, y, bw, rowH - 6);
            var label = e.op + " #" + e.seq + " " + e.state;
            ctx.fillStyle = "#a00";
            ctx.textAlign = x + 3 + ctx.measureText(label).width > w ? "right" : "left";
            ctx.fillText(label, ctx.textAlign === "right" ? w - 4 : x + 3, y + 14);
          }
        });
      });
    });
  }

  function renderDataScans(app, data) {
    data.runs.forEach(function (run) {
      (run.data_scans || []).forEach(function (d) {
        var s = section(app, "data_scan", run.name + ": data scan (" + d.file + ")",
                        d.docs + " documents; exact duplicates " + fmt(100 * d.exact_duplicate_ratio) +
                        "%, near duplicates " + fmt(100 * d.near_duplicate_ratio) + "%");
        ["tokens", "chars"].forEach(function (k) {
          var h = (d.length_histograms || {})[k] || [];
          if (!h.length) return;
          barChart(s, "documents by length in " + k + " (log2 buckets)",
                   h.map(function (b) { return b.lo + "-" + b.hi; }), h.map(function (b) { return b.count; }),
                   h.map(function () { return "#4e79a7"; }));
        });
        var bd = d.batch_duplicates || {};
        var rows = ["corpus_order", "shuffled"].filter(function (k) { return bd[k]; }).map(function (k) {
          return [k, bd[k].batches, bd[k].batches_with_duplicates, bd[k].mean, bd[k].max];
        });
        if (rows.length) table(s, ["duplicates per batch (batch " + bd.batch_size + ")", "batches",
                                   "with duplicates", "mean", "max"], rows);
      });
    });
  }

  // `trainscope compare --json` reports under compare/: where two dumps or two runs part.
  function renderCompares(app, data) {
    data.runs.forEach(function (run) {
      (run.compares || []).forEach(function (c) {
        var f = c.first_divergence, what;
        if (!c.diverged) {
          what = c.kind === "runs" ? "the two runs agree (" + c.matched + " common steps)" :
                 "the two dumps agree (" + c.matched + " entries matched)";
        } else if (c.kind === "runs") {
          what = f ? "the loss curves part at step " + f.step + " (" + f.kind + ")" :
                 "a per-layer norm differs (the loss curves agree)";
        } else {
          what = "first divergence: " + f.name + " (" + f.kind + ")" + (f.module ? " in " + f.module : "");
        }
        var s = section(app, "compare", run.name + ": compare (" + c.file + ")", what);
        var rows = (c.findings || []).map(function (x) { return [x.severity, x.id, x.title, x.fix]; });
        if (rows.length) table(s, ["severity", "id", "what", "fix"], rows,
                               function (i) { return "sev-" + rows[i][0]; });
      });
    });
  }

  function renderTraces(app, data) {
    data.runs.forEach(function (run) {
      (run.traces || []).forEach(function (t) {
        var s = t.source === "profiler" ?
          section(app, "trace", run.name + ": profiler traces (" + (t.file || "run directory") + ")",
                  (t.trace_files || []).length + " torch.profiler trace file(s), analysed as trainscope trace analyze does: " +
                  (t.trace_files || []).join(", ")) :
          section(app, "trace", run.name + ": trace analysis (" + t.file + ")");
        var ranks = t.ranks || [];
        var labels = [], vals = [], cols = [];
        ranks.forEach(function (r) {
          var b = r.temporal_breakdown || {};
          [["compute", "#4e79a7"], ["non_compute", "#f28e2b"], ["idle", "#bab0ac"]].forEach(function (p) {
            labels.push("r" + r.rank + " " + p[0]); vals.push(b[p[0] + "_pct"] || 0); cols.push(p[1]);
          });
        });
        if (labels.length) barChart(s, "time breakdown per rank (%)", labels, vals, cols, "%");
        ranks.forEach(function (r) {
          if (!(r.top_operators || []).length) return;
          s.appendChild(el("h3", null, "rank " + r.rank + ": top operators by total time"));
          table(s, ["operator", "calls", "total us", "self us", "mean us"], r.top_operators.map(function (o) {
            return [o.name, o.count, o.total_us, o.self_us, o.mean_us];
          }));
        });
      });
    });
  }

  function renderDoctorEnv(app, data) {
    data.runs.forEach(function (run) {
      if (run.doctor) {
        var s = section(app, "doctor", run.name + ": doctor (" + (run.doctor.passed ? "passed" : "not passed") + ")");
        var rows = run.doctor.checks.map(function (c) { return [c.verdict, c.name, c.value, c.expected, c.advice]; });
        table(s, ["verdict", "check", "value", "expected", "advice"], rows, function (i) { return "verdict-" + rows[i][0]; });
      }
      if (run.fingerprint) {
        var f = section(app, "fingerprint", run.name + ": environment fingerprint");
        table(f, ["key", "value"], run.fingerprint);
      }
    });
  }

  function render(data) {
    charts.forEach(function (g) { g.destroy(); });
    charts = [];
    var app = document.getElementById("app");
    app.textContent = "";
    document.title = data.title;
    renderSummary(app, data);
    renderFindings(app, data);
    renderCurves(app, data);
    renderScalars(app, data);
    renderPhases(app, data);
    renderRanks(app, data);
    renderMemory(app, data);
    renderHang(app, data);
    renderDataScans(app, data);
    renderTraces(app, data);
    renderCompares(app, data);
    renderDoctorEnv(app, data);
    window.tsReport = {data: data, charts: charts, rendered_at: Date.now()};
  }

  var t0 = performance.now();
  var initial = JSON.parse(document.getElementById("ts-data").textContent);
  render(initial);
  window.tsReport.render_ms = performance.now() - t0;
  if (window.TS_LIVE) {
    setInterval(function () {
      fetch("data.json", {cache: "no-store"}).then(function (r) {
        if (!r.ok) throw new Error("data.json: HTTP " + r.status);
        return r.json();
      }).then(function (d) {
        var y = window.scrollY;
        render(d);
        window.scrollTo(0, y);
      }).catch(function (e) {
        var s = document.getElementById("live-status") || el("div", {id: "live-status"});
        s.textContent = "live update failed: " + e.message;
        document.body.insertBefore(s, document.body.firstChild);
      });
    }, 2000);
  }
})();
