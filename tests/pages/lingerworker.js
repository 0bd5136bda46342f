function write(tag) {
  fetch("/setcookie?name=" + tag + "&s=0.3").catch(() => {});
  const open = indexedDB.open(tag + "db", 1);
  open.onupgradeneeded = () => open.result.createObjectStore("s");
  open.onsuccess = () => open.result.close();
  caches.open(tag + "cache").then((c) => c.put("/w", new Response("w")));
}
setInterval(() => write(self.name || "worker"), 30);
