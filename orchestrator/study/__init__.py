"""One study: its loop (ask, reject, dedupe, warm start, tell), the Optuna adapter and the samplers; no database, no Ray."""
