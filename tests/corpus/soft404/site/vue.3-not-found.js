// A build of the Vue shop with no not-found view: its catch-all route draws the home page
// for any path it does not know, as many apps do (Home is looked up when it is drawn).
window.SHOP_NOT_FOUND = { render: () => Vue.h(Home) };
