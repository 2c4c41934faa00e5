/* Drift: one stored best's re-timings (re-timed / stored, with the noise floor) and where it
   regressed after which stack change. The key comes from the page's query string. */
"use strict";

(() => {
  const { $, el, fmt, request } = TF;
  const WANTED = ["kernel", "problem", "device_class", "objective", "triton"];

  function stack(env) {
    return Object.entries(env || {}).map(([k, v]) => `${k} ${v}`).join(" · ") || "–";
  }

  function drawChart(d) {
    const box = $("#drift-chart");
    const timed = d.points.filter((p) => p.ratio !== null);
    if (!timed.length) {
      box.replaceChildren(el("p", { class: "empty", text: "No re-timing ran ok yet: nothing to draw." }));
      return;
    }
    const xs = timed.map((p) => Date.parse(p.at) / 1000);
    const ratios = timed.map((p) => p.ratio);
    const floor = timed.map((p) => (p.noise === null ? null : 1 + p.noise));
    box.replaceChildren();
    new uPlot({
      width: Math.max(box.clientWidth, 320), height: 260,
      scales: { x: { time: true } },
      axes: [{}, { label: "re-timed / stored", size: 70 }],
      series: [
        {},
        { label: "re-timed / stored", stroke: "#2a6fdb", width: 1.5, points: { size: 4 } },
        { label: "1 + noise floor", stroke: "#999", dash: [6, 4], width: 1, points: { show: false } },
      ],
      legend: { show: true },
    }, [xs, ratios, floor], box);
  }

  function render(d) {
    $("#drift-key").textContent = `${d.kernel} · ${fmt.problem(d.problem)} · ${d.device_class} · triton ${d.triton} · ${d.objective}`;
    const rows = [
      ["stored time", `${fmt.ms(d.time_ms)} ms (${d.backend})`],
      ["noise floor", d.noise === null ? "not measured" : `${(100 * d.noise).toFixed(1)}%`],
      ["last verdict", d.revalidation || "never revalidated (or tuned since)"],
      ["re-timings shown", String(d.points.length)],
    ];
    $("#drift-best").replaceChildren(
      el("table", { class: "kv" }, ...rows.map(([k, v]) => el("tr", {}, el("th", { text: k }), el("td", { text: v })))),
      el("code", { class: "small", text: fmt.config(d.config) }));
    if (!d.points.length) {
      const empty = $("#drift-empty");
      empty.hidden = false;
      empty.textContent = "This best was never re-timed: run `tunefleet revalidate`, or let a server revalidate it after a stack change.";
    }
    drawChart(d);
    $("#regressions-empty").hidden = d.regressions.length > 0;
    $("#regressions").tBodies[0].replaceChildren(...d.regressions.map((p) => el("tr", {},
      el("td", { text: fmt.when(p.at) }),
      el("td", { class: `status ${p.state}`, text: p.state }),
      el("td", { class: "num", text: p.ratio === null ? "failed" : `${p.ratio.toFixed(3)}×` }),
      el("td", { class: "small", text: stack(p.environment) }),
      el("td", { class: "small", text: p.stack_changed.join("; ") || p.changed || "no stack change recorded" }),
      el("td", {}, p.job_id ? el("a", { href: `/jobs/${p.job_id}`, text: `job ${p.job_id}` }) : "revalidate (CLI)"))));
  }

  TF.boot(async () => {
    const here = new URLSearchParams(location.search);
    const query = new URLSearchParams();
    for (const name of WANTED) if (here.get(name)) query.set(name, here.get(name));
    render(await request(`/v1/drift?${query}`));
  });
})();
