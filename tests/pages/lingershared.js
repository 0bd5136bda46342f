let clients = 0;
function write() {
  fetch("/setcookie?name=shared&s=0.3").catch(() => {});
  const open = indexedDB.open("shareddb", 1);
  open.onupgradeneeded = () => open.result.createObjectStore("s");
  open.onsuccess = () => open.result.close();
  caches.open("sharedcache").then((c) => c.put("/w", new Response("w")));
}
onconnect = (event) => {
  clients += 1;
  const port = event.ports[0];
  port.onmessage = () => setInterval(write, 30);
  port.postMessage(clients);
};
