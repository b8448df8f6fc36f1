/* xaikit report: the page's behaviour, written for it (no library). Reads the JSON block
   #xk-data: saliency groups (one PNG sprite per epoch: rows = samples, columns = cells) and
   chart series. Everything it shows is already in the page; it requests nothing. */
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("xk-data").textContent);
  var prefix = data.prefix || "";
  var SVG = "http://www.w3.org/2000/svg";
  var COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  var tip = document.getElementById("tip");
  var zoom = document.getElementById("zoom");

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  // ------------------------------------------------------------------ saliency cells
  function cell(g, row, col, side) {
    var s = side / Math.max(g.th, g.tw);
    var w = Math.round(g.tw * s), h = Math.round(g.th * s);
    var d = el("div", "cell");
    d.style.width = w + "px";
    d.style.height = h + "px";
    d.style.backgroundSize = (g.ncells * w) + "px " + (g.rows * h) + "px";
    d.style.backgroundPosition = (-col * w) + "px " + (-row * h) + "px";
    d.dataset.row = row;
    d.dataset.col = col;
    d.title = g.cells[col].title + ", sample " + row;
    return d;
  }

  function setupGroup(section, g) {
    var slider = section.querySelector("input.epoch");
    var label = section.querySelector(".epoch-label");
    var link = section.querySelector("a.full-png");
    var grid = section.querySelector("table.grid");
    var select = section.querySelector("select.sample");
    var methods = section.querySelector(".methods");
    var state = { epoch: g.epochs.length - 1 };
    section._xk = state;

    var head = el("tr");
    g.text_titles.forEach(function (t) { head.appendChild(el("th", null, t)); });
    g.grid.forEach(function (c) { head.appendChild(el("th", null, g.cells[c].title)); });
    var thead = el("thead");
    thead.appendChild(head);
    grid.appendChild(thead);
    var tbody = el("tbody");
    var textCells = [];
    for (var r = 0; r < g.rows; r++) {
      var tr = el("tr");
      var row = [];
      for (var t = 0; t < g.text_titles.length; t++) {
        var td = el("td", "text");
        row.push(td);
        tr.appendChild(td);
      }
      textCells.push(row);
      g.grid.forEach(function (c) {
        var td = el("td");
        td.appendChild(cell(g, r, c, 72));
        tr.appendChild(td);
      });
      tbody.appendChild(tr);
    }
    grid.appendChild(tbody);

    function rowText(k, r) {
      return g.text[k].map(function (col) { return col[r]; }).join(" · ");
    }

    function drawMethods() {
      var r = Number(select.value || 0);
      methods.textContent = "";
      if (g.base !== null) {
        var f = el("figure");
        f.appendChild(el("figcaption", null, g.cells[g.base].title));
        f.appendChild(cell(g, r, g.base, 160));
        f.appendChild(el("div", "sample-text", rowText(state.epoch, r)));
        methods.appendChild(f);
      }
      g.methods.forEach(function (m) {
        var f = el("figure", "method");
        f.appendChild(el("figcaption", null, m.title));
        var pair = el("div", "pair");
        pair.appendChild(cell(g, r, m.mask, 160));
        if (m.overlay !== null) pair.appendChild(cell(g, r, m.overlay, 160));
        f.appendChild(pair);
        methods.appendChild(f);
      });
    }

    var blobs = {};
    function spriteUrl(k) {
      // a data: URI turned into a short blob: URL once, so that every cell shares one decoded
      // picture instead of re-reading a long URI (no request: the bytes are already here)
      if (!blobs[k]) {
        var raw = atob(g.sprites[k].split(",")[1]);
        var bytes = new Uint8Array(raw.length);
        for (var i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
        blobs[k] = URL.createObjectURL(new Blob([bytes], { type: "image/png" }));
      }
      return blobs[k];
    }

    function setEpoch(k) {
      state.epoch = k;
      section.style.setProperty("--sprite", 'url("' + spriteUrl(k) + '")');
      section.dataset.epoch = g.epochs[k];
      label.textContent = "epoch " + g.epochs[k];
      if (g.pngs[k]) {
        link.href = prefix + g.pngs[k];
        link.hidden = false;
      } else {
        link.hidden = true;
      }
      for (var r = 0; r < g.rows; r++) {
        for (var t = 0; t < g.text_titles.length; t++) {
          var td = textCells[r][t];
          td.textContent = g.text[k][t][r];
          td.classList.toggle("wrong", !!g.colors[k][t][r]);
        }
      }
      var chosen = select.value;
      select.textContent = "";
      for (var i = 0; i < g.rows; i++) {
        var o = el("option", null, "sample " + i + (g.text_titles.length ? ": " + rowText(k, i) : ""));
        o.value = String(i);
        select.appendChild(o);
      }
      select.value = chosen || "0";
      drawMethods();
    }

    slider.addEventListener("input", function () { setEpoch(Number(slider.value)); });
    select.addEventListener("change", drawMethods);
    section.addEventListener("click", function (ev) {
      var c = ev.target.closest ? ev.target.closest(".cell") : null;
      if (!c) return;
      var box = zoom.querySelector(".zoom-cell");
      box.textContent = "";
      var big = cell(g, Number(c.dataset.row), Number(c.dataset.col), 420);
      big.style.setProperty("--sprite", section.style.getPropertyValue("--sprite"));
      box.appendChild(big);
      zoom.querySelector(".zoom-title").textContent =
        g.cells[Number(c.dataset.col)].title + ", sample " + c.dataset.row + ", epoch " + g.epochs[state.epoch];
      var a = zoom.querySelector(".zoom-png");
      a.hidden = !g.pngs[state.epoch];
      if (g.pngs[state.epoch]) a.href = prefix + g.pngs[state.epoch];
      zoom.hidden = false;
    });
    setEpoch(state.epoch);
  }

  document.querySelectorAll("section.saliency").forEach(function (section) {
    setupGroup(section, data.groups[Number(section.dataset.group)]);
  });
  document.querySelectorAll("section.pictures").forEach(function (section) {
    var g = data.pictures[Number(section.dataset.group)];
    var slider = section.querySelector("input.epoch");
    function show(k) {
      section.querySelector("img.picture").src = g.thumbs[k];
      section.querySelector("a.full-png").href = prefix + g.pngs[k];
      section.querySelector(".epoch-label").textContent = "epoch " + g.epochs[k];
      section.dataset.epoch = g.epochs[k];
    }
    slider.addEventListener("input", function () { show(Number(slider.value)); });
    show(g.epochs.length - 1);
  });
  zoom.addEventListener("click", function (ev) {
    if (ev.target === zoom || ev.target.classList.contains("zoom-close")) zoom.hidden = true;
  });
  document.addEventListener("keydown", function (ev) { if (ev.key === "Escape") zoom.hidden = true; });

  // ------------------------------------------------------------------------- charts
  function svg(tag, attrs, parent) {
    var e = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (parent) parent.appendChild(e);
    return e;
  }

  function fmt(v) {
    if (v === null || v === undefined) return "";
    var a = Math.abs(v);
    return (a !== 0 && (a < 1e-3 || a >= 1e5)) ? v.toExponential(3) : String(Math.round(v * 1e4) / 1e4);
  }

  function ticks(lo, hi, n) {
    var span = hi - lo || 1, step = Math.pow(10, Math.floor(Math.log10(span / n)));
    [1, 2, 5, 10].some(function (m) { if (span / (step * m) <= n) { step *= m; return true; } return false; });
    var out = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Math.round(v / step) * step);
    return out;
  }

  function showTip(ev, text) {
    tip.textContent = text;
    tip.hidden = false;
    tip.style.left = (ev.clientX + 12) + "px";
    tip.style.top = (ev.clientY + 12) + "px";
  }

  function drawChart(fig, chart) {
    var W = 480, H = 280, L = 56, R = 12, T = 10, B = 40;
    var xs = [], ys = [];
    chart.series.forEach(function (s) {
      s.x.forEach(function (x, i) {
        if (s.y[i] === null) return;
        xs.push(x); ys.push(s.y[i]);
        if (s.low && s.low[i] !== null) ys.push(s.low[i]);
        if (s.high && s.high[i] !== null) ys.push(s.high[i]);
      });
    });
    if (!xs.length) return;
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
    var y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    if (x1 === x0) { x0 -= 1; x1 += 1; }
    if (y1 === y0) { y0 -= 1; y1 += 1; }
    var pad = (y1 - y0) * 0.05; y0 -= pad; y1 += pad;
    function X(v) { return L + (v - x0) / (x1 - x0) * (W - L - R); }
    function Y(v) { return T + (1 - (v - y0) / (y1 - y0)) * (H - T - B); }
    var root = svg("svg", { "class": "plot", width: W, height: H + 18 * Math.ceil(chart.series.length / 4), viewBox: "0 0 " + W + " " + (H + 18 * Math.ceil(chart.series.length / 4)), role: "img" });
    svg("line", { "class": "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }, root);
    svg("line", { "class": "axis", x1: L, y1: T, x2: L, y2: H - B }, root);
    ticks(x0, x1, 6).forEach(function (v) {
      var t = svg("text", { x: X(v), y: H - B + 14, "text-anchor": "middle" }, root); t.textContent = fmt(v);
    });
    ticks(y0, y1, 5).forEach(function (v) {
      var t = svg("text", { x: L - 4, y: Y(v) + 4, "text-anchor": "end" }, root); t.textContent = fmt(v);
      svg("line", { x1: L, y1: Y(v), x2: W - R, y2: Y(v), stroke: "#eee" }, root);
    });
    var xl = svg("text", { x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle" }, root); xl.textContent = chart.x_label;
    var yl = svg("text", { x: 12, y: (T + H - B) / 2, transform: "rotate(-90 12 " + (T + H - B) / 2 + ")", "text-anchor": "middle" }, root);
    yl.textContent = chart.y_label;
    chart.series.forEach(function (s, k) {
      var color = COLORS[k % COLORS.length];
      var g = svg("g", { "class": "series", "data-name": s.name }, root);
      var pts = [];
      s.x.forEach(function (x, i) { if (s.y[i] !== null) pts.push([x, s.y[i], i]); });
      if (s.low && s.high) {
        var up = pts.map(function (p) { return X(p[0]) + "," + Y(s.high[p[2]]); });
        var down = pts.slice().reverse().map(function (p) { return X(p[0]) + "," + Y(s.low[p[2]]); });
        svg("polygon", { points: up.concat(down).join(" "), fill: color, opacity: 0.15 }, g);
      }
      svg("polyline", { points: pts.map(function (p) { return X(p[0]) + "," + Y(p[1]); }).join(" "), fill: "none", stroke: color, "stroke-width": 1.6 }, g);
      pts.forEach(function (p) {
        var c = svg("circle", { "class": "pt", cx: X(p[0]), cy: Y(p[1]), r: 3.5, fill: color }, g);
        var text = s.name + " · " + chart.x_label + " " + fmt(p[0]) + ": " + fmt(p[1]);
        c.dataset.tip = text;
        c.addEventListener("mouseenter", function (ev) { showTip(ev, text); c.setAttribute("r", 5.5); });
        c.addEventListener("mousemove", function (ev) { showTip(ev, text); });
        c.addEventListener("mouseleave", function () { tip.hidden = true; c.setAttribute("r", 3.5); });
      });
      var lg = svg("g", { "class": "legend", transform: "translate(" + (L + (k % 4) * 105) + "," + (H + 4 + 18 * Math.floor(k / 4)) + ")" }, root);
      svg("rect", { width: 10, height: 10, fill: color }, lg);
      var lt = svg("text", { x: 14, y: 9 }, lg); lt.textContent = String(s.name).slice(0, 14);
      lg.addEventListener("click", function () { g.classList.toggle("off"); lg.classList.toggle("off"); });
    });
    fig.appendChild(root);
  }

  var charts = {};
  data.charts.forEach(function (c) { charts[c.id] = c; });
  document.querySelectorAll("figure.chart").forEach(function (fig) {
    var c = charts[fig.dataset.chart];
    if (c) drawChart(fig, c);
  });

  // ------------------------------------------------------------------ sortable tables
  function sortBy(th) {
    var table = th.closest("table");
    var idx = Array.prototype.indexOf.call(th.parentNode.children, th);
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var numeric = rows.every(function (r) {
      var c = r.cells[idx];
      return !c || c.textContent === "" || c.hasAttribute("data-sort");
    });
    var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
    table.querySelectorAll("th").forEach(function (h) { h.setAttribute("aria-sort", "none"); });
    th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
    function key(r) {
      var c = r.cells[idx];
      if (!c) return numeric ? -Infinity : "";
      return numeric ? (c.textContent === "" ? -Infinity : Number(c.getAttribute("data-sort"))) : c.textContent.toLowerCase();
    }
    rows.sort(function (a, b) {
      var ka = key(a), kb = key(b);
      return (ka < kb ? -1 : ka > kb ? 1 : 0) * dir;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  document.querySelectorAll("table.sortable th").forEach(function (th) {
    th.addEventListener("click", function () { sortBy(th); });
    th.addEventListener("keydown", function (ev) { if (ev.key === "Enter") sortBy(th); });
  });

  // ------------------------------------------------------------------- long tables
  // A table of more rows than the page shows at once starts collapsed (CSS shows its first
  // rows); its button shows them all, or collapses it again. Sorting keeps the state.
  function setCollapsed(table, on) {
    table.classList.toggle("collapsed", on);
    var button = table.closest(".table-wrap").nextElementSibling;
    if (button && button.classList.contains("show-all")) {
      button.textContent = on ? "show all " + button.dataset.rows + " rows" : "show the first rows only";
      button.hidden = table._filtering === true;
    }
  }
  document.querySelectorAll("button.show-all").forEach(function (button) {
    var table = button.previousElementSibling.querySelector("table");
    button.addEventListener("click", function () { setCollapsed(table, !table.classList.contains("collapsed")); });
  });

  // -------------------------------------------------------------------------- filters
  document.querySelectorAll("article.explained").forEach(function (article) {
    var table = article.querySelector("table.filterable");
    var input = article.querySelector("input.filter");
    var onlyBad = article.querySelector("input.only-bad");
    if (!table || !input) return;
    var collapsible = table.classList.contains("collapsible");
    var wasCollapsed = table.classList.contains("collapsed");
    function apply() {
      var q = input.value.trim().toLowerCase();
      var bad = onlyBad ? onlyBad.checked : false;
      var filtering = q !== "" || bad;
      if (collapsible && filtering && !table._filtering) wasCollapsed = table.classList.contains("collapsed");
      table._filtering = filtering;
      Array.prototype.forEach.call(table.tBodies[0].rows, function (r) {
        r.hidden = (q !== "" && r.textContent.toLowerCase().indexOf(q) < 0) || (bad && !r.classList.contains("bad"));
      });
      if (collapsible) setCollapsed(table, filtering ? false : wasCollapsed);  // every match shows
    }
    input.addEventListener("input", apply);
    if (onlyBad) onlyBad.addEventListener("change", apply);
  });
})();
