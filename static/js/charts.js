// The player's charts: plotly.js (served from our own static files, 4.8 MB) is loaded only when
// the charts section arrives; figures come from the server as plain dicts in #chart-data.
// Clicking a point jumps the player to the event it stands for (customdata = seq).
"use strict";

(function () {
  let loading = null;

  function loadPlotly(src) {
    if (window.Plotly) return Promise.resolve(window.Plotly);
    if (!loading) {
      loading = new Promise(function (resolve, reject) {
        const script = document.createElement("script");
        script.src = src;
        script.onload = function () { resolve(window.Plotly); };
        script.onerror = function () { loading = null; reject(new Error("plotly.js did not load")); };
        document.head.appendChild(script);
      });
    }
    return loading;
  }

  function draw() {
    const section = document.getElementById("charts");
    const dataEl = document.getElementById("chart-data");
    if (!section || !dataEl || section.getAttribute("data-drawn") === "true") return;
    const data = JSON.parse(dataEl.textContent);
    section.setAttribute("data-drawn", "true");
    loadPlotly(section.getAttribute("data-plotly")).then(function (Plotly) {
      Object.keys(data.figures).forEach(function (name) {
        const el = document.getElementById("chart-" + name);
        if (!el) return;
        const figure = data.figures[name];
        Plotly.newPlot(el, figure.data, figure.layout, data.config).then(function () {
          el.on("plotly_click", function (event) {
            const point = event.points && event.points[0];
            if (point && typeof point.customdata === "number") {
              document.dispatchEvent(new CustomEvent("replay:goto", { detail: { seq: point.customdata } }));
            }
          });
          el.setAttribute("data-ready", "true");
        });
      });
    }).catch(function (error) {
      section.setAttribute("data-error", String(error));
    });
  }

  document.addEventListener("htmx:afterSettle", function (event) {
    if (event.target.id === "charts") draw();
  });
  document.addEventListener("htmx:historyRestore", draw);
})();
