"""The application layer: use cases every front end calls, returning plain views."""
