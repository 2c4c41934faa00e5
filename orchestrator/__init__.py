"""Jobs, Optuna-guided studies, Ray dispatch to GPU workers, and the ``tunefleet`` CLI."""
