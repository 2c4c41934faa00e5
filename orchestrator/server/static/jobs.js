/* Jobs: the token's team's jobs, paged; running jobs follow their events stream. */
"use strict";

(() => {
  const { $, el, fmt, request, events, progress, pager } = TF;
  const LIMIT = 50;
  const MAX_STREAMS = 4; // a browser keeps ~6 connections per server; leave room for the rest
  const REFRESH_MS = 15000;
  const LIVE = new Set(["queued", "running"]);
  const streams = new Map(); // job id -> AbortController
  let me = null;
  let offset = 0;

  function shape(job) {
    const classes = job.classes.length === 1 && job.classes[0] === "all" ? "all classes" : `${job.classes.length} class${job.classes.length === 1 ? "" : "es"}`;
    return `${job.problems.length} problem${job.problems.length === 1 ? "" : "s"} × ${classes}`;
  }

  function mayCancel(job) {
    return me.can_cancel && (me.admin || job.team === me.team) && LIVE.has(job.status) && !job.cancel_requested;
  }

  function cells(job) {
    const status = el("span", { class: `status ${job.status}`, text: job.cancel_requested && LIVE.has(job.status) ? `${job.status} (cancelling)` : job.status });
    const cancel = mayCancel(job) ? el("button", { type: "button", class: "cancel", text: "Cancel" }) : "";
    if (cancel) {
      cancel.addEventListener("click", async () => {
        if (!confirm(`Cancel job ${job.id}? Finished trials stay.`)) return;
        cancel.disabled = true;
        try {
          update(await request(`/v1/jobs/${job.id}/cancel`, { method: "POST" }));
        } catch (e) {
          TF.banner(`Cannot cancel job ${job.id}: ${e.message}`);
          cancel.disabled = false;
        }
      });
    }
    return [
      el("td", {}, el("a", { href: `/jobs/${job.id}`, text: `#${job.id}` })),
      el("td", { text: job.kernel }),
      el("td", {}, status),
      el("td", { text: job.team || "–" }),
      el("td", { title: job.problems.map((p) => fmt.problem(p)).join("\n") + "\n" + job.classes.join(", "), text: shape(job) }),
      el("td", {}, progress(job.trials_done, job.trials_budget)),
      el("td", { class: "num", text: fmt.ms(job.best_ms) }),
      el("td", { text: fmt.when(job.created_at) }),
      el("td", {}, cancel),
    ];
  }

  function update(job) {
    const row = document.querySelector(`#jobs tr[data-job-id="${job.id}"]`);
    if (row) row.replaceChildren(...cells(job));
    if (!LIVE.has(job.status)) stop(job.id);
  }

  function stop(id) {
    const controller = streams.get(id);
    if (controller) controller.abort();
    streams.delete(id);
  }

  function follow(job) {
    if (streams.has(job.id) || streams.size >= MAX_STREAMS) return;
    const controller = new AbortController();
    streams.set(job.id, controller);
    events(`/v1/jobs/${job.id}/events`, (name, data) => {
      if (name === "progress") update(data);
    }, controller.signal).catch(() => {}).finally(() => {
      if (streams.get(job.id) === controller) streams.delete(job.id);
    });
  }

  async function load() {
    const status = $("#status-filter").value;
    const query = new URLSearchParams({ limit: LIMIT, offset });
    if (status) query.set("status", status);
    const page = await request(`/v1/jobs?${query}`);
    const table = $("#jobs");
    const empty = $("#jobs-empty");
    $("#jobs-count").textContent = page.total ? `${page.total} job${page.total === 1 ? "" : "s"}` : "";
    if (!page.items.length) {
      table.hidden = true;
      empty.hidden = false;
      empty.textContent = status
        ? `No ${status} job of team ${me.team}.`
        : `No job yet for team ${me.team}. Submit one with: tunefleet submit JOB.yaml --server ${location.origin}`;
    } else {
      empty.hidden = true;
      table.hidden = false;
      table.tBodies[0].replaceChildren(...page.items.map((job) => el("tr", { "data-job-id": job.id }, ...cells(job))));
    }
    const shown = new Set(page.items.map((j) => j.id));
    for (const id of [...streams.keys()]) if (!shown.has(id)) stop(id);
    page.items.filter((j) => LIVE.has(j.status)).forEach(follow);
    pager($("#jobs-pager"), page.total, LIMIT, offset, (o) => { offset = o; load(); });
  }

  TF.boot(async (who) => {
    me = who;
    $("#status-filter").addEventListener("change", () => { offset = 0; load(); });
    await load();
    setInterval(() => load().catch(() => {}), REFRESH_MS);
  });
})();
