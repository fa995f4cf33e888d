/* KV-cache calculator: model, context, batch, KV dtype, GPU -> bytes, fits, max batch, TP degree.
 *
 * Self-contained (no library, no network): include presets.js (window.INFERBOOK_PRESETS, written
 * from the inferbook package by tools/export_presets.py), this file and calculators.css, then put
 *   <div data-inferbook-calc="kv-cache"></div>
 * anywhere in the page (optional defaults: data-model, data-gpu, data-n-gpus, data-ctx,
 * data-batch, data-kv-dtype, data-weight-dtype, data-utilization). Works from file:// and from
 * any HTML engine.
 *
 * The arithmetic mirrors inferbook.sizing (kv_bytes, kv_bytes_per_gpu, weight_bytes_per_gpu,
 * sequences_that_fit, tp_problem) on vLLM's start-up budget, inferbook.vllm_memory's
 * vllm_memory_budget: ceil(memory CUDA reports x gpu_memory_utilization) minus the weights
 * (plus what every TP rank holds whole) minus what vLLM subtracts at start-up (activations,
 * non-torch memory, CUDA graphs: exported per model, GPU and TP degree at `vllm serve`'s default
 * scheduler caps). The one budget the planner, the simulator and the log check read
 * (tests/test_one_budget.py); tests/test_book.py compares this page with them on a grid.
 */
(function () {
  "use strict";

  // --- inferbook.sizing, in JavaScript -------------------------------------------------------
  function vectorBytes(dt, nValues) {          // DType.vector_bytes
    var data = Math.ceil(nValues * dt.bits / 8);
    if (dt.group_size === null) return data;
    return data + Math.ceil(nValues / dt.group_size) * dt.group_overhead_bytes;
  }

  function layerBytes(m, dt, kvHeads) {        // one token, one layer, one GPU holding kvHeads
    if (m.is_mla) return vectorBytes(dt, m.kv_lora_rank) + vectorBytes(dt, m.qk_rope_head_dim);
    var heads = kvHeads === undefined ? m.num_key_value_heads : kvHeads;
    return 2 * heads * vectorBytes(dt, m.head_dim);
  }

  function cachedTokens(m, ctx) {              // sum over layers of min(window, ctx)
    var total = 0;
    m.layer_windows.forEach(function (wn) {
      total += wn[1] * (wn[0] === null ? ctx : Math.min(wn[0], ctx));
    });
    return total;
  }

  function tpProblem(m, name, n) {             // sizing.tp_problem: null when n-way TP works
    if (m.num_attention_heads % n) {
      return name + ": " + m.num_attention_heads + " attention heads cannot be split over " +
        n + " GPUs";
    }
    var kv = m.num_key_value_heads;
    if (!m.is_mla && (kv % n) && (n % kv)) {
      return name + ": " + kv + " KV heads can be neither split over nor replicated onto " +
        n + " GPUs";
    }
    return null;
  }

  function kvHeadsPerGpu(m, n) { return m.is_mla ? 0 : Math.max(1, Math.floor(m.num_key_value_heads / n)); }

  function kvBytesPerGpu(m, dt, ctx, batch, n) {
    var per = m.is_mla ? layerBytes(m, dt) : layerBytes(m, dt, kvHeadsPerGpu(m, n));
    return batch * per * cachedTokens(m, ctx);
  }

  function kvBytes(m, dt, ctx, batch) { return batch * layerBytes(m, dt) * cachedTokens(m, ctx); }

  function kvBytesPerToken(m, dt) { return m.num_hidden_layers * layerBytes(m, dt); }

  function weightBytes(m, dt) {                // below 16 bits, embeddings + LM head stay 16-bit
    if (dt.bits >= 16) return vectorBytes(dt, m.n_params);
    if (dt.name === "mxfp4") {                 // MXFP4 stores only the routed experts at 4 bits
      return vectorBytes(dt, m.routed_expert_params) + 2 * (m.n_params - m.routed_expert_params);
    }
    return vectorBytes(dt, m.n_params - m.embedding_params) + 2 * m.embedding_params;
  }

  function budget(P, q, n, m, wdt) {          // vllm_memory.vllm_memory_budget at its defaults
    // the total CUDA reports (GPU.memory_bytes), not the datasheet's GB: what vLLM multiplies;
    // requested = ceil(round(total x utilization, 6)): the rounding drops float noise
    var g = P.gpus[q.gpu], V = P.vllm;
    var requested = Math.ceil(Number((g.memory_bytes * q.gpu_memory_utilization).toFixed(6)));
    var weights = Math.ceil(weightBytes(m, wdt) / n) + V.replicated_bytes[q.model][String(n)];
    var runtime = V.runtime_bytes[q.model][q.gpu][String(n)];
    return {outside: g.memory_bytes - requested, runtime: runtime, weights: weights,
            left: requested - weights - runtime};
  }

  function floorDiv(a, b) {                    // exact floor(a / b) for non-negative integers
    var q = Math.floor(a / b);
    while (q * b > a) q -= 1;
    while ((q + 1) * b <= a) q += 1;
    return q;
  }

  function size(P, q) {
    // q: {model, gpu, n_gpus, ctx_tokens, batch, kv_dtype, weight_dtype, gpu_memory_utilization}
    var m = P.models[q.model], g = P.gpus[q.gpu];
    var kdt = P.dtypes[q.kv_dtype], wdt = P.dtypes[q.weight_dtype];
    var out = {
      kv_bytes_per_token: kvBytesPerToken(m, kdt),
      kv_bytes_total: kvBytes(m, kdt, q.ctx_tokens, q.batch),
      weight_bytes_total: weightBytes(m, wdt),
      ctx_within_model_limit: q.ctx_tokens <= m.max_position_embeddings,
      memory_bytes_per_gpu: g.memory_bytes,
      attention: m.attention,
      valid_tp_degrees: [],
      min_tp_degree: null
    };
    for (var n = 1; n <= P.max_tp_degree; n++) {
      if (tpProblem(m, q.model, n) !== null) continue;
      out.valid_tp_degrees.push(n);
      var b = budget(P, q, n, m, wdt);
      if (out.min_tp_degree === null && b.left > 0 &&
          kvBytesPerGpu(m, kdt, q.ctx_tokens, q.batch, n) <= b.left) {
        out.min_tp_degree = n;
      }
    }
    out.tp_problem = tpProblem(m, q.model, q.n_gpus);
    if (out.tp_problem !== null) return out;
    var bud = budget(P, q, q.n_gpus, m, wdt);
    out.outside_bytes_per_gpu = bud.outside;
    out.runtime_bytes_per_gpu = bud.runtime;
    out.weight_bytes_per_gpu = bud.weights;
    out.kv_budget_bytes_per_gpu = bud.left;
    out.starts = bud.left > 0;                 // vLLM: "No available memory for the cache blocks"
    out.kv_bytes_per_gpu = kvBytesPerGpu(m, kdt, q.ctx_tokens, q.batch, q.n_gpus);
    out.used_bytes_per_gpu = bud.outside + bud.runtime + bud.weights + out.kv_bytes_per_gpu;
    out.fits = out.starts && out.kv_bytes_per_gpu <= bud.left;
    var perSeq = kvBytesPerGpu(m, kdt, q.ctx_tokens, 1, q.n_gpus);
    out.max_batch = out.starts ? floorDiv(bud.left, perSeq) : 0;
    // max_context: bisect on the per-GPU KV bytes of `batch` sequences (never falls with ctx)
    var ok = function (ctx) { return out.starts && kvBytesPerGpu(m, kdt, ctx, q.batch, q.n_gpus) <= bud.left; };
    var lo = 0, hi = m.max_position_embeddings;
    if (ok(hi)) { lo = hi; } else {
      while (hi - lo > 1) { var mid = Math.floor((lo + hi) / 2); if (ok(mid)) lo = mid; else hi = mid; }
    }
    out.max_context = lo;
    return out;
  }

  function budgetNote(P) {
    return "vLLM " + P.vllm.version + "'s start-up budget (chapter 8): gpu_memory_utilization x the " +
      "memory CUDA reports, minus the weights, minus the activations of its profiling run, the " +
      "non-torch memory and the CUDA graphs at vllm serve's default limits. Chapter 2's first " +
      "estimate (a flat reserve) leaves out those runtime terms.";
  }

  // --- the page --------------------------------------------------------------------------------
  function gb(x) { return (x / 1e9).toFixed(2) + " GB"; }
  function int(x) { return x.toLocaleString("en-US"); }

  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    (children || []).forEach(function (c) { e.append(c); });
    return e;
  }

  function select(name, label, options, value) {
    var s = el("select", {name: name});
    options.forEach(function (o) {
      var opt = el("option", {value: String(o)}, [String(o)]);
      if (String(o) === String(value)) opt.selected = true;
      s.append(opt);
    });
    return el("label", {}, [el("span", {}, [label]), s,
      el("span", {class: "ib-field-error", "data-error-for": name, role: "alert"})]);
  }

  function number(name, label, value, min, step) {
    return el("label", {}, [el("span", {}, [label]),
      el("input", {name: name, type: "number", value: String(value), min: String(min),
                   step: String(step), inputmode: step === "any" ? "decimal" : "numeric"}),
      el("span", {class: "ib-field-error", "data-error-for": name, role: "alert"})]);
  }

  // What the package accepts (validate.positive_int; sizing.fraction(high_open=False) for
  // vllm_memory_budget's gpu_memory_utilization, as vLLM's own check does): anything else is
  // refused at its field with the reason, and no answer is shown for it.
  var FIELDS = {
    ctx_tokens: {label: "context (tokens)", kind: "positive-int"},
    batch: {label: "batch (sequences)", kind: "positive-int"},
    gpu_memory_utilization: {label: "GPU memory utilization", kind: "utilization"}
  };

  function fieldProblem(name, input) {
    var f = FIELDS[name], text = input.value.trim();
    if (input.validity && input.validity.badInput) return f.label + " must be a number";
    if (text === "") return f.label + " is empty";
    if (f.kind === "positive-int") {
      if (!/^[0-9]+$/.test(text)) {
        return f.label + " must be a whole number of " + (name === "batch" ? "sequences" : "tokens") +
          ", got " + text;
      }
      if (parseInt(text, 10) < 1) return f.label + " must be at least 1, got " + text;
      if (!Number.isSafeInteger(parseInt(text, 10))) return f.label + " is too large: " + text;
      return null;
    }
    var v = Number(text);
    if (!isFinite(v) || v <= 0 || v > 1) {
      return f.label + " must be a number above 0 and at most 1, got " + text;
    }
    return null;
  }

  function row(key, label) {
    return el("div", {class: "ib-row"}, [el("span", {class: "ib-label"}, [label]),
      el("output", {"data-key": key, class: "ib-value"})]);
  }

  function mount(root, P) {
    var d = root.dataset;
    var models = Object.keys(P.models), gpus = Object.keys(P.gpus), dtypes = Object.keys(P.dtypes);
    var form = el("form", {class: "ib-inputs", onsubmit: "return false"}, [
      select("model", "model", models, d.model || "Llama-3.1-70B"),
      select("gpu", "GPU", gpus, d.gpu || "H100 SXM"),
      select("n_gpus", "GPUs (tensor parallel)", [1, 2, 3, 4, 5, 6, 7, 8].slice(0, P.max_tp_degree), d.nGpus || 4),
      number("ctx_tokens", "context (tokens)", d.ctx || 32768, 1, 1),
      number("batch", "batch (sequences)", d.batch || 8, 1, 1),
      select("kv_dtype", "KV dtype", dtypes, d.kvDtype || "bf16"),
      select("weight_dtype", "weight dtype", dtypes, d.weightDtype || "bf16"),
      number("gpu_memory_utilization", "GPU memory utilization", d.utilization || P.vllm.default_utilization, 0, "any")
    ]);
    var bar = el("div", {class: "ib-bar", role: "img"}, [
      el("span", {class: "ib-bar-reserve"}), el("span", {class: "ib-bar-runtime"}),
      el("span", {class: "ib-bar-weights"}), el("span", {class: "ib-bar-kv"})]);
    var results = el("div", {class: "ib-results", "aria-live": "polite"}, [
      el("p", {class: "ib-verdict", "data-key": "verdict"}),
      bar,
      el("p", {class: "ib-legend"}, [el("span", {class: "ib-key ib-bar-reserve"}), " not requested ",
        el("span", {class: "ib-key ib-bar-runtime"}), " runtime ",
        el("span", {class: "ib-key ib-bar-weights"}), " weights ",
        el("span", {class: "ib-key ib-bar-kv"}), " KV cache (per GPU)"]),
      row("kv_bytes_per_token", "KV cache per token (all layers)"),
      row("kv_bytes_total", "KV cache, whole batch (all GPUs)"),
      row("kv_bytes_per_gpu", "KV cache per GPU"),
      row("weight_bytes_per_gpu", "weights per GPU"),
      row("runtime_bytes_per_gpu", "runtime per GPU (activations, non-torch, CUDA graphs)"),
      row("outside_bytes_per_gpu", "not requested per GPU (1 − utilization)"),
      row("kv_budget_bytes_per_gpu", "KV budget per GPU (vLLM's available KV cache memory)"),
      row("used_bytes_per_gpu", "used per GPU"),
      row("max_batch", "max sequences at this context"),
      row("max_context", "max context at this batch"),
      row("min_tp_degree", "fewest GPUs that fit (tensor parallel)")
    ]);
    root.classList.add("ib-calc");
    root.dataset.budget = "vllm";
    root.replaceChildren(el("p", {class: "ib-title"}, ["KV-cache calculator ",
      el("span", {class: "ib-static-note"}, ["runs in your browser, no kernel needed"])]),
      el("p", {class: "ib-budget-note"}, [budgetNote(P)]), form, results);

    function read() {
      var f = form.elements;
      return {
        model: f.model.value, gpu: f.gpu.value, n_gpus: parseInt(f.n_gpus.value, 10),
        ctx_tokens: parseInt(f.ctx_tokens.value, 10),
        batch: parseInt(f.batch.value, 10),
        kv_dtype: f.kv_dtype.value, weight_dtype: f.weight_dtype.value,
        gpu_memory_utilization: Number(f.gpu_memory_utilization.value)
      };
    }

    function showFieldErrors(problems) {   // {field name: reason}; every other field cleared
      form.querySelectorAll(".ib-field-error").forEach(function (e) {
        var name = e.dataset.errorFor, why = problems[name] || "";
        e.textContent = why;
        var input = form.elements[name];
        if (why) input.setAttribute("aria-invalid", "true"); else input.removeAttribute("aria-invalid");
      });
    }

    function refuse(reasons, valid) {      // no answer for impossible inputs, only the reasons
      ["kv_bytes_per_token", "kv_bytes_total", "min_tp_degree"].forEach(function (k) {
        if (!valid) put(k, "—", "invalid");
      });
      ["kv_bytes_per_gpu", "weight_bytes_per_gpu", "runtime_bytes_per_gpu", "outside_bytes_per_gpu",
       "kv_budget_bytes_per_gpu", "used_bytes_per_gpu", "max_batch", "max_context"].forEach(function (k) { put(k, "—", "invalid"); });
      var verdict = results.querySelector('[data-key="verdict"]');
      verdict.textContent = "Invalid: " + reasons.join("; ") + ".";
      verdict.dataset.value = "invalid";
      verdict.className = "ib-verdict ib-bad";
      bar.hidden = true;
    }

    function put(key, text, value) {
      var o = results.querySelector('[data-key="' + key + '"]');
      o.textContent = text;
      o.dataset.value = value === undefined ? "" : String(value);
    }

    function update() {
      var problems = {}, reasons = [];
      Object.keys(FIELDS).forEach(function (name) {
        var why = fieldProblem(name, form.elements[name]);
        if (why) { problems[name] = why; reasons.push(why); }
      });
      if (reasons.length) {
        showFieldErrors(problems);
        root.dataset.state = "invalid";
        refuse(reasons, false);
        return;
      }
      var q = read(), r = size(P, q);
      if (r.tp_problem !== null) {
        problems.n_gpus = r.tp_problem + " (valid: " + r.valid_tp_degrees.join(", ") + ")";
      }
      showFieldErrors(problems);
      root.dataset.state = JSON.stringify(q);
      put("kv_bytes_per_token", int(r.kv_bytes_per_token) + " B (" + r.attention + ", " + q.kv_dtype + ")",
          r.kv_bytes_per_token);
      put("kv_bytes_total", gb(r.kv_bytes_total), r.kv_bytes_total);
      put("min_tp_degree", r.min_tp_degree === null ? "more than " + P.max_tp_degree : String(r.min_tp_degree),
          r.min_tp_degree === null ? "none" : r.min_tp_degree);
      var verdict = results.querySelector('[data-key="verdict"]');
      if (r.tp_problem !== null) {
        refuse([r.tp_problem + ". Valid degrees: " + r.valid_tp_degrees.join(", ")], true);
        return;
      }
      bar.hidden = false;
      put("kv_bytes_per_gpu", gb(r.kv_bytes_per_gpu), r.kv_bytes_per_gpu);
      put("weight_bytes_per_gpu", gb(r.weight_bytes_per_gpu) + " (" + q.weight_dtype + ")", r.weight_bytes_per_gpu);
      put("runtime_bytes_per_gpu", gb(r.runtime_bytes_per_gpu), r.runtime_bytes_per_gpu);
      put("outside_bytes_per_gpu", gb(r.outside_bytes_per_gpu), r.outside_bytes_per_gpu);
      put("kv_budget_bytes_per_gpu", gb(r.kv_budget_bytes_per_gpu), r.kv_budget_bytes_per_gpu);
      put("used_bytes_per_gpu", gb(r.used_bytes_per_gpu) + " of " + gb(r.memory_bytes_per_gpu), r.used_bytes_per_gpu);
      put("max_batch", int(r.max_batch), r.max_batch);
      put("max_context", int(r.max_context) + " tokens (model limit " +
          int(P.models[q.model].max_position_embeddings) + ")", r.max_context);
      verdict.textContent = (r.fits ? "Fits: " : "Does not fit: ") + q.batch + " × " + int(q.ctx_tokens) +
        " tokens of " + q.model + " on " + q.n_gpus + "× " + q.gpu +
        (r.starts ? "" : " (vLLM would not start: the weights and runtime leave no memory for the " +
                         "KV cache)") +
        (r.ctx_within_model_limit ? "." : " (the context exceeds the model's limit!).");
      verdict.dataset.value = r.fits ? "fits" : "does-not-fit";
      verdict.className = "ib-verdict " + (r.fits ? "ib-good" : "ib-bad");
      var total = Math.max(r.memory_bytes_per_gpu, r.used_bytes_per_gpu);
      var parts = [r.outside_bytes_per_gpu, r.runtime_bytes_per_gpu, r.weight_bytes_per_gpu,
                   r.kv_bytes_per_gpu];
      Array.prototype.forEach.call(bar.children, function (s, i) {
        s.style.width = (100 * parts[i] / total).toFixed(2) + "%";
      });
      bar.style.setProperty("--ib-capacity", (100 * r.memory_bytes_per_gpu / total).toFixed(2) + "%");
      bar.setAttribute("aria-label", "memory per GPU: " + gb(r.used_bytes_per_gpu) + " used of " +
                       gb(r.memory_bytes_per_gpu));
    }

    form.addEventListener("input", update);
    form.addEventListener("change", update);
    update();
  }

  window.InferbookSizing = {size: size, tpProblem: tpProblem, vectorBytes: vectorBytes};

  function start() {
    var P = window.INFERBOOK_PRESETS;
    document.querySelectorAll('[data-inferbook-calc="kv-cache"]').forEach(function (root) {
      if (!P) { root.textContent = "The calculator's presets (presets.js) did not load."; return; }
      mount(root, P);
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
