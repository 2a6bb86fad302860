// nf4kernel's history site, opened as a file (file:///.../index.html): say what to do instead.
//
// asv's pages load their data (index.json, the graphs) over XMLHttpRequest, and the vendored
// libraries carry integrity hashes: a browser refuses both on file:// (Chromium blocks an
// integrity-checked script there, having no CORS response to check it against). asv then sends the
// reader to error.html, whose advice (check the internet connection) does not apply: served over
// HTTP, the site needs no network at all.
//
// The harness (harness/history/site.py) loads this script first in each page's <head>, with
// no integrity attribute: with one, it would be refused on file:// too, the one place it is for. It is a file of its own, and it
// sets styles through the CSSOM rather than markup, so that a Content-Security-Policy forbidding
// inline script and inline style attributes lets it run.
(function () {
  "use strict";
  if (window.location.protocol !== "file:") {
    return;
  }

  function line(parts) {
    var paragraph = document.createElement("p");
    parts.forEach(function (part) {
      var node = document.createElement(part.code ? "code" : "span");
      node.textContent = part.code || part.text;
      paragraph.appendChild(node);
    });
    return paragraph;
  }

  function show() {
    var box = document.createElement("div");
    box.id = "nf4kernel-needs-http";
    box.setAttribute("role", "alert");
    var title = document.createElement("h2");
    title.textContent = "This site must be served over HTTP.";
    box.appendChild(title);
    box.appendChild(
      line([{ text: "Opened as a file, the browser refuses to load its data and scripts." }])
    );
    box.appendChild(
      line([
        { text: "In the repository, run " },
        { code: "asv preview" },
        { text: " (or " },
        { code: "nox -s preview" },
        { text: ") and open " },
        { code: "http://127.0.0.1:8080" },
        { text: " (the address it prints)." },
      ])
    );
    box.style.font = "16px/1.5 sans-serif";
    box.style.margin = "2em";
    box.style.padding = "1em 1.5em";
    box.style.border = "2px solid #b94a48";
    box.style.background = "#fdf7f7";
    box.style.color = "#000";
    // The rest of the page can't work from a file, and error.html's advice is wrong here: hidden.
    Array.prototype.forEach.call(document.body.children, function (element) {
      element.style.display = "none";
    });
    document.body.insertBefore(box, document.body.firstChild);
  }

  if (document.body) {
    show();
  } else {
    document.addEventListener("DOMContentLoaded", show);
  }
})();
