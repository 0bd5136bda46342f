self.addEventListener("install", () => fetch("{SENTINEL}/sw", { mode: "no-cors" }));
