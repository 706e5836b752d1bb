// What every page shares: live parts poll only while the tab is visible, without the inline expressions
// (htmx's hx-trigger="every 5s [document.visibilityState === 'visible']") that the Content-Security-Policy
// forbids. An element marked data-poll-while-visible asks nothing while the tab is hidden and asks once
// when it is shown again (the "qm-visible" event its hx-trigger lists).
(function () {
  "use strict";

  function visible() {
    return document.visibilityState === "visible";
  }

  document.addEventListener("htmx:beforeRequest", function (event) {
    if (!visible() && event.detail.elt.hasAttribute("data-poll-while-visible")) event.preventDefault();
  });
  document.addEventListener("visibilitychange", function () {
    if (!visible() || !window.htmx) return;
    document.querySelectorAll("[data-poll-while-visible]").forEach(function (element) {
      window.htmx.trigger(element, "qm-visible");
    });
  });
})();
