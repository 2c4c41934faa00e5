/* Portability: for a kernel and problem, each class's best config run on every other class,
   as a loss against that class's own best (a heat map; cells without data say so). */
"use strict";

(() => {
  const { $, el, fmt, request } = TF;
  const HOT_LOSS_PCT = 100; // the colour saturates here
  const schemas = new Map(); // kernel -> its problem's dimension names, in the spec's order

  function colour(loss) {
    const t = Math.min(Math.max(loss, 0) / HOT_LOSS_PCT, 1);
    return `hsl(${Math.round(120 * (1 - t))}, 70%, ${Math.round(85 - 25 * t)}%)`;
  }

  function cell(c) {
    if (c.loss_pct === null) return el("td", { class: "nodata", text: c.note });
    const td = el("td", { class: "heat", title: `${fmt.ms(c.time_ms)} ms on ${c.target}; its own best ${fmt.ms(c.target_best_ms)} ms` },
      el("strong", { text: c.source === c.target ? "own best" : `${c.loss_pct >= 0 ? "+" : ""}${c.loss_pct.toFixed(1)}%` }),
      el("br"), el("span", { class: "small", text: `${fmt.ms(c.time_ms)} ms` }));
    td.style.background = colour(c.loss_pct);
    return td;
  }

  async function load(problem) {
    const query = new URLSearchParams({ kernel: $("#kernel").value, objective: $("#objective").value });
    if (problem) query.set("problem", problem);
    const m = await request(`/v1/portability?${query}`);
    const order = schemas.get(m.kernel);
    const chooser = $("#problem");
    chooser.replaceChildren(...m.problems.map((p) => el("option", { text: fmt.problem(p, order) })));
    if (m.problem) chooser.value = fmt.problem(m.problem, order);
    const table = $("#heatmap");
    const empty = $("#port-empty");
    if (m.classes.length < 2) {
      table.hidden = true;
      empty.hidden = false;
      empty.textContent = !m.problem
        ? `No ok trial of ${m.kernel} (${m.objective}) yet: nothing to compare.`
        : `Only ${m.classes.length ? m.classes[0] : "no class"} has ok trials of ${m.kernel} on ${fmt.problem(m.problem, order)}: a job on a second device class is needed.`;
      if (m.classes.length !== 1) return;
    } else {
      empty.hidden = true;
    }
    table.hidden = false;
    table.tHead.replaceChildren(el("tr", {}, el("th", { text: "best config of ↓ run on →" }), ...m.classes.map((c) => el("th", { text: c }))));
    const rows = m.classes.map((source) => el("tr", {},
      el("th", { title: JSON.stringify(m.best[source].config), text: `${source} (${fmt.ms(m.best[source].time_ms)} ms)` }),
      ...m.cells.filter((c) => c.source === source).map(cell)));
    table.tBodies[0].replaceChildren(...rows);
  }

  TF.boot(async () => {
    const { kernels } = await request("/v1/kernels");
    kernels.forEach((k) => schemas.set(k.name, k.problem.map((d) => d.name)));
    $("#kernel").replaceChildren(...kernels.map((k) => el("option", { value: k.name, text: k.name })));
    const wanted = new URLSearchParams(location.search).get("kernel");
    if (wanted && kernels.some((k) => k.name === wanted)) $("#kernel").value = wanted;
    const reload = (problem) => load(problem).catch((e) => TF.banner(e.message));
    $("#kernel").addEventListener("change", () => reload(null));
    $("#objective").addEventListener("change", () => reload($("#problem").value || null));
    $("#problem").addEventListener("change", () => reload($("#problem").value));
    await load(null);
  });
})();
