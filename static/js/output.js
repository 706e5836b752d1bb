// The job page's output panel: keep the box scrolled to its end while it follows, unless the reader has
// scrolled up to read earlier lines (then new lines are added below without moving what they read).
(function () {
  "use strict";

  var pinned = true;

  function box() {
    return document.querySelector('#job-output [data-testid="output-lines"]');
  }

  function atEnd(element) {
    return element.scrollHeight - element.scrollTop - element.clientHeight < 24;
  }

  document.addEventListener("htmx:beforeSwap", function () {
    var element = box();
    pinned = !element || atEnd(element);
  });
  document.addEventListener("htmx:afterSettle", function () {
    var element = box();
    if (element && pinned) element.scrollTop = element.scrollHeight;
  });
})();
