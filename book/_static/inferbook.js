/* The book's reading aids that need the rendered page (loaded on every page).
   Display equations wider than the column are scaled down to fit (to 70 % at most; past that
   they scroll inside their own box, see inferbook.css). */
(function () {
  "use strict";
  var MIN_SCALE = 0.7;

  function fitMath() {
    document.querySelectorAll('mjx-container[display="true"]').forEach(function (c) {
      c.style.fontSize = "";
      var avail = c.clientWidth, need = c.scrollWidth;
      if (avail > 0 && need > avail + 1) {
        var scale = Math.max(MIN_SCALE, (avail - 2) / need);
        c.style.fontSize = (100 * scale).toFixed(1) + "%";
        c.dataset.ibScaled = scale.toFixed(3);
      }
    });
    document.documentElement.dataset.ibMathFitted = "1";
  }

  function whenTypeset() {
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) {
      mj.startup.promise.then(fitMath);
    } else if (document.querySelector("mjx-container")) {
      fitMath();
    } else {
      document.documentElement.dataset.ibMathFitted = "1";
    }
  }

  var timer = null;
  window.addEventListener("resize", function () {
    clearTimeout(timer);
    timer = setTimeout(fitMath, 150);
  });
  if (document.readyState === "complete") whenTypeset();
  else window.addEventListener("load", whenTypeset);
})();
