/* xaikit report: the Dataset explorer (report_explorer.py writes its data into the JSON block
   #xk-explorer, apart from #xk-data so that the rest of the page never parses the sprites). A
   canvas scatter of the displayed samples at their embedding, coloured by cluster or by
   correctness; thumbnails (sprite sheets, one data: URI each) for a subset of the
   points that do not overlap at the current zoom, dots for the rest; hover = tooltip, click =
   the detail panel. Requests nothing: every byte is in the page. When the first full paint is
   done the explorer gets data-ready="1" and window.xkExplorer[id].painted (ms since navigation). */
(function () {
  "use strict";
  var explorers = JSON.parse(document.getElementById("xk-explorer").textContent);
  var PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#bcbd22", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354",
    "#756bb1", "#636363", "#fd8d3c"];
  var CORRECT = { "1": "#2e7d32", "0": "#c62828", "-1": "#9e9e9e" };
  var NONE = "#b0b0b0";
  var THUMB = 30, DOT = 2.6, MAX_THUMBS = 900, GRID = 4096, SETTLE_MS = 150;  // GRID: cells per row of a key
  var tip = document.getElementById("tip");
  window.xkExplorer = window.xkExplorer || {};

  function decode(b64, Type) {
    var raw = atob(b64), bytes = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
    return new Type(bytes.buffer);
  }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function loadImage(uri) {
    return new Promise(function (resolve, reject) {
      var im = new Image();
      im.onload = function () { resolve(im); };
      im.onerror = function () { reject(new Error("a sprite sheet does not decode")); };
      im.src = uri;
    });
  }
  function bitmap(source) {
    return window.createImageBitmap ? createImageBitmap(source) : Promise.resolve(source);
  }
    function clusterColor(c) { return c < 0 ? NONE : PALETTE[c % PALETTE.length]; }

  function setup(root, d) {
    var A = {};
    ["index", "klass", "label", "prediction", "cluster", "correct", "tile"].forEach(function (k) { A[k] = decode(d.arrays[k], Int32Array); });
    ["x", "y", "atypicality"].forEach(function (k) { A[k] = decode(d.arrays[k], Float32Array); });
    var lut = decode(d.lut, Uint8Array);
    var n = d.n, side = d.side, cols = d.cols, per = cols * cols;
    var canvas = root.querySelector("canvas.scatter");
    var wrap = root.querySelector(".scatter-wrap");
    var ctx = canvas.getContext("2d");
    var detail = root.querySelector("aside.detail");
    var legend = root.querySelector(".explorer-legend");
    var showThumbs = root.querySelector("input.xk-thumbs");
    var state = { mode: "cluster", selected: -1, images: null, maps: null, moving: false };
    var W = 0, H = 0, dpr = 1;
    var px = new Float32Array(n), py = new Float32Array(n);
    var placed = [];
    var view = null;

    // typical members first: they get the thumbnails when space is short
    var order = Array.from({ length: n }, function (_, i) { return i; });
    order.sort(function (a, b) { return A.atypicality[a] - A.atypicality[b]; });
    var x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (var i = 0; i < n; i++) {
      x0 = Math.min(x0, A.x[i]); x1 = Math.max(x1, A.x[i]); y0 = Math.min(y0, A.y[i]); y1 = Math.max(y1, A.y[i]);
    }
    if (!n) { x0 = y0 = 0; x1 = y1 = 1; }

    function fit() {
      var sx = (x1 - x0) || 1, sy = (y1 - y0) || 1;
      view = { cx: (x0 + x1) / 2, cy: (y0 + y1) / 2, k: Math.min((W - 2 * THUMB) / sx, (H - 2 * THUMB) / sy) };
    }
    function resize() {
      dpr = window.devicePixelRatio || 1;
      W = Math.max(200, Math.floor(wrap.clientWidth) - 2);  // the border is outside (content-box)
      H = Math.max(240, Math.min(640, Math.round(W * 0.62)));
      canvas.style.width = W + "px";
      canvas.style.height = H + "px";
      canvas.width = Math.round(W * dpr);
      canvas.height = Math.round(H * dpr);
      if (!view) fit();
    }
    function color(i) {
      return state.mode === "cluster" ? clusterColor(A.cluster[i]) : CORRECT[String(A.correct[i])];
    }
    function tileSource(i, kind) {
      var t = A.tile[i];
      if (t < 0) return null;
      var sheets = kind === "image" ? state.images : state.maps;
      if (!sheets) return null;
      var s = sheets[Math.floor(i / per)], k = i % per;
      return s ? { sheet: s, sx: (k % cols) * side, sy: Math.floor(k / cols) * side } : null;
    }
    function thumbOf(i) { return tileSource(i, state.images ? "image" : "map"); }

    var lastDraw = 0;
    function draw() {
      var t0 = performance.now();
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, W, H);
      ctx.fillStyle = "#fff";
      ctx.fillRect(0, 0, W, H);
      var i;
      for (i = 0; i < n; i++) {
        px[i] = W / 2 + (A.x[i] - view.cx) * view.k;
        py[i] = H / 2 - (A.y[i] - view.cy) * view.k;
      }
      // dots, one path per colour
      var byColor = {};
      for (i = 0; i < n; i++) {
        if (px[i] < -5 || py[i] < -5 || px[i] > W + 5 || py[i] > H + 5) continue;
        var c = color(i);
        (byColor[c] = byColor[c] || []).push(i);
      }
      Object.keys(byColor).forEach(function (c) {
        ctx.fillStyle = c;
        ctx.beginPath();
        byColor[c].forEach(function (j) { ctx.moveTo(px[j] + DOT, py[j]); ctx.arc(px[j], py[j], DOT, 0, 6.2832); });
        ctx.fill();
      });
      // thumbnails: greedy on a grid of THUMB-sized cells, typical samples first, none overlapping
      placed = [];
      if (showThumbs.checked && !state.moving && (state.images || state.maps)) {
        var grid = new Map(), S = THUMB + 2;
        ctx.imageSmoothingEnabled = side < THUMB;
        for (var o = 0; o < n && placed.length < MAX_THUMBS; o++) {
          i = order[o];
          if (A.tile[i] < 0 || px[i] < THUMB / 2 || py[i] < THUMB / 2 || px[i] > W - THUMB / 2 || py[i] > H - THUMB / 2) continue;
          var gx = Math.floor(px[i] / S) + 1, gy = Math.floor(py[i] / S) + 1, cell = gy * GRID + gx, free = true;
          if (grid.has(cell)) continue;
          for (var a = -1; a <= 1 && free; a++) {
            for (var b = -1; b <= 1 && free; b++) {
              var other = grid.get(cell + b * GRID + a);
              if (other !== undefined && Math.abs(px[other] - px[i]) < S && Math.abs(py[other] - py[i]) < S) free = false;
            }
          }
          if (!free) continue;
          grid.set(cell, i);
          placed.push(i);
        }
        var frames = {};
        placed.forEach(function (j) {
          var src = thumbOf(j), x = px[j] - THUMB / 2, y = py[j] - THUMB / 2;
          ctx.drawImage(src.sheet, src.sx, src.sy, side, side, x, y, THUMB, THUMB);
          (frames[color(j)] = frames[color(j)] || []).push(j);
        });
        ctx.lineWidth = 2;
        Object.keys(frames).forEach(function (c) {  // the frames, one path per colour
          ctx.strokeStyle = c;
          ctx.beginPath();
          frames[c].forEach(function (j) { ctx.rect(px[j] - THUMB / 2 - 1, py[j] - THUMB / 2 - 1, THUMB + 2, THUMB + 2); });
          ctx.stroke();
        });
      }
      if (state.selected >= 0) {
        var s = state.selected;
        ctx.lineWidth = 2.5;
        ctx.strokeStyle = "#000";
        ctx.beginPath();
        ctx.arc(px[s], py[s], placed.indexOf(s) >= 0 ? THUMB * 0.75 : 7, 0, 6.2832);
        ctx.stroke();
      }
      canvas.dataset.thumbs = String(placed.length);
      lastDraw = performance.now() - t0;
    }
    // while the view moves (drag, wheel) only the dots are drawn; the thumbnails come back
    // SETTLE_MS after the last move
    var settle = null;
    function moving() {
      state.moving = true;
      clearTimeout(settle);
      settle = setTimeout(function () { state.moving = false; redraw(); }, SETTLE_MS);
    }
    var pending = false;
    function redraw() {
      if (pending) return;
      pending = true;
      requestAnimationFrame(function () { pending = false; draw(); });
    }

    function drawLegend() {
      legend.textContent = "";
      var counts = {};
      for (var i = 0; i < n; i++) {
        var key = state.mode === "cluster" ? A.cluster[i] : A.correct[i];
        counts[key] = (counts[key] || 0) + 1;
      }
      var keys = Object.keys(counts).map(Number).sort(function (a, b) { return state.mode === "cluster" ? a - b : b - a; });
      keys.forEach(function (k) {
        var item = el("span", "legend-item");
        var sw = el("span", "swatch-dot");
        var text;
        if (state.mode === "cluster") {
          sw.style.background = clusterColor(k);
          var kl = d.clusters[String(k)];
          text = k < 0 ? "no cluster" : "cluster " + k + (kl !== undefined ? " (" + (d.names[String(kl)] || kl) + ")" : "");
        } else {
          sw.style.background = CORRECT[String(k)];
          text = k === 1 ? "correct" : k === 0 ? "wrong" : "no label";
        }
        item.appendChild(sw);
        item.appendChild(document.createTextNode(" " + text + ": " + counts[k]));
        legend.appendChild(item);
      });
      root.dataset.colour = state.mode;
    }

    function name(k) { return k < 0 ? "–" : (d.names[String(k)] || String(k)); }
    function hit(x, y) {
      for (var p = placed.length - 1; p >= 0; p--) {
        var j = placed[p];
        if (Math.abs(x - px[j]) <= THUMB / 2 + 1 && Math.abs(y - py[j]) <= THUMB / 2 + 1) return j;
      }
      var best = -1, bd = 64;
      for (var i = 0; i < n; i++) {
        var dx = px[i] - x, dy = py[i] - y, dd = dx * dx + dy * dy;
        if (dd < bd) { bd = dd; best = i; }
      }
      return best;
    }
    function describe(i) {
      var lab = A.label[i] < 0 ? "" : " · label " + name(A.label[i]);
      return "sample " + A.index[i] + " · class " + name(A.klass[i]) + lab + " · predicted " + name(A.prediction[i]) +
        " · cluster " + (A.cluster[i] < 0 ? "–" : A.cluster[i]);
    }

    function paintTile(cv, i, kind) {
      var c = cv.getContext("2d");
      c.imageSmoothingEnabled = false;
      c.clearRect(0, 0, cv.width, cv.height);
      var src = tileSource(i, kind);
      if (!src) return false;
      c.drawImage(src.sheet, src.sx, src.sy, side, side, 0, 0, cv.width, cv.height);
      return true;
    }
    function showDetail(i) {
      state.selected = i;
      detail.hidden = false;
      detail.dataset.index = String(A.index[i]);
      detail.querySelector(".detail-title").textContent = "sample " + A.index[i];
      var hasImage = paintTile(detail.querySelector(".d-image"), i, "image");
      paintTile(detail.querySelector(".d-map"), i, "map");
      detail.querySelector(".d-image").parentNode.hidden = !hasImage;
      var ov = detail.querySelector(".d-overlay");
      ov.parentNode.hidden = !hasImage;
      if (hasImage) {
        var c = ov.getContext("2d"), src = tileSource(i, "image"), m = tileSource(i, "map");
        c.imageSmoothingEnabled = false;
        c.filter = "grayscale(1)";
        c.drawImage(src.sheet, src.sx, src.sy, side, side, 0, 0, ov.width, ov.height);
        c.filter = "none";
        c.globalAlpha = 0.6;
        c.drawImage(m.sheet, m.sx, m.sy, side, side, 0, 0, ov.width, ov.height);
        c.globalAlpha = 1;
      }
      var facts = detail.querySelector(".detail-facts");
      facts.textContent = "";
      var wrong = A.label[i] >= 0 && A.label[i] !== A.prediction[i];
      [["dataset index", A.index[i]], ["class (explained)", name(A.klass[i])], ["label", name(A.label[i])],
        ["prediction", name(A.prediction[i]) + (wrong ? " ✗" : "")], ["cluster", A.cluster[i] < 0 ? "–" : A.cluster[i]],
        ["atypicality", A.atypicality[i].toFixed(3)]].forEach(function (kv) {
        var tr = el("tr");
        tr.appendChild(el("th", null, kv[0]));
        var td = el("td", kv[0] === "prediction" && wrong ? "wrong" : null, kv[1]);
        tr.appendChild(td);
        facts.appendChild(tr);
      });
      redraw();
    }

    // interaction: wheel zooms at the cursor, a drag pans, a click (no drag) opens the detail
    var drag = null;
    function local(ev) { var r = canvas.getBoundingClientRect(); return [ev.clientX - r.left, ev.clientY - r.top]; }
    canvas.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      var p = local(ev), f = Math.exp(-ev.deltaY * 0.0015);
      var dx = (p[0] - W / 2) / view.k, dy = (p[1] - H / 2) / view.k;
      view.cx += dx - dx / f; view.cy -= dy - dy / f; view.k *= f;
      moving();
      redraw();
    }, { passive: false });
    canvas.addEventListener("mousedown", function (ev) { drag = { p: local(ev), cx: view.cx, cy: view.cy, moved: false }; });
    window.addEventListener("mouseup", function () { setTimeout(function () { drag = null; }, 0); });
    canvas.addEventListener("mousemove", function (ev) {
      var p = local(ev);
      if (drag && (ev.buttons & 1)) {
        var dx = p[0] - drag.p[0], dy = p[1] - drag.p[1];
        if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
        if (drag.moved) {
          view.cx = drag.cx - dx / view.k; view.cy = drag.cy + dy / view.k;
          tip.hidden = true;
          moving();
          redraw();
          return;
        }
      }
      var i = hit(p[0], p[1]);
      canvas.style.cursor = i >= 0 ? "pointer" : "grab";
      if (i < 0) { tip.hidden = true; return; }
      tip.textContent = describe(i);
      tip.hidden = false;
      tip.style.left = (ev.clientX + 12) + "px";
      tip.style.top = (ev.clientY + 12) + "px";
    });
    canvas.addEventListener("mouseleave", function () { tip.hidden = true; });
    canvas.addEventListener("click", function (ev) {
      if (drag && drag.moved) return;
      var p = local(ev), i = hit(p[0], p[1]);
      if (i >= 0) showDetail(i);
    });
    root.querySelectorAll("input[type=radio]").forEach(function (r) {
      r.addEventListener("change", function () { state.mode = r.value; drawLegend(); redraw(); });
    });
    showThumbs.addEventListener("change", redraw);
    root.querySelector("button.xk-reset").addEventListener("click", function () { fit(); redraw(); });
    window.addEventListener("resize", function () { resize(); redraw(); });
    root.querySelectorAll(".swatch-dot[data-cluster]").forEach(function (s) { s.style.background = clusterColor(Number(s.dataset.cluster)); });
    root.addEventListener("click", function (ev) {
      var t = ev.target.closest ? ev.target.closest("canvas.xk-thumb") : null;
      if (!t) return;
      showDetail(Number(t.dataset.pos));
      wrap.scrollIntoView({ block: "nearest" });
    });

    // the API the browser test and a curious user can call: the screen position of a sample
    window.xkExplorer[d.id] = {
      at: function (datasetIndex) {
        for (var i = 0; i < n; i++) if (A.index[i] === datasetIndex) return [px[i], py[i]];
        return null;
      },
      placed: function () { return placed.map(function (i) { return A.index[i]; }); },
      thumbSide: THUMB,
      drawMs: function () { return lastDraw; },
      painted: null,
    };

    resize();
    draw();
    drawLegend();
    // the sheets: images as they are; maps (grey) coloured here with the page's inferno table
    var maps = Promise.all(d.maps.map(loadImage)).then(function (ims) {
      return Promise.all(ims.map(function (im) {
        var cv = document.createElement("canvas");
        cv.width = im.width; cv.height = im.height;
        var c = cv.getContext("2d");
        c.drawImage(im, 0, 0);
        var px4 = c.getImageData(0, 0, cv.width, cv.height), p = px4.data;
        for (var q = 0; q < p.length; q += 4) {
          var v = p[q] * 3;
          p[q] = lut[v]; p[q + 1] = lut[v + 1]; p[q + 2] = lut[v + 2]; p[q + 3] = 255;
        }
        c.putImageData(px4, 0, 0);
        return bitmap(cv);
      }));
    });
    // decoded once into bitmaps: drawing a tile from a large <img> or <canvas> may decode or
    // copy the whole sheet on every call
    var images = Promise.all(d.images.map(loadImage)).then(function (ims) { return Promise.all(ims.map(bitmap)); });
    Promise.all([maps, images]).then(function (both) {
      state.maps = both[0];
      state.images = d.images.length ? both[1] : null;
      root.querySelectorAll("canvas.xk-thumb").forEach(function (cv) {
        paintTile(cv, Number(cv.dataset.pos), state.images ? "image" : "map");
      });
      draw();
      window.xkExplorer[d.id].painted = performance.now();
      root.dataset.ready = "1";
    }).catch(function (err) {
      root.dataset.ready = "error";
      console.error(String(err));
    });
  }

  explorers.forEach(function (d) {
    var root = document.querySelector('[data-explorer="' + d.id + '"]');
    if (root) setup(root, d);
  });
})();
