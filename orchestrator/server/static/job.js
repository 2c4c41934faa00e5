/* A job: per-study progress (live from the events stream), and for the chosen study its
   convergence chart (uPlot), outcomes, best config, parameter importance and trial table. */
"use strict";

(() => {
  const { $, el, fmt, request, events, progress, pager } = TF;
  const jobId = document.body.dataset.jobId;
  const LIVE = new Set(["queued", "running"]);
  const LIMIT = 50;
  const ANALYSIS_EVERY_MS = 2000;
  const OUTCOMES = document.body.dataset.outcomes.split(",");
  let me = null;
  let job = null;
  let studyId = null;
  let chart = null;
  let analysedAt = 0;
  let table = { sort: "id", order: "asc", offset: 0 };

  function bars(container, entries, format) {
    const top = Math.max(...entries.map(([, v]) => v), 0) || 1;
    container.replaceChildren(...entries.map(([name, value]) => {
      const fill = el("span", { class: `fill ${name}` });
      fill.style.width = `${(100 * value) / top}%`;
      return el("div", { class: "bar" }, el("span", { class: "label", text: name }),
        el("span", { class: "track" }, fill), el("span", { class: "value", text: format(value) }));
    }));
  }

  // A study's best as `tunefleet job` shows it: the decided key's re-timed winner, or the
  // fastest trial so far (marked), with "*" when a cancelled job wrote it.
  function bestText(st) {
    if (st.best_ms === null) return "–";
    return fmt.ms(st.best_ms) + (st.best_source === "so_far" ? " (so far)" : "") + (st.cancelled_job ? "*" : "");
  }

  function renderJob(detail) {
    job = detail;
    const status = $("#job-status");
    status.className = `status ${detail.status}`;
    status.textContent = detail.cancel_requested && LIVE.has(detail.status) ? `${detail.status} (cancelling)` : detail.status;
    $("#job-summary").textContent = `${detail.kernel} · team ${detail.team || "–"} · sampler ${detail.sampler} · objective ${detail.objective} · priority ${detail.priority} · created ${fmt.when(detail.created_at)}` +
      (detail.started_at ? ` · started ${fmt.when(detail.started_at)}` : "") + (detail.finished_at ? ` · finished ${fmt.when(detail.finished_at)}` : "");
    $("#job-error").hidden = !detail.error;
    $("#job-error").textContent = detail.error ? `Error: ${detail.error}` : "";
    const bar = $("#job-progress");
    bar.max = Math.max(detail.trials_budget, 1);
    bar.value = Math.min(detail.trials_done, detail.trials_budget);
    $("#job-progress-text").textContent = `${detail.trials_done}/${detail.trials_budget} trials`;
    const cancel = $("#cancel");
    cancel.hidden = !(me.can_cancel && (me.admin || detail.team === me.team) && LIVE.has(detail.status) && !detail.cancel_requested);
    $("#studies-empty").hidden = detail.studies.length > 0;
    $("#studies-empty").textContent = detail.studies.length ? "" : (LIVE.has(detail.status) ? "No study planned yet: the job waits for a scheduler." : "This job has no study.");
    $("#studies").tBodies[0].replaceChildren(...detail.studies.map((st) => {
      const row = el("tr", { "data-study-id": st.id, class: st.id === studyId ? "selected clickable" : "clickable" },
        el("td", {}, el("a", { href: `#study-${st.id}`, text: st.label })),
        el("td", {}, el("span", { class: `status ${st.status}`, text: st.status })),
        el("td", {}, progress(st.done, st.budget)),
        el("td", { text: Object.entries(st.outcomes).map(([k, v]) => `${k} ${v}`).join(", ") || "–" }),
        el("td", { class: "num best-ms", text: bestText(st) }));
      row.addEventListener("click", (ev) => { ev.preventDefault(); choose(st.id); });
      return row;
    }));
    if (studyId === null && detail.studies.length) choose(detail.studies[0].id);
  }

  function drawChart(steps) {
    const box = $("#chart");
    $("#chart-empty").hidden = steps.length > 0;
    if (chart) { chart.destroy(); chart = null; }
    box.replaceChildren();
    if (!steps.length) return;
    const xs = steps.map((s) => s[0]);
    const ys = steps.map((s) => s[1]);
    chart = new uPlot({
      width: Math.max(box.clientWidth, 320), height: 240,
      scales: { x: { time: false }, y: { distr: 3 } },
      axes: [{ label: "trial" }, { label: "best time so far (ms)", size: 70 }],
      series: [{ label: "trial" }, { label: "best ms", stroke: "#2a6fdb", width: 2, paths: uPlot.paths.stepped({ align: 1 }), points: { size: 5 } }],
      legend: { show: true },
    }, [xs, ys], box);
  }

  function renderAnalysis(a) {
    $("#study-title").textContent = a.study.label;
    drawChart(a.convergence);
    const counts = a.study.outcomes;
    bars($("#outcomes"), OUTCOMES.filter((o) => counts[o]).map((o) => [o, counts[o]]), (v) => String(v));
    if (!Object.keys(counts).length) $("#outcomes").replaceChildren(el("p", { class: "empty", text: "No trial yet." }));
    const best = $("#best");
    if (a.best_ms !== null) {
      const st = a.study;
      const decided = a.best_source === "decided";
      const rows = [[decided ? "time (re-timed winner)" : "time (best trial so far)", `${fmt.ms(a.best_ms)} ms`]];
      if (st.cancelled_job) rows.push(["from", `cancelled job ${st.best_job}: its fastest trial so far, not re-timed`]);
      else if (decided && st.best_job !== a.job_id) rows.push(["from", `job ${st.best_job} (the key's stored best)`]);
      if (decided) {
        rows.push(["backend", st.backend === "vendor" ? `vendor (${st.vendor})` : st.backend]);
        rows.push(["vs spec default", a.speedup_vs_default ? `${fmt.speedup(a.speedup_vs_default)} (default ${fmt.ms(a.default_ms)} ms, same re-timing)` : "default not re-timed"]);
        rows.push(["vs vendor", a.speedup_vs_vendor ? `${fmt.speedup(a.speedup_vs_vendor)} (${st.vendor || "vendor path"} ${fmt.ms(st.vendor_ms)} ms, same re-timing)` : "vendor path not measured"]);
      } else {
        rows.push(["vs spec default", a.default_ms ? `after the final re-timing (default's trial ${fmt.ms(a.default_ms)} ms)`
          : (a.default_outcome ? `default was ${a.default_outcome}` : "after the final re-timing")]);
      }
      rows.push(["vs median trial", a.speedup_vs_median ? `${fmt.speedup(a.speedup_vs_median)} (fastest trial ${fmt.ms(a.fastest_trial_ms)} ms, median ${fmt.ms(a.median_ms)} ms)` : "–"]);
      best.replaceChildren(
        el("table", { class: "kv best-kv" }, ...rows.map(([k, v]) => el("tr", {}, el("th", { text: k }), el("td", { text: v })))),
        el("pre", { class: "config", text: a.best_config ? JSON.stringify(a.best_config, null, 1) : "no Triton config ran ok" }));
    } else {
      best.replaceChildren(el("p", { class: "empty", text: "No ok trial yet." }));
    }
    const imp = Object.entries(a.importance);
    if (imp.length) bars($("#importance"), imp, (v) => `${(100 * v).toFixed(0)}%`);
    else $("#importance").replaceChildren(el("p", { class: "empty", text: "Needs 3 ok trials with different times." }));
  }

  async function loadTrials() {
    const query = new URLSearchParams({ limit: LIMIT, offset: table.offset, sort: table.sort, order: table.order });
    const outcome = $("#outcome-filter").value;
    if (outcome) query.set("outcome", outcome);
    const page = await request(`/v1/jobs/${jobId}/studies/${studyId}/trials?${query}`);
    $("#trials-count").textContent = `${page.total} trial${page.total === 1 ? "" : "s"}`;
    for (const th of document.querySelectorAll("#trials th[data-sort]")) {
      th.classList.toggle("asc", th.dataset.sort === table.sort && table.order === "asc");
      th.classList.toggle("desc", th.dataset.sort === table.sort && table.order === "desc");
    }
    const body = $("#trials").tBodies[0];
    if (!page.items.length) {
      body.replaceChildren(el("tr", {}, el("td", { colspan: 6, class: "empty", text: outcome ? `No ${outcome} trial.` : "No trial yet." })));
    } else {
      body.replaceChildren(...page.items.map((t) => el("tr", {},
        el("td", { class: "num", text: t.id }),
        el("td", {}, el("code", { text: fmt.config(t.config) })),
        el("td", {}, el("span", { class: `outcome ${t.outcome}`, text: t.outcome + (t.reused ? " (reused)" : "") })),
        el("td", { class: "num", text: fmt.ms(t.median_ms) }),
        el("td", { class: "num", text: fmt.num(t.compile_s) }),
        el("td", { class: "error-text", text: t.error || "" }))));
    }
    pager($("#trials-pager"), page.total, LIMIT, table.offset, (o) => { table.offset = o; loadTrials(); });
  }

  async function analyse() {
    analysedAt = Date.now();
    const [a] = await Promise.all([request(`/v1/jobs/${jobId}/studies/${studyId}`), table.offset === 0 ? loadTrials() : null]);
    renderAnalysis(a);
  }

  function choose(id) {
    studyId = id;
    table = { sort: table.sort, order: table.order, offset: 0 };
    document.querySelectorAll("#studies tr[data-study-id]").forEach((r) => r.classList.toggle("selected", Number(r.dataset.studyId) === id));
    $("#study").hidden = false;
    analyse().catch((e) => TF.banner(`Study ${id}: ${e.message}`));
  }

  async function follow() {
    let pending = null;
    await events(`/v1/jobs/${jobId}/events`, (name, data) => {
      if (name !== "progress") return;
      renderJob(data);
      if (studyId === null || pending) return;
      const wait = Math.max(0, ANALYSIS_EVERY_MS - (Date.now() - analysedAt));
      pending = setTimeout(() => { pending = null; analyse().catch(() => {}); }, wait);
    });
  }

  TF.boot(async (who) => {
    me = who;
    const select = $("#outcome-filter");
    OUTCOMES.forEach((o) => select.append(el("option", { text: o })));
    select.addEventListener("change", () => { table.offset = 0; loadTrials(); });
    for (const th of document.querySelectorAll("#trials th[data-sort]")) {
      th.addEventListener("click", () => {
        const key = th.dataset.sort;
        table = { sort: key, order: table.sort === key && table.order === "asc" ? "desc" : "asc", offset: 0 };
        loadTrials();
      });
    }
    $("#cancel").addEventListener("click", async () => {
      if (!confirm(`Cancel job ${jobId}? Finished trials stay.`)) return;
      try { renderJob(Object.assign({}, job, await request(`/v1/jobs/${jobId}/cancel`, { method: "POST" }))); } catch (e) { TF.banner(`Cannot cancel: ${e.message}`); }
    });
    try {
      renderJob(await request(`/v1/jobs/${jobId}`));
    } catch (e) {
      if (e.status === 404) {
        $("#studies").hidden = true;
        $("#studies-empty").hidden = false;
        $("#studies-empty").textContent = `No job ${jobId} for team ${me.team}.`;
        return;
      }
      throw e;
    }
    if (LIVE.has(job.status)) follow().catch(() => {});
  });
})();
