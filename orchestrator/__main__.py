"""``python -m orchestrator`` runs the ``tunefleet`` CLI (for source checkouts without the script)."""

from orchestrator.commands.cli import main

if __name__ == "__main__":
    main()
