// The price form, enhanced: only the fields of the capacity type chosen are shown and sent (the server judges
// them either way).
(function () {
  "use strict";
  document.querySelectorAll("[data-price-form]").forEach(function (form) {
    var kind = form.querySelector("[name=capacity_type]");
    if (!kind) return;
    function show() {
      var onPrem = kind.value === "on_prem";
      form.querySelectorAll("fieldset[data-kind]").forEach(function (set) {
        var wanted = (set.dataset.kind === "on-prem") === onPrem;
        set.hidden = !wanted;
        set.disabled = !wanted;
      });
    }
    kind.addEventListener("change", show);
    show();
  });
})();
