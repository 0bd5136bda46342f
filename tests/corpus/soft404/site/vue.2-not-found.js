// The Vue shop's next build: the same app, its not-found view drawn in other words and other
// elements (SHOP_NOT_FOUND, read by the app below, loaded after it as the same code).
window.SHOP_NOT_FOUND = {
  template: `<section class="lost"><h1>Lost?</h1>
    <p>There is no page here. Try the search box, or start again from the front page.</p></section>`,
};
