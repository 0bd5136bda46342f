// The shop in React 18 with React Router 6: history routes, data fetched in effects, a
// catch-all route, and the same not-found view for a product or category that is not there.
const e = React.createElement;
const { BrowserRouter, Routes, Route, Link, useParams, useLocation, useSearchParams } =
  ReactRouterDOM;

function useJSON(url) {
  const [data, setData] = React.useState(undefined);
  React.useEffect(() => {
    setData(undefined);
    fetch(url).then((r) => (r.ok ? r.json() : null)).then(setData);
  }, [url]);
  return data;
}

function NotFound() {
  const location = useLocation();
  return e("section", { className: "missing" },
    e("h1", null, "Page not found"),
    e("p", null, "Nothing lives at ", e("code", null, location.pathname), "."),
    e(Link, { to: "/" }, "Back to the shop"));
}

function Home() {
  const products = useJSON("/api/products");
  if (products === undefined) return e("p", null, "Loading");
  return e("div", null,
    e("h1", null, "Things for tea and coffee"),
    e("p", null, "Kettles, pots, grinders and mugs, chosen one by one and sent the next day."),
    e("ul", null, products.map((p) => e("li", { key: p.id },
      e(Link, { to: "/products/" + p.id }, p.name)))),
    e("h2", null, "More"),
    e("ul", null,
      e("li", null, e(Link, { to: "/categories/empty" }, "Gift cards")),
      e("li", null, e(Link, { to: "/search?q=kettle" }, "Kettles")),
      e("li", null, e(Link, { to: "/search?q=zzz" }, "Something else")),
      e("li", null, e(Link, { to: "/products/999" }, "The old samovar")),
      e("li", null, e(Link, { to: "/categories/nope" }, "Chocolate")),
      e("li", null, e(Link, { to: "/old/blog/a-post" }, "Our blog")),
      e("li", null, e(Link, { to: "/no-such-page" }, "Opening hours"))));
}

function Product() {
  const { id } = useParams();
  const product = useJSON("/api/products/" + id);
  if (product === undefined) return e("p", null, "Loading");
  if (product === null) return e(NotFound);
  return e("article", null, e("h1", null, product.name), e("p", null, product.text),
    e("p", null, "In ", e(Link, { to: "/categories/" + product.category }, product.category)));
}

function Category() {
  const { slug } = useParams();
  const category = useJSON("/api/categories/" + slug);
  if (category === undefined) return e("p", null, "Loading");
  if (category === null) return e(NotFound);
  return e("div", null, e("h1", null, category.name),
    category.products.length
      ? e("ul", null, category.products.map((p) => e("li", { key: p.id },
          e(Link, { to: "/products/" + p.id }, p.name))))
      : e("p", null, "No products in this category yet."));
}

function Search() {
  const [params] = useSearchParams();
  const q = params.get("q") || "";
  const found = useJSON("/api/search?q=" + encodeURIComponent(q));
  if (found === undefined) return e("p", null, "Loading");
  return e("div", null, e("h1", null, "Search"),
    found.products.length
      ? e("ul", null, found.products.map((p) => e("li", { key: p.id },
          e(Link, { to: "/products/" + p.id }, p.name))))
      : e("p", null, "No results for \u201c" + q + "\u201d."));
}

ReactDOM.createRoot(document.getElementById("app")).render(
  e(BrowserRouter, null,
    e("header", null, e("strong", null, "Tea & Coffee Shop")),
    e("nav", null,
      e(Link, { to: "/" }, "Home"), " ",
      e(Link, { to: "/categories/tea" }, "Tea"), " ",
      e(Link, { to: "/categories/coffee" }, "Coffee"), " ",
      e(Link, { to: "/about" }, "About"), " ",
      e(Link, { to: "/contact" }, "Contact")),
    e("main", null,
      e(Routes, null,
        e(Route, { path: "/", element: e(Home) }),
        e(Route, { path: "/products/:id", element: e(Product) }),
        e(Route, { path: "/categories/:slug", element: e(Category) }),
        e(Route, { path: "/search", element: e(Search) }),
        e(Route, { path: "/about", element: e("p", null, "We sell tea and coffee things.") }),
        e(Route, { path: "/contact", element: e("p", null, "Write to shop@example.com.") }),
        e(Route, { path: "*", element: e(NotFound) }))),
    e("footer", null, "\u00a9 Tea & Coffee Shop")));
