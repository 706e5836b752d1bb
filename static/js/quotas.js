// The quota and budget pages' in-place edits: a refused one is shown, with its message by its field.
(function () {
  "use strict";

  // An edit refused (400: a value is wrong, 403: not yours to change) comes back as the form with the message
  // by its field: swap it in, as htmx does not swap error answers by itself.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var status = event.detail.xhr.status;
    if ((status === 400 || status === 403) && event.detail.elt.closest("[data-quota-form]")) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });
})();
