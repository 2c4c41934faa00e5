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
``repository.<function>``. Each function takes an open :class:`~sqlalchemy.orm.Session` (from
:meth:`db.Database.session`) and neither commits nor rolls back: the caller's ``with db.session()``
block is the transaction. Reads return frozen dataclass records (``*Record``) or plain data, never
ORM objects, so they stay valid after the session closes. ``ensure_*`` functions are get-or-create
and safe under concurrent callers. Only ``db/`` speaks SQL: callers build no query.
"""

from __future__ import annotations

from db.repository.best import (
    BestDecision as BestDecision,
)
from db.repository.best import (
    BestRecord as BestRecord,
)
from db.repository.best import (
    best_version as best_version,
)
from db.repository.best import (
    get_best as get_best,
)
from db.repository.best import (
    mark_revalidation as mark_revalidation,
)
from db.repository.best import (
    upsert_best as upsert_best,
)
from db.repository.catalog import (
    DeviceClassRecord as DeviceClassRecord,
)
from db.repository.catalog import (
    EnvironmentRecord as EnvironmentRecord,
)
from db.repository.catalog import (
    device_class_by_key as device_class_by_key,
)
from db.repository.catalog import (
    device_classes_by_key as device_classes_by_key,
)
from db.repository.catalog import (
    ensure_device_class as ensure_device_class,
)
from db.repository.catalog import (
    ensure_environment as ensure_environment,
)
from db.repository.catalog import (
    ensure_kernel as ensure_kernel,
)
from db.repository.catalog import (
    get_environment as get_environment,
)
from db.repository.catalog import (
    kernel_ids as kernel_ids,
)
from db.repository.jobs import (
    JobRecord as JobRecord,
)
from db.repository.jobs import (
    cancel_requested as cancel_requested,
)
from db.repository.jobs import (
    cancelled_jobs as cancelled_jobs,
)
from db.repository.jobs import (
    cancels_requested as cancels_requested,
)
from db.repository.jobs import (
    count_jobs as count_jobs,
)
from db.repository.jobs import (
    create_job as create_job,
)
from db.repository.jobs import (
    get_job as get_job,
)
from db.repository.jobs import (
    list_jobs as list_jobs,
)
from db.repository.jobs import (
    request_cancel as request_cancel,
)
from db.repository.jobs import (
    set_job_status as set_job_status,
)
from db.repository.leases import (
    Lease as Lease,
)
from db.repository.leases import (
    acquire_lease as acquire_lease,
)
from db.repository.leases import (
    check_lease as check_lease,
)
from db.repository.leases import (
    claim_next_job as claim_next_job,
)
from db.repository.leases import (
    db_now as db_now,
)
from db.repository.leases import (
    jobs_leased_by as jobs_leased_by,
)
from db.repository.leases import (
    lease_live as lease_live,
)
from db.repository.leases import (
    release_lease as release_lease,
)
from db.repository.leases import (
    renew_lease as renew_lease,
)
from db.repository.studies import (
    StudyRecord as StudyRecord,
)
from db.repository.studies import (
    StudyTrialCount as StudyTrialCount,
)
from db.repository.studies import (
    ensure_study as ensure_study,
)
from db.repository.studies import (
    set_study_status as set_study_status,
)
from db.repository.studies import (
    studies_for_job as studies_for_job,
)
from db.repository.studies import (
    study_in_job as study_in_job,
)
from db.repository.studies import (
    study_trial_counts as study_trial_counts,
)
from db.repository.tokens import (
    LAST_USED_EVERY as LAST_USED_EVERY,
)
from db.repository.tokens import (
    AuditRecord as AuditRecord,
)
from db.repository.tokens import (
    TokenRecord as TokenRecord,
)
from db.repository.tokens import (
    active_token_count as active_token_count,
)
from db.repository.tokens import (
    create_token as create_token,
)
from db.repository.tokens import (
    list_audit as list_audit,
)
from db.repository.tokens import (
    list_tokens as list_tokens,
)
from db.repository.tokens import (
    revoke_token as revoke_token,
)
from db.repository.tokens import (
    verify_token as verify_token,
)
from db.repository.tokens import (
    write_audit as write_audit,
)
from db.repository.trial_reads import (
    ClassVerdict as ClassVerdict,
)
from db.repository.trial_reads import (
    OkTrial as OkTrial,
)
from db.repository.trial_reads import (
    TrialSort as TrialSort,
)
from db.repository.trial_reads import (
    config_of as config_of,
)
from db.repository.trial_reads import (
    config_timed as config_timed,
)
from db.repository.trial_reads import (
    newest_ok_trials as newest_ok_trials,
)
from db.repository.trial_reads import (
    ok_problem_keys as ok_problem_keys,
)
from db.repository.trial_reads import (
    outcomes_since as outcomes_since,
)
from db.repository.trial_reads import (
    study_final_trials as study_final_trials,
)
from db.repository.trial_reads import (
    study_trial_page as study_trial_page,
)
from db.repository.trial_reads import (
    study_trial_stamp as study_trial_stamp,
)
from db.repository.trial_reads import (
    verdicts_by_class as verdicts_by_class,
)
from db.repository.trials import (
    MeasuredRecord as MeasuredRecord,
)
from db.repository.trials import (
    ReusedVerdict as ReusedVerdict,
)
from db.repository.trials import (
    StudyKey as StudyKey,
)
from db.repository.trials import (
    TrialFields as TrialFields,
)
from db.repository.trials import (
    TrialRecord as TrialRecord,
)
from db.repository.trials import (
    find_measured as find_measured,
)
from db.repository.trials import (
    last_trial_id as last_trial_id,
)
from db.repository.trials import (
    measured_for_key as measured_for_key,
)
from db.repository.trials import (
    measured_keys as measured_keys,
)
from db.repository.trials import (
    outcome_counts as outcome_counts,
)
from db.repository.trials import (
    record_trial as record_trial,
)
from db.repository.trials import (
    record_trials as record_trials,
)
from db.repository.trials import (
    reuse_measured as reuse_measured,
)
from db.repository.trials import (
    trials_for_study as trials_for_study,
)
from db.repository.trials import (
    verdicts_after as verdicts_after,
)
from db.repository.vendor import (
    VendorTrialFields as VendorTrialFields,
)
from db.repository.vendor import (
    VendorTrialRecord as VendorTrialRecord,
)
from db.repository.vendor import (
    measured_vendor as measured_vendor,
)
from db.repository.vendor import (
    record_vendor_trials as record_vendor_trials,
)
from db.repository.vendor import (
    vendor_trials_for_study as vendor_trials_for_study,
)
