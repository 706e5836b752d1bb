// The quota pages: Plotly charts drawn from the JSON beside them, and in-place edits whose refusals are shown.
(function () {
  "use strict";

  // Draw every chart not drawn yet: on load, and after htmx swaps a new one in (a chart reloads when quotas change).
  function drawCharts() {
    if (!window.Plotly) return;
    document.querySelectorAll("[data-plotly]:not([data-drawn])").forEach(function (element) {
      var source = document.getElementById(element.dataset.plotly);
      if (!source) return;
      var figure = JSON.parse(source.textContent);
      element.dataset.drawn = "true";
      window.Plotly.newPlot(element, figure.data, figure.layout, {
        displaylogo: false,
        displayModeBar: false,
        responsive: true,
      });
    });
  }

  // An edit refused (400: a value is wrong, 403: not yours to change) comes back as the form with the message
  // by its field: swap it in, as htmx does not swap error answers by itself.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var status = event.detail.xhr.status;
    if ((status === 400 || status === 403) && event.detail.elt.closest("[data-quota-form]")) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });
  document.addEventListener("htmx:afterSettle", drawCharts);
  document.addEventListener("DOMContentLoaded", drawCharts);
})();
