// The example SPA: a history-API router plus hashbang routes; content arrives by fetch.
(function () {
  "use strict";
  var app = document.getElementById("app");

  function ready(status, location) {
    if (typeof window.onCaptureReady === "function") window.onCaptureReady(status, location);
  }
  function setCanonical(href) {
    document.querySelector('link[rel="canonical"]').setAttribute("href", href);
  }
  function setStatus(code) {
    var m = document.createElement("meta");
    m.name = "prerender-status-code";
    m.content = String(code);
    document.head.appendChild(m);
  }
  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c];
    });
  }
  function getJSON(url) {
    return fetch(url).then(function (r) {
      if (!r.ok) throw new Error(r.status);
      return r.json();
    });
  }

  var routes = [
    [/^\/$/, function () {
      document.title = "Example Shop";
      setCanonical("/");
      return getJSON("/api/items").then(function (items) {
        app.innerHTML = "<h1>Welcome to Example Shop</h1><p>Our latest items:</p><ul>" +
          items.slice(0, 5).map(function (i) {
            return '<li><a href="/items/' + i.id + '">' + esc(i.name) + "</a></li>";
          }).join("") + '</ul><p><a href="/items">All items</a></p>';
      });
    }],
    [/^\/items$/, function () {
      document.title = "All items - Example Shop";
      setCanonical("/items");
      return getJSON("/api/items").then(function (items) {
        app.innerHTML = "<h1>All items</h1><ul>" + items.map(function (i) {
          return '<li><a href="/items/' + i.id + '">' + esc(i.name) + "</a></li>";
        }).join("") + "</ul>";
      });
    }],
    [/^\/items\/(\d+)$/, function (m) {
      var id = Number(m[1]);
      return getJSON("/api/items/" + id).then(function (item) {
        document.title = item.name + " - Example Shop";
        setCanonical("/items/" + id);
        app.innerHTML = '<article><h1 class="item">' + esc(item.name) + "</h1><p>" +
          esc(item.text) + '</p><p class="price">$' + esc(item.price) + "</p></article>" +
          (id > 1 ? '<a rel="prev" href="/items/' + (id - 1) + '">Previous</a> ' : "") +
          '<a href="/items/' + (id + 1) + '">Next</a>';
      }, function () { return notFound(); });
    }],
    [/^\/about$/, function () {
      document.title = "About - Example Shop";
      setCanonical("/about");
      app.innerHTML = "<h1>About us</h1><p>A small shop, rendered in your browser.</p>";
      return Promise.resolve();
    }],
  ];
  var hashRoutes = {
    "/faq": "<h1>FAQ</h1><p>Questions, answered. This page lives at a hashbang URL.</p>",
    "/contact": "<h1>Contact</h1><p>Write to shop@example.com.</p>",
  };

  function notFound() {
    document.title = "Not found - Example Shop";
    setStatus(404);
    app.innerHTML = "<h1>Page not found</h1><p>There is nothing here.</p>";
  }

  function render() {
    var hash = location.hash;
    if (hash.indexOf("#!") === 0) {
      var html = hashRoutes[hash.slice(2)];
      if (html) {
        document.title = hash.slice(3) + " - Example Shop";
        setCanonical("/" + hash);
        app.innerHTML = html;
      } else {
        notFound();
      }
      return Promise.resolve();
    }
    for (var i = 0; i < routes.length; i++) {
      var m = location.pathname.match(routes[i][0]);
      if (m) return routes[i][1](m);
    }
    notFound();
    return Promise.resolve();
  }

  document.addEventListener("click", function (e) {
    var a = e.target.closest && e.target.closest("a");
    if (!a || a.origin !== location.origin || e.metaKey || e.ctrlKey) return;
    e.preventDefault();
    history.pushState(null, "", a.getAttribute("href"));
    render();
  });
  window.addEventListener("popstate", render);
  window.addEventListener("hashchange", render);
  render().then(function () { ready(); }, function () { ready(); });
})();
