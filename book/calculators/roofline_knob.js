/* Roofline knob: one decode step of a model on a GPU -> arithmetic intensity, bound, time, tokens/s.
 *
 * Self-contained (no library, no network): include presets.js (window.INFERBOOK_PRESETS), this
 * file and calculators.css, then put
 *   <div data-inferbook-calc="roofline"></div>
 * in the page (optional defaults: data-model, data-gpu, data-batch, data-context).
 *
 * The arithmetic mirrors inferbook.roofline.forward_cost (new_tokens=1, 2-byte values),
 * attainable_flops and bound, with two refinements for models that are not dense MHA/GQA:
 * - MoE (Mixtral, DeepSeek): a token's FLOPs use the *active* parameters (its routed experts),
 *   while every expert's weights are read (a batch of a few sequences touches them all);
 * - MLA (DeepSeek): the cache holds kv_lora_rank + qk_rope_head_dim values per token and layer
 *   (the compressed latent), not 2 x kv_heads x head_dim.
 * For dense models this is forward_cost exactly; tests/test_book.py compares it with the package
 * on a grid and checks the first answer the page shows.
 */
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";

  // --- inferbook.roofline, in JavaScript ------------------------------------------------------
  function decodeStep(m, g, batch, past) {
    var nParams = m.n_params, nActive = m.n_active_params || m.n_params;
    var nLayer = m.num_hidden_layers;
    var dAttn = m.num_attention_heads * m.head_dim, kvDim = m.num_key_value_heads * m.head_dim;
    var newTokens = 1, bytesPerValue = 2;
    var tokens = batch * newTokens;
    var pairs = batch * (newTokens * past + newTokens * (newTokens + 1) / 2);
    var flops = 2 * nActive * tokens + 4 * dAttn * pairs * nLayer;
    var kvValues = m.is_mla ? m.kv_lora_rank + m.qk_rope_head_dim : 2 * kvDim;  // per token, layer
    var kvBytes = kvValues * nLayer * bytesPerValue * batch * (past + newTokens);
    var bytesMoved = nParams * bytesPerValue + kvBytes;
    var intensity = flops / bytesMoved;
    var peak = g.fp16_tensor_flops, bw = g.hbm_bytes_per_s;
    var ridge = peak / bw;
    var stepS = Math.max(flops / peak, bytesMoved / bw);
    return {
      flops: flops, bytes_moved: bytesMoved, intensity: intensity, ridge: ridge,
      attainable_flops: Math.min(peak, intensity * bw),
      bound: intensity >= ridge ? "compute-bound" : "memory-bound",
      step_s: stepS, tokens_per_s: batch / stepS
    };
  }

  // --- the page --------------------------------------------------------------------------------
  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    (children || []).forEach(function (c) { e.append(c); });
    return e;
  }
  function svg(tag, attrs) {
    var e = document.createElementNS(SVG, tag);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    return e;
  }

  // The chart is drawn in CSS pixels of the width it is shown at (640 at most), so its 13 px
  // labels stay 13 px on a phone instead of shrinking with a fixed 640-wide drawing.
  var MAX_W = 640, MIN_W = 280;

  function plot(host, g, r) {          // log-log roofline with the step as a dot
    var shown = host.clientWidth || MAX_W;
    var W = Math.round(Math.max(MIN_W, Math.min(MAX_W, shown)));
    var H = W < 480 ? 260 : 300, L = 64, R = W < 480 ? 18 : 30, T = 16, B = 44;
    var xmin = 0.1, xmax = 10000, ymin = 1e11, ymax = 1e16;
    var x = function (v) { return L + (W - L - R) * Math.log10(v / xmin) / Math.log10(xmax / xmin); };
    var y = function (v) { return H - B - (H - T - B) * Math.log10(v / ymin) / Math.log10(ymax / ymin); };
    var s = svg("svg", {viewBox: "0 0 " + W + " " + H, class: "ib-plot", role: "img",
      "data-drawn-width": W,
      "aria-label": "Roofline of " + g.name + ": the decode step sits at " + r.intensity.toFixed(1) +
      " FLOP per byte, " + r.bound});
    s.append(svg("rect", {x: 0, y: 0, width: W, height: H, fill: "#ffffff"}));
    [0.1, 1, 10, 100, 1000, 10000].forEach(function (v) {
      s.append(svg("line", {x1: x(v), x2: x(v), y1: T, y2: H - B, stroke: "#dddddd"}));
      var t = svg("text", {x: x(v), y: H - B + 18, "text-anchor": "middle"}); t.textContent = String(v); s.append(t);
    });
    [1e11, 1e12, 1e13, 1e14, 1e15, 1e16].forEach(function (v) {
      s.append(svg("line", {x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#dddddd"}));
      var t = svg("text", {x: L - 6, y: y(v) + 4, "text-anchor": "end"});
      t.textContent = (v / 1e12) + " T"; s.append(t);
    });
    var xl = svg("text", {x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle"});
    xl.textContent = "arithmetic intensity (FLOP per byte)"; s.append(xl);
    var yl = svg("text", {x: 14, y: (T + H - B) / 2, "text-anchor": "middle",
      transform: "rotate(-90 14 " + (T + H - B) / 2 + ")"});
    yl.textContent = "FLOP/s"; s.append(yl);
    var pts = [xmin, r.ridge, xmax].map(function (v) {
      return x(v) + "," + y(Math.min(g.fp16_tensor_flops, v * g.hbm_bytes_per_s));
    });
    s.append(svg("polyline", {points: pts.join(" "), fill: "none", stroke: "#1f5fa8", "stroke-width": 3}));
    var ix = Math.min(xmax, Math.max(xmin, r.intensity));
    s.append(svg("circle", {cx: x(ix), cy: y(Math.max(ymin, r.attainable_flops)), r: 7,
      fill: r.bound === "memory-bound" ? "#c0392b" : "#1e8449", stroke: "#222222"}));
    host.replaceChildren(s);
  }

  function mount(root, P) {
    var d = root.dataset;
    var gpus = Object.keys(P.gpus).filter(function (n) { return P.gpus[n].fp16_tensor_flops; });
    var models = Object.keys(P.models);
    function select(name, label, options, value) {
      var s = el("select", {name: name});
      options.forEach(function (o) {
        var opt = el("option", {value: o}, [o]); if (o === value) opt.selected = true; s.append(opt);
      });
      return el("label", {}, [el("span", {}, [label]), s]);
    }
    function range(name, label, value, min, max, step) {
      // min, max and step before the value: a range input clamps its value to the bounds it
      // has when the value is set (max defaults to 100), so the order decides the first answer
      var input = el("input", {name: name, type: "range", min: String(min), max: String(max),
                               step: String(step)});
      input.value = String(value);
      var shown = el("output", {"data-key": name + "_shown"});
      return el("label", {}, [el("span", {}, [label, " ", shown]), input]);
    }
    var form = el("form", {class: "ib-inputs", onsubmit: "return false"}, [
      select("model", "model", models, d.model || "Llama-2-7B"),
      select("gpu", "GPU", gpus, d.gpu || "H100 SXM"),
      range("batch", "batch", d.batch || 1, 1, 512, 1),
      range("context", "context (tokens already cached)", d.context || 1024, 0, 32768, 256)
    ]);
    var rows = [["intensity", "arithmetic intensity"], ["ridge", "ridge point of the GPU"],
      ["bound", "verdict"], ["attainable_flops", "at most"], ["step_s", "one decode step takes at least"],
      ["tokens_per_s", "tokens per second, whole batch, at most"]];
    var results = el("div", {class: "ib-results", "aria-live": "polite"}, rows.map(function (kv) {
      return el("div", {class: "ib-row"}, [el("span", {class: "ib-label"}, [kv[1]]),
        el("output", {"data-key": kv[0], class: "ib-value"})]);
    }));
    var chart = el("div", {class: "ib-chart"});
    root.classList.add("ib-calc");
    root.replaceChildren(el("p", {class: "ib-title"}, ["Roofline knob: one decode step ",
      el("span", {class: "ib-static-note"}, ["runs in your browser, no kernel needed"])]), form, results, chart);

    function put(key, text, value) {
      var o = root.querySelector('[data-key="' + key + '"]');
      o.textContent = text; o.dataset.value = String(value);
    }
    function update() {
      var f = form.elements, g = P.gpus[f.gpu.value], m = P.models[f.model.value];
      var batch = parseInt(f.batch.value, 10), past = parseInt(f.context.value, 10);
      var r = decodeStep(m, g, batch, past);
      g = Object.assign({name: f.gpu.value}, g);
      put("batch_shown", String(batch), batch);
      put("context_shown", past.toLocaleString("en-US"), past);
      put("intensity", r.intensity.toFixed(1) + " FLOP/B", r.intensity);
      put("ridge", r.ridge.toFixed(0) + " FLOP/B", r.ridge);
      put("bound", r.bound, r.bound);
      put("attainable_flops", (r.attainable_flops / 1e12).toFixed(1) + " TFLOP/s", r.attainable_flops);
      put("step_s", (r.step_s * 1e3).toFixed(2) + " ms", r.step_s);
      put("tokens_per_s", Math.round(r.tokens_per_s).toLocaleString("en-US"), r.tokens_per_s);
      plot(chart, g, r);
    }
    form.addEventListener("input", update);
    update();
    var drawnFor = chart.clientWidth, timer = null;
    window.addEventListener("resize", function () {    // redraw for the new width
      clearTimeout(timer);
      timer = setTimeout(function () {
        if (chart.clientWidth !== drawnFor) { drawnFor = chart.clientWidth; update(); }
      }, 150);
    });
  }

  window.InferbookRoofline = {decodeStep: decodeStep};

  function start() {
    var P = window.INFERBOOK_PRESETS;
    document.querySelectorAll('[data-inferbook-calc="roofline"]').forEach(function (root) {
      if (!P) { root.textContent = "The calculator's presets (presets.js) did not load."; return; }
      mount(root, P);
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
