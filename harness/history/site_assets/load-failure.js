// nf4kernel's history site: a library that fails to load sends the reader to error.html.
//
// asv's index.html does this with an inline <script> defining js_load_failure() and an
// onerror="js_load_failure()" attribute on each library's tag. The site's Content-Security-Policy
// forbids both (inline script is what an injected tag or handler would be), so the harness
// (harness/history/site.py) puts this file where asv's inline script was, before the
// libraries, and drops the attributes.
//
// A script's load error (missing, or refused by its integrity hash) does not bubble, but a
// listener on window in the capture phase sees it before the script element does. The scripts
// asv guarded are the libraries, the ones the site loads with an integrity hash.
(function () {
  "use strict";
  window.addEventListener(
    "error",
    function (event) {
      var element = event.target;
      if (element instanceof HTMLScriptElement && element.hasAttribute("integrity")) {
        window.location = "error.html";
      }
    },
    true
  );
})();
