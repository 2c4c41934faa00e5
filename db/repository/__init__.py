"""Repository functions: every read and write of tunefleet's tables, one module per aggregate.

* :mod:`~db.repository.catalog`: kernels, device classes, environments
* :mod:`~db.repository.jobs`: jobs (state machine, cancel flag, pages); :mod:`~db.repository.leases`:
  their leases and the scheduler's claim
* :mod:`~db.repository.studies`: studies and their trial counts
* :mod:`~db.repository.trials`: trial writes, dedupe, reuse and warm start's reads;
  :mod:`~db.repository.trial_reads`: the reads of trials for pages, figures, priors and metrics
* :mod:`~db.repository.best`: best configs; :mod:`~db.repository.vendor`: vendor-path measurements
* :mod:`~db.repository.tokens`: API tokens and the audit log

This package is their public surface: callers write ``from db import repository`` and
``repository.<function>`` (the errors they raise, ``repository.NotFound`` and the like, too).
Each function takes an open :class:`~sqlalchemy.orm.Session` (from :meth:`db.Database.session`)
and neither commits nor rolls back: the caller's ``with db.session()`` block is the transaction. Reads return frozen dataclass records (``*Record``) or plain data, never
ORM objects, so they stay valid after the session closes. ``ensure_*`` functions are get-or-create
and safe under concurrent callers. Only ``db/`` speaks SQL: callers build no query.
"""

from __future__ import annotations

from db.errors import InvalidRecord, InvalidTransition, LeaseLost, NotFound
from db.repository.best import (
    BestDecision,
    BestRecord,
    best_version,
    get_best,
    mark_revalidation,
    upsert_best,
)
from db.repository.catalog import (
    DeviceClassRecord,
    EnvironmentRecord,
    device_class_by_key,
    device_classes_by_key,
    ensure_device_class,
    ensure_environment,
    ensure_kernel,
    get_environment,
    kernel_ids,
)
from db.repository.jobs import (
    JobRecord,
    cancel_requested,
    cancelled_jobs,
    cancels_requested,
    count_jobs,
    create_job,
    get_job,
    list_jobs,
    request_cancel,
    set_job_status,
)
from db.repository.leases import (
    Lease,
    acquire_lease,
    check_lease,
    claim_next_job,
    db_now,
    jobs_leased_by,
    lease_live,
    release_lease,
    renew_lease,
)
from db.repository.studies import (
    StudyRecord,
    StudyTrialCount,
    ensure_study,
    set_study_status,
    studies_for_job,
    study_in_job,
    study_trial_counts,
)
from db.repository.tokens import (
    LAST_USED_EVERY,
    AuditRecord,
    TokenRecord,
    active_token_count,
    create_token,
    list_audit,
    list_tokens,
    revoke_token,
    verify_token,
    write_audit,
)
from db.repository.trial_reads import (
    ClassVerdict,
    OkTrial,
    TrialSort,
    config_of,
    config_timed,
    newest_ok_trials,
    ok_problem_keys,
    outcomes_since,
    study_final_trials,
    study_trial_page,
    study_trial_stamp,
    verdicts_by_class,
)
from db.repository.trials import (
    MeasuredRecord,
    ReusedVerdict,
    StudyKey,
    TrialFields,
    TrialRecord,
    find_measured,
    last_trial_id,
    measured_for_key,
    measured_keys,
    outcome_counts,
    record_trial,
    record_trials,
    reuse_measured,
    trials_for_study,
    verdicts_after,
)
from db.repository.vendor import (
    VendorTrialFields,
    VendorTrialRecord,
    measured_vendor,
    record_vendor_trials,
    vendor_trials_for_study,
)

__all__ = [
    "LAST_USED_EVERY",
    "AuditRecord",
    "BestDecision",
    "BestRecord",
    "ClassVerdict",
    "DeviceClassRecord",
    "EnvironmentRecord",
    "InvalidRecord",
    "InvalidTransition",
    "JobRecord",
    "Lease",
    "LeaseLost",
    "MeasuredRecord",
    "NotFound",
    "OkTrial",
    "ReusedVerdict",
    "StudyKey",
    "StudyRecord",
    "StudyTrialCount",
    "TokenRecord",
    "TrialFields",
    "TrialRecord",
    "TrialSort",
    "VendorTrialFields",
    "VendorTrialRecord",
    "acquire_lease",
    "active_token_count",
    "best_version",
    "cancel_requested",
    "cancelled_jobs",
    "cancels_requested",
    "check_lease",
    "claim_next_job",
    "config_of",
    "config_timed",
    "count_jobs",
    "create_job",
    "create_token",
    "db_now",
    "device_class_by_key",
    "device_classes_by_key",
    "ensure_device_class",
    "ensure_environment",
    "ensure_kernel",
    "ensure_study",
    "find_measured",
    "get_best",
    "get_environment",
    "get_job",
    "jobs_leased_by",
    "kernel_ids",
    "last_trial_id",
    "lease_live",
    "list_audit",
    "list_jobs",
    "list_tokens",
    "mark_revalidation",
    "measured_for_key",
    "measured_keys",
    "measured_vendor",
    "newest_ok_trials",
    "ok_problem_keys",
    "outcome_counts",
    "outcomes_since",
    "record_trial",
    "record_trials",
    "record_vendor_trials",
    "release_lease",
    "renew_lease",
    "request_cancel",
    "reuse_measured",
    "revoke_token",
    "set_job_status",
    "set_study_status",
    "studies_for_job",
    "study_final_trials",
    "study_in_job",
    "study_trial_counts",
    "study_trial_page",
    "study_trial_stamp",
    "trials_for_study",
    "upsert_best",
    "vendor_trials_for_study",
    "verdicts_after",
    "verdicts_by_class",
    "verify_token",
    "write_audit",
]
