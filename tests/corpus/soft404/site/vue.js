// The shop in Vue 3 with Vue Router 4: history routes, data fetched when a view is set up, a
// catch-all route, and the same not-found view for a product or category that is not there.
// Its layout is plain divs: a side bar of links on every page but the first.
const { createApp, ref, watchEffect, computed } = Vue;
const { createRouter, createWebHistory, useRoute } = VueRouter;

function useJSON(url) {
  const data = ref(undefined);
  watchEffect(() => {
    const target = url();
    data.value = undefined;
    fetch(target).then((r) => (r.ok ? r.json() : null)).then((d) => { data.value = d; });
  });
  return data;
}

const NotFound = window.SHOP_NOT_FOUND || {
  template: `<div class="missing"><h2>Oops!</h2>
    <p>We looked everywhere for \u201c{{ $route.fullPath }}\u201d but came back empty-handed.</p>
    <router-link to="/">Take me home</router-link></div>`,
};

const Home = {
  setup() { return { products: useJSON(() => "/api/products") }; },
  template: `<div><p v-if="products === undefined">Loading</p><template v-else>
    <h1>Welcome to the shop</h1>
    <p>Everything for a good cup, tried at our own table before it is sold.</p>
    <div v-for="p in products" :key="p.id"><router-link :to="'/products/' + p.id">{{ p.name }}</router-link></div>
    <h3>Elsewhere</h3>
    <div><router-link to="/categories/tea">Tea things</router-link></div>
    <div><router-link to="/categories/coffee">Coffee things</router-link></div>
    <div><router-link to="/categories/empty">Gift cards</router-link></div>
    <div><router-link to="/search?q=kettle">Kettles</router-link></div>
    <div><router-link to="/search?q=zzz">Something else</router-link></div>
    <div><router-link to="/about">About us</router-link></div>
    <div><router-link to="/contact">Contact</router-link></div>
    <div><router-link to="/products/999">The old samovar</router-link></div>
    <div><router-link to="/categories/nope">Chocolate</router-link></div>
    <div><router-link to="/old/blog/a-post">Our blog</router-link></div>
    <div><router-link to="/no-such-page">Opening hours</router-link></div>
  </template></div>`,
};

const Product = {
  components: { NotFound },
  setup() {
    const route = useRoute();
    return { product: useJSON(() => "/api/products/" + route.params.id) };
  },
  template: `<p v-if="product === undefined">Loading</p><NotFound v-else-if="product === null"/>
    <div v-else><h1>{{ product.name }}</h1><p>{{ product.text }}</p>
    <p>In <router-link :to="'/categories/' + product.category">{{ product.category }}</router-link></p></div>`,
};

const Category = {
  components: { NotFound },
  setup() {
    const route = useRoute();
    return { category: useJSON(() => "/api/categories/" + route.params.slug) };
  },
  template: `<p v-if="category === undefined">Loading</p><NotFound v-else-if="category === null"/>
    <div v-else><h1>{{ category.name }}</h1>
    <div v-for="p in category.products" :key="p.id"><router-link :to="'/products/' + p.id">{{ p.name }}</router-link></div>
    <p v-if="!category.products.length">No products in this category yet.</p></div>`,
};

const Search = {
  setup() {
    const route = useRoute();
    const q = computed(() => route.query.q || "");
    return { q, found: useJSON(() => "/api/search?q=" + encodeURIComponent(q.value)) };
  },
  template: `<p v-if="found === undefined">Loading</p><div v-else><h1>Search</h1>
    <div v-for="p in found.products" :key="p.id"><router-link :to="'/products/' + p.id">{{ p.name }}</router-link></div>
    <p v-if="!found.products.length">Nothing matched \u201c{{ q }}\u201d.</p></div>`,
};

const router = createRouter({
  history: createWebHistory(),
  routes: [
    { path: "/", component: Home },
    { path: "/products/:id", component: Product },
    { path: "/categories/:slug", component: Category },
    { path: "/search", component: Search },
    { path: "/about", component: { template: "<p>A small shop for tea and coffee people.</p>" } },
    { path: "/contact", component: { template: "<p>Call us on weekdays.</p>" } },
    { path: "/:pathMatch(.*)*", component: NotFound },
  ],
});

createApp({
  setup() { return { route: useRoute() }; },
  template: `<div class="top"><router-link to="/">The Cup Shop</router-link></div>
    <div class="side" v-if="route.path !== '/'">
      <div><router-link to="/categories/tea">Tea things</router-link></div>
      <div><router-link to="/categories/coffee">Coffee things</router-link></div>
      <div><router-link to="/products/1">Kettle K2</router-link></div>
      <div><router-link to="/products/2">Teapot T7</router-link></div>
      <div><router-link to="/products/3">Grinder G1</router-link></div>
      <div><router-link to="/products/4">Mug M4</router-link></div>
      <div><router-link to="/search?q=kettle">Search for kettles</router-link></div>
      <div><router-link to="/about">About us</router-link></div>
      <div><router-link to="/contact">Contact</router-link></div>
    </div>
    <div class="content"><router-view :key="route.fullPath"/></div>
    <div class="bottom">Made with care, shipped with more.</div>`,
}).use(router).mount("#app");
