/* Ringscope report: interactive charts (uPlot, embedded above this script) and sortable tables, offline.
 * Charts: an element with data-chart="ID" reads its JSON spec from <script type="application/json" id="ID">.
 *   {kind: "stack"|"line", x: [...], xlabel, ylabel, unit, series: [{label, color, values: [...]}], ymax?}
 *   ymax fixes the y-scale (charts set side by side for comparison share one). Line charts also take xticks
 *   (ticks at these x only, e.g. rank counts), xunit / xdigits (how hover shows x; default seconds, 1 digit)
 *   and per series dash (e.g. [6, 4]) and points (marker size; 0 hides them).
 *   Hover shows exact values, drag selects an x-range to zoom (double-click resets), a legend click hides a
 *   series (the stack is rebuilt without it). null is "no data": a gap, never 0.
 * Tables: <table class="sortable">; a header click sorts by the cells' data-v (numbers) or text.
 */
(function () {
  "use strict";

  function fmt(value, unit, digits) {
    if (value === null || value === undefined || Number.isNaN(value)) return "no data";
    return value.toLocaleString(undefined, {maximumFractionDigits: digits, minimumFractionDigits: digits}) +
      (unit ? " " + unit : "");
  }

  function widthOf(el) { return Math.max(320, el.clientWidth || 900); }

  // The y-axis is as wide as its longest tick label (uPlot's fixed 50 px cut "75,000" to "5,000").
  function yAxis(spec) {
    return {label: spec.ylabel, size: function (u, values) {
      var longest = (values || []).reduce(function (n, v) { return Math.max(n, String(v).length); }, 0);
      return Math.max(50, 24 + 7 * longest);
    }};
  }

  // x runs over whole buckets (the points are bucket centres), so the first and last columns are not cut in half.
  function xScale(spec) {
    var half = (spec.bucket || 0) / 2;
    return {time: false, range: function (u, min, max) { return [min - half, max + half]; }};
  }

  // From 0; up to spec.ymax where charts share a scale, else a little above the highest value.
  function yScale(spec) {
    return {range: function (u, min, max) {
      if (spec.ymax) return [0, spec.ymax];
      return [0, max > 0 ? max * 1.15 : 1];
    }};
  }

  function stacked(el, spec) {
    var count = spec.x.length;
    // Drawn top of the stack first, so each lower phase paints over the one above it.
    var order = spec.series.map(function (_, i) { return i; }).reverse();
    function stackData(u) {
      var shown = spec.series.map(function (_, i) {
        return !u || u.series[1 + order.indexOf(i)].show !== false;
      });
      var acc = new Array(count).fill(0), tops = [];
      spec.series.forEach(function (series, i) {
        acc = acc.map(function (a, j) { return a + (shown[i] ? (series.values[j] || 0) : 0); });
        tops.push(acc.map(function (v, j) { return spec.empty[j] ? null : v; }));
      });
      return [spec.x].concat(order.map(function (i) { return tops[i]; }));
    }
    var bars = uPlot.paths.bars({size: [0.9, 80]});
    var series = [{label: spec.xlabel, value: function (u, v) { return v === null ? "" : fmt(v, "s", 1); }}]
      .concat(order.map(function (i) {
        var s = spec.series[i];
        return {
          label: s.label, fill: s.color, stroke: s.color, width: 0, paths: bars, points: {show: false},
          value: function (u, v, si, idx) {
            return idx === null || idx === undefined ? "--" : fmt(s.values[idx], spec.unit, 2);
          }
        };
      }));
    var plot = new uPlot({
      width: widthOf(el), height: spec.height || 300, series: series,
      scales: {x: xScale(spec), y: yScale(spec)}, axes: [{label: spec.xlabel}, yAxis(spec)],
      cursor: {drag: {x: true, y: false}},
      hooks: {setSeries: [function (u) { u.setData(stackData(u), false); u.redraw(); }]}
    }, stackData(null), el);
    return plot;
  }

  function line(el, spec) {
    var xunit = spec.xunit === undefined ? "s" : spec.xunit, xdigits = spec.xdigits === undefined ? 1 : spec.xdigits;
    var series = [{label: spec.xlabel, value: function (u, v) { return v === null ? "" : fmt(v, xunit, xdigits); }}]
      .concat(spec.series.map(function (s) {
        var one = {label: s.label, stroke: s.color, width: 2, spanGaps: false,
                   points: s.points === 0 ? {show: false} : {size: s.points || 4},
                   value: function (u, v, si, idx) {
                     return idx === null || idx === undefined ? "--" : fmt(v, spec.unit, 1);
                   }};
        if (s.dash) one.dash = s.dash;
        return one;
      }));
    var xAxis = {label: spec.xlabel};
    if (spec.xticks) {
      xAxis.splits = function () { return spec.xticks; };
      xAxis.values = function (u, splits) { return splits.map(String); };
    }
    var data = [spec.x].concat(spec.series.map(function (s) { return s.values; }));
    return new uPlot({
      width: widthOf(el), height: spec.height || 220, series: series,
      scales: {x: xScale(spec), y: yScale(spec)},
      axes: [xAxis, yAxis(spec)], cursor: {drag: {x: true, y: false}}
    }, data, el);
  }

  var plots = [];
  document.querySelectorAll("[data-chart]").forEach(function (el) {
    var spec = JSON.parse(document.getElementById(el.getAttribute("data-chart")).textContent);
    el.textContent = "";
    plots.push([el, spec.kind === "stack" ? stacked(el, spec) : line(el, spec)]);
  });
  window.addEventListener("resize", function () {
    plots.forEach(function (p) { p[1].setSize({width: widthOf(p[0]), height: p[1].height}); });
  });

  document.querySelectorAll("table.sortable").forEach(function (table) {
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, column) {
      th.addEventListener("click", function () {
        var ascending = th.getAttribute("data-dir") !== "asc";
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("data-dir"); });
        th.setAttribute("data-dir", ascending ? "asc" : "desc");
        var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = a.cells[column].getAttribute("data-v"), y = b.cells[column].getAttribute("data-v");
          var nx = parseFloat(x), ny = parseFloat(y);
          var order = Number.isNaN(nx) || Number.isNaN(ny) ? String(x).localeCompare(String(y)) : nx - ny;
          return ascending ? order : -order;
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  });
})();
