"""Running a job: the driver, its ledger (database writes through ``db``), dispatch and pools, leases, promotion."""
