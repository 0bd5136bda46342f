// Keeps a cache write and an IndexedDB write in flight at every moment, as a shared worker
// (on connect), a dedicated one (on its first message) or the page that loads it (busypage).
function cache() {
  caches.open("busycache").then((c) => c.put("/w", new Response("w"))).then(cache, () => {});
}
function idb() {
  const open = indexedDB.open("busydb", 1);
  open.onupgradeneeded = () => open.result.createObjectStore("s");
  open.onsuccess = () => {
    const tx = open.result.transaction("s", "readwrite");
    tx.objectStore("s").put("x", 1);
    tx.oncomplete = () => { open.result.close(); idb(); };
  };
}
function start(port) {
  port.onmessage = () => {
    cache();
    idb();
    setTimeout(() => port.postMessage("writing"), 100);
  };
}
onconnect = (event) => start(event.ports[0]);
if (typeof WorkerGlobalScope !== "undefined" && typeof SharedWorkerGlobalScope === "undefined") {
  start(self);
}
