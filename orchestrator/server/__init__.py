"""tunefleet's team service: the HTTP API (app, auth, metrics), the scheduler and, later, the web page."""
