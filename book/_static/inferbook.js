/* The book's reading aids that need the rendered page (loaded on every page).
   - Display equations wider than the column are scaled down to fit (to 70 % at most; past that
     they scroll inside their own box, see inferbook.css).
   - Tables printed by cells (HTML outputs, DataFrames): number cells right-aligned (class
     ib-num, as the Sphinx extension does for Markdown tables), text cells left-aligned, and the
     header of a mostly-numeric column right-aligned with it.
   - Figures: every figure image is a link to the full-size image, and a tap/click opens it in
     an overlay at its full display size (scrollable, Esc/tap closes), so the small text of a
     plot is readable on a phone; a corner button says so. Done marks:
     html[data-ib-tables-aligned], html[data-ib-figures-zoomable].
   - Tables wider than their box on a phone (a window up to 720 px): one of five columns or fewer is stacked, a card per
     row with each cell under its column's name (class ib-stacked); a wider one scrolls inside
     its box with a visible line above it saying so (p.ib-table-hint). Laid out again after
     MathJax and on resize; done mark html[data-ib-tables-laid-out]. */
(function () {
  "use strict";
  var MIN_SCALE = 0.7;

  function fitMath() {
    document.querySelectorAll('mjx-container[display="true"]').forEach(function (c) {
      // MathJax sizes each container itself (style="font-size: 127.3%" to match the text's
      // ex-height); remember that size once and scale from it, never from the page's 100 %.
      if (c.dataset.ibBaseSize === undefined) c.dataset.ibBaseSize = c.style.fontSize || "";
      var base = c.dataset.ibBaseSize;
      var basePercent = /%$/.test(base) ? parseFloat(base) : 100;
      c.style.fontSize = base;
      delete c.dataset.ibScaled;
      var avail = c.clientWidth, need = c.scrollWidth;
      if (avail > 0 && need > avail + 1) {
        var scale = Math.max(MIN_SCALE, (avail - 2) / need);
        c.style.fontSize = (basePercent * scale).toFixed(1) + "%";
        c.dataset.ibScaled = scale.toFixed(3);
      }
    });
    layoutTables();
    document.documentElement.dataset.ibMathFitted = "1";
  }

  function whenTypeset() {
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) {
      mj.startup.promise.then(fitMath);
    } else if (document.querySelector("mjx-container")) {
      fitMath();
    } else {
      layoutTables();
      document.documentElement.dataset.ibMathFitted = "1";
    }
  }


  // --- tables -----------------------------------------------------------------------------
  var NUMBER = /^[~≈<>≤≥±+\-−]?\s*[$]?\d[\d,_ ]*(\.\d+)?(e[+-]?\d+)?\s*[%×xA-Za-zµ\/]{0,12}$/;

  function alignTables() {
    document.querySelectorAll(".cell_output table, article table").forEach(function (table) {
      var columns = {};
      Array.prototype.forEach.call(table.tBodies, function (tbody) {
        Array.prototype.forEach.call(tbody.rows, function (row) {
          Array.prototype.forEach.call(row.cells, function (cell, i) {
            var text = cell.textContent.trim();
            var numeric = text !== "" && NUMBER.test(text);
            if (cell.tagName === "TD") cell.classList.add(numeric ? "ib-num" : "ib-text");
            (columns[i] = columns[i] || []).push(numeric);
          });
        });
      });
      if (table.tHead) {
        Array.prototype.forEach.call(table.tHead.rows, function (row) {
          Array.prototype.forEach.call(row.cells, function (cell, i) {
            var flags = columns[i] || [];
            var n = flags.filter(Boolean).length;
            cell.classList.add(flags.length && n * 2 > flags.length ? "ib-num" : "ib-text");
          });
        });
      }
    });
    document.documentElement.dataset.ibTablesAligned = "1";
  }

  // --- tables on a narrow screen: stacked, or scrolling with a hint ------------------------
  var STACK_MAX_COLUMNS = 5, PHONE_MAX_WIDTH = 720;   // stacked only on a phone-width window

  function scrollBox(table) {          // the nearest ancestor that scrolls sideways
    for (var p = table.parentElement; p && p.tagName !== "ARTICLE"; p = p.parentElement) {
      if (/(auto|scroll)/.test(getComputedStyle(p).overflowX)) return p;
    }
    return null;
  }

  function headerCells(table) {
    if (table.tHead && table.tHead.rows.length) return table.tHead.rows[0].cells;
    var first = table.rows[0];
    return first && Array.prototype.every.call(first.cells, function (c) { return c.tagName === "TH"; })
      ? first.cells : null;
  }

  function labelCells(table, head) {
    if (table.dataset.ibLabelled) return;
    var names = Array.prototype.map.call(head, function (c) { return c.textContent.trim(); });
    Array.prototype.forEach.call(table.tBodies, function (tbody) {
      Array.prototype.forEach.call(tbody.rows, function (row) {
        if (row.cells[0] === head[0]) { row.classList.add("ib-head-row"); return; }
        Array.prototype.forEach.call(row.cells, function (cell, i) {
          if (names[i]) cell.dataset.label = names[i];
          if (!cell.textContent.trim() && !cell.querySelector("img, mjx-container")) cell.classList.add("ib-empty");
        });
      });
    });
    table.dataset.ibLabelled = "1";
  }

  function layoutTables() {
    document.querySelectorAll("article table").forEach(function (table) {
      if (table.closest(".ib-calc")) return;
      table.classList.remove("ib-stacked");
      var box = scrollBox(table), host = box || table.parentElement;
      var over = function () { return table.getBoundingClientRect().width > host.clientWidth + 1; };
      var head = headerCells(table);
      if (window.innerWidth <= PHONE_MAX_WIDTH && over() && head && head.length <= STACK_MAX_COLUMNS) {
        labelCells(table, head);
        table.classList.add("ib-stacked");
        if (over()) table.classList.remove("ib-stacked");
      }
      var hint = host.previousElementSibling;
      var scrolls = !!box && over();
      if (scrolls && !(hint && hint.classList.contains("ib-table-hint"))) {
        hint = document.createElement("p");
        hint.className = "ib-table-hint";
        hint.textContent = "\u21c6 Wider than the page: scroll or swipe the table sideways to see every column.";
        host.parentNode.insertBefore(hint, host);
      }
      if (hint && hint.classList.contains("ib-table-hint")) hint.hidden = !scrolls;
    });
    document.documentElement.dataset.ibTablesLaidOut = "1";
  }

  // --- figures: tap to enlarge ---------------------------------------------------------------
  var overlay = null;

  function closeZoom() {
    if (overlay) { overlay.remove(); overlay = null; document.body.classList.remove("ib-zoom-open"); }
  }

  function openZoom(img) {
    closeZoom();
    var full = new Image();
    full.src = img.currentSrc || img.src;
    full.alt = img.alt;
    full.className = "ib-zoom-img";
    // the width the figure was drawn for (its display size in the notebook), never less than
    // the width it has on the page
    var drawn = parseFloat(img.style.width) || parseFloat(img.getAttribute("width")) ||
      (img.naturalWidth ? img.naturalWidth / 2 : 0);
    full.style.width = Math.max(drawn, img.getBoundingClientRect().width) + "px";
    overlay = document.createElement("div");
    overlay.className = "ib-zoom";
    overlay.setAttribute("role", "dialog");
    overlay.setAttribute("aria-label", "Enlarged figure");
    var close = document.createElement("button");
    close.type = "button";
    close.className = "ib-zoom-close";
    close.setAttribute("aria-label", "Close the enlarged figure");
    close.textContent = "\u00d7 Close";
    var hint = document.createElement("p");
    hint.className = "ib-zoom-hint";
    hint.textContent = "Full size: scroll or pinch to move around. Tap outside or press Esc to close.";
    var box = document.createElement("div");
    box.className = "ib-zoom-box";
    box.appendChild(full);
    overlay.appendChild(close);
    overlay.appendChild(hint);
    overlay.appendChild(box);
    overlay.addEventListener("click", function (e) {
      if (e.target === overlay || e.target === close || e.target === hint) closeZoom();
    });
    document.body.appendChild(overlay);
    document.body.classList.add("ib-zoom-open");
    close.focus();
  }

  function zoomableFigures() {
    document.querySelectorAll("article figure img, article .cell_output img").forEach(function (img) {
      if (img.closest(".ib-zoomable") || img.closest(".ib-calc")) return;
      var link = img.closest("a");
      if (link && !link.classList.contains("image-reference")) return;  // a link elsewhere: keep it
      if (!link) {                 // Sphinx links scaled figures to their image; others get one
        link = document.createElement("a");
        link.href = img.getAttribute("src");
        img.parentNode.insertBefore(link, img);
        link.appendChild(img);
      }
      link.classList.add("ib-zoomable");
      link.title = "Enlarge the figure";
      var badge = document.createElement("span");
      badge.className = "ib-zoom-badge";
      badge.setAttribute("aria-hidden", "true");
      badge.textContent = "\u2922 tap to enlarge";
      link.appendChild(badge);
      link.addEventListener("click", function (e) {
        if (e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;  // new tab: the image
        e.preventDefault();
        openZoom(img);
      });
    });
    document.addEventListener("keydown", function (e) { if (e.key === "Escape") closeZoom(); });
    document.documentElement.dataset.ibFiguresZoomable = "1";
  }

  function pageAids() {
    alignTables();
    zoomableFigures();
  }

  var timer = null;
  window.addEventListener("resize", function () {
    clearTimeout(timer);
    timer = setTimeout(fitMath, 150);
  });
  if (document.readyState === "complete") { pageAids(); whenTypeset(); }
  else window.addEventListener("load", function () { pageAids(); whenTypeset(); });
})();
