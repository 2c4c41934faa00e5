/* Best configs: problems × device classes for a kernel, with provenance, and bundle downloads. */
"use strict";

(() => {
  const { $, el, fmt, request, download } = TF;
  const FORMATS = document.body.dataset.formats.split(",");
  const schemas = new Map(); // kernel -> its problem's dimension names, in the spec's order

  function rate(b) {
    const parts = [];
    if (b.tflops !== null) parts.push(`${fmt.num(b.tflops)} TFLOP/s`);
    if (b.gbs !== null) parts.push(`${fmt.num(b.gbs)} GB/s`);
    if (b.roofline_pct !== null) parts.push(`${b.roofline_pct.toFixed(1)}% of roofline`);
    return parts.join(" · ") || "rate unknown for this class";
  }

  // Which backend holds the key, and its speedups over the default config and the vendor path
  // (the server's, as `tunefleet best` prints them: times of the re-timing that decided it).
  function decided(b) {
    const backend = b.backend === "vendor" ? `vendor (${b.vendor})` : b.backend || "triton";
    return `${backend} · vs default ${fmt.speedup(b.speedup_vs_default)} · vs vendor ${fmt.speedup(b.speedup_vs_vendor)}`;
  }

  // After a job link, as after the job id in `tunefleet best`: the config comes from a cancelled job.
  const CANCELLED_MARK = "*";

  // The line explaining the mark, naming the cancelled jobs ("" when there are none).
  function cancelledNote(rows) {
    const jobs = [...new Set(rows.filter((b) => b.cancelled_job && b.job_id).map((b) => b.job_id))].sort((x, y) => x - y);
    if (!jobs.length) return "";
    return `${CANCELLED_MARK} from cancelled job ${jobs.join(", ")}: its fastest trial so far, not re-timed; ` +
      `\`tunefleet resume ${jobs[0]}\` finishes it`;
  }

  function cell(b) {
    if (!b) return el("td", { class: "nodata", text: "no best config" });
    const drift = new URLSearchParams({ kernel: b.kernel, problem: fmt.problem(b.problem), device_class: b.device_class,
      objective: b.objective, triton: b.triton });
    const who = el("span", { class: "muted small" }, `team ${b.team || "–"} · `,
      b.job_id ? el("a", { href: `/jobs/${b.job_id}`, text: `job ${b.job_id}` }) : "no job",
      b.cancelled_job ? el("span", { class: "cancelled-mark", title: "cancelled job: its fastest trial so far, not re-timed", text: CANCELLED_MARK }) : "",
      ` · ${fmt.when(b.updated_at)} · `, el("a", { class: "drift", href: `/drift?${drift}`, text: "drift" }));
    return el("td", { class: "best-cell", title: JSON.stringify(b.config) },
      el("strong", { text: `${fmt.ms(b.time_ms)} ms` }), el("br"), el("span", { text: rate(b) }), el("br"),
      el("span", { class: "small", text: decided(b) }), el("br"),
      el("code", { class: "small", text: fmt.config(b.config) }), el("br"), who);
  }

  async function load() {
    const kernel = $("#kernel").value;
    const query = new URLSearchParams({ kernel, objective: $("#objective").value });
    const data = await request(`/v1/best?${query}`);
    const classes = [...new Set(data.best.map((b) => b.device_class))].sort();
    const problems = new Map();
    for (const b of data.best) {
      const key = fmt.problem(b.problem, schemas.get(kernel));
      if (!problems.has(key)) problems.set(key, {});
      problems.get(key)[b.device_class] = b;
    }
    const table = $("#best-table");
    const empty = $("#best-empty");
    const note = $("#best-note");
    note.textContent = cancelledNote(data.best);
    note.hidden = !note.textContent;
    const chooser = $("#bundle-class");
    chooser.replaceChildren(el("option", { value: "", text: "all classes" }), ...classes.map((c) => el("option", { text: c })));
    if (!data.best.length) {
      table.hidden = true;
      empty.hidden = false;
      empty.textContent = `No best config of ${kernel} (${data.objective}) stored yet: a finished job writes them.`;
      return;
    }
    empty.hidden = true;
    table.hidden = false;
    table.tHead.replaceChildren(el("tr", {}, el("th", { text: "Problem" }), ...classes.map((c) => el("th", { text: c }))));
    table.tBodies[0].replaceChildren(...[...problems].map(([key, byClass]) =>
      el("tr", {}, el("th", { text: key }), ...classes.map((c) => cell(byClass[c])))));
  }

  function downloads() {
    $("#downloads").replaceChildren(...FORMATS.map((f) => {
      const b = el("button", { type: "button", "data-format": f, text: `Download ${f}` });
      b.addEventListener("click", async () => {
        const query = new URLSearchParams({ format: f, objective: $("#objective").value });
        if ($("#bundle-class").value) query.set("device_class", $("#bundle-class").value);
        const status = $("#download-status");
        status.textContent = `Preparing the ${f} bundle…`;
        try {
          status.textContent = `Downloaded ${await download(`/v1/bundles/${encodeURIComponent($("#kernel").value)}?${query}`)}.`;
        } catch (e) {
          status.textContent = `No ${f} bundle: ${e.message}`;
        }
      });
      return b;
    }));
  }

  TF.boot(async () => {
    const { kernels } = await request("/v1/kernels");
    kernels.forEach((k) => schemas.set(k.name, k.problem.map((d) => d.name)));
    const select = $("#kernel");
    select.replaceChildren(...kernels.map((k) => el("option", { value: k.name, title: k.description, text: k.name })));
    const wanted = new URLSearchParams(location.search).get("kernel");
    if (wanted && kernels.some((k) => k.name === wanted)) select.value = wanted;
    select.addEventListener("change", () => load().catch((e) => TF.banner(e.message)));
    $("#objective").addEventListener("change", () => load().catch((e) => TF.banner(e.message)));
    downloads();
    await load();
  });
})();
