// Starts Swagger UI on /api/docs (templates/api_docs.html). A static file, because the CSP runs
// no inline script; its settings (the schema's URL, ...) come from the page's json_script.
(function () {
  "use strict";
  const settings = JSON.parse(document.getElementById("swagger-settings").textContent);
  const csrfToken = document.body.dataset.csrfToken;
  settings.dom_id = "#swagger-ui";
  settings.presets = [window.SwaggerUIBundle.presets.apis];
  // "Try it out" with the login cookie: unsafe methods need the CSRF token, as the player's do.
  settings.requestInterceptor = function (request) {
    if (csrfToken) request.headers["X-CSRFToken"] = csrfToken;
    return request;
  };
  window.SwaggerUIBundle(settings);
})();
