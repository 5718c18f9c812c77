// Queuey admin pages: small helps on top of plain forms (everything works without them).
(function () {
  "use strict";

  // A destructive form's button stays disabled until the queue's name is typed.
  document.querySelectorAll("form[data-confirm-name]").forEach(function (form) {
    var input = form.querySelector("input[name=confirm]");
    var button = form.querySelector("button[type=submit]");
    var check = function () { button.disabled = input.value !== form.dataset.confirmName; };
    input.addEventListener("input", check);
    check();
  });

  // The test message's body is checked as JSON while typing (the server checks
  // again; the text is sent as typed, so big numbers keep their digits).
  document.querySelectorAll("textarea[data-json-check]").forEach(function (area) {
    var note = area.parentNode.querySelector("[data-json-error]");
    var check = function () {
      try {
        var value = JSON.parse(area.value);
        if (value === null || typeof value !== "object" || Array.isArray(value)) {
          note.textContent = "a message must be a JSON object";
          return;
        }
        note.textContent = "";
      } catch (err) {
        note.textContent = "not valid JSON yet: " + err.message;
      }
    };
    area.addEventListener("input", check);
  });
})();
