// Every chart of the portal, drawn with Plotly from the JSON beside it (templates/partials/chart.html): the
// figure the server sends holds its data and what is its own (axes, bar mode, height); the look every chart
// shares (font, colours, legend, margins, background) and Plotly's configuration are here, once.
//
// Figures name their colours ("color": "blue", or "blue/0.28" for that colour at 28% opacity) from COLOURS;
// series that name none take COLORWAY's in turn.
(function () {
  "use strict";

  var COLOURS = {
    blue: "#2453c7",
    orange: "#f79009",
    green: "#12b76a",
    violet: "#9e77ed",
    red: "#f04438",
    sky: "#0ba5ec",
    pink: "#ee46bc",
    slate: "#667085",
    lime: "#a6ef67",
    purple: "#875bf7",
    grey: "#98a2b3",
    indigo: "#3b5bdb",
    iris: "#7a5af8",
    lavender: "#7a8fd6",
    crimson: "#d92d20",
    maroon: "#b42318",
  };
  var COLORWAY = ["blue", "orange", "green", "violet", "red", "sky", "pink", "slate", "lime", "purple", "grey"];
  var LAYOUT = {
    height: 320,
    margin: { l: 60, r: 10, t: 40, b: 10 },
    legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" },
    font: { family: "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size: 12 },
    paper_bgcolor: "#ffffff",
    plot_bgcolor: "#ffffff",
    colorway: COLORWAY,
  };
  var CONFIG = { displaylogo: false, displayModeBar: false, responsive: true };

  function isObject(value) {
    return value !== null && typeof value === "object" && !Array.isArray(value);
  }

  // The figure's own settings over the shared ones, object by object (a figure's margin may set only "l").
  function merged(shared, own) {
    var result = {};
    Object.keys(shared).forEach(function (key) {
      result[key] = shared[key];
    });
    Object.keys(own).forEach(function (key) {
      result[key] = isObject(result[key]) && isObject(own[key]) ? merged(result[key], own[key]) : own[key];
    });
    return result;
  }

  function colour(value) {
    if (typeof value !== "string") return value;
    var parts = value.split("/");
    var hex = COLOURS[parts[0]];
    if (!hex) return value;
    if (parts.length === 1) return hex;
    var rgb = [1, 3, 5].map(function (at) {
      return parseInt(hex.slice(at, at + 2), 16);
    });
    return "rgba(" + rgb.join(", ") + ", " + parts[1] + ")";
  }

  // Every "color", "fillcolor", "colorway"… in the figure, a name or a list of names, as Plotly reads it.
  function coloured(value, key) {
    if (Array.isArray(value)) {
      return value.map(function (item) {
        return /colou?r(way)?$/.test(key || "") ? colour(item) : coloured(item);
      });
    }
    if (isObject(value)) {
      var result = {};
      Object.keys(value).forEach(function (name) {
        result[name] = coloured(value[name], name);
      });
      return result;
    }
    return /colou?r$/.test(key || "") ? colour(value) : value;
  }

  // Draw every chart not drawn yet: on load, and after htmx swaps a new one in (a chart reloads when quotas change).
  function drawCharts() {
    if (!window.Plotly) return;
    document.querySelectorAll("[data-plotly]:not([data-drawn])").forEach(function (element) {
      var source = document.getElementById(element.dataset.plotly);
      if (!source) return;
      var figure = coloured(JSON.parse(source.textContent));
      element.dataset.drawn = "true";
      window.Plotly.newPlot(element, figure.data, merged(coloured(LAYOUT), figure.layout || {}), CONFIG);
    });
  }

  document.addEventListener("htmx:afterSettle", drawCharts);
  document.addEventListener("DOMContentLoaded", drawCharts);
})();
