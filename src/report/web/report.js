// trainscope report page: draws the data model embedded in #ts-data (docs/formats.md
// "Report") with uPlot and a few plain canvases. Live mode (trainscope serve) fetches
// data.json every 2 s and redraws. No request leaves the page otherwise.
(function () {
  "use strict";
  var COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf",
                "#bcbd22", "#7f7f7f", "#393b79", "#637939", "#8c6d31"];
  var PHASE_COLORS = {data_wait: "#e15759", h2d: "#f28e2b", forward: "#4e79a7",
                      backward: "#76b7b2", comm_wait: "#edc948", optimizer: "#59a14f"};
  var MARK_COLORS = {spike: "#d62728", curve_spike: "#d62728", nonfinite: "#000000",
                     first_nonfinite: "#000000", nan: "#000000", anomaly_checkpoint: "#9467bd",
                     error: "#000000", first_bad: "#ff7f0e", loss_scale: "#8c564b"};
  var charts = [];
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

  // Markers: events of the metrics files and diagnose's pinned verdicts, one per kind+step.
  function markersOf(data, kinds) {
    var seen = {}, out = [];
    data.runs.forEach(function (run) {
      (run.events || []).concat(run.pins || []).forEach(function (e) {
        if (kinds.indexOf(e.kind) < 0) return;
        var key = e.kind + ":" + e.step;
        if (seen[key]) return;
        seen[key] = true;
        out.push(e);
      });
    });
    // Spikes and non-finite values drawn last, on top of checkpoints at the same step.
    var rank = function (m) { return m.kind === "spike" ? 3 : m.kind.indexOf("nonfinite") >= 0 ? 2 : 1; };
    return out.sort(function (a, b) { return rank(a) - rank(b); });
  }

  // A line chart of several series (each {label, x, y}) on one step axis, markers drawn as
  // vertical lines plus a DOM element each (class ts-marker, data-kind, data-step).
  function lineChart(parent, title, series, opts) {
    opts = opts || {};
    series = series.filter(function (s) { return s.x && s.x.length; });
    if (!series.length) return null;
    var box = el("div", {"class": "chart", "data-chart": opts.id || title});
    parent.appendChild(box);
    var tables = series.map(function (s) { return [s.x, s.y]; });
    var joined = uPlot.join(tables);
    var markers = opts.markers || [];
    var useries = [{label: "step"}];
    series.forEach(function (s, i) {
      useries.push({label: s.label, stroke: s.color || COLORS[i % COLORS.length], width: 1.5,
                    spanGaps: true, fill: s.fill, value: function (u, v) { return fmt(v); },
                    points: {show: s.x.length < 200}});
    });
    var o = {
      title: title, width: width(), height: opts.height || 260, series: useries,
      scales: {x: {time: false}, y: {distr: opts.log ? 3 : 1}},
      axes: [{label: "step", incrs: STEP_INCRS}, {label: opts.unit || "", size: 70,
              values: function (u, vals) { return vals.map(fmt); }}],
      legend: {live: true},
      hooks: {draw: [function (u) { drawMarkers(u, markers); }]}
    };
    var u = new uPlot(o, joined, box);
    charts.push(u);
    return u;
  }
  function drawMarkers(u, markers) {
    var old = u.over.querySelectorAll(".ts-marker");
    for (var i = 0; i < old.length; i++) old[i].remove();
    var ctx = u.ctx, top = u.bbox.top, h = u.bbox.height;
    markers.forEach(function (m) {
      var xs = u.valToPos(m.step, "x", true);
      if (!(xs >= u.bbox.left && xs <= u.bbox.left + u.bbox.width)) return;
      ctx.save();
      ctx.strokeStyle = MARK_COLORS[m.kind] || "#d62728";
      ctx.lineWidth = 2 * devicePixelRatio;
      ctx.setLineDash([6 * devicePixelRatio, 4 * devicePixelRatio]);
      ctx.beginPath();
      ctx.moveTo(xs, top);
      ctx.lineTo(xs, top + h);
      ctx.stroke();
      ctx.restore();
      var d = el("div", {"class": "ts-marker kind-" + m.kind, "data-kind": m.kind,
                         "data-step": m.step, title: m.kind + " at step " + m.step + ": " + m.text});
      d.style.left = u.valToPos(m.step, "x") + "px";
      d.textContent = m.kind === "spike" || m.kind === "curve_spike" ? "spike " + m.step :
                      (m.kind.indexOf("nonfinite") >= 0 || m.kind === "nan") ? "NaN " + m.step : "";
      u.over.appendChild(d);
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
        var ls = r0.series.loss;
        txt += ", last loss " + fmt(ls.y[ls.y.length - 1]);
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

  function renderCurves(app, data) {
    var anomalyKinds = ["spike", "nonfinite", "first_nonfinite", "anomaly_checkpoint", "error",
                        "first_bad", "nan", "curve_spike", "loss_scale"];
    var marks = markersOf(data, anomalyKinds);
    var specs = [["loss", "Loss", ""], ["val_loss", "Validation loss", ""],
                 ["lr", "Learning rate", ""], ["grad_norm", "Gradient norm (before clipping)", ""]];
    var s = null;
    specs.forEach(function (sp) {
      var ser = seriesOf(data, sp[0]);
      if (!ser.length) return;
      if (!s) s = section(app, "curves", "Training curves",
                          "Dashed lines: loss spikes, first non-finite value, anomaly checkpoints and diagnose's verdicts at their steps (hover for details).");
      lineChart(s, sp[1], ser, {id: sp[0], markers: marks, unit: sp[2]});
    });
  }

  function renderPhases(app, data) {
    var s = null;
    data.runs.forEach(function (run) {
      var rank = (run.ranks || []).filter(function (r) { return r.phases && r.phases.x; })[0];
      if (!rank) return;
      if (!s) s = section(app, "phases", "Step phases (stacked, ms)",
                          "Per step: data wait, host-to-device copy, forward, backward, communication wait, optimizer.");
      var names = ["data_wait", "h2d", "forward", "backward", "comm_wait", "optimizer"];
      var cum = [], acc = rank.phases.x.map(function () { return 0; });
      names.forEach(function (n) {
        var raw = rank.phases[n] || [];
        acc = acc.map(function (a, i) { return a + (raw[i] || 0); });
        cum.push({name: n, raw: raw, y: acc.slice()});
      });
      // Drawn top first so each lower band paints over the one above it.
      var ser = cum.slice().reverse().map(function (c) {
        return {label: c.name, x: rank.phases.x, y: c.y, color: PHASE_COLORS[c.name],
                fill: PHASE_COLORS[c.name] + "cc", raw: c.raw};
      });
      var u = lineChart(s, run.name + " rank " + rank.rank + ": step time by phase", ser,
                        {id: "phases", unit: "ms", markers: markersOf(data, ["spike"])});
      if (u) ser.forEach(function (c, i) {
        u.series[i + 1].value = function (uu, v, si, idx) { return idx === null ? "-" : fmt(c.raw[idx]); };
      });
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

  function renderTraces(app, data) {
    data.runs.forEach(function (run) {
      (run.traces || []).forEach(function (t) {
        var s = section(app, "trace", run.name + ": trace analysis (" + t.file + ")");
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
    charts.forEach(function (u) { u.destroy(); });
    charts = [];
    var app = document.getElementById("app");
    app.textContent = "";
    document.title = data.title;
    renderSummary(app, data);
    renderFindings(app, data);
    renderCurves(app, data);
    renderPhases(app, data);
    renderRanks(app, data);
    renderMemory(app, data);
    renderHang(app, data);
    renderDataScans(app, data);
    renderTraces(app, data);
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
