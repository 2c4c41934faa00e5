"""tunefleet's team service: the HTTP API over the application layer, the scheduler, auth and tokens, limits, metrics and the web page."""
