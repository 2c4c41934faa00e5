"""A module a job must never make the server import: importing it leaves a marker file."""

import os
from pathlib import Path

Path(os.environ.get("TUNEFLEET_EVIL_MARKER", "/tmp/tunefleet-evil-imported")).write_text("imported")
SPEC = None
